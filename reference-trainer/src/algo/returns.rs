//! Per-turn discounted returns `R_t = r_t + γ·R_{t+1}` over an episode's kept turns (T2PO-RULES
//! §5 "Returns"; verl-agent `gigpo/core_gigpo.py::compute_step_discounted_returns`) and the
//! format penalty λ on invalid turns (§5 "Format check"; verl-agent
//! `verl/trainer/ppo/ray_trainer.py::apply_invalid_action_penalty`).
//!
//! How verl-agent applies the penalty, reproduced here: the returns are computed from the raw
//! environment rewards first; then, for each invalid turn row only, λ is subtracted from that
//! row's return (`step_rewards[i] -= λ`) and from that row's score (the episode reward written at
//! the row's last token, `token_level_scores[i, last] -= λ`). The penalty is *not* a reward, so
//! it is not discounted into earlier turns' returns and not summed into the other rows' scores.

use super::{config_err, AlgoError, Result};
use crate::rollout::trajectory::EpisodeRecord;
use serde::{Deserialize, Serialize};

/// γ of the spec.
pub const DEFAULT_GAMMA: f64 = 0.95;
/// λ of the spec (verl-agent `invalid_action_penalty_coef`; its Search QA script uses 0.01).
pub const DEFAULT_FORMAT_PENALTY: f64 = 0.1;

/// Discount and penalty.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReturnConfig {
    /// Discount γ ∈ [0, 1].
    pub gamma: f64,
    /// Penalty λ ≥ 0 for a turn with `format_valid == false` (0 switches it off).
    pub format_penalty: f64,
}

impl Default for ReturnConfig {
    fn default() -> Self {
        ReturnConfig {
            gamma: DEFAULT_GAMMA,
            format_penalty: DEFAULT_FORMAT_PENALTY,
        }
    }
}

impl ReturnConfig {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<()> {
        if !(0.0..=1.0).contains(&self.gamma) {
            return Err(config_err(
                "gamma",
                format!("{} is not in [0, 1]", self.gamma),
            ));
        }
        if !(self.format_penalty.is_finite() && self.format_penalty >= 0.0) {
            return Err(config_err(
                "format_penalty",
                format!("{} is not a finite value ≥ 0", self.format_penalty),
            ));
        }
        Ok(())
    }
}

/// `R_t = r_t + γ·R_{t+1}`, `R_{T} = 0`, for one trajectory's rewards in turn order.
pub fn discounted_returns(rewards: &[f64], gamma: f64) -> Result<Vec<f64>> {
    if !(0.0..=1.0).contains(&gamma) {
        return Err(config_err("gamma", format!("{gamma} is not in [0, 1]")));
    }
    if let Some(r) = rewards.iter().find(|r| !r.is_finite()) {
        return Err(AlgoError::NonFinite {
            what: "reward",
            value: *r,
        });
    }
    let mut out = vec![0.0; rewards.len()];
    let mut running = 0.0;
    for (o, r) in out.iter_mut().zip(rewards).rev() {
        running = r + gamma * running;
        *o = running;
    }
    Ok(out)
}

/// The two per-turn quantities the advantages are built from.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnValues {
    /// The row's episode score: `Σ_k r_k` over the episode's kept turns, minus λ if this turn is
    /// invalid (the GRPO / GiGPO episode term normalises these).
    pub score: f64,
    /// The row's return: `R_t` from the raw rewards, minus λ if this turn is invalid (the GiGPO
    /// step term normalises these).
    pub ret: f64,
    /// Whether the penalty was applied.
    pub penalised: bool,
}

