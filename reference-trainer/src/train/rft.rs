//! The cold start (spec §5 "Cold start"): supervised fine-tuning on the environments' experts'
//! demonstrations, then rejection-sampling fine-tuning (RFT) — roll the policy out on training
//! tasks, keep the episodes whose task score reaches the threshold, fine-tune on their
//! (prompt, response) turns for at most 5 epochs. Before it, for the random-initialised default
//! only, [`pretrain`]: the language modelling a pretrained base model brings with it, on a
//! generated encyclopedia about another world than the tasks'.

use std::ops::ControlFlow;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha12Rng;
use serde::{Deserialize, Serialize};

use super::config::{RlTasks, TrainConfig};
use super::metrics::{MetricsLine, RejectionReport, RolloutSummary, UpdateReport};
use super::optimizer::AdamW;
use super::sft::{cut_thinking, expert_demos_counted, plan_micro_batches, sft_step_in, Demo};
use super::state::derive_seed;
use crate::error::{Error, Result};
use crate::model::Qwen3;
use crate::rollout::{
    encyclopedia, rollout_part_until, EnvPool, EpisodeRecord, EpisodeSpec, PackedQwen3,
    RolloutStats, Split,
};
use crate::tokenizer::Tokenizer;

/// Purposes of derived seeds (see [`derive_seed`]): each random draw of a run has its own.
pub mod purpose {
    /// The order of the demonstrations in each SFT epoch.
    pub const DEMO_SHUFFLE: u64 = 1;
    /// The training tasks of a rejection round.
    pub const RFT_TASKS: u64 = 2;
    /// A rejection round's rollout.
    pub const RFT_ROLLOUT: u64 = 3;
    /// The order of a rejection round's kept turns.
    pub const RFT_SHUFFLE: u64 = 4;
    /// The training tasks of an RL iteration.
    pub const RL_TASKS: u64 = 5;
    /// An RL iteration's rollout.
    pub const RL_ROLLOUT: u64 = 6;
    /// The mini-batch shuffle of an RL update.
    pub const RL_SHUFFLE: u64 = 7;
    /// Held-out evaluation.
    pub const EVAL: u64 = 8;
    /// The experts' wording of the demonstrations.
    pub const DEMOS: u64 = 9;
    /// Which training tasks the demonstrations come from.
    pub const DEMO_TASKS: u64 = 10;
    /// The pretraining encyclopedia's world.
    pub const PRETRAIN_WORLD: u64 = 11;
    /// The order of the pretraining sequences.
    pub const PRETRAIN_SHUFFLE: u64 = 12;
    /// A further rollout batch of an RL iteration (DAPO's dynamic sampling).
    pub const DYNAMIC_BATCH: u64 = 13;
    /// The training tasks of `control.calibrate`'s warm-ups.
    pub const CALIBRATE_TASKS: u64 = 14;
    /// A warm-up rollout of `control.calibrate` (iteration 1: ε, 2: η).
    pub const CALIBRATE_ROLLOUT: u64 = 15;
    /// Which demonstrations `rft.cut_think` cuts, and where.
    pub const CUT_THINK: u64 = 16;
    /// The expert's wording of a relabelled round's labels (`rft.relabel`).
    pub const RELABEL: u64 = 17;
}

/// Hooks the caller gives a stage: a log line, a progress bar for a phase, and whether to stop.
pub trait Reporter {
    /// One human-readable line.
    fn line(&mut self, text: &str);
    /// A phase of `total` units begins (`pretrain`, `sft`, `rejection` rollouts and `rft`
    /// fine-tuning of the rejection rounds, `eval`, RL's `rollout` and `update`, `checkpoint`).
    fn begin(&mut self, phase: &str, total: usize);
    /// `done` of the phase's units are done.
    fn advance(&mut self, done: usize);
    /// The phase ended.
    fn end(&mut self);
    /// A progress line from work that draws no bar of its own (`ablate`'s parallel runs, at
    /// most once a minute per run): not part of the log, so a terminal or a log of stderr
    /// shows it and stdout stays free of timings. Default: dropped.
    fn progress(&mut self, _text: &str) {}
    /// The signal number when the caller asked the run to stop (SIGINT, SIGTERM); the stages
    /// look at it between fine-tuning steps and rollout rounds and give up with
    /// [`Error::Stopped`]. `None` (the default): run on.
    fn stop_requested(&self) -> Option<i32> {
        None
    }
}

/// [`Error::Stopped`] when `rep` asks to stop.
pub fn check_stop(rep: &dyn Reporter) -> Result<()> {
    match rep.stop_requested() {
        Some(signal) => Err(Error::Stopped { signal }),
        None => Ok(()),
    }
}

/// A stage of the cold start, as its checkpoints name it: each is finished before the next
/// begins, and the policy (and the fine-tuning optimizer) after it is all the next needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Next-token pretraining ([`pretrain`]).
    Pretrain,
    /// SFT on the experts' demonstrations.
    Sft,
    /// The SFT, this many of its optimizer steps done (a checkpoint inside it every
    /// `rft.checkpoint_every` steps, and at a stop; [`ColdStartResume::sft`] holds the rest).
    SftPart(usize),
    /// Rejection round `n` (0-based).
    Rejection(usize),
}

