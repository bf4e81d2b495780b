//! The one per-token caller of the control kernel. Each decode step, in the spec's order:
//! the **raw** logits of every active row go through `t2po_control::observe_batch_mass`
//! (statistics, `M_t`, the TTI decision); a forced step replaces sampling; otherwise temperature /
//! top-p sampling draws one token from the row's own generator; then `accept(token)`.
//!
//! The draw reuses what the kernel's pass over the row computed: the row's max (no max pass of
//! its own at any temperature), its log-sum-exp and, at `T = 1` without a nucleus, the mass of
//! each 2048-entry chunk (`t2po_control::observe_batch_mass`), so the draw's inverse-CDF search
//! picks the chunk from those and exponentiates only that chunk, up to the drawn entry, instead
//! of the row; greedy decoding needs no exponential at all. A sampler without the kernel
//! ([`Sampler::sample_only`]) makes both passes itself.

use rand::Rng;
use rand_chacha::ChaCha12Rng;
use rayon::prelude::*;
use t2po_control::{
    mass_chunks, observe_batch_mass, Event, Sequence, Step, TokenStats, MASS_CHUNK,
};

use crate::error::{Error, Result};
use crate::model::fused::{exp_neg, max_of};

/// Fewest rows per parallel `observe_batch` call (below it, one call: the split costs more).
const OBSERVE_CHUNK: usize = 8;

/// Temperature and nucleus sampling.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SamplingParams {
    /// Softmax temperature (≥ 0). 0 is greedy decoding (argmax, ties to the lowest id), as
    /// verl validates (`val_kwargs.temperature = 0`, `do_sample = False`); its log-probs are
    /// those of the untempered distribution (T = 1).
    pub temperature: f32,
    /// Nucleus mass in `(0, 1]`; 1 samples from the whole distribution.
    pub top_p: f32,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
        }
    }
}

impl SamplingParams {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<()> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(Error::invalid(
                "temperature",
                format!(
                    "{}: must be a number ≥ 0 (0: greedy decoding)",
                    self.temperature
                ),
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(Error::invalid(
                "top_p",
                format!("{}: must be in (0, 1]", self.top_p),
            ));
        }
        Ok(())
    }
}

/// What happened at one row's decode step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Draw {
    /// The emitted token.
    pub token: u32,
    /// `log p(token)` under the model's distribution at the sampling temperature (forced
    /// tokens included: they are trained like sampled ones).
    pub log_prob: f32,
    /// Whether TTI forced this token.
    pub forced: bool,
    /// `M_t` of this position (`None` on forced positions, which have no signal).
    pub signal: Option<f32>,
    /// Whether TTI fired at this step, and why (its queue starts at the next step).
    pub event: Event,
    /// The window mean of `|ΔM|` that TTI's convergence rule compared with ε at this step
    /// (`Sequence::window_mean`), where the rule was checked: an observed position at
    /// `t ≥ L_min` while TTI was armed, and a full window. The rule fires at ε exactly where
    /// this is below ε, so the smallest such value of a generation run with ε = 0 says at which
    /// ε it would have fired (`control.calibrate`).
    pub window_mean: Option<f32>,
}

/// Entries per block of the draw's cumulative search: the exp pass leaves one sum per block,
/// so finding the drawn entry scans block sums, then one block.
const BLOCK: usize = 64;

const NO_DRAW: Draw = Draw {
    token: 0,
    log_prob: 0.0,
    forced: false,
    signal: None,
    event: Event::None,
    window_mean: None,
};

/// One chunk's buffers for [`Sampler`]: the row's tempered, unnormalised probabilities, their
/// block sums, and the top-p order.
#[derive(Debug, Default)]
struct RowScratch {
    probs: Vec<f32>,
    blocks: Vec<f64>,
    order: Vec<u32>,
}

/// `p[i] = e^((x[i] − max)·inv_t)` (0 for masked `−inf` entries) for one block of at most
/// [`BLOCK`] entries; returns their sum (16 f32 lanes, then the tail). Inlined into each
/// multiversioned caller, so it is compiled for that caller's target features.
#[inline(always)]
fn exp_block(x: &[f32], max: f32, inv_t: f32, p: &mut [f32]) -> f32 {
    const L: usize = 16;
    let mut lanes = [0f32; L];
    let xc = x.chunks_exact(L);
    let xr = xc.remainder();
    let mut pc = p.chunks_exact_mut(L);
    for (xv, pv) in xc.zip(&mut pc) {
        for k in 0..L {
            let e = exp_neg((xv[k] - max) * inv_t);
            let e = if xv[k] == f32::NEG_INFINITY { 0.0 } else { e };
            pv[k] = e;
            lanes[k] += e;
        }
    }
    let mut sum: f32 = lanes.iter().sum();
    for (&xi, pi) in xr.iter().zip(pc.into_remainder()) {
        let e = if xi == f32::NEG_INFINITY {
            0.0
        } else {
            exp_neg((xi - max) * inv_t)
        };
        *pi = e;
        sum += e;
    }
    sum
}

