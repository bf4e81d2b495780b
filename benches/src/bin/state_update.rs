//! The per-token cost of the state machine (observe with precomputed statistics + accept),
//! as the `state_update` group of `benches/control.rs` runs it, timed so that a loaded machine
//! does not decide the answer: rounds of 200 000 steps, and the least round time per step
//! (time the process spends descheduled only ever adds to a round). Criterion's estimate, a
//! mean-like fit, takes that time in, so on a shared machine it reads well above this.
//!
//! Usage: `cargo run --release -p t2po-benches --bin state_update [ROUNDS]` (default 60).

use std::hint::black_box;
use std::time::Instant;
use t2po_control::{Config, Sequence, ThinkStart, TokenStats};

const STEPS: usize = 200_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: usize = match std::env::args().nth(1) {
        Some(a) => a.parse().map_err(|e| format!("ROUNDS: {e}"))?,
        None => 60,
    };
    if rounds == 0 {
        return Err("ROUNDS: expected at least 1".into());
    }
    println!("| profile | least ns per observe + accept ({rounds} rounds of {STEPS}) | median |");
    println!("|---|---:|---:|");
    for (name, cfg) in [("paper", Config::paper()), ("released", Config::released())] {
        // As the criterion group: stay armed, so the trigger check runs every step.
        let mut cfg = cfg;
        cfg.epsilon = 0.0;
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
        let mut seq = Sequence::new(&cfg)?;
        seq.begin_generation(ThinkStart::Inside);
        let mut i = 0usize;
        let mut times = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let start = Instant::now();
            for _ in 0..STEPS {
                let step = seq.observe(black_box(&inputs[i & 1023]))?;
                seq.accept(black_box(7))?;
                i += 1;
                if i.is_multiple_of(100_000) {
                    seq.begin_generation(ThinkStart::Inside);
                }
                black_box(step);
            }
            times.push(start.elapsed().as_secs_f64() * 1e9 / STEPS as f64);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "| {name} | {:.2} | {:.2} |",
            times[0],
            times[times.len() / 2]
        );
    }
    Ok(())
}
