//! The turn loop and the TDS loop of a batched multi-turn rollout (spec §3–§5).
//!
//! Many episodes advance together in *rounds*: each round generates one response for every
//! episode still running — its next turn, or another try of its current turn when TDS asked
//! for a resample — as one batch (prefill, then decode until every row ends). Per episode and
//! turn: build the verl-agent prompt with the memory window, chat-format it, generate, compute
//! Φ, let [`Tds::decide`] keep or discard the try; a kept try is projected and stepped in the
//! environment; discarded tries never reach it and are only counted.
//!
//! Think start: the verl-agent templates ask the model to open `<think>` itself, so the
//! assistant turn opens with nothing and each generation begins [`ThinkStart::Outside`]; TTI
//! starts watching when the model emits `<think>`.

use std::ops::ControlFlow;

use rand::SeedableRng;
use rand_chacha::ChaCha12Rng;
use t2po_control::{Config, Event, Profile, Sequence, Tds, ThinkStart};
use t2po_envs::{is_strict_format, Env, HistoryEntry, Observation};

use super::policy::{Policy, Prefilled};
use super::sampler::{Draw, Sampler, SamplingParams};
use super::trajectory::{DiscardedTry, EpisodeRecord, Generation, TtiFire, TtiReason, TurnRecord};
use crate::error::{Error, Result};
use crate::tokenizer::{ControlTokens, Tokenizer};

/// The control switches a rollout can run with (the paper's method, its ablations and the two
/// baselines that live in the rollout).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ControlSwitches {
    /// Token-level thinking intervention.
    pub tti: bool,
    /// Turn-level dynamical sampling.
    pub tds: bool,
    /// The paper's rules or the released code's.
    pub profile: ProfileName,
    /// Baseline: a hard thinking budget (only `L_max` cuts thinking; no convergence trigger).
    pub hard_budget: bool,
}

/// A serialisable [`Profile`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProfileName {
    /// The paper's rules.
    Paper,
    /// The authors' released code.
    Released,
}

/// A serialisable [`Trigger`](t2po_control::Trigger): TTI's convergence rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerName {
    /// The paper's window mean of |ΔM| below ε.
    WindowMean,
    /// The released code's patience counter.
    Patience,
    /// Peak-cut: the first local minimum of `M_t` (the uncertainty peak), the paper's argued
    /// ablation of the trigger rule.
    PeakCut,
}

impl From<TriggerName> for t2po_control::Trigger {
    fn from(t: TriggerName) -> Self {
        match t {
            TriggerName::WindowMean => t2po_control::Trigger::WindowMean,
            TriggerName::Patience => t2po_control::Trigger::Patience,
            TriggerName::PeakCut => t2po_control::Trigger::PeakCut,
        }
    }
}

impl From<ProfileName> for Profile {
    fn from(p: ProfileName) -> Self {
        match p {
            ProfileName::Paper => Profile::Paper,
            ProfileName::Released => Profile::Released,
        }
    }
}

impl Default for ControlSwitches {
    fn default() -> Self {
        Self {
            tti: true,
            tds: true,
            profile: ProfileName::Paper,
            hard_budget: false,
        }
    }
}

impl ControlSwitches {
    /// The kernel config for environments that answer in `<action>` (WebShop, ALFWorld): the
    /// profile's defaults, the token ids derived from the tokenizer, and the switches applied.
    pub fn control_config(&self, tokens: &ControlTokens) -> Result<Config> {
        self.control_config_for(tokens, &["action"])
    }

