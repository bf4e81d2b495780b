//! TTI — token-level thinking intervention: the per-sequence controller (spec §3).
//!
//! A [`Sequence`] is told every token (`accept`) and shown every logits row or its statistics
//! (`observe`). While inside `<think>` and after `L_min` positions, it fires once when `M_t`
//! stops moving (window mean of `|ΔM|` over `N + 1` deltas below `ε`, or the released
//! patience counter), and always when the think content reaches `L_max`; firing loads the
//! forced queue, whose tokens are then handed out one per step, starting with the next step.
//! All state is fixed-size plain data (any bit pattern is a valid value), so C can own it.

use crate::config::{Config, Trigger, WINDOW_CAPACITY};
use crate::error::{Error, Status};
use crate::signal::SignalState;
use crate::stats::{mass_chunks, token_stats_wide, Logit, TokenStats};
use crate::tds::TurnAccumulator;

/// Where a generation starts with respect to `<think>` (`t2po_think_start`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThinkStart {
    /// The prompt's think state as the sequence holds it ([`Sequence::prompt_inside_think`]):
    /// what the prompt tokens given to [`Sequence::accept`] since the last reset left, or, for
    /// another try of a generation, the state that generation started from.
    FromPrompt = 0,
    /// Inside a think block (the prompt ends with `<think>`).
    Inside = 1,
    /// Outside a think block.
    Outside = 2,
}

impl ThinkStart {
    /// Reads the integer form used by C; unknown values are an error.
    pub fn from_u32(value: u32) -> Result<Self, Error> {
        match value {
            0 => Ok(Self::FromPrompt),
            1 => Ok(Self::Inside),
            2 => Ok(Self::Outside),
            _ => Err(Error::Config(crate::error::ConfigError::UnknownKind {
                field: "think_start",
                value,
            })),
        }
    }
}

/// Why TTI fired at a step (`t2po_event`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Nothing happened.
    None = 0,
    /// The convergence rule fired (window mean below ε, or patience reached).
    Converged = 1,
    /// The think budget `L_max` was reached.
    Budget = 2,
    /// Reported by an accept, not an observe: the model closed think itself on the step TTI
    /// fired, so its own close stands and the forced queue was dropped.
    ModelClosed = 3,
}

/// The outcome of one observed decode step (`t2po_step`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    /// The token the engine must emit at this step, or −1 to sample freely.
    pub forced_token: i32,
    /// An [`Event`] value: whether TTI fired at this step (its queue starts at the next step).
    pub event: u32,
    /// `M_t` of this position (0 on forced steps, which have no signal).
    pub signal: f32,
    /// `t`: observed (non-forced) positions of this generation so far.
    pub position: u32,
    /// A [`Status`] value; non-zero only for failed rows of a batched observe.
    pub status: u32,
}

impl Default for Step {
    fn default() -> Self {
        Self {
            forced_token: -1,
            event: Event::None as u32,
            signal: 0.0,
            position: 0,
            status: Status::Ok as u32,
        }
    }
}

impl Step {
    /// The forced token of this step, if any.
    pub fn forced(&self) -> Option<u32> {
        u32::try_from(self.forced_token).ok()
    }

    /// Applies the decision to a logits row: with a forced token, every entry becomes `−inf`
    /// except the forced one, which becomes 0. Returns whether the row changed.
    /// A `forced_token` below −1 is [`Error::BadForcedToken`].
    pub fn apply<T: Logit>(&self, row: &mut [T]) -> Result<bool, Error> {
        if self.forced_token < -1 {
            return Err(Error::BadForcedToken(self.forced_token));
        }
        let Some(token) = self.forced() else {
            return Ok(false);
        };
        let index = token as usize;
        if index >= row.len() {
            return Err(Error::TokenOutOfRow {
                token,
                len: row.len(),
            });
        }
        row.fill(T::NEG_INF);
        row[index] = T::ZERO;
        Ok(true)
    }
}

const SEQ_MAGIC: u32 = 0x7270_0001;