/// `count` distinct training tasks drawn with `seed` (all of them, shuffled, when there are
/// fewer).
pub fn sample_tasks(pool: &EnvPool, count: usize, seed: u64) -> Vec<usize> {
    let all: Vec<usize> = (0..pool.num_tasks(Split::Train)).collect();
    sample_from(all, count, seed)
}

/// `count` distinct entries of `candidates` drawn with `seed` (all of them, shuffled, when
/// there are fewer); on `0..n` it draws what [`sample_tasks`] draws.
pub fn sample_from(mut candidates: Vec<usize>, count: usize, seed: u64) -> Vec<usize> {
    candidates.shuffle(&mut ChaCha12Rng::seed_from_u64(seed));
    candidates.truncate(count.min(candidates.len()));
    candidates
}

/// `count` distinct entries of `candidates` drawn with `seed`, evenly over their sources
/// (`source_of[task]`; a task past its end counts as having none): each source's candidates are
/// shuffled, then the sources, in an order drawn with the same seed, give one task each in turn
/// until `count` are drawn. No two sources' counts differ by more than one unless a source runs
/// out, and then the others fill the batch; all of `candidates`, when there are fewer.
pub fn sample_balanced(
    candidates: Vec<usize>,
    source_of: &[String],
    count: usize,
    seed: u64,
) -> Vec<usize> {
    let mut rng = ChaCha12Rng::seed_from_u64(seed);
    let mut by_source: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
    for t in candidates {
        let source = source_of.get(t).map_or("", String::as_str);
        by_source.entry(source).or_default().push(t);
    }
    let mut queues: Vec<Vec<usize>> = by_source.into_values().collect();
    for q in &mut queues {
        q.shuffle(&mut rng);
    }
    queues.shuffle(&mut rng);
    // Round r takes each source's r-th task, in the drawn source order.
    let rounds = queues.iter().map(Vec::len).max().unwrap_or(0);
    (0..rounds)
        .flat_map(|r| queues.iter().filter_map(move |q| q.get(r).copied()))
        .take(count)
        .collect()
}

/// The training tasks whose expert episodes are the cold start's demonstrations
/// (`rft.demo_tasks` of them, drawn over the whole shuffled split).
pub fn demo_tasks(pool: &EnvPool, cfg: &TrainConfig) -> Vec<usize> {
    sample_tasks(
        pool,
        cfg.rft.demo_tasks,
        derive_seed(cfg.seed, 0, purpose::DEMO_TASKS),
    )
}

/// The training tasks RL draws from (`train.rl_tasks`, then `train.rl_sources`), in index
/// order; an error when a named source has no training task or when they are fewer than one
/// iteration's `rollout.tasks_per_iteration`.
pub fn rl_task_pool(pool: &EnvPool, cfg: &TrainConfig) -> Result<Vec<usize>> {
    let n = pool.num_tasks(Split::Train);
    let mut tasks: Vec<usize> = match cfg.train.rl_tasks {
        RlTasks::All => (0..n).collect(),
        RlTasks::Undemonstrated => {
            let mut seen = vec![false; n];
            for t in demo_tasks(pool, cfg) {
                seen[t] = true;
            }
            (0..n).filter(|&t| !seen[t]).collect()
        }
    };
    let wanted = &cfg.train.rl_sources;
    if !wanted.is_empty() {
        let sources = pool.task_sources(Split::Train).ok_or_else(|| {
            Error::invalid(
                "train.rl_sources",
                format!(
                    "{wanted:?}: the {} environment's tasks have no source",
                    pool.kind().as_str()
                ),
            )
        })?;
        let mut present: Vec<&str> = sources.iter().map(String::as_str).collect();
        present.sort_unstable();
        present.dedup();
        if let Some(missing) = wanted.iter().find(|w| !present.contains(&w.as_str())) {
            return Err(Error::invalid(
                "train.rl_sources",
                format!(
                    "{missing:?} is not a source of the training split (it has: {})",
                    present.join(", ")
                ),
            ));
        }
        tasks.retain(|&t| wanted.contains(&sources[t]));
    }
    if tasks.len() < cfg.rollout.tasks_per_iteration {
        return Err(Error::invalid(
            "train.rl_tasks",
            format!(
                "{:?}{} leaves {} of the {n} training tasks (rft.demo_tasks = {}), fewer than \
                 rollout.tasks_per_iteration = {}",
                cfg.train.rl_tasks,
                if wanted.is_empty() {
                    String::new()
                } else {
                    format!(" with train.rl_sources = {wanted:?}")
                },
                tasks.len(),
                cfg.rft.demo_tasks,
                cfg.rollout.tasks_per_iteration
            ),
        ));
    }
    Ok(tasks)
}

/// The most episodes [`run_episodes`] decodes as one batch: a larger call runs in consecutive
/// parts of this many, each drawing from its episodes' own random streams, so it samples what
/// one batch would (`rollout::rollout_part_until`) while holding at most this many episodes'
/// caches and records in flight. 1,024 Search QA episodes of the default model peak at ~2 GB;
/// `eval --split train --tasks 4000` held 8.6 GB as one batch.
pub const MAX_BATCH_EPISODES: usize = 1024;

