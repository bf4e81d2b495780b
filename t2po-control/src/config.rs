//! Every T²PO parameter in one plain `#[repr(C)]` record, shared as-is with C (`t2po_config`).
//!
//! Spec §2–§4 (`shared/spec/T2PO-RULES.md`). The two profiles (paper, released code) are two
//! *values* of this record, not two code paths: the signal's terms, the trigger rule, the turn
//! mean and the TDS rule are each chosen by an integer field read through a checked
//! conversion (integers from C are never transmuted into Rust enums).

use crate::error::ConfigError;

/// Largest `j` for top-j confidence (the selection buffer is fixed-size).
pub const TOP_J_CAPACITY: usize = 64;
/// Capacity of the delta window: the window holds `N + 1` deltas, so `N ≤ WINDOW_CAPACITY − 1`.
pub const WINDOW_CAPACITY: usize = 32;
/// Capacity of the forced-token queue.
pub const QUEUE_CAPACITY: usize = 8;

/// Qwen3 `<think>`.
pub const QWEN3_THINK_OPEN: u32 = 151_667;
/// Qwen3 `</think>`.
pub const QWEN3_THINK_CLOSE: u32 = 151_668;
/// Qwen3 forced queue of the paper: `</think>`, `\n`, `<action>` (three tokens: `<`, `action`, `>`).
///
/// cbindgen:ignore
pub const QWEN3_PAPER_QUEUE: [u32; 5] = [151_668, 198, 27, 1311, 29];

/// Which profile [`Config::for_profile`] builds.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// The paper's rules (default).
    Paper = 0,
    /// The authors' released code (without its two bugs, spec §6).
    Released = 1,
}

/// How a raw statistic is scaled before it enters the signal.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Norm {
    /// `(x − min)/(max − min)` with min/max running over the current generation (paper).
    RunningMinMax = 0,
    /// `clamp(x / ln V, 0, 1)` with `V` the row length (released code, entropy).
    LnVocab = 1,
    /// The raw value (released code, confidence).
    Identity = 2,
}

/// The transform applied after normalisation: the signal is `α·T_H + (1 − α)·T_C`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Term {
    /// `x`
    Direct = 0,
    /// `1 − x`
    Complement = 1,
    /// `−x`
    Negate = 2,
}

/// The TTI convergence rule.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// `mean(Δ_{t−N..t}) < ε` over the `N + 1` most recent deltas (paper).
    WindowMean = 0,
    /// A counter reset by `Δ > tol` and incremented otherwise reaches `patience` (released).
    Patience = 1,
    /// Peak-cut, the ablation the paper argues against (§4.2, "why not truncate at the peak",
    /// Fig. 4): cut at the first peak of uncertainty, i.e. the first local minimum of `M_t`
    /// (which is high for confident, low-entropy rows): `M_{t−1}` fell below the value before
    /// it (level steps after the fall keep the trough) and `M_t > M_{t−1}`, at `t ≥ L_min`.
    /// The rise is seen one step after the trough, so the queue starts two tokens after it.
    /// `window`, `ε`, `patience` are not used.
    PeakCut = 2,
}

/// How the turn signal Φ aggregates M_t.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TurnMean {
    /// `exp(mean(ln max(M_t, φ_floor)))` over all observed tokens (paper).
    Geometric = 0,
    /// Arithmetic mean over tokens with position `t > phi_skip` (released).
    Arithmetic = 1,
}

/// When TDS calls a turn hesitant.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TdsRule {
    /// `Γ < η` (paper).
    BelowEta = 0,
    /// `0 < Γ < η` (released).
    OpenInterval = 1,
}

/// Which try TDS keeps when the resample budget runs out.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// The last try (released behaviour).
    Last = 0,
    /// The try with the largest Γ.
    Best = 1,
}

macro_rules! from_u32 {
    ($ty:ident, $field:literal, [$($variant:ident),+]) => {
        impl $ty {
            /// Reads the integer form used in [`Config`] (and in C); unknown values are an error.
            pub fn from_u32(value: u32) -> Result<Self, ConfigError> {
                $(if value == $ty::$variant as u32 { return Ok($ty::$variant); })+
                Err(ConfigError::UnknownKind { field: $field, value })
            }
        }
    };
}
from_u32!(Profile, "profile", [Paper, Released]);
from_u32!(Norm, "norm", [RunningMinMax, LnVocab, Identity]);
from_u32!(Term, "term", [Direct, Complement, Negate]);
from_u32!(Trigger, "trigger", [WindowMean, Patience, PeakCut]);
from_u32!(TurnMean, "turn_mean", [Geometric, Arithmetic]);
from_u32!(TdsRule, "tds_rule", [BelowEta, OpenInterval]);
from_u32!(Keep, "keep", [Last, Best]);