// Flag bits of `Sequence::flags`, exported to C (`T2PO_SEQ_*` in t2po.h) because the CUDA
// mirror of the state machine (t2po-cuda/kernels) reads and writes the same field.
/// `t2po_seq.flags`: inside a think block now.
pub const SEQ_INSIDE: u32 = 1 << 0;
/// `t2po_seq.flags`: the prompt ends inside think — as the prompt tokens left it, and from
/// `begin_generation` on as its `think_start` resolved it.
pub const SEQ_PROMPT_INSIDE: u32 = 1 << 1;
/// `t2po_seq.flags`: between `begin_generation` and `reset`.
pub const SEQ_GENERATING: u32 = 1 << 2;
/// `t2po_seq.flags`: observe done, accept of the step's token not yet.
pub const SEQ_AWAITING_ACCEPT: u32 = 1 << 3;
/// `t2po_seq.flags`: this step's token is forced.
pub const SEQ_FORCED_STEP: u32 = 1 << 4;
/// `t2po_seq.flags`: TTI fired in this generation.
pub const SEQ_FIRED: u32 = 1 << 5;
/// `t2po_seq.flags`: the forced queue is active.
pub const SEQ_QUEUE: u32 = 1 << 6;
/// `t2po_seq.flags`: the think block of this generation closed.
pub const SEQ_DONE: u32 = 1 << 7;
/// `t2po_seq.flags`: `M_t` fell at an observed step and has not risen since (the trough that
/// [`Trigger::PeakCut`] waits for).
pub const SEQ_FALLING: u32 = 1 << 8;

/// The controller of one sequence (`t2po_seq`): signal ranges, TTI state, forced queue and the
/// turn accumulator for Φ. Caller-allocated, fixed-size, never allocates.
///
/// Per generation: [`reset`](Self::reset) → [`accept`](Self::accept) prompt tokens (optional)
/// → [`begin_generation`](Self::begin_generation) → for each step
/// [`observe_row`](Self::observe_row) (or [`observe`](Self::observe) with precomputed
/// statistics) then [`accept`](Self::accept) of the emitted token → [`turn_signal`](Self::turn_signal).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sequence {
    magic: u32,
    flags: u32,
    t: u32,
    generated: u32,
    think_len: u32,
    queue_pos: u32,
    fire_position: u32,
    fire_event: u32,
    calm: u32,
    deltas_seen: u32,
    head: u32,
    prev_m: f32,
    deltas: [f32; WINDOW_CAPACITY],
    signal: SignalState,
    turn: TurnAccumulator,
    config: Config,
}

impl Sequence {
    /// A sequence in the prompt phase, outside think; the config is validated and copied.
    pub fn new(cfg: &Config) -> Result<Self, Error> {
        cfg.validate()?;
        Ok(Self::fresh(*cfg))
    }

    /// The prompt-phase state for an already validated config.
    const fn fresh(config: Config) -> Self {
        Self {
            magic: SEQ_MAGIC,
            flags: 0,
            t: 0,
            generated: 0,
            think_len: 0,
            queue_pos: 0,
            fire_position: 0,
            fire_event: 0,
            calm: 0,
            deltas_seen: 0,
            head: 0,
            prev_m: 0.0,
            deltas: [0.0; WINDOW_CAPACITY],
            signal: SignalState::new(),
            turn: TurnAccumulator {
                mantissa: 0.0,
                exponent: 0,
                sum: 0.0,
                count: 0,
                count_after_skip: 0,
            },
            config,
        }
    }

    /// Whether this value was made by [`Sequence::new`] (C callers may hand in any memory).
    pub fn is_initialized(&self) -> bool {
        self.magic == SEQ_MAGIC
    }

    /// The configuration this sequence runs with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Back to the prompt phase, outside think, all generation state cleared.
    pub fn reset(&mut self) {
        *self = Self::fresh(self.config);
    }

    /// Starts a generation (a turn, or another try of it). Clears the signal ranges, the window,
    /// the one-time flag, the queue and Φ; keeps the prompt's think state.
    pub fn begin_generation(&mut self, start: ThinkStart) {
        let prompt_inside = match start {
            ThinkStart::FromPrompt => self.flags & SEQ_PROMPT_INSIDE,
            ThinkStart::Inside => SEQ_PROMPT_INSIDE,
            ThinkStart::Outside => 0,
        };
        self.reset();
        self.flags =
            SEQ_GENERATING | prompt_inside | if prompt_inside != 0 { SEQ_INSIDE } else { 0 };
    }

    /// Shows the step's logits row (raw, before temperature or penalties). On a forced step the
    /// row is not read. On error the sequence is unchanged.
    pub fn observe_row<T: Logit>(&mut self, row: &[T]) -> Result<Step, Error> {
        self.observe_row_stats(row).map(|(step, _)| step)
    }

