//! A training run end to end: the cold start, held-out evaluation, the RL loop (rollout on a
//! frozen copy of the policy → GRPO/GiGPO advantages → dual-clip PPO updates), checkpoints
//! with exact resume, `metrics.jsonl`, and at the end the curves as PNGs and a results table.
//!
//! Layout of the output folder:
//! `metrics.jsonl` (one line per cold-start stage, the evaluation before RL, each RL
//! iteration), `cold-start/` (the policy after the cold start, Hugging Face layout; also the
//! KL reference), `checkpoints/iter-NNNNNN/` + `checkpoints/latest`, `plots/*.png`,
//! `results.md`.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device};

use super::config::{ExpertKind, TrainConfig};
use super::eval_cache;
use super::metrics::{MetricsLine, MetricsLog, RolloutSummary};
use super::optimizer::AdamW;
use super::plots::{write_png, Chart, PlotError, Series};
use super::ppo::{update_until, SftAnchor, UpdateConfig};
use super::rft::{
    check_stop, cold_start, pretrain, purpose, rl_task_pool, run_episodes, sample_from,
    ColdStartResume, FineTuneProgress, Reporter, Stage,
};
use super::state::{self, derive_seed, ColdStart, Loaded, TrainerState};
use crate::algo::{compute_advantages, flatten_rows};
use crate::defaults;
use crate::error::{Error, Result};
use crate::model::{checkpoint, Qwen3};
use crate::rollout::{EnvPool, Split};
use crate::tokenizer::Tokenizer;
use t2po_envs::webshop::expert::Demonstrator;

/// The run's config, written beside the exported cold start (`RUN/cold-start/run_config.toml`);
/// RL checkpoints carry theirs in `trainer_state.json`.
pub const RUN_CONFIG: &str = "run_config.toml";

/// How a run is started.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The output folder.
    pub out: PathBuf,
    /// Continue the run in `out` from its latest checkpoint.
    pub resume: bool,
    /// `config` was given by the user (on resume it must then equal the run's own).
    pub explicit_config: bool,
    /// `config.train.iterations` was set by the user (`--iterations`): on resume it extends or
    /// shortens the run, which otherwise keeps its own config.
    pub iterations_given: bool,
    /// Start from this Hugging Face checkpoint instead of the random-initialised default.
    pub init: Option<PathBuf>,
    /// Where the model runs.
    pub device: Device,
    /// Run the cold start.
    pub cold_start: bool,
    /// Run RL (`train.iterations` iterations).
    pub rl: bool,
    /// A folder where the evaluation before RL is looked up before it runs and stored after:
    /// a run that would evaluate the same weights with the same program and settings takes the
    /// stored figures instead ([`super::eval_cache`]; `ablate` passes one per ablation). `None`:
    /// always evaluate.
    pub eval_cache: Option<PathBuf>,
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
    /// The kernels' code path (`model::kernel_path`), written at the end of `results.md`.
    pub kernels: &'static str,
}

/// A user's model and tokenizer made ready for the T²PO decode loop: the tags
/// [`Tokenizer::control_tokens`] needs that the tokenizer lacks (a Llama's or Qwen2's has no
/// `<think>`) are added ([`Tokenizer::with_control_tags`]) and the embedding grows to cover
/// them ([`Qwen3::with_vocab_size`]); the tags added are returned for the log. A tokenizer whose
/// ids run past the model's embedding is an error naming both sizes.
pub fn with_control_tags(model: Qwen3, tok: Tokenizer) -> Result<(Qwen3, Tokenizer, Vec<String>)> {
    let (tok, added) = tok.with_control_tags()?;
    let before = model.config().vocab_size;
    if added.is_empty() && tok.id_bound() > before {
        return Err(crate::Error::invalid(
            "tokenizer",
            format!(
                "its ids run to {} but the model's embedding has {before} rows",
                tok.id_bound()
            ),
        ));
    }
    let model = model.with_vocab_size(tok.id_bound())?;
    Ok((model, tok, added))
}

/// Builds the policy a fresh run starts from: a Hugging Face checkpoint folder's or a GGUF
/// file's ([`crate::gguf`]), with the control tags it lacks added ([`with_control_tags`]), or
/// the default tokenizer and a random model shaped by `cfg.model`.
pub fn initial_policy(
    cfg: &TrainConfig,
    init: Option<&Path>,
    device: &Device,
) -> Result<(Qwen3, Tokenizer)> {
    match init {
        Some(path) => {
            let (model, tok) = if crate::gguf::is_gguf(path) {
                crate::gguf::load(path, DType::F32, device)?
            } else {
                // A training checkpoint's files are checked first (an unverified one loads as
                // is).
                state::verify_if_training_checkpoint(path)?;
                (
                    checkpoint::load(path, DType::F32, device)?,
                    Tokenizer::load(path.join("tokenizer.json"))?,
                )
            };
            let (model, tok, _) = with_control_tags(model, tok)?;
            Ok((model, tok))
        }
        None => {
            let tok = defaults::tokenizer(cfg.seed)?;
            let mut mcfg = cfg.model_config(tok.id_bound(), defaults::MAX_POSITIONS);
            defaults::name_special_tokens(&mut mcfg, &tok)?;
            Ok((Qwen3::random(mcfg, cfg.seed, DType::F32, device)?, tok))
        }
    }
}

/// The environments of a config (generated data, deterministic in the seed), with the
/// config's demonstrator and memory window for the cold start's demonstrations.
pub fn pool_for(cfg: &TrainConfig) -> Result<EnvPool> {
    let mut pool = EnvPool::generated(cfg.env, cfg.seed, cfg.data)?;
    pool.set_history_length(cfg.rollout.history_length);
    pool.set_webshop_demonstrator(match cfg.rft.expert {
        ExpertKind::Privileged => Demonstrator::Privileged,
        ExpertKind::Shopper => Demonstrator::Shopper,
    })?;
    Ok(pool)
}

