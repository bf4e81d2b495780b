//! `control.calibrate` (beyond the paper): ε and η from the policy itself.
//!
//! The paper fixes ε (TTI's convergence rule: the window mean of `|ΔM|` below ε) and η (TDS:
//! `Γ = |ΔΦ|` below η) by hand per environment; the right values depend on the model, its
//! vocabulary and the task. Here two warm-up rollouts on training tasks measure them:
//!
//! 1. **ε.** TTI observes with ε = 0 (the rule is checked and never fires; `L_max` still cuts)
//!    and TDS never resamples (η = 0). Each turn records the smallest window mean its rule
//!    compared ([`Generation::min_window_mean`](crate::rollout::Generation)). Up to the step
//!    where it fires, a run at another ε generates the same tokens, and the rule fires at ε
//!    exactly where a compared window mean is below ε — so a turn fires at ε iff its smallest
//!    window mean is below ε, and ε is chosen as the value below which `target_fire_rate` of
//!    the turns fall ([`threshold_for_rate`]).
//! 2. **η.** Rolled out again with the chosen ε (TDS sees the Φ of turns TTI cut, as it will in
//!    RL) and η = 0, each later turn (one with a previous kept turn) records Γ; η is the value
//!    below which `target_resample_rate` of them fall (with the released rule `0 < Γ < η`, a
//!    Γ of 0 never counts). This is the rate of first tries resampled; the resamples' own
//!    tries are not modelled.
//!
//! Both rollouts sample training tasks at the rollout temperature with their own seeds; the
//! held-out split is never read.

use super::config::{Calibrated, TrainConfig};
use super::rft::{purpose, run_episodes, sample_from, Reporter};
use super::state::derive_seed;
use crate::error::Result;
use crate::model::Qwen3;
use crate::rollout::{EnvPool, ProfileName, Split};
use crate::tokenizer::Tokenizer;

/// The threshold `x` at which `rate` of a population of `population` items falls below `x`
/// (`v < x`, the kernel's strict comparisons), given the values of the items that can fall
/// below any threshold at all (`candidates`; the other items never do); and the share of the
/// population that does fall below it. The count aimed at is `round(rate · population)`;
/// equal values fall below a threshold together, so the count taken is the reachable one
/// nearest to the aim (the smaller on a tie), and `x` lies halfway between the last value
/// counted and the next, away from every measured value. `candidates` must be finite and at
/// least 0; a count of 0 gives `x = 0`.
pub fn threshold_for_rate(candidates: &[f32], population: usize, rate: f64) -> (f32, f64) {
    let mut v: Vec<f32> = candidates.to_vec();
    v.sort_by(f32::total_cmp);
    let aim = (rate * population as f64).round() as usize;
    // The reachable counts: 0, and the end of each run of equal values.
    let mut count = 0usize;
    let mut i = 0;
    while i < v.len() {
        let mut j = i + 1;
        while j < v.len() && v[j] == v[i] {
            j += 1;
        }
        if j.abs_diff(aim) < count.abs_diff(aim) {
            count = j;
        }
        i = j;
    }
    let x = if count == 0 {
        0.0
    } else if count == v.len() {
        v[count - 1].next_up()
    } else {
        let (lo, hi) = (v[count - 1], v[count]);
        let mid = (f64::from(lo) + (f64::from(hi) - f64::from(lo)) / 2.0) as f32;
        if mid > lo {
            mid
        } else {
            // Adjacent floats: `hi` itself has exactly `count` values below it.
            hi
        }
    };
    (x, count as f64 / population.max(1) as f64)
}