/// All parameters of the signal, TTI and TDS. Build one with [`Config::paper`] or
/// [`Config::released`], change fields, then [`Config::validate`] (done again by every
/// constructor that takes a config).
///
/// Kind fields hold the `u32` value of the matching enum ([`Norm`], [`Term`], [`Trigger`],
/// [`TurnMean`], [`TdsRule`], [`Keep`]); booleans are `0`/`1`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    // --- signal M_t (spec §1–2) ---
    /// `j` of the top-j confidence, `1..=TOP_J_CAPACITY` (paper 20, released 1).
    pub top_j: u32,
    /// Weight of the entropy term; the confidence term gets `1 − alpha` (paper α = 0.4;
    /// released `a = 0.6` weighs confidence, so `alpha = 1 − a = 0.4`).
    pub alpha: f32,
    /// [`Norm`] of the entropy.
    pub entropy_norm: u32,
    /// [`Term`] of the entropy.
    pub entropy_term: u32,
    /// [`Norm`] of the top-j confidence `C_t = −(1/j) Σ ln p_(i)`.
    pub confidence_norm: u32,
    /// [`Term`] of the confidence.
    pub confidence_term: u32,
    /// A running range below this normalises to 0 (spec §2, default 1e-6).
    pub range_eps: f32,
    // --- TTI (spec §3) ---
    /// 1: TTI may force the queue; 0: statistics only (the "TDS only" ablation).
    pub tti_enabled: u32,
    /// [`Trigger`] rule.
    pub trigger: u32,
    /// `N` of the window rule; the window holds `N + 1` deltas (paper 4).
    pub window: u32,
    /// `ε` of the window rule (paper 0.1).
    pub epsilon: f32,
    /// Patience of the counter rule (released 20).
    pub patience: u32,
    /// A delta above this resets the counter rule (released 1e-4).
    pub patience_tol: f32,
    /// `L_min`: no convergence firing before position `t = L_min` (paper 16).
    pub min_len: u32,
    /// `L_max`: the think content never exceeds this many tokens (paper 500).
    pub max_think: u32,
    /// Token id that opens a think block.
    pub think_open: u32,
    /// Token id that closes a think block; the forced queue must start with it.
    pub think_close: u32,
    /// Number of valid entries in `queue`.
    pub queue_len: u32,
    /// The forced queue `Q`, emitted in order when TTI fires.
    pub queue: [u32; QUEUE_CAPACITY],
    // --- TDS (spec §4) ---
    /// 1: TDS may ask for resamples; 0: always keep (the "TTI only" ablation).
    pub tds_enabled: u32,
    /// [`TurnMean`] of Φ.
    pub turn_mean: u32,
    /// `φ_floor` of the geometric mean (paper 1e-6).
    pub phi_floor: f32,
    /// Positions `t ≤ phi_skip` are left out of the arithmetic mean (released 32).
    pub phi_skip: u32,
    /// [`TdsRule`].
    pub tds_rule: u32,
    /// `η` (paper 0.15, released 0.3).
    pub eta: f32,
    /// `B_max`: extra tries per turn (2).
    pub max_resamples: u32,
    /// [`Keep`] policy when the budget runs out.
    pub keep: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self::paper()
    }
}

impl Config {
    /// The paper's defaults with Qwen3 token ids.
    pub const fn paper() -> Self {
        let mut queue = [0u32; QUEUE_CAPACITY];
        let mut i = 0;
        while i < QWEN3_PAPER_QUEUE.len() {
            queue[i] = QWEN3_PAPER_QUEUE[i];
            i += 1;
        }
        Self {
            top_j: 20,
            alpha: 0.4,
            entropy_norm: Norm::RunningMinMax as u32,
            entropy_term: Term::Direct as u32,
            confidence_norm: Norm::RunningMinMax as u32,
            confidence_term: Term::Complement as u32,
            range_eps: 1e-6,
            tti_enabled: 1,
            trigger: Trigger::WindowMean as u32,
            window: 4,
            epsilon: 0.1,
            patience: 20,
            patience_tol: 1e-4,
            min_len: 16,
            max_think: 500,
            think_open: QWEN3_THINK_OPEN,
            think_close: QWEN3_THINK_CLOSE,
            queue_len: QWEN3_PAPER_QUEUE.len() as u32,
            queue,
            tds_enabled: 1,
            turn_mean: TurnMean::Geometric as u32,
            phi_floor: 1e-6,
            phi_skip: 32,
            tds_rule: TdsRule::BelowEta as u32,
            eta: 0.15,
            max_resamples: 2,
            keep: Keep::Last as u32,
        }
    }

