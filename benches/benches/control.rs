//! Criterion benchmarks of the control kernel: token statistics per row (f32, bf16; the tiny
//! default's 4,096 entries, Llama-2, Llama-3 and Qwen3 vocabularies), the state update after statistics, and the batched observe.
//! Run: `cargo bench -p t2po-benches --bench control`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use half::bf16;
use std::hint::black_box;
use t2po_benches::logits;
use t2po_control::{observe_batch, token_stats, Config, Sequence, Step, ThinkStart, TokenStats};

fn stats(c: &mut Criterion) {
    let mut g = c.benchmark_group("token_stats");
    for &v in &[4_096usize, 32_000, 128_256, 151_936] {
        let row = logits(1, v, 1);
        let row_bf16: Vec<bf16> = row.iter().map(|&x| bf16::from_f32(x)).collect();
        g.throughput(Throughput::Elements(v as u64));
        g.bench_with_input(BenchmarkId::new("f32_top20", v), &row, |b, row| {
            b.iter(|| token_stats(black_box(row.as_slice()), 20).unwrap())
        });
        g.bench_with_input(BenchmarkId::new("bf16_top20", v), &row_bf16, |b, row| {
            b.iter(|| token_stats(black_box(row.as_slice()), 20).unwrap())
        });
    }
    g.finish();
}

/// One observe (precomputed statistics) + accept: the per-token cost of the state machine.
fn state_update(c: &mut Criterion) {
    let mut g = c.benchmark_group("state_update");
    for (name, cfg) in [("paper", Config::paper()), ("released", Config::released())] {
        let mut cfg = cfg;
        cfg.epsilon = 0.0; // stay armed: the trigger check runs every step
        cfg.patience = u32::MAX;
        cfg.max_think = u32::MAX;
        let inputs: Vec<TokenStats> = (0..1024)
            .map(|i| TokenStats {
                entropy: (i % 17) as f32 * 0.3,
                confidence: 8.0 + (i % 13) as f32 * 0.2,
                max_logit: 10.0,
                log_sum_exp: 10.5,
                vocab: 151_936,
                top_count: 20,
            })
            .collect();
        let mut seq = Sequence::new(&cfg).unwrap();
        seq.begin_generation(ThinkStart::Inside);
        let mut i = 0usize;
        g.bench_function(BenchmarkId::new("observe_stats_accept", name), |b| {
            b.iter(|| {
                let step = seq.observe(black_box(&inputs[i & 1023])).unwrap();
                seq.accept(black_box(7)).unwrap();
                i += 1;
                if i.is_multiple_of(100_000) {
                    seq.begin_generation(ThinkStart::Inside);
                }
                step
            })
        });
    }
    g.finish();
}

fn batched(c: &mut Criterion) {
    const B: usize = 64;
    const V: usize = 151_936;
    let mut g = c.benchmark_group("observe_batch");
    g.sample_size(20);
    g.throughput(Throughput::Elements((B * V) as u64));
    let rows = logits(B, V, 2);
    let mut cfg = Config::paper();
    cfg.epsilon = 0.0;
    cfg.max_think = u32::MAX;
    let mut seqs = vec![Sequence::new(&cfg).unwrap(); B];
    for s in &mut seqs {
        s.begin_generation(ThinkStart::Inside);
    }
    let mut steps = vec![Step::default(); B];
    g.bench_function(BenchmarkId::new("f32_b64", V), |b| {
        b.iter(|| {
            observe_batch(&mut seqs, black_box(&rows), V, V, &mut steps).unwrap();
            for s in seqs.iter_mut() {
                s.accept(7).unwrap();
            }
        })
    });
    g.finish();
}

criterion_group!(benches, stats, state_update, batched);
criterion_main!(benches);