/// Runs episodes `tasks × group` on `split` with `policy` at `temperature`; groups are per task.
/// `phase` names the progress bar; a stop request ([`Reporter::stop_requested`]) ends it
/// between rounds with [`Error::Stopped`]. More than [`MAX_BATCH_EPISODES`] episodes run in
/// parts of that size.
#[allow(clippy::too_many_arguments)]
pub fn run_episodes(
    phase: &str,
    policy: &Qwen3,
    tokenizer: &Tokenizer,
    pool: &EnvPool,
    cfg: &TrainConfig,
    split: Split,
    tasks: &[usize],
    group: usize,
    temperature: f32,
    seed: u64,
    rep: &mut dyn Reporter,
) -> Result<(Vec<EpisodeRecord>, RolloutStats, f64)> {
    run_episodes_in_parts(
        phase,
        policy,
        tokenizer,
        pool,
        cfg,
        split,
        tasks,
        group,
        temperature,
        seed,
        MAX_BATCH_EPISODES,
        rep,
    )
}

/// [`run_episodes`] in parts of at most `part` episodes (≥ 1).
#[allow(clippy::too_many_arguments)]
fn run_episodes_in_parts(
    phase: &str,
    policy: &Qwen3,
    tokenizer: &Tokenizer,
    pool: &EnvPool,
    cfg: &TrainConfig,
    split: Split,
    tasks: &[usize],
    group: usize,
    temperature: f32,
    seed: u64,
    part: usize,
    rep: &mut dyn Reporter,
) -> Result<(Vec<EpisodeRecord>, RolloutStats, f64)> {
    let t0 = std::time::Instant::now();
    let rcfg = cfg.rollout_config(&tokenizer.control_tokens()?, temperature, seed)?;
    let specs: Vec<EpisodeSpec> = tasks
        .iter()
        .enumerate()
        .flat_map(|(g, &task)| (0..group).map(move |_| EpisodeSpec { task, group: g }))
        .collect();
    let n = specs.len();
    let mut records = Vec::with_capacity(n);
    let mut stats = RolloutStats::default();
    // One policy version for the whole call: its decode weights packed once.
    let packed = PackedQwen3::new(policy)?;
    rep.begin(phase, n);
    for (k, chunk) in specs.chunks(part.max(1)).enumerate() {
        let first = k * part.max(1);
        let mut envs: Vec<_> = chunk.iter().map(|_| pool.make(split)).collect();
        let mut stopped = None;
        let out = rollout_part_until(
            &packed,
            tokenizer,
            &mut envs,
            chunk,
            first,
            &rcfg,
            |_, live| {
                rep.advance(first + chunk.len() - live);
                stopped = rep.stop_requested();
                match stopped {
                    Some(_) => ControlFlow::Break(()),
                    None => ControlFlow::Continue(()),
                }
            },
        );
        match (out, stopped) {
            (Ok(Some((r, s))), _) => {
                records.extend(r);
                stats.absorb(&s);
            }
            (Ok(None), signal) => {
                rep.end();
                return Err(Error::Stopped {
                    signal: signal.unwrap_or_default(),
                });
            }
            (Err(e), _) => {
                rep.end();
                return Err(e);
            }
        }
        if n > part {
            crate::release_free_memory();
        }
    }
    rep.end();
    Ok((records, stats, t0.elapsed().as_secs_f64()))
}

/// Fine-tunes `policy` on `demos` for `epochs` epochs in batches (shuffled by `seed`); returns
/// the update's report (mean loss over steps in `loss`, the last step's in `last_loss`).
/// `phase` names the progress bar; a stop request ends it between steps with
/// [`Error::Stopped`] (the policy then holds a part of the fine-tuning: the caller drops it).
#[allow(clippy::too_many_arguments)]
pub fn fine_tune(
    phase: &str,
    policy: &Qwen3,
    opt: &mut AdamW,
    demos: &[Demo],
    epochs: usize,
    batch_size: usize,
    micro_batch_tokens: usize,
    prompt_weight: f64,
    seed: u64,
    rep: &mut dyn Reporter,
) -> Result<UpdateReport> {
    let plan = FineTunePlan {
        phase,
        demos,
        epochs,
        batch_size,
        micro_batch_tokens,
        prompt_weight,
        seed,
    };
    fine_tune_from(policy, opt, &plan, None, 0, &mut |_, _, _| Ok(()), rep)
}

/// What a fine-tuning runs on and how (the arguments of [`fine_tune`] but the model, the
/// optimizer and the reporter).
pub struct FineTunePlan<'a> {
    /// The progress bar's name (and the test hook's phase).
    pub phase: &'a str,
    /// The demonstrations.
    pub demos: &'a [Demo],
    /// Epochs over them.
    pub epochs: usize,
    /// Demonstrations per optimizer step.
    pub batch_size: usize,
    /// Padded tokens per forward/backward.
    pub micro_batch_tokens: usize,
    /// Weight of the prompt tokens' loss ([`crate::train::sft_step`]).
    pub prompt_weight: f64,
    /// The seed of each epoch's shuffle.
    pub seed: u64,
}

