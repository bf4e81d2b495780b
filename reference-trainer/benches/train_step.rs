//! Training-step speed: forward + per-token log-probs (cross-entropy) + backward + AdamW, on
//! random token batches of the shapes issue 11 names — the default-shaped 1 M-parameter Qwen3
//! (vocab 4096, d 128, 2 layers, 4 heads / 2 KV, head_dim 32, MLP 512, tied) at 16×256 and
//! 8×1024 tokens, a 5 M-parameter one (d 256, 4 layers, MLP 1024) at 16×256, and the WebShop
//! cold start's 5 M model (8 heads × 32) at 16×256 and at its SFT batch shape 8×768.
//!
//! `cargo bench -p reference-trainer --bench train_step [-- --json] [-- --quick] [-- --fused-only] [-- --shape 5M-ws:8x768]`
//! (`benches/speed_vs_torch.py` runs it next to PyTorch and prints the ratios.)

use std::time::Instant;

use candle_core::{DType, Device};
use reference_trainer::model::{Qwen3, Qwen3Config};
use reference_trainer::train::optimizer::{AdamW, AdamWConfig};

#[path = "common/train.rs"]
mod train_loop;
use train_loop::train_step;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    reference_trainer::tune_allocator();
    let args: Vec<String> = std::env::args().collect();
    let json = args.iter().any(|a| a == "--json");
    let quick = args.iter().any(|a| a == "--quick");
    // `--fused-only`: skip the composed arm (for profiling the fused path alone).
    let arms_on: &[bool] = if args.iter().any(|a| a == "--fused-only") {
        &[true]
    } else {
        &[false, true]
    };
    let reps = if quick { 2 } else { 5 };
    // (name, d, layers, MLP, heads, KV heads, rows, tokens per row). "5M-ws" is the WebShop
    // cold start's model (8 heads × 32, 4 KV heads) at the SFT's batch of 8 turns; its prompts
    // run to 900 tokens (mean ~560), so 8×768 stands for a batch padded to its longest row.
    let shapes = [
        (
            "1M", 128usize, 2usize, 512usize, 4usize, 2usize, 16usize, 256usize,
        ),
        ("1M", 128, 2, 512, 4, 2, 8, 1024),
        ("5M", 256, 4, 1024, 4, 2, 16, 256),
        ("5M-ws", 256, 4, 1024, 8, 4, 16, 256),
        ("5M-ws", 256, 4, 1024, 8, 4, 8, 768),
    ];
    let mut rows = Vec::new();
    // `--shape 1M:8x1024` runs one shape only (for profiling).
    let only = args
        .iter()
        .position(|a| a == "--shape")
        .and_then(|i| args.get(i + 1).cloned());
    for (name, d, layers, mlp, heads, kv, b, l) in shapes {
        if only
            .as_deref()
            .is_some_and(|o| o != format!("{name}:{b}x{l}"))
        {
            continue;
        }
        let cfg = Qwen3Config::small(4096, d, mlp, layers, heads, kv, d / heads, 2048);
        let seqs: Vec<Vec<u32>> = (0..b)
            .map(|r| {
                (0..l)
                    .map(|t| ((r * 7919 + t * 104729) % 4096) as u32)
                    .collect()
            })
            .collect();
        // Both paths from the same weights, timed alternately (best of `reps` each).
        let mut arms = Vec::new();
        for &fused in arms_on {
            let mut model = Qwen3::random(cfg.clone(), 1, DType::F32, &Device::Cpu).unwrap();
            model.set_fused(fused).unwrap();
            let mut opt = AdamW::new(AdamWConfig::default()).unwrap();
            train_step(&model, &mut opt, &seqs);
            arms.push((model, opt, f64::INFINITY));
        }
        for _ in 0..reps {
            for (model, opt, best) in &mut arms {
                let t = Instant::now();
                train_step(model, opt, &seqs);
                *best = best.min(t.elapsed().as_secs_f64());
            }
        }
        let tok = (b * l) as f64;
        for (model, _, best) in &arms {
            let what = if model.fused() { "fused" } else { "composed" };
            rows.push((format!("train {name} {b}x{l} {what}"), tok / best));
        }
    }
    let peak = reference_trainer::peak_rss_bytes().unwrap_or(0) as f64 / (1u64 << 20) as f64;
    if json {
        let obj: serde_json::Map<String, serde_json::Value> = rows
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::json!(v)))
            .chain([("peak RSS MiB".to_string(), serde_json::json!(peak))])
            .collect();
        println!("{}", serde_json::Value::Object(obj));
    } else {
        println!("| measure | tok/s |\n|---|---|");
        for (k, v) in &rows {
            println!("| {k} | {v:.0} |");
        }
        println!("\npeak RSS of the whole run: {peak:.0} MiB");
    }
}