    /// The kernel config for an environment whose strict format ends in one of `tags`. The
    /// paper's queue is `</think>`, `\n`, `<action>` (spec §3); an environment that answers in
    /// another tag (Search QA: `<search>` or `<answer>`) gets `</think>`, `\n` only, so the
    /// model still chooses its block and the response can stay in the strict format. The
    /// released profile forces `</think>` alone.
    pub fn control_config_for(&self, tokens: &ControlTokens, tags: &[&str]) -> Result<Config> {
        let mut cfg = Config::for_profile(self.profile.into());
        cfg.think_open = tokens.think_open;
        cfg.think_close = tokens.think_close;
        let think_and_newline = 1 + tokens.newline.len();
        let queue: &[u32] = match self.profile {
            ProfileName::Released => &tokens.forced_queue[..1],
            ProfileName::Paper if tags.contains(&"action") => &tokens.forced_queue,
            ProfileName::Paper => &tokens.forced_queue[..think_and_newline],
        };
        if queue.len() > cfg.queue.len() {
            return Err(Error::invalid(
                "forced queue",
                format!(
                    "{} tokens exceed the kernel's capacity {}",
                    queue.len(),
                    cfg.queue.len()
                ),
            ));
        }
        cfg.queue = [0; t2po_control::QUEUE_CAPACITY];
        cfg.queue[..queue.len()].copy_from_slice(queue);
        cfg.queue_len = queue.len() as u32;
        cfg.tti_enabled = u32::from(self.tti || self.hard_budget);
        cfg.tds_enabled = u32::from(self.tds);
        if self.hard_budget {
            // A window mean is never below 0, so only the L_max budget fires.
            cfg.epsilon = 0.0;
            cfg.patience = u32::MAX;
        }
        cfg.validate().map_err(t2po_control::Error::from)?;
        Ok(cfg)
    }
}

/// Everything a rollout needs besides the model, the tokenizer and the environments.
#[derive(Clone, Debug)]
pub struct RolloutConfig {
    /// The kernel's config (see [`ControlSwitches::control_config`]).
    pub control: Config,
    /// Baseline (SimpleTIR): mark void turns (no valid action, or cut off mid-output).
    pub mark_void: bool,
    /// Temperature and top-p.
    pub sampling: SamplingParams,
    /// Response cap in tokens (spec §5: 300 / 500 / 500 for the paper's 4B model).
    pub max_response_tokens: usize,
    /// Prompt cap in tokens; longer prompts lose tokens from the left (counted per turn).
    pub max_prompt_tokens: usize,
    /// Memory window `P`.
    pub history_length: usize,
    /// Turn limit (15 / 50 / 4).
    pub max_turns: usize,
    /// Seed of every sampling draw.
    pub seed: u64,
}

/// One episode to run: which task, and which group (its GRPO/GiGPO group) it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpisodeSpec {
    /// Task index in the environment.
    pub task: usize,
    /// Group id.
    pub group: usize,
}

/// Counters a rollout reports as it goes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RolloutStats {
    /// Generations run (kept + discarded).
    pub generations: usize,
    /// Tokens decoded.
    pub decoded_tokens: usize,
    /// Prompt tokens prefilled (run through the model).
    pub prefill_tokens: usize,
    /// Prompt tokens of TDS resamples taken from their first try's prefill instead of run
    /// through the model again.
    pub prefill_tokens_reused: usize,
    /// Seconds in prefill.
    pub prefill_seconds: f64,
    /// Seconds in decode steps (model + control + sampling).
    pub decode_seconds: f64,
    /// Seconds in the control kernel and sampler alone.
    pub control_seconds: f64,
}

impl RolloutStats {
    /// Adds `other`'s counters to these (two rollouts' totals).
    pub fn absorb(&mut self, other: &RolloutStats) {
        self.generations += other.generations;
        self.decoded_tokens += other.decoded_tokens;
        self.prefill_tokens += other.prefill_tokens;
        self.prefill_tokens_reused += other.prefill_tokens_reused;
        self.prefill_seconds += other.prefill_seconds;
        self.decode_seconds += other.decode_seconds;
        self.control_seconds += other.control_seconds;
    }
}

struct Live<'a> {
    env: &'a mut (dyn Env + Send),
    tags: &'static [&'static str],
    history: Vec<HistoryEntry>,
    observation: Observation,
    tds: Tds,
    seq: Sequence,
    rng: ChaCha12Rng,
    prompt: Vec<u32>,
    /// The prompt's prefill, kept while a TDS resample of this turn may follow.
    prefilled: Option<Prefilled>,
    prompt_truncated: usize,
    tries: Vec<Generation>,
    gammas: Vec<f32>,
    last_phi: Option<f32>,
    record: EpisodeRecord,
    done: bool,
}

