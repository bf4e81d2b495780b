//! What a run measures: a summary of a batch of episodes ([`RolloutSummary`]: success, score,
//! turns, thinking, TTI and TDS rates), of a policy update ([`UpdateReport`]), one line per
//! iteration ([`MetricsLine`]) in `metrics.jsonl`, and the log that appends them and, on
//! resume, cuts what came after the checkpoint.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::rollout::{EpisodeRecord, RolloutStats, TtiReason};

/// A batch of episodes, summarised. Rates are per episode (success), per kept turn (TTI,
/// format) or per generation (TDS).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RolloutSummary {
    /// Episodes.
    pub episodes: usize,
    /// Fraction of episodes that solved their task.
    pub success_rate: f64,
    /// pass@k: the fraction of groups (the `k` episodes of one task) with at least one
    /// success — the tasks on which a group-relative advantage has a signal.
    #[serde(default)]
    pub pass_at_k: f64,
    /// Mean task score at the end of an episode (WebShop's purchase score, 0/1 elsewhere).
    pub score: f64,
    /// Mean sum of rewards per episode.
    pub episode_return: f64,
    /// Mean kept turns per episode.
    pub turns_per_episode: f64,
    /// Mean think tokens per kept turn.
    pub think_tokens_per_turn: f64,
    /// Mean response tokens per kept turn.
    pub response_tokens_per_turn: f64,
    /// Fraction of kept turns where TTI fired (either rule).
    pub tti_fire_rate: f64,
    /// Fraction of kept turns where TTI fired because `M_t` converged.
    pub tti_converged_rate: f64,
    /// Fraction of kept turns where TTI fired at the think budget.
    pub tti_budget_rate: f64,
    /// Where the convergence rule fired: entry `t` counts the kept turns whose think block it
    /// cut at position `t` (tokens of think content observed). `t − L_min` says how long after
    /// its first chance it fired.
    #[serde(default)]
    pub tti_converged_at: Vec<u32>,
    /// Fraction of generations TDS discarded.
    pub tds_resample_rate: f64,
    /// Fraction of kept turns in the strict format.
    pub format_valid_rate: f64,
    /// Fraction of kept turns cut at the response cap.
    pub truncated_rate: f64,
    /// Fraction of kept turns whose prompt was longer than `rollout.max_prompt_tokens` and was
    /// cut from the left (the task's instruction is then lost).
    #[serde(default)]
    pub prompt_cut_rate: f64,
    /// Fraction of episodes with a void turn (counted when void marking is on).
    pub void_rate: f64,
    /// Tokens decoded (kept and discarded generations).
    pub decoded_tokens: usize,
    /// Prompt tokens prefilled.
    pub prefill_tokens: usize,
    /// Prompt tokens of TDS resamples not prefilled again (their first try's prefill reused).
    #[serde(default)]
    pub prefill_tokens_reused: usize,
    /// (decoded + prefilled) tokens per second of rollout.
    pub tokens_per_second: f64,
    /// Wall seconds.
    pub seconds: f64,
    /// Episodes whose task score came with its parts (WebShop: the episodes that bought).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub scored_episodes: usize,
    /// The mean of each part of the task score over the episodes that report it (WebShop's
    /// `r_type`, `r_att`, `r_option`, `r_price`, `title_score`, … over the purchases; `r_option`
    /// over the purchases whose goal has options), the paper's Table 8 decomposition.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reward_parts: BTreeMap<String, f64>,
    /// Success and score by the episodes' source ([`EpisodeRecord::source`]), as verl validates
    /// per `data_source`; empty where the environment reports none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by_source: BTreeMap<String, SourceSummary>,
}

