//! Rollout speed of the default-shaped policy (vocab 4096, d 128, 2 layers, 4 heads / 2 KV,
//! head_dim 32, MLP 512, tied; random weights): prefill tokens/s, decode tokens/s at batch
//! 1 / 32 / 64 with one draw per row, with the T²PO kernel (statistics, M_t, TTI decision,
//! accept) on and off, in one run: the rollout's direct decode step (`model::decode`) with its
//! default row split, split over 1 and 2 threads, and the candle-tensor path it replaced
//! (`Qwen3::decode`); and the kernel's share of a decode step, timed on the same logits inside
//! the same steps (the step with the kernel minus a sampling-only pass over the same rows),
//! which separate on/off runs on a shared machine are too noisy to show. Decode loops run on
//! the rayon pool, as the rollout runs them.
//!
//! `cargo bench -p reference-trainer --bench rollout [-- --json] [-- --quick]`
//! (`benches/speed_vs_torch.py` runs it next to PyTorch and prints the ratios.)

use std::time::Instant;

use candle_core::{DType, Device};
use reference_trainer::model::{Qwen3, Qwen3Config};
use reference_trainer::rollout::{CandleDecode, Policy, QwenCache, Sampler, SamplingParams};

#[path = "common/decode.rs"]
mod decode_loop;
use decode_loop::decode_steps;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Row {
    name: String,
    value: f64,
    unit: &'static str,
}

/// How a decode run decodes: the rollout's path (direct on f32 CPU) with its default thread
/// split or a given one, or candle tensors (`Qwen3::decode`, the previous path).
#[derive(Clone, Copy)]
enum Path {
    Direct(Option<usize>),
    Candle,
}

fn decode_run(
    model: &Qwen3,
    path: Path,
    batch: usize,
    prompt: usize,
    steps: usize,
    control: bool,
    sampler: &mut Sampler,
) -> (f64, f64) {
    // On the pool, as the rollout runs its decode loop.
    rayon::scope(|_| match path {
        Path::Direct(threads) => {
            let set = |c: &mut QwenCache| {
                if let (QwenCache::Direct(s), Some(t)) = (c, threads) {
                    s.set_threads(t);
                }
            };
            decode_steps(model, set, batch, prompt, steps, control, sampler)
        }
        Path::Candle => decode_steps(
            &CandleDecode(model),
            |_| {},
            batch,
            prompt,
            steps,
            control,
            sampler,
        ),
    })
}

fn main() {
    reference_trainer::tune_allocator();
    let args: Vec<String> = std::env::args().collect();
    let json = args.iter().any(|a| a == "--json");
    let quick = args.iter().any(|a| a == "--quick");
    let cfg = Qwen3Config::small(4096, 128, 512, 2, 4, 2, 32, 2048);
    let model = Qwen3::random(cfg, 1, DType::F32, &Device::Cpu).unwrap();
    let mut sampler = Sampler::new(SamplingParams::default()).unwrap();
    let mut rows = Vec::new();
    let reps = if quick { 1 } else { 5 };

    // Prefill: 32 prompts of 256 tokens.
    let (pb, pl) = (32usize, 256usize);
    let prompts: Vec<Vec<u32>> = (0..pb)
        .map(|b| (0..pl).map(|t| ((b * 7 + t * 13) % 4096) as u32).collect())
        .collect();
    let mut logits = Vec::new();
    let _ = Policy::prefill(&model, &prompts, 1, &mut logits).unwrap();
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let t = Instant::now();
        let _ = Policy::prefill(&model, &prompts, 1, &mut logits).unwrap();
        best = best.min(t.elapsed().as_secs_f64());
    }
    rows.push(Row {
        name: format!("prefill {pb}x{pl}"),
        value: (pb * pl) as f64 / best,
        unit: "tok/s",
    });

    let steps = if quick { 16 } else { 64 };
    let threads = rayon::current_num_threads();
    for batch in [1usize, 32, 64] {
        let direct = Path::Direct(None);
        let _ = decode_run(&model, direct, batch, 64, 4, true, &mut sampler);
        // The variants in turn within each repetition (the machine's load drifts), best of
        // the repetitions per variant: (path, control on).
        let mut variants = vec![(direct, true), (direct, false), (Path::Candle, true)];
        for t in 1..=threads.min(2) {
            variants.push((Path::Direct(Some(t)), true));
        }
        let mut best = vec![(f64::INFINITY, 0.0); variants.len()];
        for _ in 0..reps {
            for (v, b) in variants.iter().zip(best.iter_mut()) {
                let r = decode_run(&model, v.0, batch, 64, steps, v.1, &mut sampler);
                if r.0 < b.0 {
                    *b = r;
                }
            }
        }
        let ((on, ctl), (off, _), (candle, candle_ctl)) = (best[0], best[1], best[2]);
        let tokens = (batch * steps) as f64;
        let mut row =
            |name: String, value: f64, unit: &'static str| rows.push(Row { name, value, unit });
        row(
            format!("decode batch {batch} (control on)"),
            tokens / on,
            "tok/s",
        );
        row(
            format!("decode batch {batch} (control off)"),
            tokens / off,
            "tok/s",
        );
        row(
            format!("decode batch {batch}, candle path (control on)"),
            tokens / candle,
            "tok/s",
        );
        for (t, b) in best[3..].iter().enumerate() {
            row(
                format!(
                    "decode batch {batch} (control on), model split over {} thread(s)",
                    t + 1
                ),
                tokens / b.0,
                "tok/s",
            );
        }
        row(
            format!("control kernel share of the decode step (same logits), batch {batch}"),
            100.0 * ctl / on,
            "%",
        );
        row(
            format!("control kernel share, candle path, batch {batch}"),
            100.0 * candle_ctl / candle,
            "%",
        );
    }

    let peak = reference_trainer::peak_rss_bytes().unwrap_or(0) as f64 / (1u64 << 20) as f64;
    rows.push(Row {
        name: "peak RSS of the whole run".into(),
        value: peak,
        unit: "MiB",
    });
    if json {
        let obj: serde_json::Map<String, serde_json::Value> = rows
            .iter()
            .map(|r| (r.name.clone(), serde_json::json!(r.value)))
            .collect();
        println!("{}", serde_json::Value::Object(obj));
    } else {
        println!("| measure | value |\n|---|---|");
        for r in &rows {
            println!("| {} | {:.1} {} |", r.name, r.value, r.unit);
        }
    }
}
