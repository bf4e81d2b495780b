//! The direct decode step's matmul (`model::decode::matmul`, one thread) on SmolLM2-135M's
//! shapes (hidden 576, intermediate 1536, 3 KV heads × 64, vocabulary 49152), at the rows a
//! thread holds in a decode step of batch 1 / 32 / 64 (1 / 16 / 32): GFLOP/s per shape and for
//! one layer's seven products plus the head, weighted as a step runs them; and 24 distinct
//! weights read from memory, as a real step reads them. The weights are marked
//! `Packed::streamed`, as `Decoder::new` marks SmolLM2's (`--plain`: not, to compare).
//!
//! `cargo bench -p reference-trainer --bench decode_matmul [-- --json] [--plain]`

use std::time::Instant;

use reference_trainer::model::decode::{matmul, Packed};

#[path = "common/rows.rs"]
mod rows;
use rows::print_rows;

fn rnd(seed: &mut u64) -> f32 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    let streamed = !std::env::args().any(|a| a == "--plain");
    let mut seed = 1u64;
    // (name, n, k, times per step): q, k, v, o, gate, up, down per layer (30 layers), the head once.
    let shapes = [
        ("q / o 576x576", 576usize, 576usize, 60usize),
        ("k / v 192x576", 192, 576, 60),
        ("gate / up 1536x576", 1536, 576, 60),
        ("down 576x1536", 576, 1536, 30),
        ("head 49152x576", 49152, 576, 1),
    ];
    let packed: Vec<Packed> = shapes
        .iter()
        .map(|&(_, n, k, _)| {
            let w: Vec<f32> = (0..n * k).map(|_| rnd(&mut seed)).collect();
            Packed::new(&w, n, k, None).unwrap().streamed(streamed)
        })
        .collect();
    let mut rows = Vec::new();
    for m in [1usize, 16, 32] {
        let (mut flops, mut secs) = (0f64, 0f64);
        for (&(name, n, k, times), p) in shapes.iter().zip(&packed) {
            let x: Vec<f32> = (0..m * k).map(|_| rnd(&mut seed)).collect();
            let mut y = vec![0f32; m * n];
            matmul(&x, p, &mut y, false);
            // Enough repetitions for ~0.2 s per shape, best of 5 rounds.
            let reps = ((2e8 / (2.0 * (m * n * k) as f64)) as usize).clamp(1, 100_000);
            let mut best = f64::INFINITY;
            for _ in 0..5 {
                let t = Instant::now();
                for _ in 0..reps {
                    matmul(&x, p, &mut y, false);
                    std::hint::black_box(&mut y);
                }
                best = best.min(t.elapsed().as_secs_f64() / reps as f64);
            }
            let f = 2.0 * (m * n * k) as f64;
            rows.push((format!("{m} rows, {name} (GFLOP/s)"), f / best / 1e9));
            flops += f * times as f64;
            secs += best * times as f64;
        }
        rows.push((
            format!("{m} rows, a step's products (GFLOP/s)"),
            flops / secs / 1e9,
        ));
    }
    // From memory, as a real step reads its weights: 24 distinct 1536 × 576 weights (85 MB,
    // past the L3) one after the other.
    let (n, k) = (1536usize, 576usize);
    let many: Vec<Packed> = (0..24)
        .map(|_| {
            let w: Vec<f32> = (0..n * k).map(|_| rnd(&mut seed)).collect();
            Packed::new(&w, n, k, None).unwrap().streamed(streamed)
        })
        .collect();
    for m in [1usize, 16, 32] {
        let x: Vec<f32> = (0..m * k).map(|_| rnd(&mut seed)).collect();
        let mut y = vec![0f32; m * n];
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            let t = Instant::now();
            for p in &many {
                matmul(&x, p, &mut y, false);
                std::hint::black_box(&mut y);
            }
            best = best.min(t.elapsed().as_secs_f64());
        }
        let f = 2.0 * (m * n * k * many.len()) as f64;
        rows.push((
            format!("{m} rows, 24 weights 1536x576 from memory (GFLOP/s)"),
            f / best / 1e9,
        ));
    }
    print_rows(&rows, "measure", json);
}