/// Inside the block whose sum carries the running mass past `target` (`acc` before it): the
/// first entry where the in-order sum exceeds `target`. The block's lane sum and its entries
/// summed in order can differ by a rounding: then the block's last non-zero entry.
fn cross_in_block(block: &[f32], acc: f64, target: f64) -> Option<usize> {
    let mut inner = acc;
    for (i, &p) in block.iter().enumerate() {
        inner += p as f64;
        if inner > target && p > 0.0 {
            return Some(i);
        }
    }
    block.iter().rposition(|&p| p > 0.0)
}

/// The first entry of `row` at which the running sum of `e^(row[i] − max)` exceeds `target`,
/// block by block (the same exponentials and block sums as [`exp_blocks`] at `T = 1`, so the
/// same entry for the same target), stopping there: on average half a row of exponentials, none
/// stored beyond one block. `None` when the whole row sums to at most `target` (rounding, with
/// `target` from another pass's sum).
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn search_cumulative(row: &[f32], max: f32, target: f64) -> Option<usize> {
    let mut block = [0f32; BLOCK];
    let mut acc = 0.0f64;
    for (j, x) in row.chunks(BLOCK).enumerate() {
        let p = &mut block[..x.len()];
        let bs = exp_block(x, max, 1.0, p) as f64;
        if acc + bs > target {
            if let Some(i) = cross_in_block(p, acc, target) {
                return Some(j * BLOCK + i);
            }
        }
        acc += bs;
    }
    None
}

/// The inverse-CDF draw at `u ∈ [0, 1)` from the kernel's per-chunk masses of `row` (relative
/// to its `max`): the first chunk whose running mass exceeds `u·Σ mass`, then the entry inside
/// it, searched from whichever end of the chunk is nearer in mass: [`search_cumulative`] against
/// the rest of the target from the front, [`search_suffix`] against the chunk's mass minus it
/// from the back (the same entry, up to rounding; half a chunk of exponentials at most). When
/// the sampler's own sum of that chunk falls a rounding short of the kernel's, the chunk's
/// last (front search) or first (back search) entry of non-zero probability; when none of the
/// chunk's entries has one in the sampler's f32 (a chunk whose mass lies below f32's range,
/// reached only at `u` within ~1e-38 of its edge), the next entry of non-zero probability after
/// it. Never an entry of probability 0.
fn search_mass(row: &[f32], max: f32, mass: &[f64], u: f64) -> usize {
    let target = u * mass.iter().sum::<f64>();
    let mut acc = 0.0f64;
    for (k, &m) in mass.iter().enumerate() {
        if acc + m > target {
            let lo = k * MASS_CHUNK;
            let chunk = &row[lo..row.len().min(lo + MASS_CHUNK)];
            let inner = target - acc;
            let at = if inner <= 0.5 * m {
                search_cumulative(chunk, max, inner).or_else(|| last_positive(chunk, max))
            } else {
                search_suffix(chunk, max, m - inner).or_else(|| first_positive(chunk, max))
            };
            if let Some(at) = at {
                return lo + at;
            }
        }
        acc += m;
    }
    // The row's max entry has e^0 = 1.
    last_positive(row, max).unwrap_or(0)
}

/// [`search_cumulative`] from the back: the last entry `i` of `row` at which the suffix sum
/// `Σ_{j ≥ i} e^(row[j] − max)` reaches `target > 0`, block by block from the end. For a row of
/// total `S`, that is the first entry whose running sum exceeds `S − target` (the suffix from
/// `i` reaches `target` exactly when the prefix before `i` stays at or below `S − target`).
/// `None` when the whole row sums to less than `target` (rounding, with `target` from another
/// pass's sum).
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn search_suffix(row: &[f32], max: f32, target: f64) -> Option<usize> {
    let mut block = [0f32; BLOCK];
    let mut acc = 0.0f64;
    for j in (0..row.len().div_ceil(BLOCK)).rev() {
        let x = &row[j * BLOCK..row.len().min((j + 1) * BLOCK)];
        let p = &mut block[..x.len()];
        let bs = exp_block(x, max, 1.0, p) as f64;
        if acc + bs >= target {
            let mut inner = acc;
            for (i, &q) in p.iter().enumerate().rev() {
                inner += q as f64;
                if inner >= target && q > 0.0 {
                    return Some(j * BLOCK + i);
                }
            }
            // The block's lane sum and its in-order sum differ by a rounding.
            if let Some(i) = p.iter().position(|&q| q > 0.0) {
                return Some(j * BLOCK + i);
            }
        }
        acc += bs;
    }
    None
}

/// The first entry whose `e^(x − max)` is not 0 (where a search from the back lands at `u → 0`).
fn first_positive(row: &[f32], max: f32) -> Option<usize> {
    row.iter()
        .position(|&x| x != f32::NEG_INFINITY && exp_neg(x - max) > 0.0)
}

/// The last entry whose `e^(x − max)` is not 0 (where an inverse-CDF search lands at `u → 1`).
fn last_positive(row: &[f32], max: f32) -> Option<usize> {
    row.iter()
        .rposition(|&x| x != f32::NEG_INFINITY && exp_neg(x - max) > 0.0)
}

