//! `train.save_rollouts`: every RL iteration's episodes as trained on, one JSON line per episode
//! in `rollouts/iter-NNNNNN.jsonl` of the run folder (what verl's `trainer.rollout_data_dir`
//! dumps: input, output, score per step), with what verl does not write there and what one needs
//! to read why an update moved the policy the way it did: each turn's action, reward, TTI and TDS
//! decisions, and the advantage it was trained with, split into GiGPO's episode and step terms.
//!
//! The file holds text and numbers, not token ids or per-token log-probabilities (those are in
//! the rollout records, which the trainer does not keep); it is written after the advantages and
//! before the update, through a temporary file and a rename, so a stopped run leaves a whole
//! file or none.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::algo::{Advantages, TurnAdvantage};
use crate::error::{Error, Result};
use crate::rollout::{EpisodeRecord, TtiFire, TurnRecord};

/// One kept turn as trained on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnLog {
    /// Turn index from 0.
    pub turn: usize,
    /// The observation this turn acted on (GiGPO's anchor state).
    pub observation: String,
    /// The decoded response (thinking and action).
    pub response: String,
    /// Response tokens (the loss's tokens for this turn).
    pub response_tokens: usize,
    /// Think-content tokens.
    pub think_tokens: u32,
    /// The action sent to the environment.
    pub action: String,
    /// Whether the response had the required format.
    pub format_valid: bool,
    /// The environment's reward for the step.
    pub reward: f64,
    /// Where and why TTI fired (`None`: it did not).
    pub tti: Option<TtiFire>,
    /// Φ of the kept generation.
    pub phi: Option<f32>,
    /// Γ of the kept try against the previous kept turn (0 on the first turn).
    pub gamma: f32,
    /// Generations this turn took (1 + the ones TDS discarded).
    pub tds_tries: u32,
    /// The advantage and its parts (`None` where the turn was not trained on: a void
    /// trajectory under `control.filter_void` still gets its advantage here, so this is `None`
    /// only where the estimator gave the turn none).
    pub advantage: Option<TurnAdvantage>,
}

/// One episode as trained on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpisodeLog {
    /// The RL iteration (from 1).
    pub iteration: usize,
    /// Episode index within the iteration's rollout.
    pub episode: usize,
    /// Group id (the episodes of one task share it).
    pub group: usize,
    /// Task index in the training split.
    pub task: usize,
    /// Where the task came from (Search QA: `nq`, `hotpotqa`; empty where none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// The task text.
    pub task_text: String,
    /// Whether the task was solved.
    pub success: bool,
    /// The benchmark's task score at the end.
    pub score: f64,
    /// Generations TDS discarded in this episode.
    pub resamples: u32,
    /// The kept turns.
    pub turns: Vec<TurnLog>,
}

fn turn_log(t: &TurnRecord, adv: Option<&TurnAdvantage>) -> TurnLog {
    TurnLog {
        turn: t.turn,
        observation: t.anchor.clone(),
        response: t.response.clone(),
        response_tokens: t.generation.response_ids.len(),
        think_tokens: t.generation.think_tokens,
        action: t.action.clone(),
        format_valid: t.format_valid,
        reward: t.reward,
        tti: t.generation.tti,
        phi: t.generation.phi,
        gamma: t.gamma,
        tds_tries: t.tds_tries,
        advantage: adv.copied(),
    }
}

/// The iteration's episodes with their advantages (`adv.turns[e][t]` belongs to
/// `records[e].turns[t]`, as [`crate::algo::compute_advantages`] returns them).
///
/// # Errors
/// [`Error::Invalid`] when `adv` does not have one entry per episode.
pub fn episode_logs(
    iteration: usize,
    records: &[EpisodeRecord],
    adv: &Advantages,
) -> Result<Vec<EpisodeLog>> {
    if adv.turns.len() != records.len() {
        return Err(Error::invalid(
            "rollout log",
            format!(
                "{} episodes but advantages for {}",
                records.len(),
                adv.turns.len()
            ),
        ));
    }
    Ok(records
        .iter()
        .zip(&adv.turns)
        .map(|(r, a)| EpisodeLog {
            iteration,
            episode: r.episode,
            group: r.group,
            task: r.task,
            source: r.source.clone(),
            task_text: r.task_text.clone(),
            success: r.success,
            score: r.score,
            resamples: r.resamples,
            turns: r
                .turns
                .iter()
                .enumerate()
                .map(|(i, t)| turn_log(t, a.get(i)))
                .collect(),
        })
        .collect())
}

/// The file of one iteration: `DIR/rollouts/iter-NNNNNN.jsonl`.
pub fn rollout_path(run_dir: &Path, iteration: usize) -> PathBuf {
    run_dir
        .join("rollouts")
        .join(format!("iter-{iteration:06}.jsonl"))
}

/// Writes the iteration's episodes, one JSON object a line, to [`rollout_path`] (the folder is
/// made if missing; a file from an earlier attempt at the same iteration is replaced whole).
///
/// # Errors
/// [`Error::Io`] naming the file when the folder or the file cannot be written.
pub fn write_rollouts(run_dir: &Path, iteration: usize, logs: &[EpisodeLog]) -> Result<PathBuf> {
    let path = rollout_path(run_dir, iteration);
    let dir = path.parent().unwrap_or(run_dir);
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let mut text = String::new();
    for l in logs {
        let line = serde_json::to_string(l).map_err(|e| Error::Json {
            path: path.clone(),
            message: e.to_string(),
        })?;
        text.push_str(&line);
        text.push('\n');
    }
    crate::model::checkpoint::write_atomic(&path, text.as_bytes())?;
    Ok(path)
}

