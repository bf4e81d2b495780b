//! The cold start's learning curve: SFT on the experts' demonstrations with a held-out greedy
//! evaluation every few steps, to choose the default's model size, tokenizer and demonstration
//! budget from measurements (the cold-start table under README's "The main job" comes from it).
//!
//! ```text
//! cargo run --release -p reference-trainer --example sft_curve -- CONFIG OUT \
//!     [--eval-every STEPS] [--tokenizer DIR | --build-tokenizer EPISODES:VOCAB[:passages]]
//! ```
//!
//! Uses CONFIG's `[model]`, `[data]`, `[pretrain]` and `[rft]` (demo_tasks, demo_epochs,
//! batch_size, prompt_loss_weight, lr, warmup_steps, final_lr) as the main job does, and evaluates
//! as `[train]` says (eval_temperature = 0: greedy). `--build-tokenizer EPISODES:VOCAB[:passages]`
//! trains a tokenizer on other text first.
//! `--tokenizer DIR` loads `DIR/tokenizer.json` instead of the default one for the seed. Prints
//! one line per evaluation and writes them to `OUT/curve.jsonl`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use candle_core::{DType, Device};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha12Rng;
use reference_trainer::defaults;
use reference_trainer::model::Qwen3;
use reference_trainer::rollout::Split;
use reference_trainer::tokenizer::Tokenizer;
use reference_trainer::train::rft::{pretrain, purpose, run_episodes, sample_tasks, Reporter};
use reference_trainer::train::run::pool_for;
use reference_trainer::train::state::derive_seed;
use reference_trainer::train::{expert_demos, sft_step, AdamW, Demo, RolloutSummary, TrainConfig};

/// Prints the pretraining's lines, nothing of its progress bar.
struct Print;
impl Reporter for Print {
    fn line(&mut self, s: &str) {
        println!("{s}");
    }
    fn begin(&mut self, _: &str, _: usize) {}
    fn advance(&mut self, _: usize) {}
    fn end(&mut self) {}
}