    /// [`observe_row`](Self::observe_row), also handing back the row's [`TokenStats`] that the
    /// step computed: `None` on a forced step, whose row is not read. A sampler that draws from
    /// the same raw row can take the row's max and log-sum-exp from them instead of passing
    /// over the row again (`log p(i) = x_i − log_sum_exp` at temperature 1; the max at any
    /// temperature). The step is the one [`observe_row`](Self::observe_row) returns, bit for bit.
    pub fn observe_row_stats<T: Logit>(
        &mut self,
        row: &[T],
    ) -> Result<(Step, Option<TokenStats>), Error> {
        self.observe_with(row, None)
    }

    /// [`observe_row_stats`](Self::observe_row_stats), also writing the row's per-chunk
    /// probability masses to `mass` as [`token_stats_mass`](crate::token_stats_mass) does
    /// (`mass.len()` = [`mass_chunks`]`(row.len())`; untouched on a forced step): a sampler at
    /// temperature 1 draws from them and the statistics' max without another pass over the
    /// row. The step is the one [`observe_row`](Self::observe_row) returns, bit for bit.
    pub fn observe_row_mass<T: Logit>(
        &mut self,
        row: &[T],
        mass: &mut [f64],
    ) -> Result<(Step, Option<TokenStats>), Error> {
        self.observe_with(row, Some(mass))
    }

    /// The step: the forced queue's, or the row's statistics (and masses when asked), then the
    /// signal and the rule.
    #[inline]
    fn observe_with<T: Logit>(
        &mut self,
        row: &[T],
        mass: Option<&mut [f64]>,
    ) -> Result<(Step, Option<TokenStats>), Error> {
        if let Some(step) = self.forced_step()? {
            return Ok((step, None));
        }
        let w = token_stats_wide(row, self.config.top_j, mass)?;
        let step = self.observe_unforced(w.entropy, w.confidence, w.stats.vocab);
        Ok((step, Some(w.stats)))
    }

    /// Like [`observe_row`](Self::observe_row) with statistics computed elsewhere (a GPU kernel).
    /// Statistics with a non-finite entropy or confidence, or `vocab == 0`, are an error.
    #[inline]
    pub fn observe(&mut self, stats: &TokenStats) -> Result<Step, Error> {
        if let Some(step) = self.forced_step()? {
            return Ok(step);
        }
        if !(stats.entropy.is_finite() && stats.confidence.is_finite() && stats.vocab > 0) {
            // The forced-step path above changed nothing when it returned None.
            return Err(Error::BadStats);
        }
        Ok(self.observe_unforced(stats.entropy as f64, stats.confidence as f64, stats.vocab))
    }

    /// Checks the call order; on a step owned by the forced queue returns that step.
    #[inline]
    fn forced_step(&mut self) -> Result<Option<Step>, Error> {
        if self.flags & SEQ_GENERATING == 0 {
            return Err(Error::Order("observe before begin_generation"));
        }
        if self.flags & SEQ_AWAITING_ACCEPT != 0 {
            return Err(Error::Order(
                "observe twice without accept of the step's token",
            ));
        }
        if self.flags & SEQ_QUEUE == 0 {
            return Ok(None);
        }
        self.flags |= SEQ_AWAITING_ACCEPT | SEQ_FORCED_STEP;
        Ok(Some(Step {
            forced_token: self.config.queue[self.queue_pos as usize % self.config.queue.len()]
                as i32,
            position: self.t,
            ..Step::default()
        }))
    }