/// Reads a file [`write_rollouts`] wrote.
///
/// # Errors
/// [`Error::Io`] when it cannot be read, [`Error::Json`] naming the line that does not parse.
pub fn read_rollouts(path: &Path) -> Result<Vec<EpisodeLog>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| Error::Json {
                path: path.to_path_buf(),
                message: format!("line {}: {e}", i + 1),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::{compute_advantages, AdvantageConfig, Estimator};
    use crate::rollout::{Generation, TtiReason};

    fn turn(i: usize, action: &str, reward: f64, anchor: &str) -> TurnRecord {
        TurnRecord {
            turn: i,
            prompt_ids: vec![1, 2, 3],
            prompt_truncated: 0,
            generation: Generation {
                response_ids: vec![7; 5 + i],
                log_probs: vec![-0.5; 5 + i],
                forced: vec![false; 5 + i],
                signal: vec![Some(0.3); 5 + i],
                phi: Some(0.3),
                think_tokens: 3,
                tti: (i == 0).then_some(TtiFire {
                    position: 2,
                    reason: TtiReason::Converged,
                }),
                truncated: false,
                min_window_mean: None,
            },
            response_mask: vec![1; 5 + i],
            response: format!("<think>t{i}</think><{action}>"),
            gamma: 0.0,
            tds_tries: 1 + i as u32,
            discarded: Vec::new(),
            action: action.to_string(),
            format_valid: true,
            void: false,
            reward,
            done: reward > 0.0,
            won: reward > 0.0,
            score: reward,
            anchor: anchor.to_string(),
        }
    }

    fn episode(e: usize, won: bool) -> EpisodeRecord {
        let mut turns = vec![turn(0, "search", 0.0, "question")];
        turns.push(turn(1, "answer", if won { 1.0 } else { 0.0 }, "passage"));
        EpisodeRecord {
            episode: e,
            env: "search".into(),
            task: 42,
            group: 0,
            task_text: "Who?".into(),
            source: "hotpotqa".into(),
            turns,
            success: won,
            score: if won { 1.0 } else { 0.0 },
            total_reward: if won { 1.0 } else { 0.0 },
            resamples: 1,
            void: false,
            reward_parts: Default::default(),
        }
    }

    #[test]
    fn logs_carry_each_turns_advantage_and_read_back_equal() {
        let records = vec![episode(0, true), episode(1, false), episode(2, false)];
        let cfg = AdvantageConfig::for_env("search", Estimator::Gigpo).unwrap();
        let adv = compute_advantages(&records, &cfg).unwrap();
        let logs = episode_logs(3, &records, &adv).unwrap();
        assert_eq!(logs.len(), 3);
        for (log, (rec, a)) in logs.iter().zip(records.iter().zip(&adv.turns)) {
            assert_eq!(log.iteration, 3);
            assert_eq!(log.source, "hotpotqa");
            assert_eq!(log.turns.len(), rec.turns.len());
            for (t, (rt, at)) in log.turns.iter().zip(rec.turns.iter().zip(a)) {
                assert_eq!(t.advantage.as_ref(), Some(at));
                assert_eq!(t.action, rt.action);
                assert_eq!(t.response_tokens, rt.generation.response_ids.len());
                assert_eq!(t.observation, rt.anchor);
            }
        }
        // The solved episode's answer turn is pushed up, the failed ones' pushed down.
        let last = |l: &EpisodeLog| l.turns[1].advantage.unwrap().advantage;
        assert!(last(&logs[0]) > 0.0);
        assert!(last(&logs[1]) < 0.0 && last(&logs[2]) < 0.0);
        assert_eq!(logs[0].turns[0].tti.unwrap().reason, TtiReason::Converged);

        let dir = tempfile::tempdir().unwrap();
        let path = write_rollouts(dir.path(), 3, &logs).unwrap();
        assert_eq!(path, dir.path().join("rollouts").join("iter-000003.jsonl"));
        assert_eq!(read_rollouts(&path).unwrap(), logs);
        // Written again (a resumed iteration), the file is replaced, not appended to.
        write_rollouts(dir.path(), 3, &logs[..1]).unwrap();
        assert_eq!(read_rollouts(&path).unwrap(), logs[..1].to_vec());
    }

    #[test]
    fn mismatched_advantages_and_bad_lines_are_errors() {
        let records = vec![episode(0, true), episode(1, false)];
        let cfg = AdvantageConfig::for_env("search", Estimator::Grpo).unwrap();
        let adv = compute_advantages(&records, &cfg).unwrap();
        let err = episode_logs(1, &records[..1], &adv)
            .unwrap_err()
            .to_string();
        assert!(err.contains("1 episodes but advantages for 2"), "{err}");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.jsonl");
        std::fs::write(&path, "{\"iteration\": 1}\n").unwrap();
        let err = read_rollouts(&path).unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
    }
}
