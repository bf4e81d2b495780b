//! A training run end to end: the cold start, held-out evaluation, the RL loop (rollout on a
//! frozen copy of the policy → GRPO/GiGPO advantages → dual-clip PPO updates), checkpoints
//! with exact resume, `metrics.jsonl`, and at the end the curves as PNGs and a results table.
//!
//! Layout of the output folder:
//! `metrics.jsonl` (one line per cold-start stage, the evaluation before RL, each RL
//! iteration), `cold-start/` (the policy after the cold start, Hugging Face layout; also the
//! KL reference), `checkpoints/iter-NNNNNN/` + `checkpoints/latest`, `plots/*.png`,
//! `results.md`.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};

use super::config::TrainConfig;
use super::metrics::{MetricsLine, MetricsLog, RolloutSummary};
use super::optimizer::AdamW;
use super::plots::{write_png, Chart, PlotError, Series};
use super::ppo::{update, UpdateConfig};
use super::rft::{cold_start, purpose, run_episodes, sample_tasks, Reporter};
use super::state::{self, derive_seed, TrainerState, FORMAT};
use crate::algo::{compute_advantages, flatten_rows};
use crate::defaults;
use crate::error::{Error, Result};
use crate::model::{checkpoint, Qwen3};
use crate::rollout::{EnvPool, Split};
use crate::tokenizer::Tokenizer;

/// How a run is started.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The output folder.
    pub out: PathBuf,
    /// Continue the run in `out` from its latest checkpoint.
    pub resume: bool,
    /// `config` was given by the user (on resume it must then equal the run's own).
    pub explicit_config: bool,
    /// Start from this Hugging Face checkpoint instead of the random-initialised default.
    pub init: Option<PathBuf>,
    /// Where the model runs.
    pub device: Device,
    /// Run the cold start.
    pub cold_start: bool,
    /// Run RL (`train.iterations` iterations).
    pub rl: bool,
}

/// What a run reports at the end.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// Held-out evaluation before RL (after the cold start).
    pub before: Option<RolloutSummary>,
    /// Held-out evaluation after the last RL iteration.
    pub after: Option<RolloutSummary>,
    /// RL iterations completed.
    pub iterations: usize,
    /// The PNGs written.
    pub plots: Vec<PathBuf>,
    /// `results.md`.
    pub results: PathBuf,
    /// `metrics.jsonl`.
    pub metrics: PathBuf,
    /// The last checkpoint.
    pub checkpoint: Option<PathBuf>,
    /// Wall seconds of this invocation.
    pub seconds: f64,
}

/// Builds the policy a fresh run starts from: a checkpoint's, or the default tokenizer and a
/// random model shaped by `cfg.model`.
pub fn initial_policy(
    cfg: &TrainConfig,
    init: Option<&Path>,
    device: &Device,
) -> Result<(Qwen3, Tokenizer)> {
    match init {
        Some(dir) => {
            let model = checkpoint::load(dir, DType::F32, device)?;
            let tok = Tokenizer::load(dir.join("tokenizer.json"))?;
            Ok((model, tok))
        }
        None => {
            let tok = defaults::tokenizer(cfg.seed)?;
            let mcfg = cfg.model_config(tok.id_bound(), defaults::MAX_POSITIONS);
            Ok((Qwen3::random(mcfg, cfg.seed, DType::F32, device)?, tok))
        }
    }
}

/// The environments of a config (generated data, deterministic in the seed).
pub fn pool_for(cfg: &TrainConfig) -> Result<EnvPool> {
    EnvPool::generated(cfg.env, cfg.seed, defaults::pool_size(cfg.env))
}

/// Held-out evaluation: the first `train.eval_tasks` tasks of the test split, each
/// `train.eval_episodes` times, at `train.eval_temperature`, with one fixed seed (every
/// evaluation of a run sees the same tasks and the same random numbers).
pub fn evaluate(
    policy: &Qwen3,
    tokenizer: &Tokenizer,
    pool: &EnvPool,
    cfg: &TrainConfig,
    rep: &mut dyn Reporter,
) -> Result<RolloutSummary> {
    evaluate_on(policy, tokenizer, pool, cfg, Split::Test, rep)
}

/// [`evaluate`] on either split (the `eval` command: a checkpoint evaluated with its run's
/// config reproduces the run's own evaluation exactly).
pub fn evaluate_on(
    policy: &Qwen3,
    tokenizer: &Tokenizer,
    pool: &EnvPool,
    cfg: &TrainConfig,
    split: Split,
    rep: &mut dyn Reporter,
) -> Result<RolloutSummary> {
    let n = cfg.train.eval_tasks.min(pool.num_tasks(split));
    let tasks: Vec<usize> = (0..n).collect();
    let (records, stats, secs) = run_episodes(
        policy,
        tokenizer,
        pool,
        cfg,
        split,
        &tasks,
        cfg.train.eval_episodes,
        cfg.train.eval_temperature,
        derive_seed(cfg.seed, 0, purpose::EVAL),
        rep,
    )?;
    Ok(RolloutSummary::of(&records, &stats, secs))
}

