//! TDS — turn-level dynamical sampling (spec §4).
//!
//! [`TurnAccumulator`] folds a turn's `M_t` into Φ (paper: geometric mean of `max(M_t, φ_floor)`,
//! kept as an f64 mantissa product in `[1, 2)` plus an integer sum of binary exponents, so no
//! logarithm is taken per token and nothing underflows; `ln Π = ln mant + e·ln 2` at the end;
//! released: arithmetic mean over positions `t > phi_skip`).
//! [`Tds`] holds one episode's decision state: `Γ = |Φ^k − Φ^{k−1}|` against the *kept* Φ of the
//! previous turn; hesitant turns (`Γ < η`, or released `0 < Γ < η`) are resampled up to `B_max`
//! times; turn 1 is never resampled; when the budget runs out `keep = last | best` decides.

use crate::config::{Config, Keep, TdsRule, TurnMean};
use crate::error::Error;

/// Running sums of one turn's signal (all-POD).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TurnAccumulator {
    /// Mantissa of `Π max(M_t, φ_floor)`, in `[1, 2)` (0 before the first token).
    pub mantissa: f64,
    /// Binary exponent of that product.
    pub exponent: i64,
    /// `Σ M_t` over positions past the skip (arithmetic mean).
    pub sum: f64,
    /// Tokens in the product.
    pub count: u32,
    /// Tokens in `sum`.
    pub count_after_skip: u32,
}

const EXP_MASK: u64 = 0x7FF << 52;

/// The most one factor `max(M_t, φ_floor)` can move the product's binary exponent, either way:
/// the factor is an f32 in `[2^-149, 2^128)` (φ_floor > 0), the mantissa is in `[1, 2)`.
const MAX_EXPONENT_STEP: u64 = 150;

impl TurnAccumulator {
    /// Adds `M_t` of generated position `t` (1-based). An accumulator that no sequence of pushes
    /// can produce (see [`reachable`](Self::reachable): its owner wrote bytes into it) is left
    /// as it is, so it stays an error until the sequence is reset: adding to it would
    /// renormalise a NaN or infinite mantissa into `[1, 2)` and turn garbage into a Φ.
    #[inline]
    pub fn push(&mut self, cfg: &Config, t: u32, m: f32) {
        if !self.reachable(cfg) {
            return;
        }
        if cfg.turn_mean == TurnMean::Arithmetic as u32 {
            if t > cfg.phi_skip {
                self.sum += m as f64;
                self.count_after_skip = self.count_after_skip.saturating_add(1);
            }
        } else {
            let x = m.max(cfg.phi_floor) as f64; // NaN-free: max returns the floor for NaN
            let prod = if self.count == 0 {
                x
            } else {
                self.mantissa * x
            };
            let bits = prod.to_bits();
            self.exponent += ((bits & EXP_MASK) >> 52) as i64 - 1023;
            self.mantissa = f64::from_bits((bits & !EXP_MASK) | (1023 << 52));
            self.count = self.count.saturating_add(1);
        }
    }

    /// Whether the fields `cfg`'s turn mean uses hold a value that pushes of f32 `M_t` onto a
    /// fresh accumulator can produce: geometric — the fresh zeros, or a mantissa in `[1, 2)`
    /// and an exponent within 150 per token; arithmetic — a finite sum within `f32::MAX` per
    /// token. Anything else was written by the state's owner, not by the kernel.
    pub fn reachable(&self, cfg: &Config) -> bool {
        if cfg.turn_mean == TurnMean::Arithmetic as u32 {
            let bound = self.count_after_skip as f64 * f32::MAX as f64;
            self.sum.is_finite() && self.sum.abs() <= bound
        } else if self.count == 0 {
            self.mantissa == 0.0 && self.exponent == 0
        } else {
            (1.0..2.0).contains(&self.mantissa)
                && self.exponent.unsigned_abs() <= u64::from(self.count) * MAX_EXPONENT_STEP
        }
    }

    /// Φ of the turn so far; [`Error::BadAccumulator`] when the accumulator is not
    /// [`reachable`](Self::reachable) (state corrupted by its owner: the kernel itself only
    /// ever adds finite values) or Φ would not be finite, and [`Error::EmptyTurn`] when no
    /// token entered it. A corrupted accumulator stays an error for the rest of the generation
    /// ([`push`](Self::push) leaves it alone); a fresh one replaces it at reset.
    pub fn phi(&self, cfg: &Config) -> Result<f32, Error> {
        if !self.reachable(cfg) {
            return Err(Error::BadAccumulator);
        }
        let phi = if cfg.turn_mean == TurnMean::Arithmetic as u32 {
            if self.count_after_skip == 0 {
                return Err(Error::EmptyTurn);
            }
            (self.sum / self.count_after_skip as f64) as f32
        } else {
            if self.count == 0 {
                return Err(Error::EmptyTurn);
            }
            let ln_prod = libm::log(self.mantissa) + self.exponent as f64 * core::f64::consts::LN_2;
            libm::exp(ln_prod / self.count as f64) as f32
        };
        if !phi.is_finite() {
            return Err(Error::BadAccumulator);
        }
        Ok(phi)
    }
}