    /// The released code's rules (spec §2–§4 "released"), per-sequence state (spec §6).
    pub const fn released() -> Self {
        let mut queue = [0u32; QUEUE_CAPACITY];
        queue[0] = QWEN3_THINK_CLOSE;
        let paper = Self::paper();
        Self {
            top_j: 1,
            alpha: 0.4,
            entropy_norm: Norm::LnVocab as u32,
            entropy_term: Term::Complement as u32,
            confidence_norm: Norm::Identity as u32,
            confidence_term: Term::Negate as u32,
            trigger: Trigger::Patience as u32,
            min_len: 0,
            max_think: 450,
            queue_len: 1,
            queue,
            turn_mean: TurnMean::Arithmetic as u32,
            tds_rule: TdsRule::OpenInterval as u32,
            eta: 0.3,
            ..paper
        }
    }

    /// The defaults of a profile.
    pub const fn for_profile(profile: Profile) -> Self {
        match profile {
            Profile::Paper => Self::paper(),
            Profile::Released => Self::released(),
        }
    }

    /// The forced queue as a slice (clamped to capacity, so it is safe on unvalidated values).
    pub fn queue(&self) -> &[u32] {
        let len = (self.queue_len as usize).min(QUEUE_CAPACITY);
        &self.queue[..len]
    }

    /// Checks every field; the error names the field, the value and what was expected.
    pub fn validate(&self) -> Result<(), ConfigError> {
        use ConfigError as E;
        if self.top_j == 0 || self.top_j as usize > TOP_J_CAPACITY {
            return Err(E::TopJ { value: self.top_j });
        }
        if !(0.0..=1.0).contains(&self.alpha) {
            return Err(E::Alpha { value: self.alpha });
        }
        Norm::from_u32(self.entropy_norm).map_err(|_| E::UnknownKind {
            field: "entropy_norm",
            value: self.entropy_norm,
        })?;
        Term::from_u32(self.entropy_term).map_err(|_| E::UnknownKind {
            field: "entropy_term",
            value: self.entropy_term,
        })?;
        Norm::from_u32(self.confidence_norm).map_err(|_| E::UnknownKind {
            field: "confidence_norm",
            value: self.confidence_norm,
        })?;
        Term::from_u32(self.confidence_term).map_err(|_| E::UnknownKind {
            field: "confidence_term",
            value: self.confidence_term,
        })?;
        if !(self.range_eps.is_finite() && self.range_eps >= 0.0) {
            return Err(E::NonNegative {
                field: "range_eps",
                value: self.range_eps,
            });
        }
        check_flag("tti_enabled", self.tti_enabled)?;
        check_flag("tds_enabled", self.tds_enabled)?;
        Trigger::from_u32(self.trigger)?;
        if self.window as usize + 1 > WINDOW_CAPACITY {
            return Err(E::Window { value: self.window });
        }
        if !(self.epsilon.is_finite() && self.epsilon >= 0.0) {
            return Err(E::NonNegative {
                field: "epsilon",
                value: self.epsilon,
            });
        }
        if self.patience == 0 {
            return Err(E::Patience);
        }
        if !(self.patience_tol.is_finite() && self.patience_tol >= 0.0) {
            return Err(E::NonNegative {
                field: "patience_tol",
                value: self.patience_tol,
            });
        }
        if self.max_think == 0 {
            return Err(E::MaxThinkZero);
        }
        if self.min_len > self.max_think {
            return Err(E::Lengths {
                min_len: self.min_len,
                max_think: self.max_think,
            });
        }
        if self.think_open == self.think_close {
            return Err(E::ThinkTokens {
                token: self.think_open,
            });
        }
        if self.queue_len as usize > QUEUE_CAPACITY {
            return Err(E::QueueTooLong {
                len: self.queue_len,
            });
        }
        if self.tti_enabled == 1 {
            match self.queue().first() {
                None => return Err(E::EmptyQueue),
                Some(&head) if head != self.think_close => {
                    return Err(E::QueueHead {
                        head,
                        think_close: self.think_close,
                    })
                }
                _ => {}
            }
        }
        if let Some(&token) = self.queue().iter().find(|&&t| t > i32::MAX as u32) {
            return Err(E::TokenRange { token });
        }
        TurnMean::from_u32(self.turn_mean)?;
        if !(self.phi_floor.is_finite() && self.phi_floor > 0.0) {
            return Err(E::PhiFloor {
                value: self.phi_floor,
            });
        }
        TdsRule::from_u32(self.tds_rule)?;
        if !(self.eta.is_finite() && self.eta >= 0.0) {
            return Err(E::NonNegative {
                field: "eta",
                value: self.eta,
            });
        }
        Keep::from_u32(self.keep)?;
        Ok(())
    }
}