    #[inline(always)]
    fn observe_unforced(&mut self, entropy: f64, confidence: f64, vocab: u32) -> Step {
        let cfg = &self.config;
        let m = self.signal.update_wide(cfg, entropy, confidence, vocab);
        self.t = self.t.saturating_add(1);
        // A local minimum of `M` one step back: it fell (maybe then stayed level) and now rises.
        let mut trough = false;
        if self.t >= 2 {
            trough = self.flags & SEQ_FALLING != 0 && m > self.prev_m;
            if m < self.prev_m {
                self.flags |= SEQ_FALLING;
            } else if m > self.prev_m {
                self.flags &= !SEQ_FALLING;
            }
            let delta = (m - self.prev_m).abs();
            self.deltas[self.head as usize % WINDOW_CAPACITY] = delta;
            self.head = (self.head + 1) % WINDOW_CAPACITY as u32;
            self.deltas_seen = self.deltas_seen.saturating_add(1);
            self.calm = if delta > cfg.patience_tol {
                0
            } else {
                self.calm.saturating_add(1)
            };
        }
        self.prev_m = m;
        self.turn.push(cfg, self.t, m);

        let mut event = Event::None;
        let armed = SEQ_INSIDE;
        let blocked = SEQ_FIRED | SEQ_DONE;
        if cfg.tti_enabled != 0 && self.flags & armed != 0 && self.flags & blocked == 0 {
            let converged = self.t >= cfg.min_len
                && if cfg.trigger == Trigger::Patience as u32 {
                    self.calm >= cfg.patience
                } else if cfg.trigger == Trigger::PeakCut as u32 {
                    trough
                } else {
                    self.window_mean().is_some_and(|mean| mean < cfg.epsilon)
                };
            if converged {
                event = Event::Converged;
            } else if self.think_len.saturating_add(1) >= cfg.max_think {
                event = Event::Budget;
            }
            if event != Event::None {
                self.flags |= SEQ_FIRED | SEQ_QUEUE;
                self.queue_pos = 0;
                self.fire_position = self.t;
                self.fire_event = event as u32;
            }
        }
        self.flags |= SEQ_AWAITING_ACCEPT;
        Step {
            forced_token: -1,
            event: event as u32,
            signal: m,
            position: self.t,
            status: Status::Ok as u32,
        }
    }

    /// Mean of the `N + 1` most recent deltas, summed newest first; `None` until that many exist.
    pub fn window_mean(&self) -> Option<f32> {
        let n = self.config.window as usize + 1;
        if (self.deltas_seen as usize) < n || n > WINDOW_CAPACITY {
            return None;
        }
        let mut sum = 0f32;
        for k in 0..n {
            let idx = (self.head as usize + WINDOW_CAPACITY - 1 - k) % WINDOW_CAPACITY;
            sum += self.deltas[idx];
        }
        Some(sum / n as f32)
    }

    /// Tells the sequence the token emitted at this step (or a prompt token, before
    /// [`begin_generation`](Self::begin_generation)). A token other than the pending forced one
    /// is [`Error::ForcedMismatch`] and leaves the sequence unchanged.
    #[inline]
    pub fn accept(&mut self, token: u32) -> Result<(), Error> {
        let (open, close) = (self.config.think_open, self.config.think_close);
        if self.flags & SEQ_GENERATING == 0 {
            if token == open {
                self.flags |= SEQ_INSIDE | SEQ_PROMPT_INSIDE;
            } else if token == close {
                self.flags &= !(SEQ_INSIDE | SEQ_PROMPT_INSIDE);
            }
            return Ok(());
        }
        if self.flags & SEQ_AWAITING_ACCEPT == 0 {
            return Err(Error::Order("accept without observe of the step's row"));
        }
        let forced = self.flags & SEQ_FORCED_STEP != 0;
        if forced {
            let expected = self.config.queue[self.queue_pos as usize % self.config.queue.len()];
            if token != expected {
                return Err(Error::ForcedMismatch {
                    expected,
                    got: token,
                });
            }
            self.queue_pos += 1;
            if self.queue_pos >= self.config.queue_len {
                self.flags &= !SEQ_QUEUE;
            }
        }
        self.flags &= !(SEQ_AWAITING_ACCEPT | SEQ_FORCED_STEP);
        self.generated = self.generated.saturating_add(1);
        let inside = self.flags & SEQ_INSIDE != 0;
        if token == open && !inside && self.flags & SEQ_DONE == 0 {
            self.flags |= SEQ_INSIDE;
        } else if token == close && inside {
            self.flags &= !SEQ_INSIDE;
            self.flags |= SEQ_DONE;
            if !forced && self.queue_pos == 0 {
                // The model closed think itself on the step TTI fired: its own close stands.
                self.flags &= !SEQ_QUEUE;
            }
        } else if inside {
            self.think_len = self.think_len.saturating_add(1);
        }
        Ok(())
    }