/// The episodes of one source, summarised.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SourceSummary {
    /// Episodes from this source.
    pub episodes: usize,
    /// Fraction of them that solved their task.
    pub success_rate: f64,
    /// Their mean task score.
    pub score: f64,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl RolloutSummary {
    /// Summarises `records` produced with counters `stats` in `seconds`.
    pub fn of(records: &[EpisodeRecord], stats: &RolloutStats, seconds: f64) -> Self {
        let n = records.len().max(1) as f64;
        let turns: Vec<_> = records.iter().flat_map(|e| &e.turns).collect();
        let t = turns.len().max(1) as f64;
        let count = |f: &dyn Fn(&crate::rollout::TurnRecord) -> bool| {
            turns.iter().filter(|x| f(x)).count() as f64 / t
        };
        let discarded: usize = records.iter().map(|e| e.resamples as usize).sum();
        let mut groups: std::collections::BTreeMap<usize, bool> = Default::default();
        for e in records {
            *groups.entry(e.group).or_default() |= e.success;
        }
        let mut tti_converged_at: Vec<u32> = Vec::new();
        for x in &turns {
            if let Some(f) = x.generation.tti {
                if f.reason == TtiReason::Converged {
                    let t = f.position as usize;
                    if tti_converged_at.len() <= t {
                        tti_converged_at.resize(t + 1, 0);
                    }
                    tti_converged_at[t] += 1;
                }
            }
        }
        let mut parts: BTreeMap<String, (f64, usize)> = BTreeMap::new();
        for e in records {
            for (k, &v) in &e.reward_parts {
                let p = parts.entry(k.clone()).or_default();
                p.0 += v;
                p.1 += 1;
            }
        }
        let mut by_source: BTreeMap<String, SourceSummary> = BTreeMap::new();
        for e in records.iter().filter(|e| !e.source.is_empty()) {
            let x = by_source.entry(e.source.clone()).or_default();
            x.episodes += 1;
            x.success_rate += f64::from(u8::from(e.success));
            x.score += e.score;
        }
        for x in by_source.values_mut() {
            x.success_rate /= x.episodes as f64;
            x.score /= x.episodes as f64;
        }
        Self {
            by_source,
            scored_episodes: records
                .iter()
                .filter(|e| !e.reward_parts.is_empty())
                .count(),
            reward_parts: parts
                .into_iter()
                .map(|(k, (sum, n))| (k, sum / n as f64))
                .collect(),
            episodes: records.len(),
            success_rate: records.iter().filter(|e| e.success).count() as f64 / n,
            pass_at_k: groups.values().filter(|&&s| s).count() as f64 / groups.len().max(1) as f64,
            tti_converged_at,
            score: records.iter().map(|e| e.score).sum::<f64>() / n,
            episode_return: records.iter().map(|e| e.total_reward).sum::<f64>() / n,
            turns_per_episode: turns.len() as f64 / n,
            think_tokens_per_turn: turns
                .iter()
                .map(|x| f64::from(x.generation.think_tokens))
                .sum::<f64>()
                / t,
            response_tokens_per_turn: turns
                .iter()
                .map(|x| x.generation.response_ids.len() as f64)
                .sum::<f64>()
                / t,
            tti_fire_rate: count(&|x| x.generation.tti.is_some()),
            tti_converged_rate: count(
                &|x| matches!(x.generation.tti, Some(f) if f.reason == TtiReason::Converged),
            ),
            tti_budget_rate: count(
                &|x| matches!(x.generation.tti, Some(f) if f.reason == TtiReason::Budget),
            ),
            tds_resample_rate: discarded as f64 / (turns.len() + discarded).max(1) as f64,
            format_valid_rate: count(&|x| x.format_valid),
            truncated_rate: count(&|x| x.generation.truncated),
            prompt_cut_rate: count(&|x| x.prompt_truncated > 0),
            void_rate: records.iter().filter(|e| e.void).count() as f64 / n,
            decoded_tokens: stats.decoded_tokens,
            prefill_tokens: stats.prefill_tokens,
            prefill_tokens_reused: stats.prefill_tokens_reused,
            tokens_per_second: (stats.decoded_tokens + stats.prefill_tokens) as f64
                / seconds.max(1e-9),
            seconds,
        }
    }
}