/// How far a fine-tuning has gone, as a checkpoint inside it keeps it (`rft.checkpoint_every`):
/// with the optimizer's state saved beside it, the rest of the fine-tuning runs as it would
/// have without the stop (each epoch's order comes from the seed and the epoch), and its report
/// sums the whole of it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FineTuneProgress {
    /// Optimizer steps done.
    pub steps: usize,
    /// Demonstrations trained on so far.
    pub rows: usize,
    /// Response tokens in the loss so far.
    pub tokens: usize,
    /// Tokens through forward and backward so far.
    pub forward_tokens: usize,
    /// The sum of the steps' losses, in step order.
    pub loss_sum: f64,
    /// The last step's loss.
    pub last_loss: f64,
    /// The last step's gradient norm before clipping.
    pub grad_norm: f64,
    /// The last step's learning rate.
    pub lr: f64,
    /// Seconds spent fine-tuning so far (the runs before this one, summed).
    pub seconds: f64,
}

/// Told at each checkpoint inside a fine-tuning: how far it has gone, the optimizer as it
/// stands, and the reporter (no phase is open then).
pub type OnProgress<'a> =
    dyn FnMut(&FineTuneProgress, &AdamW, &mut dyn Reporter) -> Result<()> + 'a;

/// [`fine_tune`] from `from` (a checkpoint inside it; `None`: from the start), telling
/// `on_progress` every `every` steps (0: never) — and, when `every` > 0, on a stop request
/// with steps done since it was last told, before it ends with [`Error::Stopped`], so a stop
/// loses no finished step. `on_progress` is told between two phases of `plan.phase` (the
/// progress bar ends before and begins again after, counting the steps left). Bit for bit, a
/// fine-tuning resumed from a checkpoint ends as one that ran through.
pub fn fine_tune_from(
    policy: &Qwen3,
    opt: &mut AdamW,
    plan: &FineTunePlan<'_>,
    from: Option<&FineTuneProgress>,
    every: usize,
    on_progress: &mut OnProgress<'_>,
    rep: &mut dyn Reporter,
) -> Result<UpdateReport> {
    let t0 = std::time::Instant::now();
    let mut report = UpdateReport::default();
    let demos = plan.demos;
    if demos.is_empty() || plan.epochs == 0 {
        return Ok(report);
    }
    let steps_per_epoch = demos.len().div_ceil(plan.batch_size);
    let total = steps_per_epoch * plan.epochs;
    let mut done = from.cloned().unwrap_or_default();
    if done.steps > total {
        return Err(Error::invalid(
            plan.phase,
            format!(
                "a checkpoint {} steps into a fine-tuning of {total} steps",
                done.steps
            ),
        ));
    }
    let before = done.seconds;
    let mut told = done.steps;
    rep.begin(plan.phase, total - done.steps);
    for epoch in 0..plan.epochs {
        if (epoch + 1) * steps_per_epoch <= done.steps {
            continue;
        }
        let mut order: Vec<usize> = (0..demos.len()).collect();
        order.shuffle(&mut ChaCha12Rng::seed_from_u64(derive_seed(
            plan.seed,
            epoch as u64,
            0,
        )));
        for (i, chunk) in order.chunks(plan.batch_size).enumerate() {
            if epoch * steps_per_epoch + i < done.steps {
                continue;
            }
            if let Some(signal) = rep.stop_requested() {
                rep.end();
                if every > 0 && done.steps > told {
                    done.seconds = before + t0.elapsed().as_secs_f64();
                    on_progress(&done, opt, rep)?;
                }
                return Err(Error::Stopped { signal });
            }
            let mut batch: Vec<Demo> = chunk.iter().map(|&i| demos[i].clone()).collect();
            let groups = plan_micro_batches(&mut batch, plan.micro_batch_tokens);
            let r = sft_step_in(policy, opt, &batch, &groups, plan.prompt_weight)?;
            done.steps += 1;
            done.loss_sum += r.loss;
            done.last_loss = r.loss;
            done.rows += batch.len();
            done.tokens += r.tokens;
            done.forward_tokens += batch.iter().map(Demo::tokens).sum::<usize>();
            done.grad_norm = r.step.grad_norm;
            done.lr = r.step.lr;
            rep.advance(done.steps - told);
            if every > 0 && done.steps.is_multiple_of(every) && done.steps < total {
                rep.end();
                done.seconds = before + t0.elapsed().as_secs_f64();
                on_progress(&done, opt, rep)?;
                told = done.steps;
                rep.begin(plan.phase, total - done.steps);
            }
        }
    }
    rep.end();
    report.rows = done.rows;
    report.tokens = done.tokens;
    report.forward_tokens = done.forward_tokens;
    report.steps = done.steps;
    report.grad_norm = done.grad_norm;
    report.lr = done.lr;
    report.loss = done.loss_sum / done.steps as f64;
    report.last_loss = done.last_loss;
    report.seconds = before + t0.elapsed().as_secs_f64();
    report.tokens_per_second = report.forward_tokens as f64 / report.seconds.max(1e-9);
    Ok(report)
}

/// The pretraining sequences: the passages of a generated encyclopedia about another world than
/// the environment's (seeded by `seed`), tokenized, joined with `<|endoftext|>` and cut into
/// sequences of `seq_len` tokens (the last partial one dropped). Each is a [`Demo`] whose
/// "prompt" is its first token, so the loss is on every next token.
pub fn pretrain_sequences(
    tokenizer: &Tokenizer,
    passages: usize,
    seq_len: usize,
    seed: u64,
) -> Result<Vec<Demo>> {
    let eot = tokenizer.control_tokens()?.endoftext;
    let mut stream = Vec::new();
    for text in encyclopedia(seed, passages) {
        stream.extend(tokenizer.encode(&text)?);
        stream.push(eot);
    }
    Ok(stream
        .chunks_exact(seq_len)
        .map(|c| Demo {
            prompt: c[..1].to_vec(),
            response: c[1..].to_vec(),
        })
        .collect())
}

