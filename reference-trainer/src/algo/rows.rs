//! Training rows from episode records: one row per kept turn, `prompt_ids ++ response_ids` with
//! `start = prompt length`, the row's advantage broadcast over its response tokens (times the
//! response mask, as verl's `scores.unsqueeze(-1) * response_mask`), plus SimpleTIR void
//! filtering (T2PO-RULES §5; verl-agent `core_gigpo.py::episode_norm_reward`).
//!
//! TDS-discarded tries are not in `EpisodeRecord::turns`, so they never become rows; forced TTI
//! tokens are kept with whatever mask the rollout gave them (1: trained like sampled tokens).

use super::advantage::Advantages;
use super::{AlgoError, Result};
use crate::rollout::trajectory::EpisodeRecord;
use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};

/// One training sequence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainingRow {
    /// Index of the episode in the batch slice.
    pub episode: usize,
    /// Index of the turn in `EpisodeRecord::turns`.
    pub turn: usize,
    /// `prompt_ids ++ response_ids`.
    pub input_ids: Vec<u32>,
    /// Prompt length: the response starts at `input_ids[start]`.
    pub start: usize,
    /// Per response token: the row's advantage times the mask.
    pub advantages: Vec<f32>,
    /// Per response token: 1.0 in the loss, 0.0 out.
    pub response_mask: Vec<f32>,
    /// Per response token: the sampler's log-probs (diagnostics; the loss uses recomputed ones).
    pub rollout_log_probs: Vec<f32>,
    /// Per response token: forced by TTI (diagnostics; no special treatment).
    pub forced: Vec<bool>,
}

impl TrainingRow {
    /// Response length.
    pub fn response_len(&self) -> usize {
        self.input_ids.len().saturating_sub(self.start)
    }
}

/// Indices of the episodes that enter the loss: all of them, or — with `filter_void` — those
/// with `void == false` (SimpleTIR). Advantages are computed before filtering (void episodes
/// still count in their group's statistics); only their rows leave the loss.
pub fn trainable_episodes(episodes: &[EpisodeRecord], filter_void: bool) -> Vec<usize> {
    episodes
        .iter()
        .enumerate()
        .filter(|(_, e)| !(filter_void && e.void))
        .map(|(i, _)| i)
        .collect()
}

/// Flattens the trainable episodes into rows (episode-major, turn order). `advantages` must
/// come from [`super::compute_advantages`] on the same slice. Turns with an empty response are
/// skipped (nothing to train). Inconsistent record lengths are errors naming the field.
pub fn flatten_rows(
    episodes: &[EpisodeRecord],
    advantages: &Advantages,
    filter_void: bool,
) -> Result<Vec<TrainingRow>> {
    if advantages.turns.len() != episodes.len() {
        return Err(AlgoError::Tensor {
            name: "advantages",
            reason: format!(
                "{} episodes of advantages for {} episodes",
                advantages.turns.len(),
                episodes.len()
            ),
        });
    }
    let mut rows = Vec::new();
    for e in trainable_episodes(episodes, filter_void) {
        let ep = &episodes[e];
        let adv = &advantages.turns[e];
        if adv.len() != ep.turns.len() {
            return Err(AlgoError::Episode {
                episode: e,
                field: "turns",
                reason: format!("{} turns but {} advantages", ep.turns.len(), adv.len()),
            });
        }
        for (t, (turn, a)) in ep.turns.iter().zip(adv).enumerate() {
            let resp = &turn.generation.response_ids;
            if resp.is_empty() {
                continue;
            }
            let err = |field: &'static str, reason: String| AlgoError::Turn {
                episode: e,
                turn: t,
                field,
                reason,
            };
            if turn.prompt_ids.is_empty() {
                return Err(err(
                    "prompt_ids",
                    "empty: the first response token has no context".into(),
                ));
            }
            if turn.response_mask.len() != resp.len() {
                return Err(err(
                    "response_mask",
                    format!(
                        "length {} for {} response tokens",
                        turn.response_mask.len(),
                        resp.len()
                    ),
                ));
            }
            if let Some(v) = turn.response_mask.iter().find(|&&v| v > 1) {
                return Err(err("response_mask", format!("value {v} is not 0 or 1")));
            }
            if turn.generation.log_probs.len() != resp.len() {
                return Err(err(
                    "generation.log_probs",
                    format!(
                        "length {} for {} response tokens",
                        turn.generation.log_probs.len(),
                        resp.len()
                    ),
                ));
            }
            let forced = if turn.generation.forced.is_empty() {
                vec![false; resp.len()]
            } else if turn.generation.forced.len() == resp.len() {
                turn.generation.forced.clone()
            } else {
                return Err(err(
                    "generation.forced",
                    format!(
                        "length {} for {} response tokens",
                        turn.generation.forced.len(),
                        resp.len()
                    ),
                ));
            };
            let mask: Vec<f32> = turn.response_mask.iter().map(|&m| f32::from(m)).collect();
            let value = a.advantage as f32;
            let mut input_ids = Vec::with_capacity(turn.prompt_ids.len() + resp.len());
            input_ids.extend_from_slice(&turn.prompt_ids);
            input_ids.extend_from_slice(resp);
            rows.push(TrainingRow {
                episode: e,
                turn: t,
                start: turn.prompt_ids.len(),
                input_ids,
                advantages: mask.iter().map(|m| value * m).collect(),
                response_mask: mask,
                rollout_log_probs: turn.generation.log_probs.clone(),
                forced,
            });
        }
    }
    Ok(rows)
}