/// Runs `specs[i]` on `envs[i]` for every `i`, all batched together, and returns one record
/// per episode (in order). `on_round` is told the counters after each round.
pub fn rollout<P: Policy>(
    policy: &P,
    tokenizer: &Tokenizer,
    envs: &mut [Box<dyn Env + Send>],
    specs: &[EpisodeSpec],
    cfg: &RolloutConfig,
    mut on_round: impl FnMut(&RolloutStats, usize),
) -> Result<(Vec<EpisodeRecord>, RolloutStats)> {
    let done = rollout_until(policy, tokenizer, envs, specs, cfg, |stats, live| {
        on_round(stats, live);
        ControlFlow::Continue(())
    })?;
    Ok(done.expect("a rollout that is never told to stop finishes"))
}

/// [`rollout`] that `on_round` can end early: after a round it answers
/// [`ControlFlow::Break`] to give up the rollout (`Ok(None)`: the episodes are dropped
/// unfinished; the environments are then mid-episode and need a reset).
pub fn rollout_until<P: Policy>(
    policy: &P,
    tokenizer: &Tokenizer,
    envs: &mut [Box<dyn Env + Send>],
    specs: &[EpisodeSpec],
    cfg: &RolloutConfig,
    on_round: impl FnMut(&RolloutStats, usize) -> ControlFlow<()>,
) -> Result<Option<(Vec<EpisodeRecord>, RolloutStats)>> {
    rollout_part_until(policy, tokenizer, envs, specs, 0, cfg, on_round)
}