/// Pretraining (`[pretrain]`): language modelling on [`pretrain_sequences`] with its own AdamW
/// (warm-up, cosine decay). `None` when it is switched off (`passages = 0`).
pub fn pretrain(
    policy: &Qwen3,
    tokenizer: &Tokenizer,
    cfg: &TrainConfig,
    rep: &mut dyn Reporter,
) -> Result<Option<MetricsLine>> {
    let p = &cfg.pretrain;
    if p.passages == 0 {
        return Ok(None);
    }
    let t0 = std::time::Instant::now();
    let seqs = pretrain_sequences(
        tokenizer,
        p.passages,
        p.seq_len,
        derive_seed(cfg.seed, 0, purpose::PRETRAIN_WORLD),
    )?;
    let steps = (seqs.len().div_ceil(p.batch_size) * p.epochs) as u64;
    rep.line(&format!(
        "pretraining: next-token prediction on a generated encyclopedia of {} passages (another \
         world than the tasks'), {} sequences of {} tokens, {} epoch(s), {steps} steps",
        p.passages,
        seqs.len(),
        p.seq_len,
        p.epochs
    ));
    let mut opt = AdamW::new(cfg.pretrain_optimizer_config(steps))?;
    let u = fine_tune(
        "pretrain",
        policy,
        &mut opt,
        &seqs,
        p.epochs,
        p.batch_size,
        cfg.optim.micro_batch_tokens,
        0.0,
        derive_seed(cfg.seed, 0, purpose::PRETRAIN_SHUFFLE),
        rep,
    )?;
    rep.line(&format!(
        "  {} steps, loss {:.3} (mean) → {:.3} (last), {:.0} tok/s, {:.1} s",
        u.steps, u.loss, u.last_loss, u.tokens_per_second, u.seconds
    ));
    Ok(Some(MetricsLine::cold_start(
        "pretrain",
        u,
        t0.elapsed().as_secs_f64(),
    )))
}

/// What [`cold_start`] tells its caller after each stage and at each checkpoint inside the
/// SFT: the stage, the fine-tuning optimizer as it stands, the SFT's step count, the stage's
/// metrics line (none inside the SFT), how far the SFT has gone (inside it), and the reporter to
/// work under.
pub type OnStage<'a> = dyn FnMut(
        Stage,
        &AdamW,
        u64,
        Option<MetricsLine>,
        Option<&FineTuneProgress>,
        &mut dyn Reporter,
    ) -> Result<()>
    + 'a;

/// Where a checkpoint left the cold start: the last stage it finished (or how far into the SFT
/// it had gone), the fine-tuning optimizer as it was then, and the SFT's step count.
pub struct ColdStartResume {
    /// The stage the checkpoint was written after ([`Stage::SftPart`]: inside the SFT).
    pub stage: Stage,
    /// The fine-tuning optimizer.
    pub opt: AdamW,
    /// The SFT's step count (its schedule's length).
    pub sft_steps: u64,
    /// Inside the SFT: how far it had gone.
    pub sft: Option<FineTuneProgress>,
}

