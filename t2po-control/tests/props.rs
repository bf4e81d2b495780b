//! Property tests for the invariants of spec §3 (TTI) and §4 (TDS), and for the profile switch.
//!
//! The TTI properties drive a [`Sequence`] like an engine would (observe → accept), with random
//! configs, random statistics that alternate noisy and flat stretches (so both rules fire), and a
//! random model that sometimes closes think itself; every step is checked against a naive
//! recomputation from the recorded `M_t` values.

use proptest::prelude::*;
use t2po_control::{
    Config, Error, Event, Keep, Sequence, Tds, TdsRule, ThinkStart, TokenStats, Trigger,
};

const OPEN: u32 = 50;
const CLOSE: u32 = 51;
const WORD: u32 = 7;

fn stats(h: f32, c: f32) -> TokenStats {
    TokenStats {
        entropy: h,
        confidence: c,
        max_logit: 0.0,
        log_sum_exp: c.min(3.0),
        vocab: 32_000,
        top_count: 20,
    }
}

/// Per-step statistics: noisy and flat segments.
fn stat_stream() -> impl Strategy<Value = Vec<(f32, f32)>> {
    prop::collection::vec(
        (
            1usize..40,
            0.0f32..10.0,
            0.0f32..20.0,
            prop::bool::ANY,
            any::<u64>(),
        ),
        1..12,
    )
    .prop_map(|segs| {
        let mut out = Vec::new();
        for (len, h, c, flat, seed) in segs {
            let mut rng = t2po_fixtures::Rng::new(seed | 1);
            for _ in 0..len {
                let u = rng.next_f32();
                let noise = if flat { 1e-3 } else { 4.0 };
                out.push((h + noise * u, c + noise * (1.0 - u)));
            }
        }
        out
    })
}

prop_compose! {
    fn config()(
        released_signal in prop::bool::ANY,
        trigger in 0u32..3,
        min_len in 0u32..40,
        window in 0u32..8,
        epsilon in 0.0f32..0.3,
        patience in 1u32..25,
        patience_tol in 0.0f32..0.05,
        extra in 1u32..120,
        queue_tail in prop::collection::vec(0u32..100, 0..7),
    ) -> Config {
        let mut c = if released_signal { Config::released() } else { Config::paper() };
        c.trigger = Trigger::from_u32(trigger).unwrap() as u32;
        c.min_len = min_len;
        c.window = window;
        c.epsilon = epsilon;
        c.patience = patience;
        c.patience_tol = patience_tol;
        c.max_think = min_len.max(1) + extra - 1;
        c.think_open = OPEN;
        c.think_close = CLOSE;
        c.queue = [0; 8];
        c.queue[0] = CLOSE;
        for (i, &t) in queue_tail.iter().enumerate() {
            c.queue[i + 1] = 100 + t;
        }
        c.queue_len = 1 + queue_tail.len() as u32;
        c
    }
}

/// Naive mean of the last n deltas of `ms`, summed newest first (the documented order).
fn naive_window_mean(ms: &[f32], n: usize) -> Option<f32> {
    if ms.len() < n + 1 {
        return None;
    }
    let mut sum = 0f32;
    for k in 0..n {
        let i = ms.len() - 1 - k;
        sum += (ms[i] - ms[i - 1]).abs();
    }
    Some(sum / n as f32)
}

/// Naive patience count: consecutive small deltas ending at the last M.
/// Whether `ms` ends one step after a local minimum: the last value rises above the one before
/// it, which is below the nearest different value before it (level runs are one trough).
fn naive_trough(ms: &[f32]) -> bool {
    let t = ms.len();
    if t < 3 || ms[t - 1] <= ms[t - 2] {
        return false;
    }
    let mut k = t - 2;
    while k > 0 && ms[k - 1] == ms[k] {
        k -= 1;
    }
    k > 0 && ms[k - 1] > ms[k]
}