/// [`rollout_until`] for the episodes `first..first + specs.len()` of a larger rollout: each
/// episode draws from the random stream of its index in the whole and its record carries that
/// index, so a rollout run in consecutive parts (to bound the memory its batch holds) samples
/// what one call over all of it samples, wherever the policy's forward pass gives each row the
/// same logits whatever the batch around it (the CPU paths do: `tests/rollout.rs`).
pub fn rollout_part_until<P: Policy>(
    policy: &P,
    tokenizer: &Tokenizer,
    envs: &mut [Box<dyn Env + Send>],
    specs: &[EpisodeSpec],
    first: usize,
    cfg: &RolloutConfig,
    mut on_round: impl FnMut(&RolloutStats, usize) -> ControlFlow<()>,
) -> Result<Option<(Vec<EpisodeRecord>, RolloutStats)>> {
    if envs.len() != specs.len() {
        return Err(Error::invalid(
            "rollout",
            format!("{} environments for {} episodes", envs.len(), specs.len()),
        ));
    }
    if cfg.max_response_tokens == 0 || cfg.max_turns == 0 || cfg.max_prompt_tokens == 0 {
        return Err(Error::invalid(
            "rollout",
            "max_response_tokens, max_prompt_tokens and max_turns must be at least 1",
        ));
    }
    let controls = tokenizer.control_tokens()?;
    // Logit rows can be wider than the tokenizer (real Qwen3: 151936 rows, 151669 ids): ids it
    // cannot decode are masked with −∞ (spec §1 allows masked entries) so they are never drawn.
    let id_bound = tokenizer.id_bound();
    let mut sampler = Sampler::new(cfg.sampling)?;
    let greedy = cfg.sampling.temperature == 0.0;
    let mut stats = RolloutStats::default();
    let mut live: Vec<Live<'_>> = Vec::with_capacity(envs.len());
    for (j, (env, &spec)) in envs.iter_mut().zip(specs).enumerate() {
        let i = first + j;
        let first = env.reset(spec.task);
        let record = EpisodeRecord {
            episode: i,
            env: env.name().to_string(),
            task: spec.task,
            group: spec.group,
            task_text: env.task().to_string(),
            source: String::new(),
            turns: Vec::new(),
            success: false,
            score: 0.0,
            total_reward: 0.0,
            resamples: 0,
            void: false,
            reward_parts: Default::default(),
        };
        let tags = response_tags(env.name());
        live.push(Live {
            env: &mut **env,
            tags,
            history: Vec::new(),
            observation: first,
            tds: Tds::new(&cfg.control)?,
            seq: Sequence::new(&cfg.control)?,
            // Episode i's own stream; the constant keeps it apart from a weight init that
            // uses the same seed.
            rng: ChaCha12Rng::seed_from_u64(
                cfg.seed ^ 0xD1B5_4A32_D192_ED03 ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            ),
            prompt: Vec::new(),
            prefilled: None,
            prompt_truncated: 0,
            tries: Vec::new(),
            gammas: Vec::new(),
            last_phi: None,
            record,
            done: false,
        });
    }
    for l in &mut live {
        l.tds.begin_episode();
    }

    loop {
        let pending: Vec<usize> = (0..live.len()).filter(|&i| !live[i].done).collect();
        if pending.is_empty() {
            break;
        }
        for &i in &pending {
            let l = &mut live[i];
            if l.tries.is_empty() {
                let text = tokenizer.chat_prompt(&l.env.prompt(&l.history, cfg.history_length));
                let mut ids = tokenizer.encode(&text)?;
                l.prompt_truncated = ids.len().saturating_sub(cfg.max_prompt_tokens);
                if l.prompt_truncated > 0 {
                    ids.drain(..l.prompt_truncated);
                }
                l.prompt = ids;
                l.prefilled = None;
            }
        }
        let prompts: Vec<Vec<u32>> = pending.iter().map(|&i| live[i].prompt.clone()).collect();
        // A resample (a try after the first) starts from its turn's kept prefill. A first try
        // keeps its prefill when TDS may ask for another: TDS is on, a kept turn came before
        // (first turns are never resampled) and tries are left, and decoding is not greedy
        // (a greedy resample is its first try again; below).
        let reuse: Vec<Option<Prefilled>> =
            pending.iter().map(|&i| live[i].prefilled.clone()).collect();
        let may_resample = |l: &Live<'_>| {
            cfg.control.tds_enabled != 0
                && l.last_phi.is_some()
                && l.tries.len() < cfg.control.max_resamples as usize
        };
        let keep: Vec<bool> = pending
            .iter()
            .map(|&i| !greedy && live[i].prefilled.is_none() && may_resample(&live[i]))
            .collect();
        let mut rows: Vec<Row> = pending
            .iter()
            .map(|&i| {
                let mut seq = live[i].seq;
                seq.reset();
                seq.begin_generation(ThinkStart::Outside);
                Row {
                    seq,
                    rng: live[i].rng.clone(),
                    gen: Generation::default(),
                    finished: false,
                }
            })
            .collect();
        let kept = generate(
            policy,
            &mut sampler,
            &prompts,
            &reuse,
            &keep,
            &mut rows,
            cfg,
            &controls.eos,
            id_bound,
            &mut stats,
        )?;
        for ((&i, row), kept) in pending.iter().zip(rows).zip(kept) {
            let l = &mut live[i];
            if kept.is_some() {
                l.prefilled = kept;
            }
            l.seq = row.seq;
            l.rng = row.rng;
            let mut gen = row.gen;
            gen.phi = l.seq.turn_signal().ok();
            gen.think_tokens = l.seq.think_len();
            gen.tti = l.seq.fired().map(|(position, event)| TtiFire {
                position,
                reason: if event == Event::Budget {
                    TtiReason::Budget
                } else {
                    TtiReason::Converged
                },
            });
            // A generation without Φ (released profile: no position past `phi_skip`) carries no
            // evidence to resample on: TDS is shown the previous kept Φ (Γ = 0, which both rules
            // keep, and the next turn is compared with the same Φ as before). On a first turn
            // there is none; the floor stands in (first turns are never resampled).
            let phi = gen.phi.or(l.last_phi).unwrap_or(cfg.control.phi_floor);
            let mut verdict = l.tds.decide(phi)?;
            l.tries.push(gen);
            l.gammas.push(verdict.gamma);
            // Greedy decoding (T = 0, as held-out evaluation runs): a resample decodes the same
            // prompt from the same kept prefill by argmax, so it is this try again, token for
            // token and with the same Φ (on a forward pass that gives a row the same logits
            // whatever the batch around it, as the CPU paths do). TDS still decides every try
            // it would have seen, so tries, Γs and resample counts are the same; only the
            // decoding is not repeated (`tests/rollout.rs` holds it equal to decoding them).
            while greedy && verdict.resample != 0 {
                l.record.resamples += 1;
                verdict = l.tds.decide(phi)?;
                let again = l.tries[l.tries.len() - 1].clone();
                l.tries.push(again);
                l.gammas.push(verdict.gamma);
            }
            if verdict.resample != 0 {
                l.record.resamples += 1;
                continue;
            }
            l.tds.commit()?;
            l.prefilled = None;
            l.last_phi = Some(verdict.kept_phi);
            finish_turn(l, verdict.kept_try as usize, tokenizer, &controls, cfg)?;
        }
        if on_round(&stats, live.iter().filter(|l| !l.done).count()).is_break() {
            return Ok(None);
        }
    }
    Ok(Some((live.into_iter().map(|l| l.record).collect(), stats)))
}

