//! The self-calibrated signal `M_t = α·T_H + (1 − α)·T_C` (spec §2).
//!
//! Paper: `T_H = H̃`, `T_C = 1 − C̃`, with `x̃ = (x − min)/(max − min)` over the current
//! generation's tokens `1..t` (causal running range; 0 while the range is below `range_eps`).
//! Released: `T_H = 1 − clamp(H/ln V, 0, 1)`, `T_C = −C₁ = ln p_max`, weights `1 − a` and `a`.
//! Both are the same formula with different [`Norm`]/[`Term`] values in the config.
//! The running ranges and the normalisation are kept in f64, from entropy and confidence in f64
//! ([`Sequence::observe_row`](crate::Sequence::observe_row) hands over the kernel's f64 values;
//! [`Sequence::observe`](crate::Sequence::observe) widens its f32 ones): a tiny running range
//! magnifies any rounding of `H` and `C`, and f32 rounding alone moved `M_t` by up to 3.7e-3 on
//! rows whose entropy barely varies. `M_t` itself is rounded to f32 once, at the end.

use crate::config::{Config, Norm, Term};
use crate::stats::TokenStats;

/// Running min/max of entropy and confidence over the current generation (all-POD, f64).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SignalState {
    /// Number of tokens that entered the range.
    pub count: u32,
    /// The vocabulary size `ln_vocab` was computed for (0: none yet).
    pub vocab: u32,
    /// Running minimum entropy.
    pub h_min: f64,
    /// Running maximum entropy.
    pub h_max: f64,
    /// Running minimum confidence.
    pub c_min: f64,
    /// Running maximum confidence.
    pub c_max: f64,
    /// `ln vocab`, cached: rows of one sequence share a vocabulary.
    pub ln_vocab: f64,
}

impl Default for SignalState {
    fn default() -> Self {
        Self::new()
    }
}

impl SignalState {
    /// An empty range (start of a generation).
    pub const fn new() -> Self {
        Self {
            count: 0,
            vocab: 0,
            h_min: 0.0,
            h_max: 0.0,
            c_min: 0.0,
            c_max: 0.0,
            ln_vocab: 0.0,
        }
    }

    /// Adds this token's statistics to the running ranges and returns its `M_t`.
    #[inline]
    pub fn update(&mut self, cfg: &Config, stats: &TokenStats) -> f32 {
        self.update_wide(
            cfg,
            stats.entropy as f64,
            stats.confidence as f64,
            stats.vocab,
        )
    }

    /// [`update`](Self::update) with the entropy `h` and confidence `c` in f64 (as the
    /// statistics kernel computes them) for a row of `vocab` entries.
    #[inline]
    pub fn update_wide(&mut self, cfg: &Config, h: f64, c: f64, vocab: u32) -> f32 {
        if self.count == 0 {
            (self.h_min, self.h_max, self.c_min, self.c_max) = (h, h, c, c);
        } else {
            self.h_min = self.h_min.min(h);
            self.h_max = self.h_max.max(h);
            self.c_min = self.c_min.min(c);
            self.c_max = self.c_max.max(c);
        }
        self.count = self.count.saturating_add(1);
        let ln_norm = Norm::LnVocab as u32;
        if (cfg.entropy_norm == ln_norm || cfg.confidence_norm == ln_norm) && vocab != self.vocab {
            self.vocab = vocab;
            self.ln_vocab = libm::log(vocab as f64);
        }
        let th = term(
            cfg.entropy_term,
            normalize(
                cfg.entropy_norm,
                h,
                self.h_min,
                self.h_max,
                cfg.range_eps as f64,
                self.ln_vocab,
            ),
        );
        let tc = term(
            cfg.confidence_term,
            normalize(
                cfg.confidence_norm,
                c,
                self.c_min,
                self.c_max,
                cfg.range_eps as f64,
                self.ln_vocab,
            ),
        );
        let alpha = cfg.alpha as f64;
        (alpha * th + (1.0 - alpha) * tc) as f32
    }
}

#[inline]
fn normalize(norm: u32, x: f64, min: f64, max: f64, range_eps: f64, ln_v: f64) -> f64 {
    match norm {
        n if n == Norm::LnVocab as u32 => {
            if ln_v > 0.0 {
                (x / ln_v).clamp(0.0, 1.0)
            } else {
                0.0
            }
        }
        n if n == Norm::Identity as u32 => x,
        // RunningMinMax, and the fallback for unvalidated values.
        _ => {
            let range = max - min;
            if range < range_eps || range <= 0.0 {
                0.0
            } else {
                // No clamp needed: `min ≤ x ≤ max` (the ranges include this token), and
                // rounding is monotonic, so `0 ≤ x − min ≤ max − min` and the quotient is in [0, 1].
                (x - min) / range
            }
        }
    }
}

#[inline]
fn term(kind: u32, x: f64) -> f64 {
    match kind {
        k if k == Term::Complement as u32 => 1.0 - x,
        k if k == Term::Negate as u32 => -x,
        _ => x,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(entropy: f32, confidence: f32, max_logit: f32, lse: f32) -> TokenStats {
        TokenStats {
            entropy,
            confidence,
            max_logit,
            log_sum_exp: lse,
            vocab: 151_936,
            top_count: 20,
        }
    }

    #[test]
    fn paper_signal_by_hand() {
        let cfg = Config::paper();
        let mut s = SignalState::new();
        // First token: both ranges empty → H̃ = C̃ = 0 → M = 0.4·0 + 0.6·1.
        assert!((s.update(&cfg, &st(2.0, 10.0, 0.0, 0.0)) - 0.6).abs() < 1e-7);
        // Second: H ∈ [2, 4] → H̃ = 1; C ∈ [10, 14] → C̃ = 1 → M = 0.4.
        assert!((s.update(&cfg, &st(4.0, 14.0, 0.0, 0.0)) - 0.4).abs() < 1e-7);
        // Third: H̃ = 0.5, C̃ = 0.25 → M = 0.2 + 0.45.
        assert!((s.update(&cfg, &st(3.0, 11.0, 0.0, 0.0)) - 0.65).abs() < 1e-6);
    }

    #[test]
    fn released_signal_by_hand() {
        let cfg = Config::released();
        let mut s = SignalState::new();
        let ln_v = (151_936f64).ln();
        let h = 3.0f64;
        let c1 = 0.7f64; // −ln p_max
        let got = s.update(&cfg, &st(h as f32, c1 as f32, 0.0, 0.0)) as f64;
        let want = 0.6 * (-c1) + 0.4 * (1.0 - (h / ln_v).clamp(0.0, 1.0));
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    }
}
