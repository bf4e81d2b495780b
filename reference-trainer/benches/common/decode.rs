//! The decode loop the `rollout` and `real_model` benches time: `steps` tokens for `batch` rows
//! after a `prompt`-token prompt, one draw per row at the sampler's settings, the T²PO kernel on
//! or off. With the kernel on, its own cost is timed on the same logits inside the same steps:
//! (observe + sample + accept) minus a sampling-only pass over the same rows, whose draws are
//! discarded and whose time is not part of a step.

use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha12Rng;
use reference_trainer::rollout::{Policy, Sampler};
use t2po_control::{Config, Sequence, ThinkStart};

/// Returns (seconds of the decode steps, seconds of them spent in the control kernel).
/// `setup` adjusts the cache after the prefill (the direct step's thread split).
pub fn decode_steps<P: Policy>(
    model: &P,
    setup: impl Fn(&mut P::Cache),
    batch: usize,
    prompt: usize,
    steps: usize,
    control: bool,
    sampler: &mut Sampler,
) -> (f64, f64) {
    let vocab = model.vocab_size();
    let prompts: Vec<Vec<u32>> = (0..batch)
        .map(|b| {
            (0..prompt)
                .map(|t| ((b * 131 + t * 17) % vocab) as u32)
                .collect()
        })
        .collect();
    let mut cfg = Config::paper();
    cfg.think_open = 1;
    cfg.think_close = 2;
    cfg.queue_len = 1;
    cfg.queue[0] = 2;
    cfg.max_think = 1_000_000;
    let mut seqs = vec![Sequence::new(&cfg).unwrap(); batch];
    for s in &mut seqs {
        s.reset();
        s.begin_generation(ThinkStart::Inside);
    }
    let mut rngs: Vec<ChaCha12Rng> = (0..batch)
        .map(|b| ChaCha12Rng::seed_from_u64(b as u64))
        .collect();
    let mut logits = Vec::new();
    let mut cache = Policy::prefill(model, &prompts, steps, &mut logits).unwrap();
    setup(&mut cache);
    let mut draws = Vec::new();
    let mut tokens = vec![0u32; batch];
    let t0 = Instant::now();
    let mut kernel_s = 0.0;
    let mut spare_s = 0.0;
    let mut spare = rngs.clone();
    let mut spare_draws = Vec::new();
    for _ in 0..steps {
        if control {
            // The kernel's own cost, on the same logits: (observe + sample + accept) minus a
            // sampling-only pass over the same rows (whose draws are discarded).
            let tc = Instant::now();
            sampler
                .step(&mut seqs, &mut rngs, &logits, vocab, &mut draws)
                .unwrap();
            let with = tc.elapsed().as_secs_f64();
            let ts = Instant::now();
            sampler
                .sample_only(&mut spare, &logits, vocab, &mut spare_draws)
                .unwrap();
            let sampling = ts.elapsed().as_secs_f64();
            spare_s += sampling;
            kernel_s += with - sampling;
        } else {
            sampler
                .sample_only(&mut rngs, &logits, vocab, &mut draws)
                .unwrap();
        }
        for (t, d) in tokens.iter_mut().zip(&draws) {
            *t = d.token;
        }
        Policy::decode(model, &mut cache, &tokens, &mut logits).unwrap();
    }
    // The spare sampling pass is not part of a decode step.
    (t0.elapsed().as_secs_f64() - spare_s, kernel_s)
}