struct Quiet;
impl Reporter for Quiet {
    fn line(&mut self, _: &str) {}
    fn begin(&mut self, _: &str, _: usize) {}
    fn advance(&mut self, _: usize) {}
    fn end(&mut self) {}
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        anyhow::bail!("usage: sft_curve CONFIG OUT [--eval-every STEPS] [--tokenizer DIR | --build-tokenizer EP:VOCAB[:passages]]");
    }
    let cfg = TrainConfig::load(&PathBuf::from(&args[0]))?;
    let out = PathBuf::from(&args[1]);
    let mut eval_every = 100usize;
    let mut tok_dir: Option<PathBuf> = None;
    let mut build: Option<String> = None;
    let mut i = 2;
    while i < args.len() {
        match args[i].as_str() {
            "--eval-every" => eval_every = args.get(i + 1).context("a value")?.parse()?,
            "--tokenizer" => tok_dir = Some(PathBuf::from(args.get(i + 1).context("a value")?)),
            "--build-tokenizer" => build = Some(args.get(i + 1).context("a value")?.clone()),
            other => anyhow::bail!("unknown argument {other}"),
        }
        i += 2;
    }
    std::fs::create_dir_all(&out)?;
    let t_start = std::time::Instant::now();
    if let Some(spec) = &build {
        // EPISODES:VOCAB[:passages] — expert episodes per environment, vocabulary size, and
        // whether the Search QA corpus passages join the text.
        let parts: Vec<&str> = spec.split(':').collect();
        let episodes: usize = parts[0].parse()?;
        let vocab: usize = parts[1].parse()?;
        let mut text = defaults::corpus(cfg.seed, episodes)?;
        if parts.get(2) == Some(&"passages") {
            let world = t2po_envs::search_qa::corpus::World::generate(cfg.seed, cfg.data.passages);
            text.extend(world.passages.iter().map(|p| p.contents.clone()));
        }
        let t0 = std::time::Instant::now();
        let tok = reference_trainer::tokenizer::build_default(text, vocab)?
            .with_model_max_length(defaults::MAX_POSITIONS);
        let dir = out.join("tokenizer");
        std::fs::create_dir_all(&dir)?;
        tok.save(&dir)?;
        println!("tokenizer {spec}: {:.1} s", t0.elapsed().as_secs_f64());
        tok_dir = Some(dir);
    }
    let tok = match &tok_dir {
        Some(d) => Tokenizer::load(d.join("tokenizer.json"))?,
        None => defaults::tokenizer(cfg.seed)?,
    };
    let pool = pool_for(&cfg)?;
    let mcfg = cfg.model_config(tok.id_bound(), defaults::MAX_POSITIONS);
    let policy = Qwen3::random(mcfg, cfg.seed, DType::F32, &Device::Cpu)?;
    // `[pretrain]` as the main job runs it (off when passages = 0).
    pretrain(&policy, &tok, &cfg, &mut Print)?;
    let f = &cfg.rft;
    let tasks = sample_tasks(
        &pool,
        f.demo_tasks,
        derive_seed(cfg.seed, 0, purpose::DEMO_TASKS),
    );
    let demos = expert_demos(
        &pool,
        &tok,
        &tasks,
        derive_seed(cfg.seed, 0, purpose::DEMOS),
        cfg.rollout.max_prompt_tokens,
    )?;
    let steps = (demos.len().div_ceil(f.batch_size) * f.demo_epochs) as u64;
    let mut opt = AdamW::new(cfg.rft_optimizer_config(steps))?;
    let prompt_tokens: usize = demos.iter().map(|d| d.prompt.len()).sum();
    let response_tokens: usize = demos.iter().map(|d| d.response.len()).sum();
    println!(
        "{} parameters, vocab {}, {} demos from {} tasks ({:.0} prompt + {:.1} response tokens each), {} steps; setup {:.1} s",
        policy.num_parameters(),
        tok.id_bound(),
        demos.len(),
        tasks.len(),
        prompt_tokens as f64 / demos.len() as f64,
        response_tokens as f64 / demos.len() as f64,
        steps,
        t_start.elapsed().as_secs_f64()
    );
    let mut log = std::fs::File::create(out.join("curve.jsonl"))?;
    let mut step = 0u64;
    let mut losses = Vec::new();
    let mut train_secs = 0.0;
    let mut report = |step: u64, losses: &mut Vec<f64>, train_secs: f64| -> Result<()> {
        let t0 = std::time::Instant::now();
        let n = cfg.train.eval_tasks.min(pool.num_tasks(Split::Test));
        let tasks: Vec<usize> = (0..n).collect();
        let (records, stats, secs) = run_episodes(
            "eval",
            &policy,
            &tok,
            &pool,
            &cfg,
            Split::Test,
            &tasks,
            1,
            cfg.train.eval_temperature,
            derive_seed(cfg.seed, 0, purpose::EVAL),
            &mut Quiet,
        )?;
        let e = RolloutSummary::of(&records, &stats, secs);
        // The first action equal to the expert's (the copy skill: question → query).
        let copied = records
            .iter()
            .filter(|r| {
                let want = pool.expert_episode(Split::Test, r.task, 0);
                matches!((r.turns.first(), want.steps.first()),
                    (Some(t), Some(w)) if t.action == w.action.action)
            })
            .count() as f64
            / records.len().max(1) as f64;
        let mean_loss = losses.iter().sum::<f64>() / losses.len().max(1) as f64;
        losses.clear();
        println!(
            "step {step:>5} ({train_secs:>6.1} s train): loss {mean_loss:.3} | held-out success {:.3} first-action {copied:.3} valid {:.3} turns {:.2} think {:.1} ({:.1} s)",
            e.success_rate,
            e.format_valid_rate,
            e.turns_per_episode,
            e.think_tokens_per_turn,
            t0.elapsed().as_secs_f64()
        );
        writeln!(
            log,
            "{}",
            serde_json::json!({"step": step, "train_seconds": train_secs, "loss": mean_loss,
                "success": e.success_rate, "first_action": copied, "format_valid": e.format_valid_rate,
                "turns": e.turns_per_episode, "think": e.think_tokens_per_turn})
        )?;
        Ok(())
    };
    for epoch in 0..f.demo_epochs {
        let mut order: Vec<usize> = (0..demos.len()).collect();
        order.shuffle(&mut ChaCha12Rng::seed_from_u64(derive_seed(
            derive_seed(cfg.seed, 0, purpose::DEMO_SHUFFLE),
            epoch as u64,
            0,
        )));
        for chunk in order.chunks(f.batch_size) {
            let t0 = std::time::Instant::now();
            let mut batch: Vec<Demo> = chunk.iter().map(|&i| demos[i].clone()).collect();
            batch.sort_by_key(|d| std::cmp::Reverse(d.prompt.len() + d.response.len()));
            let longest = batch[0].prompt.len() + batch[0].response.len();
            let micro = (cfg.optim.micro_batch_tokens / longest.max(1)).max(1);
            losses.push(sft_step(&policy, &mut opt, &batch, micro, f.prompt_loss_weight)?.loss);
            train_secs += t0.elapsed().as_secs_f64();
            step += 1;
            if step.is_multiple_of(eval_every as u64) {
                report(step, &mut losses, train_secs)?;
            }
        }
    }
    if !step.is_multiple_of(eval_every as u64) {
        report(step, &mut losses, train_secs)?;
    }
    // A few held-out episodes, greedy, to read.
    let (records, _, _) = run_episodes(
        "eval",
        &policy,
        &tok,
        &pool,
        &cfg,
        Split::Test,
        &[0, 10, 30, 45, 60],
        1,
        cfg.train.eval_temperature,
        derive_seed(cfg.seed, 0, purpose::EVAL),
        &mut Quiet,
    )?;
    for r in &records {
        println!(
            "--- task {}: {} (success {})",
            r.task, r.task_text, r.success
        );
        for t in &r.turns {
            println!("  > {:?}", t.response);
        }
    }
    let dir = out.join("model");
    reference_trainer::model::checkpoint::save(&policy, &dir, usize::MAX)?;
    tok.save(&dir)?;
    Ok(())
}