/// `probs[i] = e^((row[i] − max)·inv_t)` (0 for masked `−inf` entries) and `blocks[j]` the sum
/// of block `j`'s entries (f32 lanes, then f64): one vectorised pass over the row. `exp` is the
/// fused kernels' ([`exp_neg`], ≤ 4e-7 relative; arguments are ≤ 0 after the max).
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn exp_blocks(row: &[f32], max: f32, inv_t: f32, probs: &mut [f32], blocks: &mut [f64]) {
    for ((x, p), b) in row
        .chunks(BLOCK)
        .zip(probs.chunks_mut(BLOCK))
        .zip(blocks.iter_mut())
    {
        *b = exp_block(x, max, inv_t, p) as f64;
    }
}

impl RowScratch {
    /// Sizes the buffers for rows of `vocab` entries: the first step of a batch allocates them,
    /// whichever draws it makes (a draw from the kernel's statistics leaves them unused, and
    /// the first forced row, many steps later, would otherwise allocate mid-generation).
    fn fit(&mut self, vocab: usize) {
        self.probs.resize(vocab, 0.0);
        self.blocks.resize(vocab.div_ceil(BLOCK), 0.0);
    }

    /// Fills `probs` and `blocks` for `row`; returns the row's max and `Σ probs`.
    fn exp_pass(&mut self, row: &[f32], inv_t: f32) -> (f32, f64) {
        self.exp_pass_from(row, max_of(row), inv_t)
    }

    /// [`exp_pass`](Self::exp_pass) with the row's max already known.
    fn exp_pass_from(&mut self, row: &[f32], max: f32, inv_t: f32) -> (f32, f64) {
        self.probs.resize(row.len(), 0.0);
        self.blocks.resize(row.len().div_ceil(BLOCK), 0.0);
        exp_blocks(row, max, inv_t, &mut self.probs, &mut self.blocks);
        (max, self.blocks.iter().sum())
    }
}

/// Reusable buffers of the sampling step.
#[derive(Debug)]
pub struct Sampler {
    params: SamplingParams,
    steps: Vec<Step>,
    /// The kernel's statistics of each row (`None` on forced steps).
    stats: Vec<Option<TokenStats>>,
    /// The kernel's per-chunk masses of each row ([`mass_chunks`] per row; stale on forced
    /// steps, which do not read them).
    mass: Vec<f64>,
    /// One per parallel chunk of rows.
    scratch: Vec<RowScratch>,
}

impl Sampler {
    /// A sampler with checked parameters.
    pub fn new(params: SamplingParams) -> Result<Self> {
        params.validate()?;
        Ok(Self {
            params,
            steps: Vec::new(),
            stats: Vec::new(),
            mass: Vec::new(),
            scratch: Vec::new(),
        })
    }

    /// Rows per parallel chunk for a batch of `b`, and the chunk count; grows the per-chunk
    /// buffers on first use (warm-up).
    fn chunks(&mut self, b: usize) -> usize {
        let per = OBSERVE_CHUNK.max(b.div_ceil(rayon::current_num_threads().max(1)));
        let n = b.div_ceil(per);
        if self.scratch.len() < n {
            self.scratch.resize_with(n, RowScratch::default);
        }
        per
    }

    /// One decode step for every row: `logits` is `[B, vocab]` row-major raw logits,
    /// `seqs`/`rngs`/`out` have one entry per row.
    ///
    /// The rows are split into chunks over the pool; each chunk runs the kernel's
    /// `observe_batch` on its rows, then draws and accepts row by row while the rows are still
    /// in this core's cache. Rows are independent (own sequence, own generator), so results do
    /// not depend on the split. On an error the batch's state is unspecified (the rollout
    /// stops).
    pub fn step(
        &mut self,
        seqs: &mut [Sequence],
        rngs: &mut [ChaCha12Rng],
        logits: &[f32],
        vocab: usize,
        out: &mut Vec<Draw>,
    ) -> Result<()> {
        let b = seqs.len();
        if rngs.len() != b || logits.len() != b * vocab || vocab == 0 {
            return Err(Error::invalid(
                "sampler",
                format!(
                    "{b} sequences, {} generators, {} logits for vocab {vocab}",
                    rngs.len(),
                    logits.len()
                ),
            ));
        }
        self.steps.resize(b, Step::default());
        self.stats.resize(b, None);
        let n = mass_chunks(vocab);
        self.mass.resize(b * n, 0.0);
        out.clear();
        out.resize(b, NO_DRAW);
        let per = self.chunks(b);
        let params = self.params;
        seqs.par_chunks_mut(per)
            .zip(rngs.par_chunks_mut(per))
            .zip(logits.par_chunks(per * vocab))
            .zip(self.steps.par_chunks_mut(per))
            .zip(self.stats.par_chunks_mut(per))
            .zip(self.mass.par_chunks_mut(per * n))
            .zip(out.par_chunks_mut(per))
            .zip(self.scratch.par_iter_mut())
            .try_for_each(|(((((((s, g), l), st), ks), km), o), sc)| -> Result<()> {
                sc.fit(vocab);
                observe_batch_mass(s, l, vocab, vocab, st, ks, km)?;
                for (r, row) in l.chunks_exact(vocab).enumerate() {
                    let step = st[r];
                    let forced = step.forced();
                    let (token, log_prob) = match forced {
                        Some(t) => {
                            if t as usize >= vocab {
                                return Err(Error::invalid(
                                    "forced token",
                                    format!("{t} is outside the vocabulary ({vocab})"),
                                ));
                            }
                            (t, log_prob(&params, sc, row, t))
                        }
                        None => draw_with(
                            &params,
                            sc,
                            row,
                            &mut g[r],
                            ks[r].as_ref().map(|k| (k, &km[r * n..(r + 1) * n])),
                        ),
                    };
                    // Read before `accept`: the token may close the think block. After the
                    // observe, TTI is armed still unless it fired at this very step, and it was
                    // armed then too.
                    let window_mean = (forced.is_none()
                        && s[r].position() >= s[r].config().min_len
                        && (step.event != Event::None as u32 || s[r].tti_armed()))
                    .then(|| s[r].window_mean())
                    .flatten();
                    s[r].accept(token)?;
                    let event = match step.event {
                        1 => Event::Converged,
                        2 => Event::Budget,
                        _ => Event::None,
                    };
                    o[r] = Draw {
                        token,
                        log_prob,
                        forced: forced.is_some(),
                        signal: forced.is_none().then_some(step.signal),
                        event,
                        window_mean,
                    };
                }
                Ok(())
            })
    }

