//! The length reward of the length-penalty baselines the paper compares against (its App. C.1):
//! Kimi k1.5's (Kimi Team, 2025, arXiv:2501.12599, §2.3.3, "Length Penalty"), in the form
//! Liu et al. (2025, arXiv:2505.15612) summarise. Within a group of responses to one task with
//! lengths `len_i`, `min = min_j len_j`, `max = max_j len_j`:
//!
//! - if `max == min`, every length reward is 0 (they are all as long);
//! - else `λ_i = 0.5 − (len_i − min) / (max − min)`, and the length reward is `λ_i` for a
//!   correct response and `min(0, λ_i)` for a wrong one
//!
//! (shorter correct answers gain, longer correct ones lose, long wrong ones lose, short wrong
//! ones get nothing). It is added to the task reward with a weight.
//!
//! Multi-turn, as here: a response is an episode, its length the thinking tokens of its kept
//! turns (what the baseline penalises; the action tokens are the environment's format), its
//! group the GRPO/GiGPO episode group (one task), correct = the episode succeeded. The weighted
//! length reward is added to the reward of the episode's last turn, where the task reward
//! arrives, so the discounted returns carry it back to earlier turns as they carry the task's.

use crate::rollout::trajectory::EpisodeRecord;

use super::AlgoError;

/// Kimi k1.5's length rewards of one group (see the module docs): `lengths[i]` and
/// `correct[i]` of response `i`.
pub fn length_rewards(lengths: &[usize], correct: &[bool]) -> Vec<f64> {
    let (Some(&min), Some(&max)) = (lengths.iter().min(), lengths.iter().max()) else {
        return Vec::new();
    };
    if max == min {
        return vec![0.0; lengths.len()];
    }
    let span = (max - min) as f64;
    lengths
        .iter()
        .zip(correct)
        .map(|(&len, &ok)| {
            let lambda = 0.5 - (len - min) as f64 / span;
            if ok {
                lambda
            } else {
                lambda.min(0.0)
            }
        })
        .collect()
}

/// Adds `weight ×` the length reward to each episode's last turn reward (and to its
/// `total_reward`), per episode group; returns the length reward of each episode (unweighted).
/// Episodes without turns get 0 and nothing is added.
pub fn add_length_reward(
    episodes: &mut [EpisodeRecord],
    weight: f64,
) -> Result<Vec<f64>, AlgoError> {
    if !(weight.is_finite() && weight >= 0.0) {
        return Err(AlgoError::Config {
            field: "length_reward",
            reason: format!("{weight} is not a finite value ≥ 0"),
        });
    }
    let mut out = vec![0.0; episodes.len()];
    let mut groups: Vec<usize> = episodes.iter().map(|e| e.group).collect();
    groups.sort_unstable();
    groups.dedup();
    for g in groups {
        let members: Vec<usize> = (0..episodes.len())
            .filter(|&i| episodes[i].group == g && !episodes[i].turns.is_empty())
            .collect();
        let lengths: Vec<usize> = members
            .iter()
            .map(|&i| {
                episodes[i]
                    .turns
                    .iter()
                    .map(|t| t.generation.think_tokens as usize)
                    .sum()
            })
            .collect();
        let correct: Vec<bool> = members.iter().map(|&i| episodes[i].success).collect();
        for (&i, r) in members.iter().zip(length_rewards(&lengths, &correct)) {
            out[i] = r;
            let e = &mut episodes[i];
            if let Some(last) = e.turns.last_mut() {
                last.reward += weight * r;
                e.total_reward += weight * r;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The formula against values worked out by hand.
    #[test]
    fn kimi_length_rewards_by_hand() {
        // min 10, max 30: λ = 0.5, 0, −0.5 at 10, 20, 30.
        let r = length_rewards(&[10, 20, 30, 10, 30], &[true, true, true, false, false]);
        assert_eq!(r, vec![0.5, 0.0, -0.5, 0.0, -0.5]);
        // λ = 0.5 − 5/40 = 0.375 for a correct 15 in [10, 50]; a wrong one keeps min(0, λ) = 0.
        let r = length_rewards(&[10, 15, 50, 15], &[false, true, true, false]);
        assert_eq!(r, vec![0.0, 0.375, -0.5, 0.0]);
        // All as long: nothing.
        assert_eq!(
            length_rewards(&[7, 7, 7], &[true, false, true]),
            vec![0.0; 3]
        );
        assert!(length_rewards(&[], &[]).is_empty());
    }

    /// Per group, on the thinking tokens of every turn, added to the last turn's reward only.
    #[test]
    fn the_weighted_length_reward_lands_on_each_episodes_last_turn() {
        use crate::algo::returns::tests::{episode, turn};
        let ep = |group: usize, think: &[u32], success: bool| {
            let mut e = episode(group, think.iter().map(|_| turn(0.0, true, "a")).collect());
            for (t, &n) in e.turns.iter_mut().zip(think) {
                t.generation.think_tokens = n;
            }
            e.turns.last_mut().unwrap().reward = if success { 1.0 } else { 0.0 };
            e.total_reward = e.turns.iter().map(|t| t.reward).sum();
            e.success = success;
            e
        };
        // Group 0: think totals 10, 30, 20 (all solved); group 1: 5 and 15, one solved.
        let mut eps = vec![
            ep(0, &[4, 6], true),
            ep(1, &[5], false),
            ep(0, &[30], true),
            ep(1, &[10, 5], true),
            ep(0, &[10, 10], true),
        ];
        let r = add_length_reward(&mut eps, 0.2).unwrap();
        assert_eq!(r, vec![0.5, 0.0, -0.5, -0.5, 0.0]);
        // Only the last turn moves, by weight × reward; the total follows.
        assert_eq!(eps[0].turns[0].reward, 0.0);
        assert_eq!(eps[0].turns[1].reward, 1.0 + 0.2 * 0.5);
        assert_eq!(eps[2].total_reward, 1.0 - 0.2 * 0.5);
        assert_eq!(eps[3].turns[1].reward, 1.0 - 0.2 * 0.5);
        assert_eq!(eps[1].total_reward, 0.0);
        assert!(add_length_reward(&mut eps, -1.0).is_err());
        assert!(add_length_reward(&mut eps, f64::NAN).is_err());
    }
}