/// The cold start after pretraining on `policy`: SFT on the demonstrations, then the
/// rejection rounds. `resume`: where a checkpoint left it (after the SFT, a round, or inside
/// the SFT) with the fine-tuning optimizer as it was then; what is left of it runs. After each
/// stage, and every `rft.checkpoint_every` SFT steps, `on_stage` is told (the caller logs the
/// stage's line and checkpoints), and a stop request is an [`Error::Stopped`] there or inside a
/// stage (inside the SFT, with `rft.checkpoint_every` > 0, after `on_stage` has kept the steps
/// done).
pub fn cold_start(
    policy: &Qwen3,
    tokenizer: &Tokenizer,
    pool: &EnvPool,
    cfg: &TrainConfig,
    resume: Option<ColdStartResume>,
    rep: &mut dyn Reporter,
    on_stage: &mut OnStage<'_>,
) -> Result<()> {
    let f = &cfg.rft;
    let (mut opt, sft_steps, first_round) = match resume {
        Some(ColdStartResume {
            stage: Stage::Sft,
            opt,
            sft_steps,
            ..
        }) => (opt, sft_steps, 0),
        Some(ColdStartResume {
            stage: Stage::Rejection(r),
            opt,
            sft_steps,
            ..
        }) => (opt, sft_steps, r + 1),
        Some(ColdStartResume {
            stage: Stage::SftPart(k),
            opt,
            sft_steps,
            sft: progress,
        }) => {
            let Some(progress) = progress.filter(|p| p.steps == k) else {
                return Err(Error::invalid(
                    "cold-start checkpoint",
                    format!("written {k} steps into the SFT without how far it had gone"),
                ));
            };
            let from = Some((opt, sft_steps, progress));
            let (opt, sft_steps) = sft(policy, tokenizer, pool, cfg, from, rep, on_stage)?;
            (opt, sft_steps, 0)
        }
        // After pretraining (or from the start): the SFT is still to do.
        Some(ColdStartResume {
            stage: Stage::Pretrain,
            ..
        })
        | None => {
            let (opt, sft_steps) = sft(policy, tokenizer, pool, cfg, None, rep, on_stage)?;
            (opt, sft_steps, 0)
        }
    };
    for round in first_round..f.rounds {
        check_stop(rep)?;
        let t0 = std::time::Instant::now();
        let r = round as u64;
        let tasks = sample_tasks(pool, f.tasks, derive_seed(cfg.seed, r, purpose::RFT_TASKS));
        let (records, stats, secs) = run_episodes(
            "rejection",
            policy,
            tokenizer,
            pool,
            cfg,
            Split::Train,
            &tasks,
            f.group_size,
            cfg.rollout.temperature,
            derive_seed(cfg.seed, r, purpose::RFT_ROLLOUT),
            rep,
        )?;
        let summary = RolloutSummary::of(&records, &stats, secs);
        let (demos, kept, agreement) = if f.relabel {
            let (demos, agreement) = relabelled_demos(
                pool,
                tokenizer,
                cfg,
                &records,
                derive_seed(cfg.seed, r, purpose::RELABEL),
            )?;
            rep.line(&format!(
                "cold start: relabelled round {}: {} episodes (success {:.3}), {} turns labelled \
                 by the expert; the policy's action was the expert's in {:.3} of them",
                round + 1,
                records.len(),
                summary.success_rate,
                demos.len(),
                agreement,
            ));
            (demos, records.len(), Some(agreement))
        } else {
            let kept: Vec<&EpisodeRecord> = records
                .iter()
                .filter(|e| e.score >= f.score_threshold)
                .collect();
            let demos: Vec<Demo> = kept
                .iter()
                .flat_map(|e| &e.turns)
                .filter(|t| !t.generation.response_ids.is_empty())
                .map(|t| Demo {
                    prompt: t.prompt_ids.clone(),
                    response: t.generation.response_ids.clone(),
                })
                .collect();
            rep.line(&format!(
                "cold start: rejection round {}: {} episodes, success {:.3}, kept {} (score ≥ {}) with {} turns{}",
                round + 1,
                records.len(),
                summary.success_rate,
                kept.len(),
                f.score_threshold,
                demos.len(),
                if kept.is_empty() {
                    " — no episode reached the threshold, so this round fine-tunes on nothing"
                } else {
                    ""
                }
            ));
            (demos, kept.len(), None)
        };
        let rejection = RejectionReport {
            threshold: f.score_threshold,
            episodes: records.len(),
            kept,
            turns: demos.len(),
            expert_agreement: agreement,
        };
        let u = fine_tune(
            "rft",
            policy,
            &mut opt,
            &demos,
            f.epochs,
            f.batch_size,
            cfg.optim.micro_batch_tokens,
            f.prompt_loss_weight,
            derive_seed(cfg.seed, r, purpose::RFT_SHUFFLE),
            rep,
        )?;
        let line = MetricsLine {
            rollout: Some(summary),
            rejection: Some(rejection),
            ..MetricsLine::cold_start("rft", u, t0.elapsed().as_secs_f64())
        };
        on_stage(
            Stage::Rejection(round),
            &opt,
            sft_steps,
            Some(line),
            None,
            rep,
        )?;
    }
    Ok(())
}

/// A relabelled round's data (`rft.relabel`, DAgger): every turn of `records` (the policy's
/// training episodes) as a demonstration whose prompt is the policy's own and whose response is
/// what the environment's expert answers at that state (its wording drawn from `seed` and the
/// task), with the end token as [`expert_demos_counted`] writes it and `rft.cut_think` applied
/// as to the demonstrations. Also the share of turns whose action was the expert's. Each
/// episode is replayed from its recorded responses; a replay that reaches another state than
/// the rollout recorded (a nondeterministic environment, or records of another split or
/// world) is an error, not a wrong label.
pub fn relabelled_demos(
    pool: &EnvPool,
    tokenizer: &Tokenizer,
    cfg: &TrainConfig,
    records: &[EpisodeRecord],
    seed: u64,
) -> Result<(Vec<Demo>, f64)> {
    let end = tokenizer.control_tokens()?.im_end;
    let mut demos = Vec::new();
    let mut agree = 0usize;
    for e in records {
        let responses: Vec<String> = e.turns.iter().map(|t| t.response.clone()).collect();
        let labels = pool.expert_labels(Split::Train, e.task, seed ^ e.task as u64, &responses);
        if labels.len() != e.turns.len() {
            return Err(Error::invalid(
                "rft.relabel",
                format!(
                    "replaying episode {} (training task {}) ended after {} of its {} turns: \
                     a nondeterministic environment, or a record of another task set",
                    e.episode,
                    e.task,
                    labels.len(),
                    e.turns.len()
                ),
            ));
        }
        for (t, l) in e.turns.iter().zip(labels) {
            if l.anchor != t.anchor {
                return Err(Error::invalid(
                    "rft.relabel",
                    format!(
                        "replaying episode {} (training task {}) reached another state at turn \
                         {} than its rollout: a nondeterministic environment, or a record of \
                         another task set",
                        e.episode, e.task, t.turn
                    ),
                ));
            }
            agree += usize::from(l.action == t.action);
            let mut response = tokenizer.encode(&l.response)?;
            response.push(end);
            demos.push(Demo {
                prompt: t.prompt_ids.clone(),
                response,
            });
        }
    }
    let agreement = agree as f64 / demos.len().max(1) as f64;
    cut_as_rollouts_do(
        &mut demos,
        tokenizer,
        cfg,
        derive_seed(seed, 0, purpose::CUT_THINK),
    )?;
    Ok((demos, agreement))
}