/// What TDS says about a sampled turn (`t2po_tds_verdict`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Verdict {
    /// 1: discard this sample and generate the turn again; 0: keep `kept_try`.
    pub resample: u32,
    /// With `resample == 0`: which try of this turn to keep (0 = the first sample).
    pub kept_try: u32,
    /// Γ of this sample (0 on the first turn).
    pub gamma: f32,
    /// Φ of the kept try (with `resample == 0`).
    pub kept_phi: f32,
}

const TDS_MAGIC: u32 = 0x7D5_0001;

/// TDS state of one episode (`t2po_tds`): caller-allocated, fixed-size, all-POD.
///
/// Per turn: call [`Tds::decide`] with each try's Φ until it returns `resample == 0`, step the
/// environment with the kept try, then [`Tds::commit`]. [`Tds::begin_episode`] starts over.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tds {
    magic: u32,
    enabled: u32,
    rule: u32,
    keep: u32,
    eta: f32,
    max_resamples: u32,
    has_prev: u32,
    prev_phi: f32,
    tries: u32,
    best_try: u32,
    best_gamma: f32,
    best_phi: f32,
    awaiting_commit: u32,
    kept_phi: f32,
    turns: u32,
    resamples: u32,
}

impl Tds {
    /// A fresh episode; the config is validated.
    pub fn new(cfg: &Config) -> Result<Self, Error> {
        cfg.validate()?;
        Ok(Self {
            magic: TDS_MAGIC,
            enabled: cfg.tds_enabled,
            rule: cfg.tds_rule,
            keep: cfg.keep,
            eta: cfg.eta,
            max_resamples: cfg.max_resamples,
            has_prev: 0,
            prev_phi: 0.0,
            tries: 0,
            best_try: 0,
            best_gamma: 0.0,
            best_phi: 0.0,
            awaiting_commit: 0,
            kept_phi: 0.0,
            turns: 0,
            resamples: 0,
        })
    }

    /// Whether this value was made by [`Tds::new`] (C callers may hand in any memory).
    pub fn is_initialized(&self) -> bool {
        self.magic == TDS_MAGIC
    }

    /// Forget the previous turn (a new episode); counters are kept.
    pub fn begin_episode(&mut self) {
        self.has_prev = 0;
        self.tries = 0;
        self.awaiting_commit = 0;
    }

    /// Judge one try of the current turn with its Φ.
    pub fn decide(&mut self, phi: f32) -> Result<Verdict, Error> {
        if !phi.is_finite() {
            return Err(Error::BadPhi(phi));
        }
        if self.awaiting_commit != 0 {
            return Err(Error::Order(
                "tds decide after a keep verdict: commit the kept turn first",
            ));
        }
        let try_index = self.tries;
        if self.has_prev == 0 || self.enabled == 0 {
            return Ok(self.keep_try(try_index, phi, 0.0));
        }
        let gamma = (phi - self.prev_phi).abs();
        if try_index == 0 || gamma > self.best_gamma {
            (self.best_try, self.best_gamma, self.best_phi) = (try_index, gamma, phi);
        }
        let hesitant = if self.rule == TdsRule::OpenInterval as u32 {
            gamma > 0.0 && gamma < self.eta
        } else {
            gamma < self.eta
        };
        if hesitant && self.tries < self.max_resamples {
            self.tries += 1;
            return Ok(Verdict {
                resample: 1,
                kept_try: 0,
                gamma,
                kept_phi: 0.0,
            });
        }
        if hesitant && self.keep == Keep::Best as u32 {
            return Ok(self.keep_try(self.best_try, self.best_phi, gamma));
        }
        Ok(self.keep_try(try_index, phi, gamma))
    }

    fn keep_try(&mut self, kept_try: u32, kept_phi: f32, gamma: f32) -> Verdict {
        self.awaiting_commit = 1;
        self.kept_phi = kept_phi;
        Verdict {
            resample: 0,
            kept_try,
            gamma,
            kept_phi,
        }
    }