fn first_difference(a: &toml::Value, b: &toml::Value, path: &str) -> Option<String> {
    match (a, b) {
        (toml::Value::Table(x), toml::Value::Table(y)) => {
            for (k, v) in x {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match y.get(k) {
                    Some(w) => {
                        if let Some(d) = first_difference(v, w, &p) {
                            return Some(d);
                        }
                    }
                    None => return Some(p),
                }
            }
            y.keys()
                .find(|k| !x.contains_key(*k))
                .map(|k| format!("{path}.{k}"))
        }
        _ if a != b => Some(format!("{path} ({a} vs {b})")),
        _ => None,
    }
}

/// Runs (or resumes) training as `opts` says; `rep` gets the log lines and progress.
pub fn train(cfg: TrainConfig, opts: &RunOptions, rep: &mut dyn Reporter) -> Result<RunResult> {
    let t_start = std::time::Instant::now();
    let out = &opts.out;
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let log = MetricsLog::new(out.join("metrics.jsonl"));
    let cold_dir = out.join("cold-start");

    let existing = state::latest(out)?;
    let (cfg, policy, tokenizer, mut opt, start_iter, before, pool) = match existing {
        Some(dir) if opts.resume => {
            let loaded = state::load(&dir, DType::F32, &opts.device)?;
            let saved = TrainConfig::parse(&loaded.state.config, &dir.join("trainer_state.json"))?;
            // A resumed run may be extended (more iterations); anything else must match.
            let mut saved = saved;
            let mut same = saved.clone();
            same.train.iterations = cfg.train.iterations;
            if opts.explicit_config {
                saved.train.iterations = cfg.train.iterations;
            }
            if opts.explicit_config && same != cfg {
                let a = toml::Value::try_from(&cfg).ok();
                let b = toml::Value::try_from(&saved).ok();
                let key = a
                    .zip(b)
                    .and_then(|(a, b)| first_difference(&a, &b, ""))
                    .unwrap_or_else(|| "?".into());
                return Err(Error::invalid(
                    "--config",
                    format!(
                        "differs from the config of the run in {} (first difference: {key}); \
                         resume without --config to continue it as it was",
                        out.display()
                    ),
                ));
            }
            let cfg = saved;
            let mut opt = AdamW::new(cfg.optimizer_config())?;
            let (moments, step) = loaded.optimizer;
            opt.load_state(loaded.model.params(), moments, step)?;
            let lines = log.truncate_after(loaded.state.iteration)?;
            let before = lines
                .iter()
                .find(|l| l.stage == "eval")
                .and_then(|l| l.eval.clone());
            rep.line(&format!(
                "resuming {} from {} (iteration {} of {})",
                out.display(),
                dir.display(),
                loaded.state.iteration,
                cfg.train.iterations
            ));
            let pool = pool_for(&cfg)?;
            (
                cfg,
                loaded.model,
                loaded.tokenizer,
                opt,
                loaded.state.iteration,
                before,
                pool,
            )
        }
        Some(dir) => {
            return Err(Error::invalid(
                "--out",
                format!(
                    "{} already holds a run (latest checkpoint {}): pass --resume to continue \
                     it, or choose another folder",
                    out.display(),
                    dir.display()
                ),
            ))
        }
        None => {
            if opts.resume {
                rep.line(&format!(
                    "nothing to resume in {}: starting a new run",
                    out.display()
                ));
            }
            // A metrics file without a checkpoint is from a run that died before its first
            // checkpoint: start it over.
            match std::fs::remove_file(log.path()) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(Error::io(log.path(), e))
                }
                _ => {}
            }
            let pool = pool_for(&cfg)?;
            let (policy, tokenizer) = initial_policy(&cfg, opts.init.as_deref(), &opts.device)?;
            rep.line(&format!(
                "{}: {} parameters, {} training / {} held-out tasks",
                cfg.env.as_str(),
                policy.num_parameters(),
                pool.num_tasks(Split::Train),
                pool.num_tasks(Split::Test)
            ));
            if opts.cold_start {
                for line in cold_start(&policy, &tokenizer, &pool, &cfg, rep)? {
                    log.append(&line)?;
                }
            }
            checkpoint::save(&policy, &cold_dir, usize::MAX)?;
            tokenizer.save(&cold_dir)?;
            let t0 = std::time::Instant::now();
            let before = evaluate(&policy, &tokenizer, &pool, &cfg, rep)?;
            rep.line(&format!(
                "held-out before RL: success {:.3}, score {:.3}, think {:.1} tok/turn, {:.2} turns/episode",
                before.success_rate, before.score, before.think_tokens_per_turn, before.turns_per_episode
            ));
            log.append(&MetricsLine {
                stage: "eval".into(),
                iteration: 0,
                rollout: None,
                update: None,
                eval: Some(before.clone()),
                seconds: t0.elapsed().as_secs_f64(),
            })?;
            let opt = AdamW::new(cfg.optimizer_config())?;
            (cfg, policy, tokenizer, opt, 0, Some(before), pool)
        }
    };
    let state_of = |iteration: usize, opt: &AdamW| -> Result<TrainerState> {
        Ok(TrainerState {
            format: FORMAT,
            iteration,
            optimizer_step: opt.steps(),
            config: cfg.to_toml()?,
        })
    };
    let mut last_checkpoint = state::latest(out)?;
    if start_iter == 0 && last_checkpoint.is_none() {
        last_checkpoint = Some(state::save(
            out,
            &policy,
            &tokenizer,
            &opt,
            &state_of(0, &opt)?,
            cfg.train.keep_checkpoints,
        )?);
    }
    let reference = if cfg.algo.kl_coef > 0.0 {
        Some(checkpoint::load(&cold_dir, DType::F32, &opts.device)?)
    } else {
        None
    };
    let adv_cfg = cfg.advantage_config();
    let loss_cfg = cfg.loss_config();
    let iterations = if opts.rl { cfg.train.iterations } else { 0 };
    let mut after = None;
    for it in start_iter + 1..=iterations {
        let t0 = std::time::Instant::now();
        let i = it as u64;
        let old = policy.frozen_copy()?;
        let tasks = sample_tasks(
            &pool,
            cfg.rollout.tasks_per_iteration,
            derive_seed(cfg.seed, i, purpose::RL_TASKS),
        );
        let (records, stats, secs) = run_episodes(
            &old,
            &tokenizer,
            &pool,
            &cfg,
            Split::Train,
            &tasks,
            cfg.rollout.group_size,
            cfg.rollout.temperature,
            derive_seed(cfg.seed, i, purpose::RL_ROLLOUT),
            rep,
        )?;
        let summary = RolloutSummary::of(&records, &stats, secs);
        let adv = compute_advantages(&records, &adv_cfg)
            .map_err(|e| Error::invalid("advantages", e.to_string()))?;
        let rows = flatten_rows(&records, &adv, cfg.control.filter_void)
            .map_err(|e| Error::invalid("training rows", e.to_string()))?;
        let n_rows = rows.len();
        rep.begin("update", n_rows);
        let report = update(
            &policy,
            &old,
            reference.as_ref(),
            &mut opt,
            &rows,
            &loss_cfg,
            &UpdateConfig {
                mini_batches: cfg.optim.mini_batches,
                micro_batch_tokens: cfg.optim.micro_batch_tokens,
                temperature: f64::from(cfg.rollout.temperature),
                seed: derive_seed(cfg.seed, i, purpose::RL_SHUFFLE),
            },
            |done, total| rep.advance(done * n_rows / total.max(1)),
        );
        rep.end();
        let report = report?;
        drop(old);
        let eval = if it % cfg.train.eval_every == 0 || it == iterations {
            let e = evaluate(&policy, &tokenizer, &pool, &cfg, rep)?;
            after = Some(e.clone());
            Some(e)
        } else {
            None
        };
        let line = MetricsLine {
            stage: "rl".into(),
            iteration: it,
            rollout: Some(summary),
            update: Some(report),
            eval,
            seconds: t0.elapsed().as_secs_f64(),
        };
        rep.line(&iteration_line(&line, iterations));
        log.append(&line)?;
        if it % cfg.train.checkpoint_every == 0 || it == iterations {
            last_checkpoint = Some(state::save(
                out,
                &policy,
                &tokenizer,
                &opt,
                &state_of(it, &opt)?,
                cfg.train.keep_checkpoints,
            )?);
        }
    }
    let lines = log.read()?;
    if after.is_none() {
        after = lines
            .iter()
            .rev()
            .find_map(|l| l.eval.clone())
            .or_else(|| before.clone());
    }
    let plots = write_plots(&out.join("plots"), &lines)?;
    let results = out.join("results.md");
    checkpoint::write_atomic(
        &results,
        results_table(&cfg, before.as_ref(), after.as_ref()).as_bytes(),
    )?;
    Ok(RunResult {
        before,
        after,
        iterations: lines.iter().filter(|l| l.stage == "rl").count(),
        plots,
        results,
        metrics: log.path().to_path_buf(),
        checkpoint: last_checkpoint,
        seconds: t_start.elapsed().as_secs_f64(),
    })
}