/// [`cut_thinking`] on a share `rft.cut_think` of `demos` (none when it is 0), with the forced
/// queue and L_min the rollouts use, so a cut demonstration is what a rollout holds after TTI
/// fires; returns how many were cut.
fn cut_as_rollouts_do(
    demos: &mut [Demo],
    tokenizer: &Tokenizer,
    cfg: &TrainConfig,
    seed: u64,
) -> Result<usize> {
    if cfg.rft.cut_think <= 0.0 || demos.is_empty() {
        return Ok(0);
    }
    let control = cfg
        .rollout_config(&tokenizer.control_tokens()?, 1.0, 0)?
        .control;
    cut_thinking(
        demos,
        tokenizer,
        &control.queue[..control.queue_len as usize],
        control.min_len,
        cfg.rft.cut_think,
        seed,
    )
}

/// The cold start's demonstrations, as [`cold_start_demos`] builds them.
#[derive(Clone, Debug)]
pub struct ColdStartDemos {
    /// The training tasks whose expert episodes they are.
    pub tasks: Vec<usize>,
    /// The demonstrations (one per expert turn).
    pub demos: Vec<Demo>,
    /// How many had their thinking cut where TTI could cut it (`rft.cut_think`).
    pub thinking_cut: usize,
    /// How many had their prompt cut to `rollout.max_prompt_tokens` (from the left).
    pub prompts_cut: usize,
}

/// The cold start's demonstrations: the experts' episodes on [`demo_tasks`] (none when
/// `rft.demo_epochs` is 0), with the thinking of a share `rft.cut_think` of them cut where TTI
/// could cut it ([`cut_thinking`]). Deterministic in the config, so RL's SFT anchor
/// (`algo.sft_coef`) rebuilds the very demonstrations the cold start was trained on.
pub fn cold_start_demos(
    pool: &EnvPool,
    tokenizer: &Tokenizer,
    cfg: &TrainConfig,
) -> Result<ColdStartDemos> {
    let f = &cfg.rft;
    let demo_tasks = demo_tasks(pool, cfg);
    let (mut demos, prompts_cut) = if f.demo_epochs > 0 {
        expert_demos_counted(
            pool,
            tokenizer,
            &demo_tasks,
            derive_seed(cfg.seed, 0, purpose::DEMOS),
            cfg.rollout.max_prompt_tokens,
        )?
    } else {
        (Vec::new(), 0)
    };
    let cut = cut_as_rollouts_do(
        &mut demos,
        tokenizer,
        cfg,
        derive_seed(cfg.seed, 0, purpose::CUT_THINK),
    )?;
    Ok(ColdStartDemos {
        tasks: demo_tasks,
        demos,
        thinking_cut: cut,
        prompts_cut,
    })
}

/// The SFT stage: plans it (the demonstrations and the optimizer, whose schedule spans its
/// steps), runs it when there are demonstrations — from the start, or from `from` (a
/// checkpoint inside it: its optimizer, the SFT's step count, how far it had gone) — with a
/// checkpoint every `rft.checkpoint_every` steps, and returns the optimizer the rejection
/// rounds continue with and the SFT's step count.
fn sft(
    policy: &Qwen3,
    tokenizer: &Tokenizer,
    pool: &EnvPool,
    cfg: &TrainConfig,
    from: Option<(AdamW, u64, FineTuneProgress)>,
    rep: &mut dyn Reporter,
    on_stage: &mut OnStage<'_>,
) -> Result<(AdamW, u64)> {
    let f = &cfg.rft;
    let ColdStartDemos {
        tasks: demo_tasks,
        demos,
        thinking_cut: cut,
        prompts_cut,
    } = cold_start_demos(pool, tokenizer, cfg)?;
    let sft_steps = (demos.len().div_ceil(f.batch_size) * f.demo_epochs) as u64;
    let (mut opt, progress) = match from {
        Some((opt, saved_steps, progress)) => {
            // The demonstrations are rebuilt from the config: a checkpoint of another plan
            // (edited by hand) would go on with another schedule.
            if saved_steps != sft_steps {
                return Err(Error::invalid(
                    "cold-start checkpoint",
                    format!(
                        "written inside an SFT of {saved_steps} steps; this config's SFT has \
                         {sft_steps}"
                    ),
                ));
            }
            (opt, Some(progress))
        }
        None => (AdamW::new(cfg.rft_optimizer_config(sft_steps))?, None),
    };
    if !demos.is_empty() {
        check_stop(rep)?;
        let t0 = std::time::Instant::now();
        rep.line(&format!(
            "cold start: SFT on {} expert turns from {} training tasks (of {}, drawn over the \
             whole split), {} epoch(s), {} steps, lr {:.1e} → {:.1e} (warm-up {}, cosine){}",
            demos.len(),
            demo_tasks.len(),
            pool.num_tasks(Split::Train),
            f.demo_epochs,
            sft_steps,
            f.lr,
            f.final_lr,
            f.warmup_steps.min(sft_steps),
            match &progress {
                Some(p) => format!(", going on after step {}", p.steps),
                None => String::new(),
            }
        ));
        if f.cut_think > 0.0 {
            rep.line(&format!(
                "  thinking cut where TTI could cut it in {cut} of them (rft.cut_think = {})",
                f.cut_think
            ));
        }
        if prompts_cut > 0 {
            rep.line(&format!(
                "  warning: {prompts_cut} of them have prompts longer than \
                 rollout.max_prompt_tokens = {}, cut from the left (the instruction is lost); \
                 raise it",
                cfg.rollout.max_prompt_tokens
            ));
        }
        let plan = FineTunePlan {
            phase: "sft",
            demos: &demos,
            epochs: f.demo_epochs,
            batch_size: f.batch_size,
            micro_batch_tokens: cfg.optim.micro_batch_tokens,
            prompt_weight: f.prompt_loss_weight,
            seed: derive_seed(cfg.seed, 0, purpose::DEMO_SHUFFLE),
        };
        // The stage's wall time so far (the runs before a resume): its seconds of fine-tuning.
        let before = progress.as_ref().map_or(0.0, |p| p.seconds);
        let u = fine_tune_from(
            policy,
            &mut opt,
            &plan,
            progress.as_ref(),
            f.checkpoint_every,
            &mut |p, opt, rep| {
                on_stage(Stage::SftPart(p.steps), opt, sft_steps, None, Some(p), rep)
            },
            rep,
        )?;
        rep.line(&format!(
            "  {} steps, loss {:.3} (mean) → {:.3} (last), {:.0} tok/s, {:.1} s",
            u.steps, u.loss, u.last_loss, u.tokens_per_second, u.seconds
        ));
        let line = MetricsLine::cold_start("rft", u, before + t0.elapsed().as_secs_f64());
        on_stage(Stage::Sft, &opt, sft_steps, Some(line), None, rep)?;
    }
    Ok((opt, sft_steps))
}