fn check_flag(field: &'static str, value: u32) -> Result<(), ConfigError> {
    if value > 1 {
        return Err(ConfigError::Flag { field, value });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_profiles_validate() {
        Config::paper().validate().unwrap();
        Config::released().validate().unwrap();
    }

    /// The released profile differs from the paper in exactly the fields spec §2–§4 name.
    #[test]
    fn profiles_differ_only_where_the_spec_says() {
        let p = Config::paper();
        let r = Config::released();
        let differing = [
            ("top_j", p.top_j != r.top_j),
            ("alpha", p.alpha != r.alpha),
            ("entropy_norm", p.entropy_norm != r.entropy_norm),
            ("entropy_term", p.entropy_term != r.entropy_term),
            ("confidence_norm", p.confidence_norm != r.confidence_norm),
            ("confidence_term", p.confidence_term != r.confidence_term),
            ("range_eps", p.range_eps != r.range_eps),
            ("tti_enabled", p.tti_enabled != r.tti_enabled),
            ("trigger", p.trigger != r.trigger),
            ("window", p.window != r.window),
            ("epsilon", p.epsilon != r.epsilon),
            ("patience", p.patience != r.patience),
            ("patience_tol", p.patience_tol != r.patience_tol),
            ("min_len", p.min_len != r.min_len),
            ("max_think", p.max_think != r.max_think),
            ("think_open", p.think_open != r.think_open),
            ("think_close", p.think_close != r.think_close),
            ("queue", p.queue() != r.queue()),
            ("tds_enabled", p.tds_enabled != r.tds_enabled),
            ("turn_mean", p.turn_mean != r.turn_mean),
            ("phi_floor", p.phi_floor != r.phi_floor),
            ("phi_skip", p.phi_skip != r.phi_skip),
            ("tds_rule", p.tds_rule != r.tds_rule),
            ("eta", p.eta != r.eta),
            ("max_resamples", p.max_resamples != r.max_resamples),
            ("keep", p.keep != r.keep),
        ];
        let names: std::vec::Vec<&str> = differing
            .iter()
            .filter(|(_, d)| *d)
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(
            names,
            [
                "top_j",
                "entropy_norm",
                "entropy_term",
                "confidence_norm",
                "confidence_term",
                "trigger",
                "min_len",
                "max_think",
                "queue",
                "turn_mean",
                "tds_rule",
                "eta"
            ]
        );
    }

    #[test]
    fn validation_names_the_field() {
        type Case = (fn(&mut Config), ConfigError);
        let cases: [Case; 10] = [
            (|c| c.alpha = 1.5, ConfigError::Alpha { value: 1.5 }),
            (|c| c.top_j = 0, ConfigError::TopJ { value: 0 }),
            (|c| c.top_j = 65, ConfigError::TopJ { value: 65 }),
            (|c| c.window = 32, ConfigError::Window { value: 32 }),
            (
                |c| c.min_len = 600,
                ConfigError::Lengths {
                    min_len: 600,
                    max_think: 500,
                },
            ),
            (|c| c.queue_len = 0, ConfigError::EmptyQueue),
            (|c| c.queue_len = 9, ConfigError::QueueTooLong { len: 9 }),
            (
                |c| c.queue[0] = 198,
                ConfigError::QueueHead {
                    head: 198,
                    think_close: QWEN3_THINK_CLOSE,
                },
            ),
            (
                |c| c.trigger = 7,
                ConfigError::UnknownKind {
                    field: "trigger",
                    value: 7,
                },
            ),
            (|c| c.phi_floor = 0.0, ConfigError::PhiFloor { value: 0.0 }),
        ];
        for (mutate, want) in cases {
            let mut c = Config::paper();
            mutate(&mut c);
            assert_eq!(c.validate(), Err(want));
        }
        let mut c = Config::paper();
        c.window = 31;
        assert!(
            c.validate().is_ok(),
            "N = 31 fits: the window holds 32 deltas"
        );
        c.tti_enabled = 0;
        c.queue_len = 0;
        assert!(c.validate().is_ok(), "an empty queue is fine with TTI off");
        c.entropy_term = 3;
        let msg = std::format!("{}", c.validate().unwrap_err());
        assert!(msg.contains("entropy_term") && msg.contains('3'), "{msg}");
    }
}