/// Scores and returns for every kept turn of one episode (`episode` is its index in the batch,
/// used in error messages). The episode score is computed from the turns' rewards, not from
/// `EpisodeRecord::total_reward`.
pub fn turn_values(
    record: &EpisodeRecord,
    episode: usize,
    cfg: &ReturnConfig,
) -> Result<Vec<TurnValues>> {
    cfg.validate()?;
    let rewards: Vec<f64> = record.turns.iter().map(|t| t.reward).collect();
    if let Some((turn, t)) = record
        .turns
        .iter()
        .enumerate()
        .find(|(_, t)| !t.reward.is_finite())
    {
        return Err(AlgoError::Turn {
            episode,
            turn,
            field: "reward",
            reason: format!("{} is not finite", t.reward),
        });
    }
    let returns = discounted_returns(&rewards, cfg.gamma)?;
    let total: f64 = rewards.iter().sum();
    Ok(record
        .turns
        .iter()
        .zip(returns)
        .map(|(t, ret)| {
            let pen = if t.format_valid {
                0.0
            } else {
                cfg.format_penalty
            };
            TurnValues {
                score: total - pen,
                ret: ret - pen,
                penalised: !t.format_valid && cfg.format_penalty > 0.0,
            }
        })
        .collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::rollout::trajectory::{Generation, TurnRecord};

    pub(crate) fn turn(reward: f64, valid: bool, anchor: &str) -> TurnRecord {
        TurnRecord {
            turn: 0,
            prompt_ids: vec![1, 2],
            prompt_truncated: 0,
            generation: Generation {
                response_ids: vec![7],
                log_probs: vec![-0.5],
                forced: vec![false],
                signal: vec![Some(0.5)],
                ..Generation::default()
            },
            response_mask: vec![1],
            response: String::new(),
            gamma: 0.0,
            tds_tries: 1,
            discarded: vec![],
            action: String::new(),
            format_valid: valid,
            void: false,
            reward,
            done: false,
            won: false,
            score: 0.0,
            anchor: anchor.to_string(),
        }
    }

    pub(crate) fn episode(group: usize, turns: Vec<TurnRecord>) -> EpisodeRecord {
        let mut turns = turns;
        for (i, t) in turns.iter_mut().enumerate() {
            t.turn = i;
        }
        EpisodeRecord {
            episode: 0,
            env: "webshop".into(),
            task: group,
            group,
            task_text: String::new(),
            source: String::new(),
            total_reward: turns.iter().map(|t| t.reward).sum(),
            turns,
            success: false,
            score: 0.0,
            resamples: 0,
            void: false,
            reward_parts: Default::default(),
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn discounted_returns_by_hand() {
        // rewards [0, 0, 10], γ = 0.95:
        // R_2 = 10; R_1 = 0 + 0.95·10 = 9.5; R_0 = 0 + 0.95·9.5 = 9.025
        let r = discounted_returns(&[0.0, 0.0, 10.0], 0.95).unwrap();
        assert!(close(r[0], 9.025) && close(r[1], 9.5) && close(r[2], 10.0));
        // rewards [1, 2, 3], γ = 0.5: R_2 = 3; R_1 = 2 + 1.5 = 3.5; R_0 = 1 + 1.75 = 2.75
        let r = discounted_returns(&[1.0, 2.0, 3.0], 0.5).unwrap();
        assert!(close(r[0], 2.75) && close(r[1], 3.5) && close(r[2], 3.0));
        assert!(discounted_returns(&[], 0.95).unwrap().is_empty());
    }

    #[test]
    fn bad_gamma_and_reward_are_errors() {
        assert!(matches!(
            discounted_returns(&[1.0], 1.5),
            Err(AlgoError::Config { field: "gamma", .. })
        ));
        assert!(matches!(
            discounted_returns(&[f64::NAN], 0.9),
            Err(AlgoError::NonFinite { what: "reward", .. })
        ));
        let ep = episode(0, vec![turn(f64::INFINITY, true, "a")]);
        assert!(matches!(
            turn_values(&ep, 3, &ReturnConfig::default()),
            Err(AlgoError::Turn {
                episode: 3,
                turn: 0,
                field: "reward",
                ..
            })
        ));
        let cfg = ReturnConfig {
            format_penalty: -1.0,
            ..ReturnConfig::default()
        };
        assert!(matches!(
            turn_values(&ep, 0, &cfg),
            Err(AlgoError::Config {
                field: "format_penalty",
                ..
            })
        ));
    }

    #[test]
    fn penalty_hits_only_the_invalid_row() {
        // rewards [0, 0, 10], turn 1 invalid, γ = 0.95, λ = 0.1
        // raw returns [9.025, 9.5, 10]; turn 1: 9.5 − 0.1 = 9.4; turn 0 stays 9.025
        // (the penalty is not discounted backwards)
        // score: Σr = 10 for every row; turn 1: 10 − 0.1 = 9.9
        let ep = episode(
            0,
            vec![
                turn(0.0, true, "a"),
                turn(0.0, false, "b"),
                turn(10.0, true, "c"),
            ],
        );
        let v = turn_values(&ep, 0, &ReturnConfig::default()).unwrap();
        assert!(close(v[0].ret, 9.025) && close(v[1].ret, 9.4) && close(v[2].ret, 10.0));
        assert!(close(v[0].score, 10.0) && close(v[1].score, 9.9) && close(v[2].score, 10.0));
        assert!(!v[0].penalised && v[1].penalised && !v[2].penalised);
        // λ = 0 switches it off
        let cfg = ReturnConfig {
            format_penalty: 0.0,
            ..ReturnConfig::default()
        };
        let v = turn_values(&ep, 0, &cfg).unwrap();
        assert!(close(v[1].ret, 9.5) && close(v[1].score, 10.0) && !v[1].penalised);
    }
}