/// What one policy update did (means over its micro-batches, weighted by tokens).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UpdateReport {
    /// Training rows (kept turns) in the update.
    pub rows: usize,
    /// Response tokens in the loss.
    pub tokens: usize,
    /// Tokens through forward and backward (prompts, responses and padding).
    pub forward_tokens: usize,
    /// Optimizer steps taken.
    pub steps: usize,
    /// The loss (token-weighted mean over micro-batches; for fine-tuning, the mean over steps).
    pub loss: f64,
    /// The loss of the last optimizer step (fine-tuning; the RL loss is not comparable across
    /// steps, so 0 there).
    pub last_loss: f64,
    /// The clipped policy-gradient term.
    pub pg_loss: f64,
    /// Fraction of tokens where the clip was active.
    pub clip_frac: f64,
    /// Fraction of tokens where the dual clip bound.
    pub dual_clip_frac: f64,
    /// `mean(old − new)` log-prob.
    pub approx_kl: f64,
    /// Mean k3 KL to the reference policy (when the KL term is on).
    pub kl: Option<f64>,
    /// Mean token entropy.
    pub entropy: f64,
    /// Global gradient norm before clipping (last step).
    pub grad_norm: f64,
    /// Learning rate of the last step.
    pub lr: f64,
    /// verl's `rollout_probs_diff_max`: the largest `|p_rollout − p_train|` over the response
    /// tokens, the sampler's probability of each token against the training forward's on the
    /// same weights (a mismatch between the two code paths shows here first).
    #[serde(default)]
    pub rollout_probs_diff_max: f64,
    /// verl's `rollout_probs_diff_mean`: the mean of the same differences.
    #[serde(default)]
    pub rollout_probs_diff_mean: f64,
    /// The SFT anchor's negative log-likelihood per demonstration token, mean over the
    /// optimizer steps (`algo.sft_coef` > 0; `ppo::SftAnchor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sft_loss: Option<f64>,
    /// Forward-and-backward tokens per second.
    pub tokens_per_second: f64,
    /// Wall seconds.
    pub seconds: f64,
}

/// What a rejection-sampling round kept.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RejectionReport {
    /// The task-score threshold an episode had to reach.
    pub threshold: f64,
    /// Episodes rolled out.
    pub episodes: usize,
    /// Episodes kept.
    pub kept: usize,
    /// Turns fine-tuned on (the kept episodes' turns; with `rft.relabel`, every turn labelled).
    pub turns: usize,
    /// With `rft.relabel`: the share of labelled turns where the policy's action was the
    /// expert's (how far the policy has drifted from the expert on its own states).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expert_agreement: Option<f64>,
}

/// One line of `metrics.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricsLine {
    /// `pretrain`, `rft` (a cold-start round), `calibrate`, `eval` (before RL) or `rl`.
    pub stage: String,
    /// RL iteration (0 for the cold start and the evaluation before RL).
    pub iteration: usize,
    /// The training rollout of the iteration.
    pub rollout: Option<RolloutSummary>,
    /// The update.
    pub update: Option<UpdateReport>,
    /// Held-out evaluation, when it ran (at `train.eval_temperature`: greedy by default, the
    /// headline figure).
    pub eval: Option<RolloutSummary>,
    /// The same held-out tasks sampled at the rollout temperature (when `train.eval_sampled`).
    #[serde(default)]
    pub eval_sampled: Option<RolloutSummary>,
    /// A rejection round's selection (cold start only).
    #[serde(default)]
    pub rejection: Option<RejectionReport>,
    /// What DAPO's dynamic sampling kept (RL with `algo.dynamic_sampling` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic: Option<super::dynamic::DynamicReport>,
    /// What `control.calibrate` chose (stage `calibrate`, before the evaluation before RL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibrated: Option<super::config::Calibrated>,
    /// Wall seconds of the whole line's work.
    pub seconds: f64,
}

