//! Speed on a real-sized model: a Hugging Face folder (or a GGUF file) loaded as the trainer
//! loads `--init`, f32 on the CPU — SmolLM2-135M-Instruct in README (Llama, 134.5 M parameters,
//! 30 layers, hidden 576, vocabulary 49152). Measured in one run:
//!
//! - decode tokens/s at batch 1 / 32 / 64 (prompt 64, one draw per row at T = 1) on the rollout's
//!   path — the direct decode step with the weights packed once (`PackedQwen3`), the T²PO kernel
//!   on (statistics, M_t, TTI decision, accept) — and the kernel's share of the step, timed as the
//!   `rollout` bench times it (the step with the kernel minus a sampling-only pass over the same
//!   rows);
//! - a training step (forward + per-token log-probs + backward + AdamW, f32, the fused ops) at
//!   8 × 256 tokens.
//!
//! `cargo bench -p reference-trainer --bench real_model -- --model DIR_OR_GGUF [--json] [--quick]
//! [--only decode|train]`
//! (`benches/speed_vs_torch.py --real` converts SmolLM2's GGUF once with `convert`, runs this on
//! the folder and PyTorch eager on the same folder, and prints the ratios.)

use std::path::PathBuf;
use std::time::Instant;

use candle_core::{DType, Device};
use reference_trainer::model::checkpoint;
use reference_trainer::rollout::{PackedQwen3, QwenCache, Sampler, SamplingParams};
use reference_trainer::train::optimizer::{AdamW, AdamWConfig};

#[path = "common/decode.rs"]
mod decode_loop;
#[path = "common/rows.rs"]
mod rows;
#[path = "common/train.rs"]
mod train_loop;
use decode_loop::decode_steps;
use rows::print_rows;
use train_loop::train_step;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Decodes `steps` tokens for `batch` rows after a 64-token prompt, the kernel on, on the pool
/// as the rollout runs its decode loop; returns (seconds of the decode steps, seconds of them
/// spent in the control kernel). `threads`: split the step over that many threads instead of
/// the default.
fn decode(
    policy: &PackedQwen3,
    batch: usize,
    steps: usize,
    threads: Option<usize>,
    sampler: &mut Sampler,
) -> (f64, f64) {
    let set = |c: &mut QwenCache| {
        if let (QwenCache::Direct(s), Some(t)) = (c, threads) {
            s.set_threads(t);
        }
    };
    rayon::scope(|_| decode_steps(policy, set, batch, 64, steps, true, sampler))
}

fn main() {
    reference_trainer::tune_allocator();
    let args: Vec<String> = std::env::args().collect();
    let json = args.iter().any(|a| a == "--json");
    let quick = args.iter().any(|a| a == "--quick");
    let Some(path) = args
        .iter()
        .position(|a| a == "--model")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
    else {
        eprintln!(
            "real_model: --model DIR_OR_GGUF is required (a Hugging Face folder or a GGUF file)"
        );
        std::process::exit(2);
    };
    let model = if reference_trainer::gguf::is_gguf(&path) {
        reference_trainer::gguf::load(&path, DType::F32, &Device::Cpu)
            .map(|(m, _)| m)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    } else {
        checkpoint::load(&path, DType::F32, &Device::Cpu)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let vocab = model.config().vocab_size;
    let reps = if quick { 1 } else { 3 };
    let mut rows: Vec<(String, f64)> = Vec::new();

    // `--only decode` / `--only train` runs one part (for profiling).
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1).cloned());
    let steps = if quick { 8 } else { 32 };
    let mut sampler = Sampler::new(SamplingParams::default()).unwrap();
    if only.as_deref() != Some("train") {
        let policy = PackedQwen3::new(&model).unwrap();
        for batch in [1usize, 32, 64] {
            let _ = decode(&policy, batch, 2, None, &mut sampler);
            let mut best = (f64::INFINITY, 0.0);
            let mut one = f64::INFINITY;
            for _ in 0..reps {
                let r = decode(&policy, batch, steps, None, &mut sampler);
                if r.0 < best.0 {
                    best = r;
                }
                // The same step on one thread (at batch 1: without the column split).
                one = one.min(decode(&policy, batch, steps, Some(1), &mut sampler).0);
            }
            rows.push((
                format!("decode batch {batch}, one thread"),
                (batch * steps) as f64 / one,
            ));
            rows.push((
                format!("decode batch {batch} (control on)"),
                (batch * steps) as f64 / best.0,
            ));
            rows.push((
                format!("control kernel share, batch {batch} (%)"),
                100.0 * best.1 / best.0,
            ));
        }
    }

    let (b, l) = (8usize, 256usize);
    if only.as_deref() == Some("decode") {
        rows.push(("peak RSS MiB".into(), 0.0));
        return print_rows(&rows, &format!("measure ({vocab}-entry vocabulary)"), json);
    }
    let seqs: Vec<Vec<u32>> = (0..b)
        .map(|r| {
            (0..l)
                .map(|t| ((r * 7919 + t * 104729) % vocab) as u32)
                .collect()
        })
        .collect();
    let mut opt = AdamW::new(AdamWConfig::default()).unwrap();
    train_step(&model, &mut opt, &seqs);
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let t = Instant::now();
        train_step(&model, &mut opt, &seqs);
        best = best.min(t.elapsed().as_secs_f64());
    }
    rows.push((format!("train {b}x{l}"), (b * l) as f64 / best));
    let peak = reference_trainer::peak_rss_bytes().unwrap_or(0) as f64 / (1u64 << 20) as f64;
    rows.push(("peak RSS MiB".into(), peak));
    print_rows(&rows, &format!("measure ({vocab}-entry vocabulary)"), json);
}