/// The one-line log of an RL iteration.
pub fn iteration_line(l: &MetricsLine, iterations: usize) -> String {
    let r = l.rollout.clone().unwrap_or_default();
    let u = l.update.clone().unwrap_or_default();
    let mut s = format!(
        "iter {:>3}/{iterations}: train success {:.3} score {:.3} turns {:.1} think {:.1} TTI {:.2} TDS {:.2} valid {:.2} | loss {:.4} clip {:.3} ent {:.3} gnorm {:.3} | rollout {:.0} tok/s, update {:.0} tok/s, {:.1} s",
        l.iteration,
        r.success_rate,
        r.score,
        r.turns_per_episode,
        r.think_tokens_per_turn,
        r.tti_fire_rate,
        r.tds_resample_rate,
        r.format_valid_rate,
        u.loss,
        u.clip_frac,
        u.entropy,
        u.grad_norm,
        r.tokens_per_second,
        u.tokens_per_second,
        l.seconds
    );
    if let Some(e) = &l.eval {
        s.push_str(&format!(
            " | held-out success {:.3} score {:.3}",
            e.success_rate, e.score
        ));
    }
    s
}

/// The before/after table (markdown).
pub fn results_table(
    cfg: &TrainConfig,
    before: Option<&RolloutSummary>,
    after: Option<&RolloutSummary>,
) -> String {
    let mut s = format!(
        "| {} (held-out, {} episodes) | success rate | task score | format-valid turns | think tokens/turn | turns/episode | TDS resample rate |\n|---|---|---|---|---|---|---|\n",
        cfg.env.as_str(),
        before.or(after).map_or(0, |b| b.episodes)
    );
    for (name, e) in [
        ("before RL (after cold start)", before),
        ("after RL", after),
    ] {
        if let Some(e) = e {
            s.push_str(&format!(
                "| {name} | {:.3} | {:.3} | {:.3} | {:.1} | {:.2} | {:.3} |\n",
                e.success_rate,
                e.score,
                e.format_valid_rate,
                e.think_tokens_per_turn,
                e.turns_per_episode,
                e.tds_resample_rate
            ));
        }
    }
    s
}