/// A held-out evaluation: the headline (at `train.eval_temperature`, greedy by default, as verl
/// validates) and, when `train.eval_sampled`, the same tasks sampled at the rollout temperature.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// At `train.eval_temperature`.
    pub headline: RolloutSummary,
    /// At `rollout.temperature`.
    pub sampled: Option<RolloutSummary>,
}

/// Held-out evaluation: the first `train.eval_tasks` tasks of the test split, each
/// `train.eval_episodes` times, with one fixed seed (every evaluation of a run sees the same
/// tasks and the same random numbers).
pub fn evaluate(
    policy: &Qwen3,
    tokenizer: &Tokenizer,
    pool: &EnvPool,
    cfg: &TrainConfig,
    rep: &mut dyn Reporter,
) -> Result<Evaluation> {
    // Each phase hands its freed memory back where it ends (crate::alloc::release_free_memory).
    crate::release_free_memory();
    let headline = evaluate_on(policy, tokenizer, pool, cfg, Split::Test, rep)?;
    let sampled = if cfg.train.eval_sampled {
        Some(evaluate_at(
            policy,
            tokenizer,
            pool,
            cfg,
            Split::Test,
            cfg.rollout.temperature,
            rep,
        )?)
    } else {
        None
    };
    crate::release_free_memory();
    Ok(Evaluation { headline, sampled })
}

/// [`evaluate`] before RL, with its line for `rep`; through `cache` when one is given: the
/// figures stored there under this evaluation's [`eval_cache::key`], else evaluated and stored
/// (as evaluated by `out`).
fn evaluation_before_rl(
    policy: &Qwen3,
    tokenizer: &Tokenizer,
    pool: &EnvPool,
    cfg: &TrainConfig,
    out: &Path,
    cache: Option<&Path>,
    rep: &mut dyn Reporter,
) -> Result<Evaluation> {
    let line = |e: &Evaluation| evaluation_line(e, cfg.train.eval_temperature);
    let Some(dir) = cache else {
        let e = evaluate(policy, tokenizer, pool, cfg, rep)?;
        rep.line(&format!("held-out before RL: {}", line(&e)));
        return Ok(e);
    };
    let key = eval_cache::key(policy, tokenizer, cfg)?;
    if let Some((e, by)) = eval_cache::load(dir, &key)? {
        rep.line(&format!(
            "held-out before RL (as {} evaluated the same policy the same way; {}): {}",
            by.display(),
            dir.join(format!("{key}.json")).display(),
            line(&e)
        ));
        return Ok(e);
    }
    let e = evaluate(policy, tokenizer, pool, cfg, rep)?;
    rep.line(&format!("held-out before RL: {}", line(&e)));
    eval_cache::store(dir, &key, &e, out)?;
    Ok(e)
}

/// The episodes an RL iteration trains on, the summary of every episode it rolled out, and,
/// with `algo.dynamic_sampling`, what DAPO's filter kept ([`super::dynamic`]). The first
/// batch is always the plain iteration's (its tasks and seed); later batches draw tasks not
/// yet used this iteration.
fn training_episodes(
    old: &Qwen3,
    tokenizer: &Tokenizer,
    pool: &EnvPool,
    rl_pool: &[usize],
    cfg: &TrainConfig,
    iteration: u64,
    rep: &mut dyn Reporter,
) -> Result<(
    Vec<crate::rollout::EpisodeRecord>,
    RolloutSummary,
    Option<super::dynamic::DynamicReport>,
)> {
    let want = cfg.rollout.tasks_per_iteration;
    let tasks_seed = derive_seed(cfg.seed, iteration, purpose::RL_TASKS);
    let rollout_seed = derive_seed(cfg.seed, iteration, purpose::RL_ROLLOUT);
    let mut stats = crate::rollout::RolloutStats::default();
    let mut secs = 0.0;
    let mut used: Vec<usize> = Vec::new();
    // `train.balance_sources`: each batch evenly over the training sources (config validation
    // keeps it to Search QA, whose tasks have them).
    let sources = if cfg.train.balance_sources {
        pool.task_sources(Split::Train)
    } else {
        None
    };
    let mut roll = |batch: usize, rep: &mut dyn Reporter| -> Result<Option<Vec<_>>> {
        let (tasks_seed, rollout_seed) = match batch {
            0 => (tasks_seed, rollout_seed),
            b => (
                derive_seed(tasks_seed, b as u64, purpose::DYNAMIC_BATCH),
                derive_seed(rollout_seed, b as u64, purpose::DYNAMIC_BATCH),
            ),
        };
        let fresh: Vec<usize> = rl_pool
            .iter()
            .copied()
            .filter(|t| !used.contains(t))
            .collect();
        if fresh.is_empty() {
            return Ok(None);
        }
        let tasks = match &sources {
            Some(source_of) => super::rft::sample_balanced(fresh, source_of, want, tasks_seed),
            None => sample_from(fresh, want, tasks_seed),
        };
        used.extend(&tasks);
        let (records, s, t) = run_episodes(
            "rollout",
            old,
            tokenizer,
            pool,
            cfg,
            Split::Train,
            &tasks,
            cfg.rollout.group_size,
            cfg.rollout.temperature,
            rollout_seed,
            rep,
        )?;
        stats.absorb(&s);
        secs += t;
        Ok(Some(records))
    };
    if !cfg.algo.dynamic_sampling {
        let records = roll(0, rep)?.unwrap_or_default();
        let summary = RolloutSummary::of(&records, &stats, secs);
        return Ok((records, summary, None));
    }
    let (kept, all, report) =
        super::dynamic::collect(want, cfg.algo.max_gen_batches, |b| roll(b, &mut *rep))?;
    rep.line(&format!(
        "  dynamic sampling: {} of {} groups informative over {} batch(es), {} kept",
        report.groups_informative, report.groups_generated, report.batches, report.groups_kept
    ));
    let summary = RolloutSummary::of(&all, &stats, secs);
    Ok((kept, summary, Some(report)))
}