/// A micro-batch's per-token advantages and mask, concatenated in row order (the order of the
/// log-probs `token_log_probs(seqs, start)` returns, flattened).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PackedRows {
    /// `[N]` advantages.
    pub advantages: Vec<f32>,
    /// `[N]` mask.
    pub response_mask: Vec<f32>,
    /// Row `i` covers `offsets[i]..offsets[i + 1]`.
    pub offsets: Vec<usize>,
}

impl PackedRows {
    /// `(advantages, response_mask)` as `[N]` tensors of `dtype` on `device`.
    pub fn tensors(&self, dtype: DType, device: &Device) -> Result<(Tensor, Tensor)> {
        let a = Tensor::new(self.advantages.as_slice(), device)?.to_dtype(dtype)?;
        let m = Tensor::new(self.response_mask.as_slice(), device)?.to_dtype(dtype)?;
        Ok((a, m))
    }
}

/// Concatenates the response-token fields of `rows`.
pub fn pack_rows<'a>(rows: impl IntoIterator<Item = &'a TrainingRow>) -> PackedRows {
    let mut out = PackedRows {
        advantages: Vec::new(),
        response_mask: Vec::new(),
        offsets: vec![0],
    };
    for r in rows {
        out.advantages.extend_from_slice(&r.advantages);
        out.response_mask.extend_from_slice(&r.response_mask);
        out.offsets.push(out.advantages.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::advantage::{compute_advantages, AdvantageConfig, Estimator, NormMode};
    use crate::algo::loss::{ppo_loss, LossConfig, LossInputs};
    use crate::algo::returns::tests::{episode, turn};
    use candle_core::Var;

    /// Group 0: E0 one turn r 1 (3 response tokens, the last two forced by TTI),
    /// E1 one turn r 0, void. GRPO mean-norm: mean 0.5 → E0 +0.5, E1 −0.5.
    fn batch() -> Vec<EpisodeRecord> {
        let mut a = turn(1.0, true, "s");
        a.prompt_ids = vec![10, 11];
        a.generation.response_ids = vec![20, 21, 22];
        a.generation.log_probs = vec![-0.1, 0.0, 0.0];
        a.generation.forced = vec![false, true, true];
        a.response_mask = vec![1, 1, 1];
        let mut b = turn(0.0, true, "s");
        b.prompt_ids = vec![12];
        b.generation.response_ids = vec![30, 31];
        b.generation.log_probs = vec![-0.2, -0.3];
        b.generation.forced = vec![false, false];
        b.response_mask = vec![1, 0];
        let mut e1 = episode(0, vec![b]);
        e1.void = true;
        vec![episode(0, vec![a]), e1]
    }

    fn advs(eps: &[EpisodeRecord]) -> Advantages {
        let cfg = AdvantageConfig {
            estimator: Estimator::Grpo,
            mode: NormMode::MeanNorm,
            ..AdvantageConfig::default()
        };
        compute_advantages(eps, &cfg).unwrap()
    }

    #[test]
    fn flatten_concatenates_and_broadcasts() {
        let eps = batch();
        let rows = flatten_rows(&eps, &advs(&eps), false).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].input_ids, vec![10, 11, 20, 21, 22]);
        assert_eq!(rows[0].start, 2);
        assert_eq!(rows[0].response_len(), 3);
        // scores 1, 0 → mean 0.5 → +0.5 on every response token of E0
        assert_eq!(rows[0].advantages, vec![0.5, 0.5, 0.5]);
        assert_eq!(rows[0].forced, vec![false, true, true]);
        assert_eq!(rows[1].input_ids, vec![12, 30, 31]);
        // E1: −0.5 times mask [1, 0]
        assert_eq!(rows[1].advantages, vec![-0.5, 0.0]);
        assert_eq!(rows[1].response_mask, vec![1.0, 0.0]);
        let p = pack_rows(&rows);
        assert_eq!(p.advantages, vec![0.5, 0.5, 0.5, -0.5, 0.0]);
        assert_eq!(p.offsets, vec![0, 3, 5]);
    }

    #[test]
    fn void_filter_drops_void_trajectories_only_from_the_loss() {
        let eps = batch();
        assert_eq!(trainable_episodes(&eps, false), vec![0, 1]);
        assert_eq!(trainable_episodes(&eps, true), vec![0]);
        let rows = flatten_rows(&eps, &advs(&eps), true).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].episode, 0);
        // E0's advantage still uses E1 in the group statistics: 1 − 0.5 = 0.5 (not 1 − 0)
        assert_eq!(rows[0].advantages, vec![0.5, 0.5, 0.5]);
    }

    #[test]
    fn forced_tokens_contribute_to_the_gradient() {
        // E0's row: A = 0.5 on 3 tokens (1 sampled, 2 forced), ratio 1 (new = old):
        // loss = −0.5·3/(3 + 1e-8); d loss/d new_i = −A·ratio/(3 + 1e-8) = −0.5/3 for every
        // token, forced ones included.
        let eps = batch();
        let rows = flatten_rows(&eps, &advs(&eps), true).unwrap();
        let p = pack_rows(&rows);
        let (a, m) = p.tensors(DType::F64, &Device::Cpu).unwrap();
        let old = Tensor::new(&[-0.1f64, -0.4, -0.7], &Device::Cpu).unwrap();
        let var = Var::from_tensor(&old).unwrap();
        let ent = old.zeros_like().unwrap();
        let cfg = LossConfig {
            entropy_coef: 0.0,
            ..LossConfig::default()
        };
        let out = ppo_loss(
            &LossInputs {
                log_probs: var.as_tensor(),
                old_log_probs: &old,
                advantages: &a,
                response_mask: &m,
                ref_log_probs: None,
                entropies: &ent,
            },
            &cfg,
        )
        .unwrap();
        let d = 3.0 + 1e-8;
        assert!((out.metrics.loss - (-1.5 / d)).abs() < 1e-12);
        let g = out.loss.backward().unwrap();
        let g = g.get(var.as_tensor()).unwrap().to_vec1::<f64>().unwrap();
        for (i, x) in g.iter().enumerate() {
            assert!(
                (x - (-0.5 / d)).abs() < 1e-12,
                "token {i} (forced: {}) {x}",
                rows[0].forced[i]
            );
        }
    }

    #[test]
    fn inconsistent_records_are_errors() {
        let eps = batch();
        let adv = advs(&eps);
        let mut bad = eps.clone();
        bad[0].turns[0].response_mask = vec![1, 1];
        assert!(matches!(
            flatten_rows(&bad, &adv, false),
            Err(AlgoError::Turn {
                episode: 0,
                turn: 0,
                field: "response_mask",
                ..
            })
        ));
        let mut bad = eps.clone();
        bad[0].turns[0].response_mask = vec![1, 2, 1];
        assert!(matches!(
            flatten_rows(&bad, &adv, false),
            Err(AlgoError::Turn {
                field: "response_mask",
                ..
            })
        ));
        let mut bad = eps.clone();
        bad[1].turns[0].generation.log_probs.clear();
        assert!(matches!(
            flatten_rows(&bad, &adv, false),
            Err(AlgoError::Turn {
                episode: 1,
                field: "generation.log_probs",
                ..
            })
        ));
        let mut bad = eps.clone();
        bad[0].turns[0].prompt_ids.clear();
        assert!(matches!(
            flatten_rows(&bad, &adv, false),
            Err(AlgoError::Turn {
                field: "prompt_ids",
                ..
            })
        ));
        assert!(matches!(
            flatten_rows(&eps[..1], &adv, false),
            Err(AlgoError::Tensor {
                name: "advantages",
                ..
            })
        ));
        // an empty response is skipped, not an error
        let mut empty = eps.clone();
        empty[1].turns[0].generation.response_ids.clear();
        empty[1].turns[0].generation.log_probs.clear();
        empty[1].turns[0].response_mask.clear();
        assert_eq!(flatten_rows(&empty, &adv, false).unwrap().len(), 1);
    }
}