impl MetricsLine {
    /// A line of `stage` at `iteration` that took `seconds`, with no report yet (fill the
    /// ones the stage has with struct-update syntax).
    pub fn new(stage: &str, iteration: usize, seconds: f64) -> Self {
        Self {
            stage: stage.into(),
            iteration,
            rollout: None,
            update: None,
            eval: None,
            eval_sampled: None,
            rejection: None,
            dynamic: None,
            calibrated: None,
            seconds,
        }
    }

    /// A cold-start line (iteration 0): a fine-tuning `update` of `stage` that took `seconds`.
    pub fn cold_start(stage: &str, update: UpdateReport, seconds: f64) -> Self {
        Self {
            update: Some(update),
            ..Self::new(stage, 0, seconds)
        }
    }

    /// The line of `control.calibrate`'s warm-ups (iteration 0) that chose `cal`.
    pub fn calibration(cal: super::config::Calibrated, seconds: f64) -> Self {
        Self {
            calibrated: Some(cal),
            ..Self::new("calibrate", 0, seconds)
        }
    }
}

/// `metrics.jsonl`: appended line by line (each flushed and synced).
#[derive(Debug)]
pub struct MetricsLog {
    path: PathBuf,
}

impl MetricsLog {
    /// The log at `path` (not created until the first line).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one line.
    pub fn append(&self, line: &MetricsLine) -> Result<()> {
        let text = serde_json::to_string(line).map_err(|e| Error::Json {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| Error::io(&self.path, e))?;
        f.write_all(format!("{text}\n").as_bytes())
            .and_then(|_| f.sync_data())
            .map_err(|e| Error::io(&self.path, e))
    }

    /// Every complete line (a torn last line after a crash is ignored).
    pub fn read(&self) -> Result<Vec<MetricsLine>> {
        Ok(self.read_lines()?.into_iter().map(|(_, m)| m).collect())
    }

    /// Every complete line with its text as written.
    fn read_lines(&self) -> Result<Vec<(String, MetricsLine)>> {
        let text = match fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(&self.path, e)),
        };
        let mut out = Vec::new();
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            match serde_json::from_str(l) {
                Ok(m) => out.push((l.to_string(), m)),
                Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => {}
                Err(e) => {
                    return Err(Error::Json {
                        path: self.path.clone(),
                        message: format!("line {}: {e}", i + 1),
                    })
                }
            }
        }
        Ok(out)
    }

    /// Keeps the first `n` complete lines (what a cold-start checkpoint had seen), rewriting the
    /// file atomically.
    pub fn truncate_lines(&self, n: usize) -> Result<Vec<MetricsLine>> {
        let mut text = String::new();
        let mut kept = Vec::new();
        for (line, m) in self.read_lines()?.into_iter().take(n) {
            text.push_str(&line);
            text.push('\n');
            kept.push(m);
        }
        crate::model::checkpoint::write_atomic(&self.path, text.as_bytes())?;
        Ok(kept)
    }

    /// Keeps the lines up to RL iteration `iteration` (what a checkpoint at that iteration had
    /// seen), rewriting the file atomically.
    pub fn truncate_after(&self, iteration: usize) -> Result<Vec<MetricsLine>> {
        // The kept lines are copied as written, not re-serialised: a parse → print round trip
        // need not reproduce every digit, and a resumed run's log must equal an uninterrupted one.
        let mut text = String::new();
        let mut kept = Vec::new();
        for (line, m) in self.read_lines()? {
            if m.iteration <= iteration {
                text.push_str(&line);
                text.push('\n');
                kept.push(m);
            }
        }
        crate::model::checkpoint::write_atomic(&self.path, text.as_bytes())?;
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::{Generation, TtiFire, TurnRecord};

    fn turn(think: u32, tti: Option<TtiReason>, valid: bool) -> TurnRecord {
        TurnRecord {
            turn: 0,
            prompt_ids: vec![1],
            prompt_truncated: 0,
            generation: Generation {
                response_ids: vec![5; 10],
                think_tokens: think,
                tti: tti.map(|reason| TtiFire {
                    position: 3,
                    reason,
                }),
                ..Generation::default()
            },
            response_mask: vec![1; 10],
            response: String::new(),
            gamma: 0.0,
            tds_tries: 1,
            discarded: Vec::new(),
            action: String::new(),
            format_valid: valid,
            void: false,
            reward: 0.0,
            done: false,
            won: false,
            score: 0.0,
            anchor: String::new(),
        }
    }

    fn episode(turns: Vec<TurnRecord>, success: bool, score: f64, resamples: u32) -> EpisodeRecord {
        EpisodeRecord {
            episode: 0,
            env: "alfworld".into(),
            task: 0,
            group: 0,
            task_text: String::new(),
            source: String::new(),
            turns,
            success,
            score,
            total_reward: if success { 10.0 } else { 0.0 },
            resamples,
            void: false,
            reward_parts: Default::default(),
        }
    }

    #[test]
    fn the_summary_counts_by_episode_turn_and_generation() {
        // 2 episodes, 4 kept turns, 2 discarded generations.
        let recs = vec![
            episode(
                vec![
                    turn(10, Some(TtiReason::Converged), true),
                    turn(20, None, false),
                    turn(30, Some(TtiReason::Budget), true),
                ],
                true,
                1.0,
                2,
            ),
            episode(
                vec![TurnRecord {
                    prompt_truncated: 7,
                    ..turn(40, None, true)
                }],
                false,
                0.5,
                0,
            ),
        ];
        let stats = RolloutStats {
            decoded_tokens: 60,
            prefill_tokens: 40,
            ..RolloutStats::default()
        };
        let s = RolloutSummary::of(&recs, &stats, 2.0);
        assert_eq!(s.episodes, 2);
        assert_eq!(s.success_rate, 0.5);
        assert_eq!(s.score, 0.75);
        assert_eq!(s.episode_return, 5.0);
        assert_eq!(s.turns_per_episode, 2.0);
        assert_eq!(s.think_tokens_per_turn, 25.0);
        assert_eq!(s.tti_fire_rate, 0.5);
        assert_eq!(s.tti_converged_rate, 0.25);
        assert_eq!(s.tti_budget_rate, 0.25);
        assert_eq!(s.tds_resample_rate, 2.0 / 6.0);
        assert_eq!(s.format_valid_rate, 0.75);
        assert_eq!(
            s.prompt_cut_rate, 0.25,
            "one kept turn of four had its prompt cut"
        );
        assert_eq!(s.tokens_per_second, 50.0);
        // No episodes: zeros, not NaN.
        let e = RolloutSummary::of(&[], &RolloutStats::default(), 0.0);
        assert_eq!(e.success_rate, 0.0);
        assert_eq!(e.think_tokens_per_turn, 0.0);
        // Without reward parts the summary's JSON has no such keys (Search QA, ALFWorld).
        let json = serde_json::to_string(&s).unwrap();
        assert!(!json.contains("reward_parts") && !json.contains("scored_episodes"));
        assert_eq!(serde_json::from_str::<RolloutSummary>(&json).unwrap(), s);
    }

    #[test]
    fn reward_parts_average_over_the_episodes_that_report_them() {
        let parts = |kv: &[(&str, f64)]| kv.iter().map(|&(k, v)| (k.to_string(), v)).collect();
        let mut a = episode(vec![turn(5, None, true)], false, 0.5, 0);
        a.reward_parts = parts(&[("r_type", 1.0), ("r_att", 0.5), ("r_option", 0.0)]);
        let mut b = episode(vec![turn(5, None, true)], true, 1.0, 0);
        b.reward_parts = parts(&[("r_type", 0.5), ("r_att", 1.0)]);
        let c = episode(vec![turn(5, None, true)], false, 0.0, 0);
        let s = RolloutSummary::of(&[a, b, c], &RolloutStats::default(), 1.0);
        assert_eq!(s.scored_episodes, 2);
        assert_eq!(s.reward_parts["r_type"], 0.75);
        assert_eq!(s.reward_parts["r_att"], 0.75);
        assert_eq!(
            s.reward_parts["r_option"], 0.0,
            "over the one episode that has it"
        );
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"reward_parts\":{\"r_att\":0.75"), "{json}");
        assert_eq!(serde_json::from_str::<RolloutSummary>(&json).unwrap(), s);
    }

    #[test]
    fn success_by_source_counts_each_source_apart() {
        let of = |source: &str, success: bool| {
            let mut e = episode(
                vec![turn(5, None, true)],
                success,
                f64::from(u8::from(success)),
                0,
            );
            e.source = source.into();
            e
        };
        let recs = vec![
            of("nq", true),
            of("nq", false),
            of("nq", false),
            of("nq", true),
            of("musique", true),
            of("", true), // no source: in the totals, in no source's row
        ];
        let s = RolloutSummary::of(&recs, &RolloutStats::default(), 1.0);
        assert_eq!(s.success_rate, 4.0 / 6.0);
        assert_eq!(s.by_source.len(), 2);
        let nq = &s.by_source["nq"];
        assert_eq!((nq.episodes, nq.success_rate, nq.score), (4, 0.5, 0.5));
        let m = &s.by_source["musique"];
        assert_eq!((m.episodes, m.success_rate, m.score), (1, 1.0, 1.0));
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"by_source\":{\"musique\""), "{json}");
        assert_eq!(serde_json::from_str::<RolloutSummary>(&json).unwrap(), s);
        // Without sources the key is left out, and lines written before it read back.
        let none = RolloutSummary::of(&recs[5..], &RolloutStats::default(), 1.0);
        assert!(none.by_source.is_empty());
        assert!(!serde_json::to_string(&none).unwrap().contains("by_source"));
    }

    #[test]
    fn the_log_appends_reads_and_cuts_after_a_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let log = MetricsLog::new(dir.path().join("metrics.jsonl"));
        assert!(log.read().unwrap().is_empty());
        for i in 0..4 {
            log.append(&MetricsLine::new("rl", i, i as f64)).unwrap();
        }
        // A torn last line (a crash mid-write) is ignored.
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(log.path())
            .unwrap();
        f.write_all(b"{\"stage\":\"rl\",\"itera").unwrap();
        assert_eq!(log.read().unwrap().len(), 4);
        let kept = log.truncate_after(2).unwrap();
        assert_eq!(kept.len(), 3);
        assert_eq!(log.read().unwrap(), kept);
        // A broken line in the middle is an error naming the line.
        fs::write(log.path(), "{}\nnot json\n").unwrap();
        let e = log.read().unwrap_err().to_string();
        assert!(e.contains("line 1") || e.contains("line 2"), "{e}");
    }

    #[test]
    fn truncation_keeps_lines_as_written_and_reads_are_exact() {
        let dir = tempfile::tempdir().unwrap();
        let log = MetricsLog::new(dir.path().join("metrics.jsonl"));
        // Values whose shortest decimal form serde_json's default (best-effort) float parser
        // reads one ulp off; a resumed run's log must still equal the uninterrupted one.
        let values = [
            f64::from_bits(0x3c7f_ff54_ec4e_c4eb), // 2.7753311431404518e-17
            0.1 + 0.2,
            1.0 / 3.0,
            f64::MIN_POSITIVE,
            123_456.789_012_345_67,
        ];
        for (i, &v) in values.iter().enumerate() {
            log.append(&MetricsLine::new("rl", i, v)).unwrap();
        }
        let before = fs::read_to_string(log.path()).unwrap();
        let read: Vec<u64> = log
            .read()
            .unwrap()
            .iter()
            .map(|m| m.seconds.to_bits())
            .collect();
        let want: Vec<u64> = values.iter().map(|v| v.to_bits()).collect();
        assert_eq!(read, want, "reads are bit-exact");
        log.truncate_after(values.len()).unwrap();
        assert_eq!(fs::read_to_string(log.path()).unwrap(), before);
        log.truncate_after(1).unwrap();
        let first_two: String = before.lines().take(2).map(|l| format!("{l}\n")).collect();
        assert_eq!(fs::read_to_string(log.path()).unwrap(), first_two);
    }
}