/// [`evaluate`]'s headline on either split (the `eval` command: a checkpoint evaluated with its
/// run's config reproduces the run's own evaluation exactly).
pub fn evaluate_on(
    policy: &Qwen3,
    tokenizer: &Tokenizer,
    pool: &EnvPool,
    cfg: &TrainConfig,
    split: Split,
    rep: &mut dyn Reporter,
) -> Result<RolloutSummary> {
    evaluate_at(
        policy,
        tokenizer,
        pool,
        cfg,
        split,
        cfg.train.eval_temperature,
        rep,
    )
}

/// The evaluation's tasks and seed at `temperature` (0: greedy).
pub fn evaluate_at(
    policy: &Qwen3,
    tokenizer: &Tokenizer,
    pool: &EnvPool,
    cfg: &TrainConfig,
    split: Split,
    temperature: f32,
    rep: &mut dyn Reporter,
) -> Result<RolloutSummary> {
    let n = cfg.train.eval_tasks.min(pool.num_tasks(split));
    let tasks: Vec<usize> = (0..n).collect();
    let (records, stats, secs) = run_episodes(
        "eval",
        policy,
        tokenizer,
        pool,
        cfg,
        split,
        &tasks,
        cfg.train.eval_episodes,
        temperature,
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
///
/// Stopping ([`Reporter::stop_requested`], a signal): the run stops at the next safe point and
/// returns [`Error::Interrupted`], naming the checkpoint `--resume` continues from. In RL the
/// safe points are the start of an iteration, the rounds of its rollout, its update's
/// micro-batches and its evaluation's rounds: the iteration in progress is dropped — the policy
/// and the optimizer put back as it found them (a copy of the optimizer's moments is kept
/// through each update for that) — and the last finished one is checkpointed if it was not, so
/// nothing finished is lost. Its metrics line and checkpoint, once begun, are written whole. In
/// the cold start
/// the stage under way (pretraining, SFT, a rejection round) is dropped between two of its
/// steps or rounds, and the run resumes after the last finished stage.
pub fn train(cfg: TrainConfig, opts: &RunOptions, rep: &mut dyn Reporter) -> Result<RunResult> {
    match train_until_stopped(cfg, opts, rep) {
        Err(Error::Stopped { signal }) => Err(Error::Interrupted {
            signal,
            out: opts.out.clone(),
            latest: state::latest(&opts.out)?,
        }),
        other => other,
    }
}

/// The config a resumed run continues with: its own, which `cfg` (when the user gave one)
/// must equal but for `train.iterations` (a run may be extended, with or without the config).
fn resumed_config(
    cfg: &TrainConfig,
    opts: &RunOptions,
    loaded: &Loaded,
    out: &Path,
) -> Result<TrainConfig> {
    let mut saved =
        TrainConfig::parse(&loaded.state.config, &loaded.dir.join("trainer_state.json"))?;
    let mut same = saved.clone();
    same.train.iterations = cfg.train.iterations;
    // What `control.calibrate` chose is the run's own, not the user's.
    same.control.calibrated.clone_from(&cfg.control.calibrated);
    if opts.explicit_config || opts.iterations_given {
        saved.train.iterations = cfg.train.iterations;
    }
    if opts.explicit_config && &same != cfg {
        let a = toml::Value::try_from(cfg).ok();
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
    Ok(saved)
}

/// Writes a checkpoint as the `checkpoint` phase of `rep`.
fn save_checkpoint(
    out: &Path,
    policy: &Qwen3,
    tokenizer: &Tokenizer,
    opt: &AdamW,
    state: &TrainerState,
    keep: usize,
    rep: &mut dyn Reporter,
) -> Result<PathBuf> {
    crate::release_free_memory();
    rep.begin("checkpoint", 5);
    let saved = state::save_reporting(out, policy, tokenizer, opt, state, keep, &mut |done| {
        rep.advance(done)
    });
    rep.end();
    crate::release_free_memory();
    saved
}

/// The cold start with a checkpoint after each stage: pretraining (on a fresh run, unless the
/// policy comes from `--init`), then [`cold_start`] from `resume` (the stage a checkpoint
/// finished, its fine-tuning optimizer and SFT step count).
#[allow(clippy::too_many_arguments)]
fn checkpointed_cold_start(
    policy: &Qwen3,
    tokenizer: &Tokenizer,
    pool: &EnvPool,
    cfg: &TrainConfig,
    opts: &RunOptions,
    resume: Option<ColdStartResume>,
    log: &MetricsLog,
    rep: &mut dyn Reporter,
) -> Result<()> {
    let out = &opts.out;
    let mut on_stage = |stage: Stage,
                        opt: &AdamW,
                        sft_steps: u64,
                        line: Option<MetricsLine>,
                        sft: Option<&FineTuneProgress>,
                        rep: &mut dyn Reporter|
     -> Result<()> {
        if let Some(line) = &line {
            log.append(line)?;
        }
        let state = TrainerState {
            cold_start: Some(ColdStart {
                done: stage,
                sft_steps,
                metrics_lines: log.read()?.len(),
                sft: sft.cloned(),
            }),
            ..TrainerState::rl(0, opt.steps(), cfg.to_toml()?)
        };
        save_checkpoint(
            out,
            policy,
            tokenizer,
            opt,
            &state,
            cfg.train.keep_checkpoints,
            rep,
        )?;
        check_stop(rep)
    };
    if resume.is_none() {
        if opts.init.is_some() && cfg.pretrain.passages > 0 {
            rep.line("pretraining skipped: the policy comes from a checkpoint (--init)");
        } else if let Some(line) = pretrain(policy, tokenizer, cfg, rep)? {
            // Pretraining's optimizer is its own and ends with it: the checkpoint holds none.
            let none = AdamW::new(cfg.optimizer_config())?;
            on_stage(Stage::Pretrain, &none, 0, Some(line), None, rep)?;
        }
    }
    cold_start(policy, tokenizer, pool, cfg, resume, rep, &mut on_stage)
}

fn train_until_stopped(
    cfg: TrainConfig,
    opts: &RunOptions,
    rep: &mut dyn Reporter,
) -> Result<RunResult> {
    let t_start = std::time::Instant::now();
    let out = &opts.out;
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let log = MetricsLog::new(out.join("metrics.jsonl"));
    let cold_dir = out.join("cold-start");

    let loaded = match state::latest(out)? {
        Some(dir) if opts.resume => {
            let loaded = state::load(&dir, DType::F32, &opts.device)?;
            if !loaded.verified {
                rep.line(&state::unverified_note(&dir));
            }
            Some(loaded)
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
            None
        }
    };
    let (cfg, policy, tokenizer, mut opt, start_iter, before, pool) = match loaded {
        Some(loaded) if loaded.state.cold_start.is_none() => {
            let cfg = resumed_config(&cfg, opts, &loaded, out)?;
            let mut opt = AdamW::new(cfg.optimizer_config())?;
            let (moments, step) = loaded.optimizer;
            opt.load_state(loaded.model.params(), moments, step)?;
            let lines = log.truncate_after(loaded.state.iteration)?;
            let before = lines
                .iter()
                .find(|l| l.stage == "eval")
                .and_then(|l| l.eval.clone());
            rep.line(&format!(
                "resuming {} from {} ({})",
                out.display(),
                loaded.dir.display(),
                if opts.rl {
                    format!(
                        "iteration {} of {}",
                        loaded.state.iteration, cfg.train.iterations
                    )
                } else {
                    // A cold-start run (`--no-rl`, `ablate`'s per seed) that has ended.
                    "its cold start is done; no RL asked".to_string()
                }
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
        loaded => {
            // A new run, or one resumed inside its cold start: the cold start (what is left
            // of it), then the cold-start policy, its evaluation and the RL optimizer.
            let (mut cfg, pool, policy, tokenizer, resume) = match loaded {
                Some(loaded) => {
                    let cfg = resumed_config(&cfg, opts, &loaded, out)?;
                    let Some(progress) = loaded.state.cold_start.clone() else {
                        unreachable!("RL checkpoints are the arm above");
                    };
                    log.truncate_lines(progress.metrics_lines)?;
                    let mut opt = AdamW::new(cfg.rft_optimizer_config(progress.sft_steps))?;
                    let (moments, step) = loaded.optimizer;
                    opt.load_state(loaded.model.params(), moments, step)?;
                    let after = match progress.done {
                        Stage::Pretrain => "after pretraining".to_string(),
                        Stage::SftPart(k) => format!("{k} steps into the SFT"),
                        Stage::Sft => "after the SFT".to_string(),
                        Stage::Rejection(r) => format!("after rejection round {}", r + 1),
                    };
                    rep.line(&format!(
                        "resuming {} from {} (the cold start {after})",
                        out.display(),
                        loaded.dir.display(),
                    ));
                    let pool = pool_for(&cfg)?;
                    let resume = Some(ColdStartResume {
                        stage: progress.done,
                        opt,
                        sft_steps: progress.sft_steps,
                        sft: progress.sft,
                    });
                    (cfg, pool, loaded.model, loaded.tokenizer, resume)
                }
                None => {
                    let pool = pool_for(&cfg)?;
                    let (policy, tokenizer) =
                        initial_policy(&cfg, opts.init.as_deref(), &opts.device)?;
                    rep.line(&format!(
                        "{}: {} parameters, {} training / {} held-out tasks; kernels: {}",
                        cfg.env.as_str(),
                        policy.num_parameters(),
                        pool.num_tasks(Split::Train),
                        pool.num_tasks(Split::Test),
                        crate::model::kernel_path(&opts.device)
                    ));
                    (cfg, pool, policy, tokenizer, None)
                }
            };
            if opts.cold_start || resume.is_some() {
                checkpointed_cold_start(&policy, &tokenizer, &pool, &cfg, opts, resume, &log, rep)?;
            }
            checkpoint::save(&policy, &cold_dir, usize::MAX)?;
            tokenizer.save(&cold_dir)?;
            tokenizer.save_generation_config(&cold_dir)?;
            if cfg.control.calibrate && cfg.control.calibrated.is_none() {
                let t0 = std::time::Instant::now();
                let cal = super::calibrate::calibrate(&policy, &tokenizer, &pool, &cfg, rep)?;
                rep.line(&calibration_line(&cfg, &cal));
                log.append(&MetricsLine::calibration(
                    cal.clone(),
                    t0.elapsed().as_secs_f64(),
                ))?;
                // From here on (the evaluations, RL, every checkpoint's saved config) the
                // run uses the calibrated values.
                cfg.control.calibrated = Some(cal);
            }
            // The run's config beside the exported cold start (calibrated values included), so
            // `eval` and `generate` on that folder run as this run did.
            checkpoint::write_atomic(&cold_dir.join(RUN_CONFIG), cfg.to_toml()?.as_bytes())?;
            let t0 = std::time::Instant::now();
            let before = evaluation_before_rl(
                &policy,
                &tokenizer,
                &pool,
                &cfg,
                out,
                opts.eval_cache.as_deref(),
                rep,
            )?;
            log.append(&MetricsLine {
                eval: Some(before.headline.clone()),
                eval_sampled: before.sampled.clone(),
                ..MetricsLine::new("eval", 0, t0.elapsed().as_secs_f64())
            })?;
            let opt = AdamW::new(cfg.optimizer_config())?;
            (cfg, policy, tokenizer, opt, 0, Some(before.headline), pool)
        }
    };
    let state_of = |iteration: usize, opt: &AdamW| -> Result<TrainerState> {
        Ok(TrainerState::rl(iteration, opt.steps(), cfg.to_toml()?))
    };
    let keep = cfg.train.keep_checkpoints;
    // The iteration the latest checkpoint holds (a resumed run starts from one).
    let mut saved = start_iter;
    let mut last_checkpoint = state::latest(out)?;
    if start_iter == 0
        && last_checkpoint
            .as_ref()
            .is_none_or(|d| !is_rl_checkpoint(d))
    {
        last_checkpoint = Some(save_checkpoint(
            out,
            &policy,
            &tokenizer,
            &opt,
            &state_of(0, &opt)?,
            keep,
            rep,
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
    let rl_pool = if iterations > start_iter {
        rl_task_pool(&pool, &cfg)?
    } else {
        Vec::new()
    };
    // The SFT anchor's demonstrations: the cold start's, rebuilt from the config.
    let anchor_demos = if cfg.algo.sft_coef > 0.0 && iterations > start_iter {
        let demos = super::rft::cold_start_demos(&pool, &tokenizer, &cfg)?.demos;
        rep.line(&format!(
            "RL: SFT anchor on the cold start's {} demonstrations, {} per step at weight {} \
             (algo.sft_coef)",
            demos.len(),
            cfg.algo.sft_per_step,
            cfg.algo.sft_coef
        ));
        demos
    } else {
        Vec::new()
    };
    let anchor = (!anchor_demos.is_empty()).then_some(SftAnchor {
        demos: &anchor_demos,
        coef: cfg.algo.sft_coef,
        per_step: cfg.algo.sft_per_step,
    });
    let mut after = None;
    for it in start_iter + 1..=iterations {
        // Leaving on a stop request: the iteration in progress is dropped (the policy and the
        // optimizer are as iteration `it - 1` left them), and that one is checkpointed on the
        // way out unless it already is.
        let stop = |signal: i32, opt: &AdamW, rep: &mut dyn Reporter| -> Result<RunResult> {
            if saved != it - 1 {
                save_checkpoint(
                    out,
                    &policy,
                    &tokenizer,
                    opt,
                    &state_of(it - 1, opt)?,
                    keep,
                    rep,
                )?;
            }
            Err(Error::Stopped { signal })
        };
        if let Some(signal) = rep.stop_requested() {
            return stop(signal, &opt, rep);
        }
        let t0 = std::time::Instant::now();
        let i = it as u64;
        let old = policy.frozen_copy()?;
        // The rollout reads `old` only: a stop during it leaves the policy as it was.
        let (records, summary, dynamic) =
            match training_episodes(&old, &tokenizer, &pool, &rl_pool, &cfg, i, rep) {
                Err(Error::Stopped { signal }) => return stop(signal, &opt, rep),
                done => done?,
            };
        crate::release_free_memory();
        let mut records = records;
        if cfg.algo.length_reward > 0.0 {
            crate::algo::add_length_reward(&mut records, cfg.algo.length_reward)
                .map_err(|e| Error::invalid("length reward", e.to_string()))?;
        }
        let adv = compute_advantages(&records, &adv_cfg)
            .map_err(|e| Error::invalid("advantages", e.to_string()))?;
        let rows = flatten_rows(&records, &adv, cfg.control.filter_void)
            .map_err(|e| Error::invalid("training rows", e.to_string()))?;
        if cfg.train.save_rollouts {
            let logs = super::rollout_log::episode_logs(it, &records, &adv)?;
            super::rollout_log::write_rollouts(out, it, &logs)?;
        }
        let n_rows = rows.len();
        // The update changes the policy and the optimizer in place; a stop during it or the
        // evaluation after it puts both back: the weights from `old` (the policy as the
        // iteration began), the optimizer from this copy of its moments.
        let (moments, step) = opt.snapshot()?;
        let put_back = |opt: &mut AdamW| -> Result<()> {
            for (name, var) in policy.params() {
                var.set(old.params()[name].as_tensor())?;
            }
            opt.load_state(policy.params(), moments.clone(), step)
        };
        rep.begin("update", n_rows);
        let mut asked = None;
        let report = update_until(
            &policy,
            &old,
            reference.as_ref(),
            anchor.as_ref(),
            &mut opt,
            &rows,
            &loss_cfg,
            &UpdateConfig {
                mini_batches: cfg.optim.mini_batches,
                micro_batch_tokens: cfg.optim.micro_batch_tokens,
                temperature: f64::from(cfg.rollout.temperature),
                seed: derive_seed(cfg.seed, i, purpose::RL_SHUFFLE),
            },
            |done, total| {
                rep.advance(done * n_rows / total.max(1));
                asked = rep.stop_requested();
                match asked {
                    Some(_) => ControlFlow::Break(()),
                    None => ControlFlow::Continue(()),
                }
            },
        );
        rep.end();
        crate::release_free_memory();
        let Some(report) = report? else {
            put_back(&mut opt)?;
            return stop(asked.unwrap_or_default(), &opt, rep);
        };
        let (eval, eval_sampled) = if it % cfg.train.eval_every == 0 || it == iterations {
            match evaluate(&policy, &tokenizer, &pool, &cfg, rep) {
                Ok(e) => {
                    after = Some(e.headline.clone());
                    (Some(e.headline), e.sampled)
                }
                Err(Error::Stopped { signal }) => {
                    put_back(&mut opt)?;
                    return stop(signal, &opt, rep);
                }
                Err(e) => return Err(e),
            }
        } else {
            (None, None)
        };
        drop(old);
        let line = MetricsLine {
            rollout: Some(summary),
            update: Some(report),
            eval,
            eval_sampled,
            dynamic,
            ..MetricsLine::new("rl", it, t0.elapsed().as_secs_f64())
        };
        rep.line(&iteration_line(&line, iterations));
        log.append(&line)?;
        if it % cfg.train.checkpoint_every == 0 || it == iterations {
            last_checkpoint = Some(save_checkpoint(
                out,
                &policy,
                &tokenizer,
                &opt,
                &state_of(it, &opt)?,
                keep,
                rep,
            )?);
            saved = it;
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
    let plots = write_plots(&out.join("plots"), &lines, cfg.control.min_len)?;
    let results = out.join("results.md");
    let kernels = crate::model::kernel_path(&opts.device);
    checkpoint::write_atomic(
        &results,
        format!(
            "{}\n{}\n",
            results_table(&cfg, before.as_ref(), after.as_ref()),
            kernels_line(kernels)
        )
        .as_bytes(),
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
        kernels,
    })
}

/// What `control.calibrate` chose, in one line.
pub fn calibration_line(cfg: &TrainConfig, cal: &super::config::Calibrated) -> String {
    let k = &cfg.control;
    let mut parts = Vec::new();
    if k.tti {
        parts.push(format!(
            "ε = {:.4} (config {}): TTI would fire in {:.1} % of {} warm-up turns \
             (target {:.1} %; {} turns reached the rule)",
            cal.epsilon,
            k.epsilon,
            100.0 * cal.fire_rate.unwrap_or(f64::NAN),
            cal.turns,
            100.0 * k.target_fire_rate,
            cal.checked_turns
        ));
    }
    if k.tds {
        parts.push(format!(
            "η = {:.4} (config {}): TDS would resample {:.1} % of {} later turns (target {:.1} %)",
            cal.eta,
            k.eta,
            100.0 * cal.resample_rate.unwrap_or(f64::NAN),
            cal.later_turns,
            100.0 * k.target_resample_rate
        ));
    }
    if parts.is_empty() {
        parts.push("TTI and TDS off: nothing to calibrate".into());
    }
    format!("calibrated: {}", parts.join("; "))
}

/// Whether `dir` is an RL checkpoint (`iter-NNNNNN`), not a cold-start stage's.
fn is_rl_checkpoint(dir: &Path) -> bool {
    dir.file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("iter-"))
}

/// One evaluation in words: the headline (greedy or at its temperature) and the sampled figure.
pub fn evaluation_line(e: &Evaluation, temperature: f32) -> String {
    let h = &e.headline;
    let how = if temperature == 0.0 {
        "greedy".to_string()
    } else {
        format!("T = {temperature}")
    };
    let mut s = format!(
        "success {:.3} ({how}), score {:.3}, format-valid {:.3}, think {:.1} tok/turn, {:.2} turns/episode",
        h.success_rate, h.score, h.format_valid_rate, h.think_tokens_per_turn, h.turns_per_episode
    );
    if let Some(x) = &e.sampled {
        s.push_str(&format!("; sampled success {:.3}", x.success_rate));
    }
    s
}

/// The one-line log of an RL iteration.
pub fn iteration_line(l: &MetricsLine, iterations: usize) -> String {
    let r = l.rollout.clone().unwrap_or_default();
    let u = l.update.clone().unwrap_or_default();
    let mut s = format!(
        "iter {:>3}/{iterations}: train success {:.3} pass@k {:.3} score {:.3} turns {:.1} think {:.1} TTI {:.2} TDS {:.2} valid {:.2} | loss {:.4} clip {:.3} ent {:.3} gnorm {:.3} | rollout {:.0} tok/s, update {:.0} tok/s, {:.1} s",
        l.iteration,
        r.success_rate,
        r.pass_at_k,
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
    if let Some(x) = u.sft_loss {
        s.push_str(&format!(" | sft anchor {x:.3}"));
    }
    if r.prompt_cut_rate > 0.0 {
        s.push_str(&format!(
            " | prompts cut at max_prompt_tokens {:.2}",
            r.prompt_cut_rate
        ));
    }
    if let Some(e) = &l.eval {
        s.push_str(&format!(
            " | held-out success {:.3} score {:.3}",
            e.success_rate, e.score
        ));
    }
    if let Some(e) = &l.eval_sampled {
        s.push_str(&format!(" (sampled {:.3})", e.success_rate));
    }
    s
}

/// One sentence on whether held-out success moved through RL, against the sampling noise of
/// the held-out estimate (the standard error of a difference of two success rates over `n`
/// episodes each); the spread across seeds is what `ablate` measures. `None` without both
/// evaluations.
pub fn verdict(
    before: Option<&RolloutSummary>,
    after: Option<&RolloutSummary>,
    iterations: usize,
) -> Option<String> {
    let (b, a) = (before?, after?);
    if iterations == 0 {
        return Some(format!(
            "Held-out success after the cold start: {:.3} ({} episodes); no RL iterations ran.",
            b.success_rate, b.episodes
        ));
    }
    let n = b.episodes.min(a.episodes).max(1) as f64;
    let var = |p: f64| p * (1.0 - p) / n;
    let se = (var(b.success_rate) + var(a.success_rate)).sqrt();
    let d = a.success_rate - b.success_rate;
    let moved = if d > 0.0 {
        format!("rose from {:.3} to {:.3}", b.success_rate, a.success_rate)
    } else if d < 0.0 {
        format!("fell from {:.3} to {:.3}", b.success_rate, a.success_rate)
    } else {
        format!("stayed at {:.3}", b.success_rate)
    };
    let size = if se > 0.0 {
        let z = d.abs() / se;
        let call = if z >= 2.0 {
            "more than twice the sampling error of the held-out estimate: RL moved it"
        } else {
            "within twice the sampling error of the held-out estimate: not a clear change"
        };
        format!(" ({d:+.3}, {z:.1} standard errors of the difference over {n} episodes; {call})")
    } else {
        String::new()
    };
    Some(format!(
        "Held-out success {moved} over {iterations} RL iterations{size}. Across seeds: \
         `ablate --seeds 3`."
    ))
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
    let rows: Vec<(&str, &RolloutSummary)> = [("before RL", before), ("after RL", after)]
        .into_iter()
        .filter_map(|(l, e)| e.map(|e| (l, e)))
        .collect();
    if let Some(t) = by_source_table("success by source (held-out)", &rows) {
        s.push('\n');
        s.push_str(&t);
    }
    s
}

/// The line `results.md` ends with: the kernels' code path (`model::kernel_path`), on which
/// the run's figures reproduce to the digit.
pub fn kernels_line(kernels: &str) -> String {
    format!(
        "Kernels: {kernels}. A run reproduces these figures to the digit where its kernels take the \
         same path; another path (AVX-512 against AVX2) sums in another order and gives another \
         sample of the same run."
    )
}

/// Success by source (markdown), one row per labelled summary and one column per source any
/// of them has (with its episodes), as verl reports validation per `data_source`. `None` when
/// fewer than two sources are present (one source says no more than the totals).
pub fn by_source_table(title: &str, rows: &[(&str, &RolloutSummary)]) -> Option<String> {
    let mut sources: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, r) in rows {
        for (k, v) in &r.by_source {
            let n = sources.entry(k.as_str()).or_default();
            *n = (*n).max(v.episodes);
        }
    }
    if sources.len() < 2 {
        return None;
    }
    let mut s = format!("| {title} |");
    for (k, n) in &sources {
        s.push_str(&format!(" {k} ({n}) |"));
    }
    s.push_str("\n|---|");
    s.push_str(&"---|".repeat(sources.len()));
    s.push('\n');
    for (label, r) in rows {
        s.push_str(&format!("| {label} |"));
        for k in sources.keys() {
            match r.by_source.get(*k) {
                Some(v) => s.push_str(&format!(" {:.3} |", v.success_rate)),
                None => s.push_str(" – |"),
            }
        }
        s.push('\n');
    }
    Some(s)
}

/// `t − L_min` of the convergence rule's fires in `at` (entry `t` counts fires at `t`): the mean
/// and the 90th percentile, `None` without fires.
fn fire_offsets(at: &[u32], min_len: u32) -> Option<(f64, f64)> {
    let n: u64 = at.iter().map(|&c| u64::from(c)).sum();
    if n == 0 {
        return None;
    }
    let off = |t: usize| t as f64 - f64::from(min_len);
    let mean = at
        .iter()
        .enumerate()
        .map(|(t, &c)| off(t) * f64::from(c))
        .sum::<f64>()
        / n as f64;
    let want = (0.9 * n as f64).ceil() as u64;
    let mut seen = 0u64;
    let mut p90 = 0.0;
    for (t, &c) in at.iter().enumerate() {
        seen += u64::from(c);
        if seen >= want {
            p90 = off(t);
            break;
        }
    }
    Some((mean, p90))
}

/// The curves of a run: success (train rollouts, pass@k, held-out greedy and sampled), task
/// score (where it differs from success), format-valid turns, think tokens per turn, the TDS
/// resample rate, and where TTI's convergence rule fires (`t − L_min`).
pub fn write_plots(dir: &Path, lines: &[MetricsLine], min_len: u32) -> Result<Vec<PathBuf>> {
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
    let pick_eval = |sampled: bool, f: &dyn Fn(&RolloutSummary) -> f64| -> Vec<(f64, f64)> {
        lines
            .iter()
            .filter_map(|l| {
                let e = if sampled { &l.eval_sampled } else { &l.eval };
                e.as_ref().map(|e| (l.iteration as f64, f(e)))
            })
            .collect()
    };
    // Train-rollout curve of `f`, plus the held-out markers where `held_out`.
    let chart = |title: &str, y_label: &str, f: &dyn Fn(&RolloutSummary) -> f64, held_out: bool| {
        let mut series = vec![Series::new("train rollout", pick(f))];
        if held_out {
            series.push(Series::markers("held-out (greedy)", pick_eval(false, f)));
            let sampled = pick_eval(true, f);
            if !sampled.is_empty() {
                series.push(Series::markers("held-out (sampled)", sampled));
            }
        }
        Chart {
            title: title.into(),
            x_label: "RL iteration".into(),
            y_label: y_label.into(),
            series,
        }
    };
    let mut success = chart("Success rate", "success rate", &|r| r.success_rate, true);
    success.series.insert(
        1,
        Series::new(
            "train pass@k (any success in a group)",
            pick(&|r| r.pass_at_k),
        ),
    );
    let mut charts = vec![("success.png", success)];
    // Search QA and ALFWorld score 0/1 like success: a second identical chart says nothing.
    let all: Vec<&RolloutSummary> = lines
        .iter()
        .flat_map(|l| [l.rollout.as_ref(), l.eval.as_ref(), l.eval_sampled.as_ref()])
        .flatten()
        .collect();
    if all.iter().any(|r| (r.score - r.success_rate).abs() > 1e-12) {
        charts.push((
            "score.png",
            chart("Task score", "score", &|r| r.score, true),
        ));
    }
    charts.push((
        "format_valid.png",
        chart(
            "Format-valid turns",
            "fraction of turns",
            &|r| r.format_valid_rate,
            true,
        ),
    ));
    charts.push((
        "think_tokens.png",
        chart(
            "Think tokens per turn",
            "tokens",
            &|r| r.think_tokens_per_turn,
            true,
        ),
    ));
    charts.push((
        "resample_rate.png",
        chart(
            "TDS resample rate",
            "discarded / generations",
            &|r| r.tds_resample_rate,
            false,
        ),
    ));
    let offsets: Vec<(f64, (f64, f64))> = rl
        .iter()
        .filter_map(|l| {
            let r = l.rollout.as_ref()?;
            Some((
                l.iteration as f64,
                fire_offsets(&r.tti_converged_at, min_len)?,
            ))
        })
        .collect();
    if !offsets.is_empty() {
        charts.push((
            "tti_position.png",
            Chart {
                title: "Where TTI's convergence rule fires (train rollouts)".into(),
                x_label: "RL iteration".into(),
                y_label: "think tokens after L_min".into(),
                series: vec![
                    Series::new("mean", offsets.iter().map(|(x, o)| (*x, o.0)).collect()),
                    Series::new(
                        "90th percentile",
                        offsets.iter().map(|(x, o)| (*x, o.1)).collect(),
                    ),
                ],
            },
        ));
    }
    // Held-out greedy success of each source (where an environment names two or more), as
    // markers: the evaluations are sparse, and the sources can move apart (README: RL that
    // lifts multi-hop questions can cost single-hop ones).
    let mut by_source: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    for l in lines {
        for (k, v) in l.eval.iter().flat_map(|e| &e.by_source) {
            by_source
                .entry(k.as_str())
                .or_default()
                .push((l.iteration as f64, v.success_rate));
        }
    }
    if by_source.len() >= 2 {
        charts.push((
            "success_by_source.png",
            Chart {
                title: "Held-out success by source (greedy)".into(),
                x_label: "RL iteration".into(),
                y_label: "success rate".into(),
                series: by_source
                    .into_iter()
                    .map(|(k, points)| Series::markers(k, points))
                    .collect(),
            },
        ));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn held_out(success: f64) -> RolloutSummary {
        RolloutSummary {
            episodes: 70,
            success_rate: success,
            ..RolloutSummary::default()
        }
    }

    #[test]
    fn the_verdict_weighs_the_change_against_the_binomial_error() {
        // 0.1 -> 0.3 over 70 episodes: se = sqrt(.09/70 + .21/70) = 0.0655, z = 3.05.
        let v = verdict(Some(&held_out(0.1)), Some(&held_out(0.3)), 30).unwrap();
        assert!(v.contains("rose from 0.100 to 0.300"), "{v}");
        assert!(v.contains("+0.200, 3.1 standard errors"), "{v}");
        assert!(v.contains("RL moved it"), "{v}");
        // 0.143 -> 0.157: one episode, z = 0.23.
        let v = verdict(Some(&held_out(0.143)), Some(&held_out(0.157)), 30).unwrap();
        assert!(v.contains("not a clear change"), "{v}");
        let v = verdict(Some(&held_out(0.3)), Some(&held_out(0.1)), 30).unwrap();
        assert!(v.contains("fell from 0.300 to 0.100"), "{v}");
        let v = verdict(Some(&held_out(0.143)), Some(&held_out(0.143)), 30).unwrap();
        assert!(v.contains("stayed at 0.143"), "{v}");
        let v = verdict(Some(&held_out(0.2)), None, 30);
        assert!(v.is_none());
        let v = verdict(Some(&held_out(0.2)), Some(&held_out(0.2)), 0).unwrap();
        assert!(v.contains("no RL iterations ran"), "{v}");
    }

    #[test]
    fn the_by_source_table_has_a_column_per_source_and_a_row_per_summary() {
        use super::super::metrics::SourceSummary;
        let with = |kv: &[(&str, usize, f64)]| RolloutSummary {
            by_source: kv
                .iter()
                .map(|&(k, episodes, success_rate)| {
                    let x = SourceSummary {
                        episodes,
                        success_rate,
                        score: success_rate,
                    };
                    (k.to_string(), x)
                })
                .collect(),
            ..held_out(0.0)
        };
        let before = with(&[("nq", 10, 0.5), ("musique", 10, 0.1)]);
        let after = with(&[("nq", 10, 0.7), ("musique", 10, 0.2), ("popqa", 10, 0.3)]);
        let t = by_source_table("by source", &[("before", &before), ("after", &after)]).unwrap();
        assert_eq!(
            t,
            "| by source | musique (10) | nq (10) | popqa (10) |\n|---|---|---|---|\n\
             | before | 0.100 | 0.500 | – |\n| after | 0.200 | 0.700 | 0.300 |\n"
        );
        // One source (or none) adds nothing to the totals: no table.
        let one = with(&[("nq", 10, 0.5)]);
        assert!(by_source_table("t", &[("a", &one)]).is_none());
        assert!(by_source_table("t", &[("a", &held_out(0.2))]).is_none());
        // The results table carries it under the before/after rows.
        let cfg = TrainConfig::default_for(crate::rollout::EnvKind::Search).unwrap();
        let r = results_table(&cfg, Some(&before), Some(&after));
        assert!(
            r.contains("| success by source (held-out) | musique (10)"),
            "{r}"
        );
        assert!(r.contains("| after RL | 0.200 | 0.700 | 0.300 |"), "{r}");
        // The plots: one chart of the held-out success by source, only with two sources or more.
        let line = |iteration: usize, eval: &RolloutSummary| MetricsLine {
            rollout: Some(held_out(0.5)),
            eval: Some(eval.clone()),
            ..MetricsLine::new("rl", iteration, 1.0)
        };
        let dir = tempfile::tempdir().unwrap();
        let written = write_plots(dir.path(), &[line(1, &before), line(2, &after)], 16).unwrap();
        let png = dir.path().join("success_by_source.png");
        assert!(written.contains(&png), "{written:?}");
        assert!(std::fs::read(&png)
            .unwrap()
            .starts_with(b"\x89PNG\r\n\x1a\n"));
        let dir = tempfile::tempdir().unwrap();
        let written = write_plots(dir.path(), &[line(1, &one), line(2, &one)], 16).unwrap();
        assert!(!written.iter().any(|p| p.ends_with("success_by_source.png")));
        assert!(written.iter().any(|p| p.ends_with("success.png")));
    }
}