/// The curves of a run: success (train and held-out), think tokens per turn, TDS resample rate.
pub fn write_plots(dir: &Path, lines: &[MetricsLine]) -> Result<Vec<PathBuf>> {
    let rl: Vec<&MetricsLine> = lines.iter().filter(|l| l.stage == "rl").collect();
    if rl.is_empty() {
        return Ok(Vec::new());
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let pick = |f: &dyn Fn(&RolloutSummary) -> f64| -> Vec<(f64, f64)> {
        rl.iter()
            .filter_map(|l| l.rollout.as_ref().map(|r| (l.iteration as f64, f(r))))
            .collect()
    };
    let evals: Vec<(f64, &RolloutSummary)> = lines
        .iter()
        .filter_map(|l| l.eval.as_ref().map(|e| (l.iteration as f64, e)))
        .collect();
    let pick_eval = |f: &dyn Fn(&RolloutSummary) -> f64| -> Vec<(f64, f64)> {
        evals.iter().map(|(x, e)| (*x, f(e))).collect()
    };
    // Train-rollout curve of `f`, plus the held-out one where `held_out`.
    let chart = |title: &str, y_label: &str, f: &dyn Fn(&RolloutSummary) -> f64, held_out: bool| {
        let mut series = vec![Series {
            name: "train rollout".into(),
            points: pick(f),
        }];
        if held_out {
            series.push(Series {
                name: "held-out".into(),
                points: pick_eval(f),
            });
        }
        Chart {
            title: title.into(),
            x_label: "RL iteration".into(),
            y_label: y_label.into(),
            series,
        }
    };
    let charts = [
        (
            "success.png",
            chart("Success rate", "success rate", &|r| r.success_rate, true),
        ),
        (
            "score.png",
            chart("Task score", "score", &|r| r.score, true),
        ),
        (
            "think_tokens.png",
            chart(
                "Think tokens per turn",
                "tokens",
                &|r| r.think_tokens_per_turn,
                true,
            ),
        ),
        (
            "resample_rate.png",
            chart(
                "TDS resample rate",
                "discarded / generations",
                &|r| r.tds_resample_rate,
                false,
            ),
        ),
    ];
    let mut out = Vec::new();
    for (name, chart) in &charts {
        let path = dir.join(name);
        match write_png(&path, chart, 800, 480) {
            Ok(()) => out.push(path),
            // Nothing to draw yet (e.g. no held-out point): no file, not a failed run.
            Err(PlotError::Empty { .. }) => {}
            Err(e) => return Err(Error::invalid("plot", e.to_string())),
        }
    }
    Ok(out)
}
