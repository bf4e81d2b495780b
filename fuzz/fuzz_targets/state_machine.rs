//! Fuzzes the TTI/TDS state machines through the Rust API with valid configs and arbitrary
//! statistics, tokens and call order. Checks the spec §3/§4 invariants on every step: no panic;
//! at most one firing per generation; never a converged firing before L_min; think content never
//! beyond L_max; forced tokens exactly the queue, in order; TDS never beyond B_max per turn and
//! never resampling turn 1.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use t2po_control::{Error, Event, Sequence, Tds, ThinkStart, TokenStats};

#[path = "common.rs"]
#[allow(dead_code)]
mod common;
use common::RawConfig;

#[derive(Arbitrary, Debug)]
enum Op {
    Begin(u8),
    Reset,
    PromptToken(u8),
    /// Observe statistics, then accept: the forced token if any, else `token`.
    Step {
        h: u16,
        c: u16,
        token: u8,
    },
    /// Accept a token without observing (an order error unless in the prompt).
    StrayAccept(u8),
    Turn {
        phi: u16,
    },
}

fuzz_target!(|input: (RawConfig, Vec<Op>)| {
    let (raw, ops) = input;
    let mut cfg = raw.build();
    cfg.think_open = 3;
    cfg.think_close = 4;
    if cfg.queue_len > 0 {
        cfg.queue[0] = 4;
    }
    let Ok(mut seq) = Sequence::new(&cfg) else {
        return;
    };
    let mut tds = Tds::new(&cfg).unwrap();
    let queue = cfg.queue().to_vec();
    let mut fired_this_gen = 0;
    let mut forced_seen: Vec<u32> = Vec::new();
    let mut generating = false;
    let mut turn_tries = 0u32;
    let mut turns_committed = 0u32;
    for op in ops.into_iter().take(2000) {
        match op {
            Op::Begin(s) => {
                let start = ThinkStart::from_u32(s as u32 % 3).unwrap();
                seq.begin_generation(start);
                fired_this_gen = 0;
                forced_seen.clear();
                generating = true;
            }
            Op::Reset => {
                seq.reset();
                generating = false;
            }
            Op::PromptToken(t) => {
                let r = seq.accept(t as u32 % 8);
                assert!(generating || r.is_ok());
            }
            Op::Step { h, c, token } => {
                let stats = TokenStats {
                    entropy: h as f32 / 4096.0,
                    confidence: c as f32 / 2048.0,
                    max_logit: 0.0,
                    log_sum_exp: 0.0,
                    vocab: 1000,
                    top_count: 1,
                };
                let step = match seq.observe(&stats) {
                    Ok(step) => step,
                    // Before begin_generation, or after a stray accept left the order off.
                    Err(Error::Order(_)) => continue,
                    Err(e) => panic!("unexpected {e}"),
                };
                if step.event != Event::None as u32 {
                    fired_this_gen += 1;
                    assert_eq!(fired_this_gen, 1, "fired twice in one generation");
                    if step.event == Event::Converged as u32 {
                        assert!(step.position >= cfg.min_len, "converged before L_min");
                    }
                }
                let tok = match step.forced() {
                    Some(f) => {
                        forced_seen.push(f);
                        assert_eq!(&queue[..forced_seen.len()], &forced_seen[..], "queue order");
                        f
                    }
                    None => token as u32 % 8,
                };
                seq.accept(tok).unwrap();
                // L_max is part of TTI: with TTI off (the "TDS only" ablation) nothing is forced.
                if cfg.tti_enabled == 1 {
                    assert!(
                        seq.think_len() <= cfg.max_think,
                        "think content beyond L_max"
                    );
                }
            }
            Op::StrayAccept(t) => {
                let _ = seq.accept(t as u32 % 8);
            }
            Op::Turn { phi } => {
                let phi = phi as f32 / 65535.0;
                let v = tds.decide(phi).unwrap();
                if turns_committed == 0 {
                    assert_eq!(v.resample, 0, "turn 1 resampled");
                }
                if v.resample == 1 {
                    turn_tries += 1;
                    assert!(turn_tries <= cfg.max_resamples, "beyond B_max");
                } else {
                    assert!(v.kept_try <= turn_tries);
                    tds.commit().unwrap();
                    turns_committed += 1;
                    turn_tries = 0;
                }
            }
        }
    }
});