/// Runs the two warm-ups on `policy` and returns what they chose (ε and η stay the config's
/// for a switch that is off). `cfg.control.calibrated` is ignored (a fresh calibration).
pub fn calibrate(
    policy: &Qwen3,
    tokenizer: &Tokenizer,
    pool: &EnvPool,
    cfg: &TrainConfig,
    rep: &mut dyn Reporter,
) -> Result<Calibrated> {
    let k = &cfg.control;
    let train_tasks: Vec<usize> = (0..pool.num_tasks(Split::Train)).collect();
    let tasks = sample_from(
        train_tasks,
        k.calibrate_tasks,
        derive_seed(cfg.seed, 0, purpose::CALIBRATE_TASKS),
    );
    let warm_up = |phase: u64, epsilon: f32, rep: &mut dyn Reporter| {
        // η = 0: TDS compares Γ and never resamples (every generation is kept and counted).
        let mut c = cfg.clone();
        c.control.epsilon = epsilon;
        c.control.eta = 0.0;
        c.control.calibrated = None;
        let (records, _, _) = run_episodes(
            "calibrate",
            policy,
            tokenizer,
            pool,
            &c,
            Split::Train,
            &tasks,
            cfg.rollout.group_size,
            cfg.rollout.temperature,
            derive_seed(cfg.seed, phase, purpose::CALIBRATE_ROLLOUT),
            rep,
        )?;
        Ok::<_, crate::error::Error>(records)
    };
    let mut out = Calibrated {
        epsilon: k.epsilon,
        eta: k.eta,
        fire_rate: None,
        resample_rate: None,
        turns: 0,
        checked_turns: 0,
        later_turns: 0,
    };
    if k.tti {
        let records = warm_up(1, 0.0, rep)?;
        let minima: Vec<f32> = records
            .iter()
            .flat_map(|e| &e.turns)
            .filter_map(|t| t.generation.min_window_mean)
            .collect();
        out.turns = records.iter().map(|e| e.turns.len()).sum();
        out.checked_turns = minima.len();
        let (epsilon, rate) = threshold_for_rate(&minima, out.turns, k.target_fire_rate);
        (out.epsilon, out.fire_rate) = (epsilon, Some(rate));
    }
    if k.tds {
        let records = warm_up(2, out.epsilon, rep)?;
        let open_interval = k.profile == ProfileName::Released;
        let gammas: Vec<f32> = records
            .iter()
            .flat_map(|e| &e.turns)
            .filter(|t| t.turn > 0)
            .map(|t| t.gamma)
            .collect();
        out.later_turns = gammas.len();
        let candidates: Vec<f32> = gammas
            .into_iter()
            .filter(|&g| !open_interval || g > 0.0)
            .collect();
        let (eta, rate) = threshold_for_rate(&candidates, out.later_turns, k.target_resample_rate);
        (out.eta, out.resample_rate) = (eta, Some(rate));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_is_the_stated_percentile() {
        // 100 values 0.01, 0.02, …, 1.00 (a known distribution), all of a population of 100:
        // a 30 % rate puts the threshold between the 30th and the 31st value, and exactly 30
        // values fall below it; in a population of 200 (the other 100 never fire) the same
        // rate needs 60 of the values.
        let v: Vec<f32> = (1..=100).rev().map(|i| i as f32 / 100.0).collect();
        let (x, r) = threshold_for_rate(&v, 100, 0.3);
        assert!(x > 0.30 && x < 0.31, "{x}");
        assert_eq!(r, 0.3);
        let (x, r) = threshold_for_rate(&v, 200, 0.3);
        assert!(x > 0.60 && x < 0.61, "{x}");
        assert_eq!(r, 0.3);
        // Rates outside what the candidates allow: 0 → nothing below 0; above the candidates'
        // share → every candidate counted, and the share reached is reported.
        assert_eq!(threshold_for_rate(&v, 100, 0.0), (0.0, 0.0));
        let (x, r) = threshold_for_rate(&v, 400, 0.5);
        assert!(x > 1.0 && x < 1.0001, "{x}");
        assert_eq!(r, 0.25);
        assert_eq!(threshold_for_rate(&[], 10, 0.5), (0.0, 0.0));
        assert_eq!(threshold_for_rate(&[], 0, 0.5), (0.0, 0.0));
    }

    #[test]
    fn ties_and_equal_neighbours_give_the_nearest_reachable_count() {
        // Four values at 0.5 fall below a threshold together: an aim of 3 (30 % of 10) takes
        // all four (4 is nearer than 0), the threshold halfway to 0.9; an aim of 1 takes none.
        let v = [0.5f32, 0.5, 0.5, 0.5, 0.9];
        let (x, r) = threshold_for_rate(&v, 10, 0.3);
        assert!((x - 0.7).abs() < 1e-6, "{x}");
        assert_eq!(r, 0.4);
        assert_eq!(threshold_for_rate(&v, 10, 0.1), (0.0, 0.0));
        // Between two distinct neighbours the threshold is strictly between them; a 0 among
        // the values is not below a threshold of 0.
        assert_eq!(threshold_for_rate(&[0.25, 0.75], 2, 0.5), (0.5, 0.5));
        assert_eq!(threshold_for_rate(&[0.0, 0.75], 2, 0.2), (0.0, 0.0));
        let (x, r) = threshold_for_rate(&[0.0, 0.75], 2, 0.5);
        assert_eq!((x, r), (0.375, 0.5));
        // Adjacent floats: the upper one is the threshold.
        let lo = 0.5f32;
        let (x, r) = threshold_for_rate(&[lo, lo.next_up()], 2, 0.5);
        assert_eq!((x, r), (lo.next_up(), 0.5));
    }

    #[test]
    fn the_chosen_threshold_reproduces_the_share_on_the_measured_values() {
        // Random values with many ties, any population and rate: the share reported is the
        // share of the population strictly below the threshold, and no threshold gets a
        // count nearer to the aim.
        let mut g = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            g ^= g << 13;
            g ^= g >> 7;
            g ^= g << 17;
            (g >> 40) as f32 / (1u64 << 24) as f32
        };
        for case in 0..500 {
            let n = case % 37;
            let v: Vec<f32> = (0..n).map(|_| (next() * 8.0).floor() / 8.0).collect();
            let population = n + case % 5;
            let rate = f64::from(next());
            let (x, r) = threshold_for_rate(&v, population, rate);
            let below = v.iter().filter(|&&c| c < x).count();
            assert_eq!(r, below as f64 / population.max(1) as f64, "case {case}");
            let aim = (rate * population as f64).round() as usize;
            let best = v
                .iter()
                .map(|&t| v.iter().filter(|&&c| c <= t).count())
                .chain([0])
                .map(|c| c.abs_diff(aim))
                .min()
                .unwrap();
            assert_eq!(below.abs_diff(aim), best, "case {case}");
        }
    }
}