/// The tags of the strict response format for an environment (by its name).
fn response_tags(name: &str) -> &'static [&'static str] {
    match name.parse::<super::pool::EnvKind>() {
        Ok(kind) => kind.response_tags(),
        Err(_) => &["action"],
    }
}

/// Steps the environment with the kept try and records the turn.
fn finish_turn(
    l: &mut Live<'_>,
    kept: usize,
    tokenizer: &Tokenizer,
    controls: &ControlTokens,
    cfg: &RolloutConfig,
) -> Result<()> {
    let tries = std::mem::take(&mut l.tries);
    let gammas = std::mem::take(&mut l.gammas);
    let tds_tries = tries.len() as u32;
    let mut discarded = Vec::new();
    let mut kept_gen = None;
    for (k, (g, gamma)) in tries.into_iter().zip(&gammas).enumerate() {
        if k == kept {
            kept_gen = Some(g);
        } else {
            discarded.push(DiscardedTry {
                phi: g.phi,
                gamma: *gamma,
                tokens: g.response_ids.len(),
            });
        }
    }
    let gen =
        kept_gen.ok_or_else(|| Error::invalid("tds", format!("kept try {kept} of {tds_tries}")))?;
    let text_ids: &[u32] = match gen.response_ids.last() {
        Some(t) if controls.eos.contains(t) => &gen.response_ids[..gen.response_ids.len() - 1],
        _ => &gen.response_ids,
    };
    let response = tokenizer.decode(text_ids)?;
    let anchor = l.env.anchor().to_string();
    let projected = l.env.project(&response);
    // Spec §5: only the strict format is valid; a lenient parse still acts but is penalised.
    let format_valid = projected.valid && is_strict_format(&response, l.tags);
    let t = l.env.step(&projected);
    let turn = l.record.turns.len();
    let void = cfg.mark_void && (!projected.valid || gen.truncated);
    l.record.total_reward += t.reward;
    l.record.success = t.info.won;
    l.record.score = t.info.score;
    if l.record.source != t.info.source {
        l.record.source.clone_from(&t.info.source);
    }
    l.record.void |= void;
    if !t.info.parts.is_empty() {
        l.record.reward_parts = t
            .info
            .parts
            .iter()
            .map(|&(k, v)| (k.to_string(), v))
            .collect();
    }
    l.history.push(
        l.env
            .history_entry(&l.observation, &projected, &t.observation),
    );
    l.observation = t.observation;
    let done = t.done || turn + 1 >= cfg.max_turns;
    l.record.turns.push(TurnRecord {
        turn,
        prompt_ids: std::mem::take(&mut l.prompt),
        prompt_truncated: l.prompt_truncated,
        response_mask: vec![1; gen.response_ids.len()],
        generation: gen,
        response,
        gamma: gammas[kept],
        tds_tries,
        discarded,
        action: projected.action,
        format_valid,
        void,
        reward: t.reward,
        done,
        won: t.info.won,
        score: t.info.score,
        anchor,
    });
    l.done = done;
    Ok(())
}

struct Row {
    seq: Sequence,
    rng: ChaCha12Rng,
    gen: Generation,
    finished: bool,
}