    /// Sampling alone, without the control kernel (the baseline of the overhead benchmark),
    /// split over the pool as [`step`](Self::step) splits it.
    pub fn sample_only(
        &mut self,
        rngs: &mut [ChaCha12Rng],
        logits: &[f32],
        vocab: usize,
        out: &mut Vec<Draw>,
    ) -> Result<()> {
        let b = rngs.len();
        if logits.len() != b * vocab || vocab == 0 {
            return Err(Error::invalid("sampler", "one generator per logits row"));
        }
        out.clear();
        out.resize(b, NO_DRAW);
        let per = self.chunks(b);
        let params = self.params;
        rngs.par_chunks_mut(per)
            .zip(logits.par_chunks(per * vocab))
            .zip(out.par_chunks_mut(per))
            .zip(self.scratch.par_iter_mut())
            .for_each(|(((g, l), o), sc)| {
                for (r, row) in l.chunks_exact(vocab).enumerate() {
                    let (token, log_prob) = draw(&params, sc, row, &mut g[r]);
                    o[r] = Draw {
                        token,
                        log_prob,
                        ..NO_DRAW
                    };
                }
            });
        Ok(())
    }
}

/// `1 / T`, and 1 for greedy decoding (its log-probs are of the untempered distribution).
fn inverse_temperature(params: &SamplingParams) -> f32 {
    if params.temperature > 0.0 {
        1.0 / params.temperature
    } else {
        1.0
    }
}

/// `log softmax(row / T)[token]`.
fn log_prob(params: &SamplingParams, sc: &mut RowScratch, row: &[f32], token: u32) -> f32 {
    let inv_t = inverse_temperature(params);
    let (max, total) = sc.exp_pass(row, inv_t);
    ((row[token as usize] - max) * inv_t) - total.ln() as f32
}

/// One draw from `softmax(row / T)` restricted to the top-p nucleus, with its log-prob
/// under the full tempered distribution; at `T = 0` the argmax (the generator is still
/// advanced, so a row's later draws do not depend on the temperature of earlier ones).
fn draw(
    params: &SamplingParams,
    sc: &mut RowScratch,
    row: &[f32],
    rng: &mut ChaCha12Rng,
) -> (u32, f32) {
    draw_with(params, sc, row, rng, None)
}

