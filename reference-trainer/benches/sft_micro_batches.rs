//! A fine-tuning step's micro-batches: the 5 M WebShop cold start's SFT batches (8 of the
//! shopper's turns, 200 to 800 tokens, sorted longest first) in one micro-batch padded to the
//! longest row — the plan before stop 57 — against `sft::padded_micro_batches`' split, the two
//! timed alternately on the same batches (which plan goes first alternates too). The model is
//! the WebShop config's with the 5 M sizes (d 256, 4 layers, 8 heads × 32, MLP 1024), random:
//! the speed does not depend on the weights. Prints tok/s (tokens without padding) and the
//! ratio, and the padded tokens of each plan.
//!
//! `cargo bench -p reference-trainer --bench sft_micro_batches [-- --steps N] [-- --json]`

use std::time::Instant;

use candle_core::Device;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha12Rng;
use reference_trainer::rollout::EnvKind;
use reference_trainer::train::optimizer::{AdamW, AdamWConfig};
use reference_trainer::train::rft::cold_start_demos;
use reference_trainer::train::run::{initial_policy, pool_for};
use reference_trainer::train::sft::{plan_micro_batches, sft_step, sft_step_in, Demo};
use reference_trainer::train::TrainConfig;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    reference_trainer::tune_allocator();
    let args: Vec<String> = std::env::args().collect();
    let json = args.iter().any(|a| a == "--json");
    let steps: usize = args
        .iter()
        .position(|a| a == "--steps")
        .and_then(|i| args.get(i + 1))
        .map_or(30, |s| s.parse().expect("--steps N"));
    let mut cfg = TrainConfig::default_for(EnvKind::Webshop).unwrap();
    cfg.model.hidden_size = 256;
    cfg.model.intermediate_size = 1024;
    cfg.model.num_hidden_layers = 4;
    cfg.model.num_attention_heads = 8;
    cfg.model.num_key_value_heads = 4;
    cfg.model.head_dim = 32;
    // Enough of the shopper's episodes for `steps` batches (~4.6 turns each).
    cfg.rft.demo_tasks = (steps * cfg.rft.batch_size / 4).max(8);
    let (model, tokenizer) = initial_policy(&cfg, None, &Device::Cpu).unwrap();
    let pool = pool_for(&cfg).unwrap();
    let demos = cold_start_demos(&pool, &tokenizer, &cfg).unwrap().demos;
    let mut order: Vec<usize> = (0..demos.len()).collect();
    order.shuffle(&mut ChaCha12Rng::seed_from_u64(cfg.seed));
    // A small rate: the weights stay near where they began, as the timing wants.
    let mut opt = AdamW::new(AdamWConfig {
        lr: 1e-6,
        ..AdamWConfig::default()
    })
    .unwrap();
    let budget = cfg.optim.micro_batch_tokens;
    let (mut t_one, mut t_split) = (0.0, 0.0);
    let (mut tokens, mut padded_one, mut padded_split, mut runs) = (0, 0, 0, 0);
    let mut done = 0;
    for (k, chunk) in order.chunks(cfg.rft.batch_size).take(steps).enumerate() {
        let mut batch: Vec<_> = chunk.iter().map(|&i| demos[i].clone()).collect();
        // The trainer's plan (sorted longest first, then split), as a fine-tuning step runs it.
        let groups = plan_micro_batches(&mut batch, budget);
        let lens: Vec<usize> = batch.iter().map(Demo::tokens).collect();
        tokens += lens.iter().sum::<usize>();
        padded_one += lens[0] * lens.len();
        padded_split += groups
            .iter()
            .map(|g| lens[g.start] * g.len())
            .sum::<usize>();
        runs += groups.len();
        let per = (budget / lens[0]).max(1);
        for split in [k % 2 == 1, k % 2 == 0] {
            let t = Instant::now();
            if split {
                sft_step_in(
                    &model,
                    &mut opt,
                    &batch,
                    &groups,
                    cfg.rft.prompt_loss_weight,
                )
                .unwrap();
                t_split += t.elapsed().as_secs_f64();
            } else {
                sft_step(&model, &mut opt, &batch, per, cfg.rft.prompt_loss_weight).unwrap();
                t_one += t.elapsed().as_secs_f64();
            }
        }
        done += 1;
    }
    let (one, split) = (tokens as f64 / t_one, tokens as f64 / t_split);
    if json {
        println!(
            "{}",
            serde_json::json!({
                "steps": done, "tokens": tokens,
                "one micro-batch tok/s": one, "padded_micro_batches tok/s": split,
                "padded tokens, one": padded_one, "padded tokens, split": padded_split,
                "micro-batches, split": runs,
            })
        );
    } else {
        println!(
            "{done} steps of the 5 M WebShop SFT ({tokens} tokens):\n\
             | plan | padded tokens | micro-batches | tok/s |\n|---|---|---|---|\n\
             | one micro-batch (before) | {padded_one} | {done} | {one:.0} |\n\
             | padded_micro_batches | {padded_split} | {runs} | {split:.0} |\n\n\
             split / one: {:.3}×",
            split / one
        );
    }
}