fn naive_calm(ms: &[f32], tol: f32) -> u32 {
    let mut calm = 0;
    for w in ms.windows(2) {
        calm = if (w[1] - w[0]).abs() > tol {
            0
        } else {
            calm + 1
        };
    }
    calm
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn tti_invariants(cfg in config(), stream in stat_stream(), start_inside in prop::bool::ANY,
                      close_every in prop::option::of(5usize..200)) {
        let mut seq = Sequence::new(&cfg).unwrap();
        seq.begin_generation(if start_inside { ThinkStart::Inside } else { ThinkStart::Outside });
        let queue = cfg.queue().to_vec();
        let mut inside = start_inside;
        let mut done = false;
        let mut think_len = 0u32;
        let mut ms: Vec<f32> = Vec::new();
        let mut events = 0;
        let mut forced: Vec<u32> = Vec::new();
        let mut expect_forcing = false;
        let steps = stream.len() + cfg.max_think as usize + 16;
        for i in 0..steps {
            let (h, c) = stream[i % stream.len()];
            let step = seq.observe(&stats(h, c)).unwrap();
            let token = if let Some(tok) = step.forced() {
                prop_assert!(expect_forcing, "forced token without a firing");
                forced.push(tok);
                tok
            } else {
                prop_assert!(!expect_forcing,
                    "a free step while the queue is pending");
                ms.push(step.signal);
                let t = ms.len() as u32;
                prop_assert_eq!(step.position, t);
                let n = cfg.window as usize + 1;
                prop_assert_eq!(seq.window_mean(), naive_window_mean(&ms, n));
                let armed = inside && !done && events == 0;
                let converged = t >= cfg.min_len && if cfg.trigger == Trigger::Patience as u32 {
                    naive_calm(&ms, cfg.patience_tol) >= cfg.patience
                } else if cfg.trigger == Trigger::PeakCut as u32 {
                    naive_trough(&ms)
                } else {
                    naive_window_mean(&ms, n).is_some_and(|m| m < cfg.epsilon)
                };
                let budget = think_len + 1 >= cfg.max_think;
                let want = if !armed { Event::None }
                    else if converged { Event::Converged }
                    else if budget { Event::Budget }
                    else { Event::None };
                prop_assert_eq!(step.event, want as u32, "t = {}", t);
                if want != Event::None {
                    events += 1;
                    expect_forcing = true;
                }
                // The model: the first token opens think when starting outside; sometimes it
                // closes think itself.
                if !inside && !done && t == 1 { OPEN }
                else if close_every.is_some_and(|k| i % k == k - 1) { CLOSE }
                else { WORD }
            };
            seq.accept(token).unwrap();
            if token == OPEN && !inside && !done {
                inside = true;
            } else if token == CLOSE && inside {
                inside = false;
                done = true;
                if forced.is_empty() { expect_forcing = false; }
            } else if inside {
                think_len += 1;
            }
            if expect_forcing && forced.len() == queue.len() { expect_forcing = false; }
            prop_assert!(think_len <= cfg.max_think, "think content beyond L_max");
            prop_assert_eq!(seq.think_len(), think_len);
            prop_assert_eq!(seq.inside_think(), inside);
        }
        prop_assert!(events <= 1, "fired {} times", events);
        prop_assert!(!inside, "thinking not terminated by L_max");
        if !forced.is_empty() {
            prop_assert_eq!(&forced, &queue, "forced tokens are exactly the queue, in order");
        }
        if let Some((t, Event::Converged)) = seq.fired() {
            prop_assert!(t >= cfg.min_len, "converged before L_min");
        }
    }

    #[test]
    fn tds_invariants(phis in prop::collection::vec(prop::collection::vec(0.0f32..1.0, 4), 1..30),
                      eta in 0.0f32..0.5, b_max in 0u32..4, released in prop::bool::ANY,
                      best in prop::bool::ANY) {
        let mut cfg = Config::paper();
        cfg.eta = eta;
        cfg.max_resamples = b_max;
        cfg.tds_rule = if released { TdsRule::OpenInterval } else { TdsRule::BelowEta } as u32;
        cfg.keep = if best { Keep::Best } else { Keep::Last } as u32;
        let mut tds = Tds::new(&cfg).unwrap();
        let mut prev: Option<f32> = None;
        let mut total = 0;
        for (turn, tries) in phis.iter().enumerate() {
            let mut used = 0;
            let mut gammas = Vec::new();
            let kept = loop {
                let phi = tries[used.min(tries.len() - 1)];
                let v = tds.decide(phi).unwrap();
                let gamma = prev.map(|p| (phi - p).abs());
                gammas.push((gamma.unwrap_or(0.0), phi));
                let hesitant = gamma.is_some_and(|g| if released { g > 0.0 && g < eta } else { g < eta });
                if turn == 0 {
                    prop_assert_eq!(v.resample, 0, "turn 1 is never resampled");
                }
                prop_assert_eq!(v.resample == 1, hesitant && (used as u32) < b_max);
                if v.resample == 0 { break v; }
                used += 1;
                prop_assert!(used as u32 <= b_max, "more than B_max resamples");
            };
            if best && used as u32 == b_max && b_max > 0 && kept.gamma < eta {
                let max_gamma = gammas.iter().map(|g| g.0).fold(f32::MIN, f32::max);
                prop_assert_eq!(gammas[kept.kept_try as usize].0, max_gamma);
            } else {
                prop_assert_eq!(kept.kept_try as usize, used);
            }
            prop_assert_eq!(kept.kept_phi, gammas[kept.kept_try as usize].1);
            tds.commit().unwrap();
            prev = Some(kept.kept_phi);
            total += used;
        }
        prop_assert_eq!(tds.resamples() as usize, total);
        prop_assert_eq!(tds.turns() as usize, phis.len());
    }

    /// Switching one block of the profile (signal, trigger, TDS) changes only that block's output.
    #[test]
    fn profile_switch_changes_only_its_block(stream in stat_stream(),
                                              phis in prop::collection::vec(0.0f32..1.0, 1..20)) {
        let paper = Config::paper();
        let released = Config::released();
        // Released signal block on top of the paper's trigger and TDS.
        let mut signal_only = paper;
        signal_only.top_j = released.top_j;
        signal_only.entropy_norm = released.entropy_norm;
        signal_only.entropy_term = released.entropy_term;
        signal_only.confidence_norm = released.confidence_norm;
        signal_only.confidence_term = released.confidence_term;
        // Released TDS block (turn mean and rule) on top of the paper's signal and trigger.
        let mut tds_only = paper;
        tds_only.turn_mean = released.turn_mean;
        tds_only.tds_rule = released.tds_rule;
        tds_only.eta = released.eta;
        // Released trigger on the paper's signal.
        let mut trigger_only = paper;
        trigger_only.trigger = released.trigger;

        let run = |cfg: &Config| {
            let mut seq = Sequence::new(cfg).unwrap();
            seq.begin_generation(ThinkStart::Outside); // never fires: pure signal
            let mut out = Vec::new();
            for &(h, c) in &stream {
                out.push(seq.observe(&stats(h, c)).unwrap().signal);
                seq.accept(WORD).unwrap();
            }
            out
        };
        let m_paper = run(&paper);
        prop_assert_eq!(&run(&tds_only), &m_paper, "TDS block changed M_t");
        prop_assert_eq!(&run(&trigger_only), &m_paper, "trigger block changed M_t");
        let m_rel = run(&signal_only);
        // The signal block alone reproduces the released formula.
        let ln_v = (32_000f32).ln();
        for (m, &(h, c)) in m_rel.iter().zip(&stream) {
            let want = 0.4 * (1.0 - (h / ln_v).clamp(0.0, 1.0)) + 0.6 * (-c);
            prop_assert!((m - want).abs() < 1e-5, "{} vs {}", m, want);
        }
        // TDS decisions depend only on the TDS block.
        let decide_all = |cfg: &Config| {
            let mut tds = Tds::new(cfg).unwrap();
            phis.iter().map(|&p| {
                let v = tds.decide(p).unwrap();
                if v.resample == 0 { tds.commit().unwrap(); }
                v
            }).collect::<Vec<_>>()
        };
        prop_assert_eq!(decide_all(&signal_only), decide_all(&paper));
        prop_assert_eq!(decide_all(&trigger_only), decide_all(&paper));
    }

    /// M_t of the paper profile equals a naive running min–max recomputation.
    #[test]
    fn paper_signal_matches_naive(stream in stat_stream()) {
        let cfg = Config::paper();
        let mut seq = Sequence::new(&cfg).unwrap();
        seq.begin_generation(ThinkStart::Outside);
        for (i, &(h, c)) in stream.iter().enumerate() {
            let m = seq.observe(&stats(h, c)).unwrap().signal;
            seq.accept(WORD).unwrap();
            let seen = &stream[..=i];
            let norm = |x: f32, f: fn(&(f32, f32)) -> f32| {
                let lo = seen.iter().map(f).fold(f32::INFINITY, f32::min);
                let hi = seen.iter().map(f).fold(f32::NEG_INFINITY, f32::max);
                if hi - lo < cfg.range_eps { 0.0 } else { (x - lo) / (hi - lo) }
            };
            let want = 0.4 * norm(h, |s| s.0) + 0.6 * (1.0 - norm(c, |s| s.1));
            prop_assert!((m - want).abs() < 1e-6, "t={} {} vs {}", i + 1, m, want);
        }
    }
}

#[test]
fn out_of_order_calls_are_errors_not_panics() {
    let mut seq = Sequence::new(&Config::paper()).unwrap();
    assert!(matches!(
        seq.observe(&stats(1.0, 1.0)),
        Err(Error::Order(_))
    ));
    seq.begin_generation(ThinkStart::Inside);
    assert!(matches!(seq.accept(1), Err(Error::Order(_))));
    assert!(matches!(seq.turn_signal(), Err(Error::EmptyTurn)));
}