/// Generates one response per row: prefill all prompts (those with `reuse` from their kept
/// prefill), then decode until every row emitted an end-of-turn token or reached the cap;
/// finished rows leave the batch (and the cache). Returns the prefills kept for `keep`.
#[allow(clippy::too_many_arguments)]
fn generate<P: Policy>(
    policy: &P,
    sampler: &mut Sampler,
    prompts: &[Vec<u32>],
    reuse: &[Option<Prefilled>],
    keep: &[bool],
    rows: &mut [Row],
    cfg: &RolloutConfig,
    eos: &[u32],
    id_bound: usize,
    stats: &mut RolloutStats,
) -> Result<Vec<Option<Prefilled>>> {
    let vocab = policy.vocab_size();
    let mask_tail = |logits: &mut [f32]| {
        if id_bound < vocab {
            for row in logits.chunks_exact_mut(vocab) {
                row[id_bound..].fill(f32::NEG_INFINITY);
            }
        }
    };
    let mut logits = Vec::new();
    let t0 = std::time::Instant::now();
    let (mut cache, kept) =
        policy.prefill_reusing(prompts, cfg.max_response_tokens, reuse, keep, &mut logits)?;
    mask_tail(&mut logits);
    stats.prefill_seconds += t0.elapsed().as_secs_f64();
    for (p, r) in prompts.iter().zip(reuse) {
        if r.is_some() {
            stats.prefill_tokens_reused += p.len();
        } else {
            stats.prefill_tokens += p.len();
        }
    }
    stats.generations += rows.len();

    let t1 = std::time::Instant::now();
    // The loop runs on a pool thread: the parallel sections of each step (the model's row
    // split, the kernel's row chunks) then go through that worker's own deque; joined from
    // outside the pool, each would go through the global injector, which allocates a block
    // every 63 jobs (`tests/decode_alloc.rs` counts zero allocations per step this way).
    rayon::scope(|_| {
        decode_loop(
            policy,
            sampler,
            rows,
            cfg,
            eos,
            stats,
            &mut cache,
            &mut logits,
            &mask_tail,
        )
    })?;
    stats.decode_seconds += t1.elapsed().as_secs_f64();
    debug_assert!(rows.iter().all(|r| r.finished));
    Ok(kept)
}

/// The decode steps of [`generate`] after the prefill.
#[allow(clippy::too_many_arguments)]
fn decode_loop<P: Policy>(
    policy: &P,
    sampler: &mut Sampler,
    rows: &mut [Row],
    cfg: &RolloutConfig,
    eos: &[u32],
    stats: &mut RolloutStats,
    cache: &mut P::Cache,
    logits: &mut Vec<f32>,
    mask_tail: &(dyn Fn(&mut [f32]) + Sync),
) -> Result<()> {
    let vocab = policy.vocab_size();
    // Room for a whole response up front: recording a token never grows a vector.
    for r in rows.iter_mut() {
        let g = &mut r.gen;
        let n = cfg.max_response_tokens;
        g.response_ids.reserve(n);
        g.log_probs.reserve(n);
        g.forced.reserve(n);
        g.signal.reserve(n);
    }
    let mut active: Vec<usize> = (0..rows.len()).collect();
    let mut seqs: Vec<Sequence> = rows.iter().map(|r| r.seq).collect();
    let mut rngs: Vec<ChaCha12Rng> = rows.iter().map(|r| r.rng.clone()).collect();
    let mut draws: Vec<Draw> = Vec::with_capacity(rows.len());
    let mut next: Vec<u32> = Vec::with_capacity(rows.len());
    let mut keep: Vec<usize> = Vec::with_capacity(rows.len());
    loop {
        let tc = std::time::Instant::now();
        sampler.step(&mut seqs, &mut rngs, logits, vocab, &mut draws)?;
        stats.control_seconds += tc.elapsed().as_secs_f64();
        stats.decoded_tokens += active.len();
        keep.clear();
        next.clear();
        for (k, d) in draws.iter().enumerate() {
            let row = &mut rows[active[k]];
            let g = &mut row.gen;
            g.response_ids.push(d.token);
            g.log_probs.push(d.log_prob);
            g.forced.push(d.forced);
            g.signal.push(d.signal);
            if let Some(w) = d.window_mean {
                g.min_window_mean = Some(g.min_window_mean.map_or(w, |m| m.min(w)));
            }
            let end = eos.contains(&d.token);
            if end || g.response_ids.len() >= cfg.max_response_tokens {
                g.truncated = !end;
                row.finished = true;
                row.seq = seqs[k];
                row.rng = rngs[k].clone();
            } else {
                keep.push(k);
                next.push(d.token);
            }
        }
        if keep.is_empty() {
            break;
        }
        if keep.len() < active.len() {
            policy.retain(cache, &keep)?;
            // `keep` is increasing, so compacting in place never overwrites a kept entry.
            for (i, &k) in keep.iter().enumerate() {
                active[i] = active[k];
                seqs[i] = seqs[k];
                rngs.swap(i, k);
            }
            active.truncate(keep.len());
            seqs.truncate(keep.len());
            rngs.truncate(keep.len());
        }
        policy.decode(cache, &next, logits)?;
        mask_tail(logits);
    }
    Ok(())
}