/// [`draw`], with the control kernel's statistics and per-chunk masses of the same raw row when
/// it computed them: its max replaces the max pass; at `T = 0` the argmax and `x − lse` need no
/// exponential; at `T = 1` without a nucleus the target `u·Σ mass` picks the chunk from the
/// masses, and the search runs inside that chunk alone and stops at the drawn entry
/// ([`search_mass`]). The masses are the kernel's sums (each within ~1e-6 relative of the exact
/// one), so a draw can differ from [`draw`]'s only when `u` falls within that rounding of a
/// boundary between two entries (or chunks: then the chunk's last entry of non-zero
/// probability, as an inverse-CDF draw at `u → 1`). Log-probs are `x − lse` (the kernel's
/// log-sum-exp: ≤ 1e-6 absolute error plus the f32 rounding of `lse`).
fn draw_with(
    params: &SamplingParams,
    sc: &mut RowScratch,
    row: &[f32],
    rng: &mut ChaCha12Rng,
    known: Option<(&TokenStats, &[f64])>,
) -> (u32, f32) {
    let inv_t = inverse_temperature(params);
    if let Some((k, mass)) = known {
        if params.temperature == 0.0 {
            let _: f64 = rng.random::<f64>();
            let token = row.iter().position(|&v| v == k.max_logit).unwrap_or(0);
            return (token as u32, row[token] - k.log_sum_exp);
        }
        if params.temperature == 1.0 && params.top_p >= 1.0 {
            let u: f64 = rng.random::<f64>();
            let token = search_mass(row, k.max_logit, mass, u);
            return (token as u32, row[token] - k.log_sum_exp);
        }
    }
    let (max, total) = match known {
        Some((k, _)) => sc.exp_pass_from(row, k.max_logit, inv_t),
        None => sc.exp_pass(row, inv_t),
    };
    let u: f64 = rng.random::<f64>();
    if params.temperature == 0.0 {
        // The first entry equal to the row's maximum, which the exp pass has found (NaN
        // entries are neither the maximum nor equal to it): the argmax, ties to the lowest id.
        let token = row.iter().position(|&v| v == max).unwrap_or(0);
        return (token as u32, (row[token] - max) - total.ln() as f32);
    }
    let probs = &sc.probs;
    let token = if params.top_p >= 1.0 {
        // The first entry whose cumulative mass exceeds u·total: whole blocks by their sums,
        // then entry by entry inside the block that crosses.
        let target = u * total;
        let mut acc = 0.0f64;
        let mut pick = None;
        for (j, &bs) in sc.blocks.iter().enumerate() {
            if acc + bs > target {
                let block = &probs[j * BLOCK..probs.len().min((j + 1) * BLOCK)];
                pick = cross_in_block(block, acc, target).map(|i| j * BLOCK + i);
                if pick.is_some() {
                    break;
                }
            }
            acc += bs;
        }
        // Rounding can leave the whole sum a hair below the target: the last non-zero entry.
        pick.unwrap_or_else(|| probs.iter().rposition(|&p| p > 0.0).unwrap_or(0))
    } else {
        sc.order.clear();
        sc.order.extend(0..row.len() as u32);
        sc.order.sort_unstable_by(|&a, &b| {
            probs[b as usize]
                .total_cmp(&probs[a as usize])
                .then(a.cmp(&b))
        });
        let cut = params.top_p as f64 * total;
        let mut mass = 0.0f64;
        let mut keep = 0;
        for &i in &sc.order {
            mass += probs[i as usize] as f64;
            keep += 1;
            if mass >= cut {
                break;
            }
        }
        let target = u * mass;
        let mut acc = 0.0f64;
        let mut pick = sc.order[keep - 1] as usize;
        for &i in &sc.order[..keep] {
            acc += probs[i as usize] as f64;
            if acc > target {
                pick = i as usize;
                break;
            }
        }
        pick
    };
    let log_prob = ((row[token] - max) * inv_t) - total.ln() as f32;
    (token as u32, log_prob)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn softmax64(row: &[f32], t: f64) -> Vec<f64> {
        let m = row.iter().fold(f64::NEG_INFINITY, |a, &x| a.max(x as f64));
        let e: Vec<f64> = row.iter().map(|&x| ((x as f64 - m) / t).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|x| x / s).collect()
    }

    #[test]
    fn draws_follow_the_tempered_distribution() {
        let row = [0.5f32, 2.0, -1.0, 1.0, f32::NEG_INFINITY, 0.0];
        for t in [0.5f32, 1.0, 2.0] {
            let s = Sampler::new(SamplingParams {
                temperature: t,
                top_p: 1.0,
            })
            .unwrap();
            let mut rng = ChaCha12Rng::seed_from_u64(3);
            let n = 60_000;
            let mut counts = [0usize; 6];
            for _ in 0..n {
                let (tok, lp) = draw(&s.params, &mut RowScratch::default(), &row, &mut rng);
                counts[tok as usize] += 1;
                // Log-prob against an f64 reference: 1e-5 absolute.
                let want = softmax64(&row, t as f64)[tok as usize].ln();
                assert!((lp as f64 - want).abs() < 1e-5, "{lp} vs {want}");
            }
            assert_eq!(counts[4], 0, "a -inf logit was drawn");
            let p = softmax64(&row, t as f64);
            for (i, &c) in counts.iter().enumerate() {
                // 5 standard deviations of a binomial count.
                let sd = (n as f64 * p[i] * (1.0 - p[i])).sqrt();
                assert!(
                    (c as f64 - n as f64 * p[i]).abs() <= 5.0 * sd + 1.0,
                    "T {t}, token {i}: {c} draws, expected {}",
                    n as f64 * p[i]
                );
            }
        }
    }

    #[test]
    fn draws_across_blocks_follow_the_distribution_and_skip_masked_entries() {
        // 300 entries (5 blocks, the last one partial): a few strong ones spread over the
        // blocks, the rest weak, a masked tail (as the rollout masks ids past the tokenizer).
        let mut row = vec![-2.0f32; 300];
        for (i, v) in [
            (3usize, 1.0f32),
            (70, 2.0),
            (150, 0.5),
            (250, 1.5),
            (255, 1.0),
        ] {
            row[i] = v;
        }
        row[280..].fill(f32::NEG_INFINITY);
        let p = softmax64(&row, 1.0);
        let params = SamplingParams::default();
        let mut sc = RowScratch::default();
        let mut rng = ChaCha12Rng::seed_from_u64(4);
        let n = 100_000;
        let mut counts = vec![0usize; row.len()];
        for _ in 0..n {
            let (tok, lp) = draw(&params, &mut sc, &row, &mut rng);
            counts[tok as usize] += 1;
            assert!((lp as f64 - p[tok as usize].ln()).abs() < 1e-5);
        }
        assert!(
            counts[280..].iter().all(|&c| c == 0),
            "a masked entry was drawn"
        );
        for i in [3usize, 70, 150, 250, 255] {
            let sd = (n as f64 * p[i] * (1.0 - p[i])).sqrt();
            let want = n as f64 * p[i];
            assert!(
                (counts[i] as f64 - want).abs() <= 5.0 * sd,
                "{i}: {} vs {want}",
                counts[i]
            );
        }
        // The weak entries together.
        let weak: usize = (0..280)
            .filter(|i| row[*i] == -2.0)
            .map(|i| counts[i])
            .sum();
        let pw: f64 = (0..280).filter(|i| row[*i] == -2.0).map(|i| p[i]).sum();
        let sd = (n as f64 * pw * (1.0 - pw)).sqrt();
        assert!((weak as f64 - n as f64 * pw).abs() <= 5.0 * sd);
    }

    #[test]
    fn steps_do_not_depend_on_the_thread_split() {
        let (b, v) = (40usize, 200usize);
        let mut g = ChaCha12Rng::seed_from_u64(8);
        let logits: Vec<f32> = (0..b * v).map(|_| g.random::<f32>() * 4.0).collect();
        let mut cfg = t2po_control::Config::paper();
        cfg.think_open = 1;
        cfg.think_close = 2;
        cfg.queue_len = 1;
        cfg.queue[0] = 2;
        cfg.min_len = 2;
        cfg.max_think = 5;
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let mut seqs = vec![Sequence::new(&cfg).unwrap(); b];
                for s in &mut seqs {
                    s.reset();
                    s.begin_generation(t2po_control::ThinkStart::Inside);
                }
                let mut rngs: Vec<_> = (0..b as u64).map(ChaCha12Rng::seed_from_u64).collect();
                let mut s = Sampler::new(SamplingParams::default()).unwrap();
                let mut out = Vec::new();
                let mut all = Vec::new();
                for _ in 0..8 {
                    s.step(&mut seqs, &mut rngs, &logits, v, &mut out).unwrap();
                    all.extend_from_slice(&out);
                }
                all
            })
        };
        let one = run(1);
        assert!(one.iter().any(|d| d.forced));
        assert_eq!(one, run(3));
    }

    #[test]
    fn top_p_keeps_the_smallest_nucleus() {
        // Probabilities 0.5, 0.3, 0.15, 0.05: top_p 0.75 keeps tokens {0, 1}.
        let row: Vec<f32> = [0.5f32, 0.3, 0.15, 0.05].iter().map(|p| p.ln()).collect();
        let s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_p: 0.75,
        })
        .unwrap();
        let mut rng = ChaCha12Rng::seed_from_u64(9);
        let mut counts = [0usize; 4];
        for _ in 0..20_000 {
            counts[draw(&s.params, &mut RowScratch::default(), &row, &mut rng).0 as usize] += 1;
        }
        assert_eq!(counts[2] + counts[3], 0);
        let ratio = counts[0] as f64 / counts[1] as f64;
        assert!((ratio - 5.0 / 3.0).abs() < 0.1, "{counts:?}");
    }

    #[test]
    fn temperature_zero_is_greedy_with_untempered_log_probs() {
        let params = SamplingParams {
            temperature: 0.0,
            top_p: 1.0,
        };
        Sampler::new(params).unwrap();
        let mut rng = ChaCha12Rng::seed_from_u64(9);
        // The largest entry wins wherever it sits (first block, a later block, the partial
        // tail), ties go to the lowest id, masked entries never win.
        for (at, len) in [(0usize, 10usize), (70, 200), (199, 200), (130, 131)] {
            let mut row: Vec<f32> = (0..len).map(|i| ((i * 37) % 11) as f32 * 0.1).collect();
            row[at] = 5.0;
            if at + 1 < len {
                row[at + 1] = f32::NEG_INFINITY;
            }
            for _ in 0..20 {
                let (tok, lp) = draw(&params, &mut RowScratch::default(), &row, &mut rng);
                assert_eq!(tok as usize, at);
                let want = softmax64(&row, 1.0)[at].ln();
                assert!((lp as f64 - want).abs() < 1e-5, "{lp} vs {want}");
            }
        }
        let tied = [1.0f32, 3.0, 3.0, -1.0];
        let (tok, _) = draw(&params, &mut RowScratch::default(), &tied, &mut rng);
        assert_eq!(tok, 1);
    }

    #[test]
    fn bad_parameters_are_named() {
        for t in [-0.5f32, f32::NAN, f32::INFINITY] {
            let e = Sampler::new(SamplingParams {
                temperature: t,
                top_p: 1.0,
            })
            .unwrap_err();
            assert!(e.to_string().contains("temperature"), "{t}");
        }
        let e = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_p: 1.5,
        })
        .unwrap_err();
        assert!(e.to_string().contains("top_p"));
    }

    /// The paper's rules on a small vocabulary: `<think>` 1, `</think>` 2, the forced queue
    /// `</think>` then token 3, L_min = 4 and L_max = `max_think`.
    fn think_config(max_think: u32) -> t2po_control::Config {
        let mut cfg = t2po_control::Config::paper();
        cfg.think_open = 1;
        cfg.think_close = 2;
        cfg.queue_len = 2;
        cfg.queue[..2].copy_from_slice(&[2, 3]);
        cfg.min_len = 4;
        cfg.max_think = max_think;
        cfg
    }

    /// A sequence whose generation starts inside a think block.
    fn inside_think(cfg: &t2po_control::Config) -> t2po_control::Sequence {
        let mut seq = t2po_control::Sequence::new(cfg).unwrap();
        seq.reset();
        seq.begin_generation(t2po_control::ThinkStart::Inside);
        seq
    }

    #[test]
    fn forced_steps_replace_sampling_and_are_accepted() {
        let mut seqs = vec![inside_think(&think_config(6))];
        let mut rngs = vec![ChaCha12Rng::seed_from_u64(1)];
        let mut s = Sampler::new(SamplingParams::default()).unwrap();
        // Token 5 always wins by far: the model never closes the think block itself.
        let mut row = vec![0.0f32; 8];
        row[5] = 30.0;
        let mut out = Vec::new();
        let mut emitted = Vec::new();
        for _ in 0..9 {
            s.step(&mut seqs, &mut rngs, &row, 8, &mut out).unwrap();
            emitted.push((out[0].token, out[0].forced, out[0].event));
        }
        // The budget L_max = 6 fires at the 6th think token; the queue follows in order.
        let tokens: Vec<u32> = emitted.iter().map(|e| e.0).collect();
        assert_eq!(&tokens[..8], &[5, 5, 5, 5, 5, 5, 2, 3]);
        assert!(emitted[6].1 && emitted[7].1 && !emitted[5].1);
        assert!(emitted.iter().filter(|e| e.2 != Event::None).count() == 1);
        assert!(seqs[0].fired().is_some());
    }

    /// One think block of `steps` decode steps over `rows` at ε = `epsilon`: the draws.
    fn think_run(rows: &[Vec<f32>], epsilon: f32, seed: u64) -> Vec<Draw> {
        let mut cfg = think_config(40);
        cfg.window = 2;
        cfg.epsilon = epsilon;
        let mut seqs = vec![inside_think(&cfg)];
        let mut rngs = vec![ChaCha12Rng::seed_from_u64(seed)];
        let mut s = Sampler::new(SamplingParams::default()).unwrap();
        let mut out = Vec::new();
        rows.iter()
            .map(|row| {
                s.step(&mut seqs, &mut rngs, row, row.len(), &mut out)
                    .unwrap();
                out[0]
            })
            .collect()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// What `control.calibrate` rests on: a think block run with ε = 0 records the window
        /// means its convergence rule compared; at ε = their minimum m it generates the same
        /// tokens and never fires by convergence, and at the next float above m it fires by
        /// convergence exactly at the first step whose window mean was m (the tokens before
        /// it unchanged).
        #[test]
        fn the_rule_fires_exactly_where_epsilon_exceeds_the_smallest_compared_window_mean(
            seed in 0u64..1_000_000,
            scale in 0.2f32..6.0,
            drift in -0.02f32..0.3,
            calm in 0usize..10,
        ) {
            let mut g = ChaCha12Rng::seed_from_u64(seed);
            // Rows whose sharpness drifts, so M_t settles at varying rates, after `calm` equal
            // rows (a window mean of 0 can come at the rule's first check); the close tag is
            // unlikely but possible (the model may close think itself).
            let first: Vec<f32> = (0..16).map(|_| g.random::<f32>() * scale).collect();
            let rows: Vec<Vec<f32>> = (0..48)
                .map(|t| {
                    let sharp = scale * (1.0 + drift * t as f32).max(0.1);
                    let mut r: Vec<f32> = if t < calm {
                        first.clone()
                    } else {
                        (0..16).map(|_| g.random::<f32>() * sharp).collect()
                    };
                    r[2] -= 6.0;
                    r
                })
                .collect();
            let base = think_run(&rows, 0.0, seed);
            proptest::prop_assert!(base.iter().all(|d| d.event != Event::Converged));
            let Some(m) = base.iter().filter_map(|d| d.window_mean).reduce(f32::min) else {
                return Ok(());
            };
            let at = think_run(&rows, m, seed);
            proptest::prop_assert!(at.iter().all(|d| d.event != Event::Converged));
            let tokens = |d: &[Draw]| d.iter().map(|d| d.token).collect::<Vec<_>>();
            proptest::prop_assert_eq!(tokens(&at), tokens(&base));
            let above = think_run(&rows, m.next_up(), seed);
            let first = base.iter().position(|d| d.window_mean == Some(m)).unwrap();
            let fired = above.iter().position(|d| d.event == Event::Converged);
            proptest::prop_assert_eq!(fired, Some(first));
            proptest::prop_assert_eq!(tokens(&above[..=first]), tokens(&base[..=first]));
        }
    }

    #[test]
    fn the_search_from_the_back_finds_the_entry_the_search_from_the_front_finds() {
        // Rows of one chunk and of a partial block, with masked entries (probability 0): for
        // targets spread over the mass, the suffix search against `S − t` lands where the
        // prefix search against `t` does, except within rounding of a boundary between two
        // neighbouring entries of non-zero probability.
        let mut g = ChaCha12Rng::seed_from_u64(5);
        for len in [1usize, 63, 100, 2048] {
            let mut row: Vec<f32> = (0..len).map(|_| g.random::<f32>() * 6.0 - 3.0).collect();
            for (i, x) in row.iter_mut().enumerate() {
                if i % 7 == 3 {
                    *x = f32::NEG_INFINITY;
                }
            }
            let max = max_of(&row);
            let p: Vec<f64> = row
                .iter()
                .map(|&x| {
                    if x == f32::NEG_INFINITY {
                        0.0
                    } else {
                        exp_neg(x - max) as f64
                    }
                })
                .collect();
            let total: f64 = p.iter().sum();
            let mut mismatches = 0;
            for k in 0..2_000 {
                let t = total * (k as f64 + 0.5) / 2_000.0;
                let front = search_cumulative(&row, max, t).unwrap();
                let back = search_suffix(&row, max, total - t).unwrap();
                assert!(p[front] > 0.0 && p[back] > 0.0);
                if front != back {
                    mismatches += 1;
                    let (lo, hi) = (front.min(back), front.max(back));
                    assert!(p[lo + 1..hi].iter().all(|&q| q == 0.0), "{front} vs {back}");
                }
            }
            assert!(
                mismatches <= 4,
                "{mismatches} of 2000 targets differ (V {len})"
            );
            // A target above the row's sum is not found; the fallbacks name the edges.
            assert_eq!(search_suffix(&row, max, 2.0 * total), None);
            assert_eq!(first_positive(&row, max), p.iter().position(|&q| q > 0.0));
            assert_eq!(last_positive(&row, max), p.iter().rposition(|&q| q > 0.0));
        }
    }

    #[test]
    fn a_chunk_with_a_trace_of_mass_and_no_drawable_entry_is_passed_over() {
        // The kernel's mass of chunk 0 is a trace (below f32's range) while every entry there
        // has probability 0 in the sampler's f32: `u = 0` lands in it, and the draw moves on to
        // the first entry of non-zero probability instead of naming a masked one.
        let mut row = vec![f32::NEG_INFINITY; 2 * MASS_CHUNK + 10];
        row[MASS_CHUNK + 7] = 0.5;
        row[MASS_CHUNK + 9] = 1.0;
        let mass = [1e-39, 0.6 + 1.0, 0.0];
        assert_eq!(search_mass(&row, 1.0, &mass, 0.0), MASS_CHUNK + 7);
        // And the ends of the distribution stay on drawable entries.
        assert_eq!(search_mass(&row, 1.0, &mass, 1.0 - 1e-16), MASS_CHUNK + 9);
    }

    #[test]
    fn draws_from_the_kernels_statistics_equal_the_samplers_own_passes() {
        // Rows of several lengths (one block, blocks with a partial tail, the default vocab, four
        // chunks with masked ones), peaked and flat, with a masked tail; the kernel's statistics
        // and chunk masses of each row handed to
        // the draw give the same tokens as the sampler's own two passes from the same
        // generator states, and log-probs within 1e-5 of an f64 reference.
        let mut g = ChaCha12Rng::seed_from_u64(11);
        let mut rows = Vec::new();
        for (len, scale) in [
            (10usize, 1.0f32),
            (300, 3.0),
            (4096, 2.0),
            (4096, 12.0),
            (6200, 2.0),
        ] {
            let mut row: Vec<f32> = (0..len).map(|_| g.random::<f32>() * scale - 5.0).collect();
            let tail = len / 10;
            row[len - tail..].fill(f32::NEG_INFINITY);
            if len == 6200 {
                // Four chunks: the second masked whole (mass 0), the last masked whole.
                row[2048..4096].fill(f32::NEG_INFINITY);
            }
            rows.push(row);
        }
        let params = [
            (1.0f32, 1.0f32),
            (0.0, 1.0),
            (0.7, 1.0),
            (1.0, 0.9),
            (1.3, 0.95),
        ];
        for (temperature, top_p) in params {
            let params = SamplingParams { temperature, top_p };
            for row in &rows {
                let mut mass = vec![0.0; mass_chunks(row.len())];
                let stats = t2po_control::token_stats_mass(row.as_slice(), 20, &mut mass).unwrap();
                assert_eq!(stats.max_logit, max_of(row));
                let t = if temperature > 0.0 {
                    temperature as f64
                } else {
                    1.0
                };
                let p = softmax64(row, t);
                let (mut a, mut b) = (RowScratch::default(), RowScratch::default());
                let mut ga = ChaCha12Rng::seed_from_u64(row.len() as u64);
                let mut gb = ga.clone();
                let mut mismatches = 0;
                for _ in 0..2_000 {
                    let (ta, _) = draw(&params, &mut a, row, &mut ga);
                    let (tb, lb) = draw_with(&params, &mut b, row, &mut gb, Some((&stats, &mass)));
                    if ta != tb {
                        // Only where `u` falls within the two sums' rounding of the boundary
                        // between two neighbouring entries of non-zero probability.
                        mismatches += 1;
                        let (lo, hi) = (ta.min(tb) as usize, ta.max(tb) as usize);
                        assert!(
                            p[lo + 1..hi].iter().all(|&q| q == 0.0),
                            "{ta} vs {tb}: not neighbours (T {temperature}, V {})",
                            row.len()
                        );
                    }
                    let want = p[tb as usize].ln();
                    assert!((lb as f64 - want).abs() < 1e-5, "{lb} vs {want}");
                }
                assert_eq!(ga, gb, "the generators advance alike");
                // Expected: about u·V·(relative difference of the sums, ≤ 1e-6) per draw.
                assert!(mismatches <= 10, "{mismatches} of 2000 draws differ");
                if temperature != 1.0 || top_p < 1.0 {
                    assert_eq!(mismatches, 0, "only T = 1 takes the kernel's sum");
                }
            }
        }
    }
}