#[cfg(test)]
mod balanced_tests {
    use super::sample_balanced;
    use proptest::prelude::*;

    fn count_of(drawn: &[usize], source_of: &[String], source: &str) -> usize {
        drawn.iter().filter(|&&t| source_of[t] == source).count()
    }

    #[test]
    fn an_uneven_pool_gives_an_even_batch() {
        // 90 % of the pool is one source; the batch is 4 + 4.
        let source_of: Vec<String> = (0..100)
            .map(|t| if t < 90 { "nq" } else { "hotpotqa" }.to_string())
            .collect();
        for seed in 0..20 {
            let drawn = sample_balanced((0..100).collect(), &source_of, 8, seed);
            assert_eq!(drawn.len(), 8);
            assert_eq!(count_of(&drawn, &source_of, "nq"), 4, "seed {seed}");
            assert_eq!(count_of(&drawn, &source_of, "hotpotqa"), 4, "seed {seed}");
        }
        // A source that runs out leaves the rest to the others.
        let drawn = sample_balanced((0..100).collect(), &source_of, 30, 7);
        assert_eq!(count_of(&drawn, &source_of, "hotpotqa"), 10);
        assert_eq!(count_of(&drawn, &source_of, "nq"), 20);
        // Different seeds draw different tasks; the same seed the same ones.
        let a = sample_balanced((0..100).collect(), &source_of, 8, 1);
        assert_eq!(a, sample_balanced((0..100).collect(), &source_of, 8, 1));
        assert_ne!(a, sample_balanced((0..100).collect(), &source_of, 8, 2));
    }

    proptest! {
        #[test]
        fn draws_are_distinct_candidates_spread_within_one(
            sources in proptest::collection::vec(0u8..4, 1..120),
            keep in proptest::collection::vec(any::<bool>(), 120),
            count in 0usize..40,
            seed in any::<u64>(),
        ) {
            let source_of: Vec<String> = sources.iter().map(|s| format!("s{s}")).collect();
            let candidates: Vec<usize> =
                (0..source_of.len()).filter(|&t| keep[t]).collect();
            let drawn = sample_balanced(candidates.clone(), &source_of, count, seed);
            prop_assert_eq!(drawn.len(), count.min(candidates.len()));
            let mut sorted = drawn.clone();
            sorted.sort_unstable();
            sorted.dedup();
            prop_assert_eq!(sorted.len(), drawn.len());
            prop_assert!(drawn.iter().all(|t| candidates.contains(t)));
            // Sources not yet exhausted differ by at most one; an exhausted source gave all.
            let mut names: Vec<&String> = candidates.iter().map(|&t| &source_of[t]).collect();
            names.sort_unstable();
            names.dedup();
            let got: Vec<(usize, usize)> = names
                .iter()
                .map(|n| {
                    let have = candidates.iter().filter(|&&t| &source_of[t] == *n).count();
                    (count_of(&drawn, &source_of, n), have)
                })
                .collect();
            let open: Vec<usize> = got.iter().filter(|(g, h)| g < h).map(|(g, _)| *g).collect();
            if let (Some(lo), Some(hi)) = (open.iter().min(), open.iter().max()) {
                prop_assert!(hi - lo <= 1, "{:?}", got);
                // An exhausted source (all of its tasks drawn) got at most one more than an
                // open one: it was drawn from in the same rounds.
                prop_assert!(got.iter().all(|(g, _)| *g <= hi + 1), "{:?}", got);
            }
        }
    }
}