    /// [`accept`](Self::accept) of every prompt token, in order, before
    /// [`begin_generation`](Self::begin_generation); during a generation it is
    /// [`Error::Order`] and changes nothing.
    pub fn accept_prompt(&mut self, tokens: &[u32]) -> Result<(), Error> {
        if self.flags & SEQ_GENERATING != 0 {
            return Err(Error::Order(
                "accept_prompt during a generation: reset first",
            ));
        }
        for &token in tokens {
            self.accept(token)?;
        }
        Ok(())
    }

    /// Whether the prompt ends inside think, which is where a generation starts (spec §3: TTI
    /// watches positions inside `<think>`). Before [`begin_generation`](Self::begin_generation)
    /// it is what the prompt tokens accepted since the last reset left; from it on, the
    /// `think_start` it was given, resolved: [`ThinkStart::Inside`] or
    /// [`ThinkStart::Outside`] as declared by the caller (whatever the prompt tokens said),
    /// [`ThinkStart::FromPrompt`] what they left. [`ThinkStart::FromPrompt`] starts from this,
    /// so another try of the same turn starts where the first did.
    pub fn prompt_inside_think(&self) -> bool {
        self.flags & SEQ_PROMPT_INSIDE != 0
    }

    /// Whether TTI can still fire in this generation now: TTI enabled, generating, inside think,
    /// not fired and the think block not closed. False after `begin_generation` outside think
    /// means TTI, the `L_max` bound included, stays off until the model opens think itself.
    pub fn tti_armed(&self) -> bool {
        self.config.tti_enabled != 0
            && self.flags & (SEQ_GENERATING | SEQ_INSIDE) == SEQ_GENERATING | SEQ_INSIDE
            && self.flags & (SEQ_FIRED | SEQ_DONE) == 0
    }

    /// Whether TTI fired and the model closed think itself on the firing step, so the forced
    /// queue was dropped (no forced token was handed out).
    pub fn queue_dropped(&self) -> bool {
        self.flags & SEQ_FIRED != 0 && self.flags & SEQ_QUEUE == 0 && self.queue_pos == 0
    }

    /// Φ of the generation so far (spec §4).
    pub fn turn_signal(&self) -> Result<f32, Error> {
        self.turn.phi(&self.config)
    }

    /// `t`: observed (non-forced) positions of this generation.
    pub fn position(&self) -> u32 {
        self.t
    }

    /// Tokens accepted in this generation (forced ones included).
    pub fn generated(&self) -> u32 {
        self.generated
    }

    /// Think content tokens accepted in this generation (the tags excluded).
    pub fn think_len(&self) -> u32 {
        self.think_len
    }

    /// Whether the sequence is inside a think block now.
    pub fn inside_think(&self) -> bool {
        self.flags & SEQ_INSIDE != 0
    }

    /// Whether a forced token is pending for the next steps.
    pub fn forcing(&self) -> bool {
        self.flags & SEQ_QUEUE != 0
    }

    /// Where and why TTI fired in this generation: `(t, event)`.
    pub fn fired(&self) -> Option<(u32, Event)> {
        if self.flags & SEQ_FIRED == 0 {
            return None;
        }
        let event = if self.fire_event == Event::Budget as u32 {
            Event::Budget
        } else {
            Event::Converged
        };
        Some((self.fire_position, event))
    }
}

/// One decode step for `B` sequences: row `b` of `logits` starts at `b·row_stride` and has
/// `vocab` entries. Each step gets its own status; a failed row leaves its sequence unchanged.
/// Returns [`Error::BatchRows`] when any row failed (the others are done).
pub fn observe_batch<T: Logit>(
    seqs: &mut [Sequence],
    logits: &[T],
    vocab: usize,
    row_stride: usize,
    steps: &mut [Step],
) -> Result<(), Error> {
    observe_batch_impl(seqs, logits, vocab, row_stride, steps, None, None)
}

/// [`observe_batch`], also writing each row's statistics to `stats` (one entry per sequence:
/// `Some` for a row the step read, `None` for a forced step and for a failed row), as
/// [`Sequence::observe_row_stats`] returns them. `stats.len()` must equal the batch.
pub fn observe_batch_stats<T: Logit>(
    seqs: &mut [Sequence],
    logits: &[T],
    vocab: usize,
    row_stride: usize,
    steps: &mut [Step],
    stats: &mut [Option<TokenStats>],
) -> Result<(), Error> {
    observe_batch_impl(seqs, logits, vocab, row_stride, steps, Some(stats), None)
}