    /// The kept try went to the environment: its Φ becomes `Φ^{k−1}` of the next turn.
    pub fn commit(&mut self) -> Result<(), Error> {
        if self.awaiting_commit == 0 {
            return Err(Error::Order(
                "tds commit without a keep verdict for this turn",
            ));
        }
        self.awaiting_commit = 0;
        self.has_prev = 1;
        self.prev_phi = self.kept_phi;
        self.turns = self.turns.saturating_add(1);
        self.resamples = self.resamples.saturating_add(self.tries);
        self.tries = 0;
        Ok(())
    }

    /// Committed turns since [`Tds::new`].
    pub fn turns(&self) -> u32 {
        self.turns
    }

    /// Resamples spent by committed turns since [`Tds::new`] (the resample-rate numerator).
    pub fn resamples(&self) -> u32 {
        self.resamples
    }

    /// Resamples spent on the current turn so far.
    pub fn tries(&self) -> u32 {
        self.tries
    }

    /// All three counters at once (`t2po_tds_counters`).
    pub fn counters(&self) -> TdsCounters {
        TdsCounters {
            turns: self.turns,
            resamples: self.resamples,
            tries: self.tries,
        }
    }
}

/// TDS counters of an episode state (`t2po_tds_counters`): the resample rate the spec asks
/// for is `resamples / (turns + resamples)` over committed turns.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TdsCounters {
    /// Committed turns since init.
    pub turns: u32,
    /// Resamples spent by committed turns since init.
    pub resamples: u32,
    /// Resamples spent on the current (uncommitted) turn so far.
    pub tries: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometric_mean_matches_direct_product() {
        let cfg = Config::paper();
        let mut acc = TurnAccumulator::default();
        let ms = [0.5f32, 0.25, 0.0, 0.8];
        for (i, &m) in ms.iter().enumerate() {
            acc.push(&cfg, i as u32 + 1, m);
        }
        let want = (0.5f64 * 0.25 * 1e-6 * 0.8).powf(0.25);
        let got = acc.phi(&cfg).unwrap() as f64;
        assert!((got - want).abs() / want < 1e-6, "{got} vs {want}");
        assert_eq!(TurnAccumulator::default().phi(&cfg), Err(Error::EmptyTurn));
    }

    #[test]
    fn non_finite_accumulators_are_an_error() {
        let paper = Config::paper();
        let released = Config::released();
        for (cfg, acc) in [
            (
                &paper,
                TurnAccumulator {
                    mantissa: f64::NAN,
                    count: 3,
                    ..Default::default()
                },
            ),
            (
                &paper,
                TurnAccumulator {
                    mantissa: f64::INFINITY,
                    count: 3,
                    ..Default::default()
                },
            ),
            (
                &paper,
                TurnAccumulator {
                    mantissa: 1.5,
                    exponent: i64::MAX / 2,
                    count: 1,
                    ..Default::default()
                },
            ),
            (
                &released,
                TurnAccumulator {
                    sum: f64::NAN,
                    count_after_skip: 2,
                    ..Default::default()
                },
            ),
            (
                &released,
                TurnAccumulator {
                    sum: 1e300,
                    count_after_skip: 1,
                    ..Default::default()
                },
            ),
        ] {
            assert_eq!(acc.phi(cfg), Err(Error::BadAccumulator), "{acc:?}");
        }
    }

    #[test]
    fn a_corrupted_accumulator_stays_an_error_until_reset() {
        // What an outside check wrote into a sequence's state: a non-finite mantissa (which one
        // more push used to renormalise into [1, 2), giving Φ ≈ 2.2e8), an exponent of
        // i64::MIN (Φ = 0 with no error), a count of 0 over a used product, a NaN sum.
        let paper = Config::paper();
        let released = Config::released();
        let used = {
            let mut acc = TurnAccumulator::default();
            for t in 1..=3 {
                acc.push(&paper, t, 0.25);
            }
            assert!(acc.phi(&paper).is_ok());
            acc
        };
        for (cfg, acc) in [
            (
                &paper,
                TurnAccumulator {
                    mantissa: f64::NAN,
                    ..used
                },
            ),
            (
                &paper,
                TurnAccumulator {
                    mantissa: f64::INFINITY,
                    ..used
                },
            ),
            (
                &paper,
                TurnAccumulator {
                    mantissa: 0.5,
                    ..used
                },
            ),
            (
                &paper,
                TurnAccumulator {
                    exponent: i64::MIN,
                    ..used
                },
            ),
            (
                &paper,
                TurnAccumulator {
                    exponent: i64::MAX,
                    ..used
                },
            ),
            (&paper, TurnAccumulator { count: 0, ..used }),
            (
                &released,
                TurnAccumulator {
                    sum: f64::NAN,
                    count_after_skip: 2,
                    ..Default::default()
                },
            ),
            (
                &released,
                TurnAccumulator {
                    sum: -1e300,
                    count_after_skip: 2,
                    ..Default::default()
                },
            ),
        ] {
            let mut acc = acc;
            assert_eq!(acc.phi(cfg), Err(Error::BadAccumulator), "{acc:?}");
            for t in 40..50 {
                acc.push(cfg, t, 0.5);
                assert_eq!(acc.phi(cfg), Err(Error::BadAccumulator), "{acc:?}");
            }
        }
        // The largest exponent step a real token makes stays within the bound.
        let mut acc = TurnAccumulator::default();
        let tiny = Config {
            phi_floor: f32::from_bits(1),
            ..paper
        };
        for t in 1..=1000 {
            acc.push(&tiny, t, if t % 2 == 0 { f32::MAX } else { 0.0 });
            assert!(acc.reachable(&tiny), "{t}: {acc:?}");
        }
        assert!(acc.phi(&tiny).is_ok());
    }

    #[test]
    fn long_turns_do_not_underflow() {
        let cfg = Config::paper();
        let mut acc = TurnAccumulator::default();
        for t in 1..=5000u32 {
            acc.push(&cfg, t, if t % 2 == 0 { 1e-6 } else { 0.5 });
        }
        let want = (1e-6f64 * 0.5).sqrt();
        let got = acc.phi(&cfg).unwrap() as f64;
        assert!((got - want).abs() / want < 1e-6, "{got} vs {want}");
    }

    #[test]
    fn arithmetic_mean_skips_the_prefix() {
        let cfg = Config::released();
        let mut acc = TurnAccumulator::default();
        for t in 1..=40u32 {
            acc.push(&cfg, t, if t <= 32 { 100.0 } else { t as f32 });
        }
        // t = 33..=40 → mean 36.5.
        assert!((acc.phi(&cfg).unwrap() - 36.5).abs() < 1e-6);
    }

    #[test]
    fn paper_rule_sequence() {
        let mut tds = Tds::new(&Config::paper()).unwrap();
        // Turn 1 never resampled.
        let v = tds.decide(0.5).unwrap();
        assert_eq!((v.resample, v.kept_try), (0, 0));
        assert!(tds.decide(0.1).is_err(), "decide before commit");
        tds.commit().unwrap();
        // Turn 2: Γ = 0.05 < 0.15 twice → resample, then the budget (2) runs out.
        assert_eq!(tds.decide(0.55).unwrap().resample, 1);
        assert_eq!(tds.decide(0.45).unwrap().resample, 1);
        let v = tds.decide(0.52).unwrap();
        assert_eq!((v.resample, v.kept_try), (0, 2), "keep = last");
        tds.commit().unwrap();
        assert_eq!((tds.turns(), tds.resamples()), (2, 2));
        // Turn 3 against Φ = 0.52: Γ = 0.3 ≥ η → keep at once.
        let v = tds.decide(0.82).unwrap();
        assert_eq!((v.resample, v.kept_try), (0, 0));
        assert!((v.gamma - 0.3).abs() < 1e-6);
        assert!(tds.commit().is_ok() && tds.commit().is_err());
    }

    #[test]
    fn keep_best_and_released_rule() {
        let mut cfg = Config::paper();
        cfg.keep = Keep::Best as u32;
        let mut tds = Tds::new(&cfg).unwrap();
        tds.decide(0.5).unwrap();
        tds.commit().unwrap();
        tds.decide(0.52).unwrap(); // Γ 0.02
        tds.decide(0.6).unwrap(); // Γ 0.10 (best)
        let v = tds.decide(0.49).unwrap(); // Γ 0.01, budget out
        assert_eq!((v.resample, v.kept_try), (0, 1));
        assert!((v.kept_phi - 0.6).abs() < 1e-7);
        tds.commit().unwrap();

        let mut tds = Tds::new(&Config::released()).unwrap();
        tds.decide(0.2).unwrap();
        tds.commit().unwrap();
        // Γ = 0 is not hesitant under 0 < Γ < 0.3.
        assert_eq!(tds.decide(0.2).unwrap().resample, 0);
        tds.commit().unwrap();
        assert_eq!(tds.decide(0.25).unwrap().resample, 1);
        assert!(matches!(tds.decide(f32::NAN), Err(Error::BadPhi(_))));
    }
}