/// [`observe_batch_stats`], also writing each read row's per-chunk probability masses
/// ([`Sequence::observe_row_mass`]): row `b`'s are `mass[b·n .. (b + 1)·n]` with
/// `n = `[`mass_chunks`]`(vocab)`, untouched for a forced step. `mass.len()` must be `B·n`.
pub fn observe_batch_mass<T: Logit>(
    seqs: &mut [Sequence],
    logits: &[T],
    vocab: usize,
    row_stride: usize,
    steps: &mut [Step],
    stats: &mut [Option<TokenStats>],
    mass: &mut [f64],
) -> Result<(), Error> {
    observe_batch_impl(
        seqs,
        logits,
        vocab,
        row_stride,
        steps,
        Some(stats),
        Some(mass),
    )
}

fn observe_batch_impl<T: Logit>(
    seqs: &mut [Sequence],
    logits: &[T],
    vocab: usize,
    row_stride: usize,
    steps: &mut [Step],
    mut stats: Option<&mut [Option<TokenStats>]>,
    mut mass: Option<&mut [f64]>,
) -> Result<(), Error> {
    let batch = seqs.len();
    if batch == 0 || steps.len() != batch {
        return Err(Error::Size("batch must be >= 1 with one step per sequence"));
    }
    if vocab == 0 || row_stride < vocab {
        return Err(Error::Size("vocab must be >= 1 and row_stride >= vocab"));
    }
    if stats.as_deref().is_some_and(|s| s.len() != batch) {
        return Err(Error::Size("one stats entry per sequence"));
    }
    let n = mass_chunks(vocab);
    if mass
        .as_deref()
        .is_some_and(|m| batch.checked_mul(n) != Some(m.len()))
    {
        return Err(Error::Size(
            "mass must hold mass_chunks(vocab) entries per sequence",
        ));
    }
    let needed = (batch - 1)
        .checked_mul(row_stride)
        .and_then(|n| n.checked_add(vocab));
    if needed.is_none_or(|n| n > logits.len()) {
        return Err(Error::Size(
            "logits holds fewer than (batch - 1) * row_stride + vocab entries",
        ));
    }
    let mut failed = 0;
    for (b, (seq, out)) in seqs.iter_mut().zip(steps.iter_mut()).enumerate() {
        let row = &logits[b * row_stride..b * row_stride + vocab];
        let row_mass = mass.as_deref_mut().map(|m| &mut m[b * n..(b + 1) * n]);
        let (step, row_stats) = match seq.observe_with(row, row_mass) {
            Ok(r) => r,
            Err(e) => {
                failed += 1;
                let step = Step {
                    status: Status::from(e) as u32,
                    ..Step::default()
                };
                (step, None)
            }
        };
        *out = step;
        if let Some(s) = stats.as_deref_mut() {
            s[b] = row_stats;
        }
    }
    if failed > 0 {
        return Err(Error::BatchRows { failed });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(h: f32, c: f32) -> TokenStats {
        TokenStats {
            entropy: h,
            confidence: c,
            max_logit: 0.0,
            log_sum_exp: 0.0,
            vocab: 1000,
            top_count: 20,
        }
    }

    fn cfg() -> Config {
        let mut c = Config::paper();
        c.queue = [9, 8, 7, 0, 0, 0, 0, 0];
        c.queue_len = 3;
        c.think_open = 1;
        c.think_close = 9;
        c.min_len = 4;
        c.max_think = 50;
        c
    }

    #[test]
    fn converged_fire_forces_the_queue_in_order() {
        let mut seq = Sequence::new(&cfg()).unwrap();
        seq.accept(1).unwrap(); // prompt ends with <think>
        seq.begin_generation(ThinkStart::FromPrompt);
        assert!(seq.inside_think());
        // Alternate then flatten: the window of 5 deltas goes below 0.1 after the flat stretch.
        let hs = [1.0, 3.0, 1.0, 3.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0];
        let mut fired_at = None;
        for (i, &h) in hs.iter().enumerate() {
            let step = seq.observe(&stats(h, 5.0)).unwrap();
            assert_eq!(step.forced_token, -1);
            seq.accept(100).unwrap();
            if step.event == Event::Converged as u32 {
                fired_at = Some(i + 1);
                break;
            }
        }
        let t = fired_at.expect("fires on the flat stretch");
        assert!(t >= 4);
        assert_eq!(seq.fired(), Some((t as u32, Event::Converged)));
        let mut emitted = std::vec::Vec::new();
        while seq.forcing() {
            let step = seq.observe(&stats(2.0, 5.0)).unwrap();
            let tok = step.forced().unwrap();
            assert_eq!(
                seq.accept(tok + 1),
                Err(Error::ForcedMismatch {
                    expected: tok,
                    got: tok + 1
                })
            );
            seq.accept(tok).unwrap();
            emitted.push(tok);
        }
        assert_eq!(emitted, [9, 8, 7]);
        assert!(!seq.inside_think());
        // Never re-arms: a new think block in the same generation does not fire.
        seq.observe(&stats(2.0, 5.0)).unwrap();
        seq.accept(1).unwrap();
        for _ in 0..100 {
            let step = seq.observe(&stats(2.0, 5.0)).unwrap();
            assert_eq!((step.forced_token, step.event), (-1, 0));
            seq.accept(100).unwrap();
        }
    }

    #[test]
    fn budget_bounds_think_content() {
        let mut c = cfg();
        c.tti_enabled = 1;
        c.epsilon = 0.0; // never converges
        c.max_think = 7;
        let mut seq = Sequence::new(&c).unwrap();
        seq.begin_generation(ThinkStart::Inside);
        let mut content = 0;
        loop {
            let step = seq.observe(&stats(content as f32, 1.0)).unwrap();
            match step.forced() {
                Some(tok) => {
                    seq.accept(tok).unwrap();
                    if tok == 9 {
                        break;
                    }
                }
                None => {
                    seq.accept(100).unwrap();
                    content += 1;
                }
            }
        }
        assert_eq!(content, 7);
        assert_eq!(seq.fired().unwrap().1, Event::Budget);
    }

    #[test]
    fn order_errors_leave_state_unchanged() {
        let mut seq = Sequence::new(&cfg()).unwrap();
        assert!(matches!(
            seq.observe(&stats(1.0, 1.0)),
            Err(Error::Order(_))
        ));
        seq.begin_generation(ThinkStart::Outside);
        assert!(matches!(seq.accept(5), Err(Error::Order(_))));
        seq.observe(&stats(1.0, 1.0)).unwrap();
        let before = seq;
        assert!(matches!(
            seq.observe(&stats(1.0, 1.0)),
            Err(Error::Order(_))
        ));
        assert_eq!(seq, before);
    }

    #[test]
    fn model_closing_on_the_firing_step_cancels_the_queue() {
        let mut c = cfg();
        c.min_len = 0;
        c.max_think = 1;
        let mut seq = Sequence::new(&c).unwrap();
        seq.begin_generation(ThinkStart::Inside);
        let step = seq.observe(&stats(1.0, 1.0)).unwrap();
        assert_eq!(step.event, Event::Budget as u32);
        seq.accept(9).unwrap(); // the model's own </think>
        assert!(!seq.forcing() && !seq.inside_think());
    }

    #[test]
    fn apply_masks_all_but_the_forced_token() {
        let step = Step {
            forced_token: 2,
            ..Step::default()
        };
        let mut row = [1.0f32, 2.0, 3.0, 4.0];
        assert_eq!(step.apply(&mut row), Ok(true));
        assert_eq!(
            row,
            [f32::NEG_INFINITY, f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY]
        );
        let mut short = [0.0f32; 2];
        assert_eq!(
            step.apply(&mut short),
            Err(Error::TokenOutOfRow { token: 2, len: 2 })
        );
        assert_eq!(Step::default().apply(&mut row), Ok(false));
    }

    /// A config whose rule may fire from the third token (budget 4), and three sequences
    /// generating inside a think block under it.
    fn three_early_firing() -> (Config, [Sequence; 3]) {
        let mut c = cfg();
        c.min_len = 2;
        c.max_think = 4;
        let mut seqs = [Sequence::new(&c).unwrap(); 3];
        for s in &mut seqs {
            s.begin_generation(ThinkStart::Inside);
        }
        (c, seqs)
    }

    #[test]
    fn observe_batch_stats_equals_observe_batch_and_hands_back_each_read_rows_stats() {
        // Two identical batches of three sequences: one sees `observe_batch`, the other
        // `observe_batch_stats`, over rows that make sequence 0 fire (then force) early.
        let (c, mut plain) = three_early_firing();
        const V: usize = 37;
        let mut with = plain;
        let mut rows = [0f32; 3 * V];
        let (mut a, mut b) = ([Step::default(); 3], [Step::default(); 3]);
        let mut stats = [None; 3];
        let mut forced_seen = 0;
        for t in 0..8u32 {
            for (i, x) in rows.iter_mut().enumerate() {
                *x = ((i as u32 * 7 + t * 13) % 23) as f32 * 0.31 - 3.0;
            }
            observe_batch(&mut plain, &rows, V, V, &mut a).unwrap();
            observe_batch_stats(&mut with, &rows, V, V, &mut b, &mut stats).unwrap();
            assert_eq!(a, b);
            for r in 0..3 {
                match a[r].forced() {
                    Some(tok) => {
                        forced_seen += 1;
                        assert_eq!(stats[r], None, "a forced step reads no row");
                        plain[r].accept(tok).unwrap();
                        with[r].accept(tok).unwrap();
                    }
                    None => {
                        let row = &rows[r * V..(r + 1) * V];
                        let want = crate::stats::token_stats(row, c.top_j).unwrap();
                        assert_eq!(stats[r], Some(want));
                        plain[r].accept(100).unwrap();
                        with[r].accept(100).unwrap();
                    }
                }
            }
            assert_eq!(plain, with);
        }
        assert!(forced_seen > 0, "the test must cover forced steps");
        // A stats slice of the wrong length changes nothing.
        let before = with;
        let mut short = [None; 2];
        assert!(matches!(
            observe_batch_stats(&mut with, &rows, V, V, &mut b, &mut short),
            Err(Error::Size(_))
        ));
        assert_eq!(with, before);
    }

    #[test]
    fn observe_batch_mass_equals_observe_batch_stats_and_hands_back_each_read_rows_masses() {
        // Rows of three chunks (4,100 entries); sequence 0 fires early, then is forced.
        use std::vec;
        let (c, mut plain) = three_early_firing();
        const V: usize = 4100;
        let n = mass_chunks(V);
        assert_eq!(n, 3);
        let mut with = plain;
        let mut rows = vec![0f32; 3 * V];
        let (mut a, mut b) = ([Step::default(); 3], [Step::default(); 3]);
        let (mut sa, mut sb) = ([None; 3], [None; 3]);
        let mut mass = vec![0f64; 3 * n];
        let mut forced_seen = 0;
        for t in 0..8u32 {
            for (i, x) in rows.iter_mut().enumerate() {
                *x = ((i as u32 * 7 + t * 13) % 23) as f32 * 0.31 - 3.0 + (i / V) as f32;
            }
            mass.fill(-1.0);
            observe_batch_stats(&mut plain, &rows, V, V, &mut a, &mut sa).unwrap();
            observe_batch_mass(&mut with, &rows, V, V, &mut b, &mut sb, &mut mass).unwrap();
            assert_eq!((a, sa), (b, sb));
            for r in 0..3 {
                let got = &mass[r * n..(r + 1) * n];
                match a[r].forced() {
                    Some(tok) => {
                        forced_seen += 1;
                        assert_eq!(got, &[-1.0; 3], "a forced step writes no mass");
                        plain[r].accept(tok).unwrap();
                        with[r].accept(tok).unwrap();
                    }
                    None => {
                        let mut want = [0f64; 3];
                        let row = &rows[r * V..(r + 1) * V];
                        crate::stats::token_stats_mass(row, c.top_j, &mut want).unwrap();
                        assert_eq!(got, &want);
                        plain[r].accept(100).unwrap();
                        with[r].accept(100).unwrap();
                    }
                }
            }
            assert_eq!(plain, with);
        }
        assert!(forced_seen > 0, "the test must cover forced steps");
        // A mass slice of the wrong length changes nothing.
        let before = with;
        let mut short = vec![0f64; 3 * n - 1];
        assert!(matches!(
            observe_batch_mass(&mut with, &rows, V, V, &mut b, &mut sb, &mut short),
            Err(Error::Size(_))
        ));
        assert_eq!(with, before);
        // Nor does one on a single row.
        assert!(matches!(
            with[1].observe_row_mass(&rows[..V], &mut short[..2]),
            Err(Error::Size(_))
        ));
        assert_eq!(with, before);
    }
}
