//! Per-token statistics of one logits row in one pass: entropy, top-j confidence, max, log-sum-exp
//! (spec §1).
//!
//! Blockwise online softmax: the row is read once from memory, in chunks of 2048 that stay in L1.
//! For each chunk a max scan (per 64-block, for top-j), then `Σ e^(x−m)` and `Σ e^(x−m)(x−m)`
//! against the running max `m`, rescaled in f64 when `m` grows (`s ← s·e^(m−m')`,
//! `t ← (t + (m−m')·s)·e^(m−m')`), so `H = ln s − t/s` and `lse = m + ln s`. The passes are
//! software-pipelined: the exp pass over chunk k (already in L1) runs in the same loop as the
//! max scan of chunk k + 1, so the loads from memory overlap the arithmetic. Top-j keeps the j
//! largest values in a fixed sorted buffer; 64-blocks whose max is below the j-th value held
//! when their chunk began, or below a floor the first chunk sets (the whole row does, for an
//! f32 row of two chunks), are skipped (on AVX-512F the others are inserted by vector
//! operations with the buffer in registers: no walk, no branch per entry). NaN and `+inf` poison the sums (NaN propagates through the exp pass), which is
//! checked once per row; only then is the row scanned for the offending index.
//! On CPUs with AVX-512F the exp pass is explicit AVX-512 code (a 32-entry `2^(i/32)` table in
//! two registers, a degree-2 polynomial, `vscalefps`: 12 vector operations per 16 entries with
//! the subtraction, the range mask and both sums, where the portable form takes 14) and
//! touches the row one chunk beyond the one being scanned, one load per cache line, so the
//! misses of a row streamed from L3 overlap the arithmetic; elsewhere the portable form below.
//! Error bound (f32 rows): `exp` by Cody–Waite and a degree-5 minimax polynomial (≤ 6.5e-7
//! relative; the AVX-512 form ≤ 6e-7, seen 4.6e-7), lane sums of ≤ 64 terms in f32 then f64,
//! entries equal to the max counted exactly:
//! relative error of every statistic ≤ 1e-5 (tested against an f64 two-pass reference; seen
//! ≤ 3.2e-7), plus 1e-7 absolute for values at 0; the log-sum-exp `m + ln s` carries the sum's
//! relative error as an absolute one, so its floor is 1e-6 (seen 3e-7 on rows with lse ≈ 0).

use crate::config::TOP_J_CAPACITY;
use crate::error::{Error, RowError};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

/// Statistics of one logits row (`t2po_token_stats`). Natural logs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TokenStats {
    /// `H = −Σ p ln p`, in `[0, ln V]`.
    pub entropy: f32,
    /// `C = −(1/k) Σ_{i≤k} ln p_(i)` over the `k = top_count` largest probabilities.
    pub confidence: f32,
    /// The largest logit.
    pub max_logit: f32,
    /// `ln Σ e^x`.
    pub log_sum_exp: f32,
    /// The row length `V` (masked entries included).
    pub vocab: u32,
    /// `k = min(j, number of finite entries)`.
    pub top_count: u32,
}

/// Entries per chunk: 8 KiB of f32, two chunks (the one in the exp pass, the one being scanned)
/// well inside L1. Measured on the Intel Xeon (model 167, a row of 151 936 in L2, same run):
/// 2048 ran ~5 % faster than 1024 — half the chunk boundaries, where the next exp pass waits
/// for the chunk's max — and 4096 no faster.
const CHUNK: usize = MASS_CHUNK;
const BLOCK: usize = 64;
/// The AVX-512 exp pass over chunk `k` touches chunk `k + 1 + TOUCH_AHEAD` (one load per cache
/// line) while it scans chunk `k + 1`: measured on an Intel Xeon (Sapphire Rapids class), rows
/// streamed from L3 ran ~10 % faster with a touch than without, and a touch one chunk beyond
/// the scan ~2 % faster than two (three or four: no better; one load per 128 or 256 bytes, or
/// all of a chunk's lines at once: slower). The hardware prefetchers alone left the arithmetic
/// waiting on memory. A `PREFETCHT0` in the touch's place measured another 3–7 % (a load that
/// misses holds up retirement, a prefetch does not): it is what toolchains whose
/// `_mm_prefetch` is a safe function build (`cfg(t2po_safe_prefetch)`, probed by `build.rs`);
/// on the declared minimum Rust (1.89) the intrinsic is `unsafe`, which this crate keeps for
/// FFI only, so that build keeps the touch. (Measured with chunks of 1024; with 2048, one chunk ahead and two were alike.)
const TOUCH_AHEAD: usize = 1;

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::bf16 {}
    impl Sealed for half::f16 {}
}

/// An element type of a logits row: `f32`, `bf16` or `f16`.
pub trait Logit: Copy + sealed::Sealed {
    /// Widens a chunk of at most `CHUNK` entries to f32 (no copy for f32).
    #[doc(hidden)]
    fn widen<'a>(src: &'a [Self], buf: &'a mut [f32; CHUNK]) -> &'a [f32];
    /// The f32 view of a chunk [`widen`](Self::widen) already wrote to `buf` (`src` for f32).
    #[doc(hidden)]
    fn widened<'a>(src: &'a [Self], buf: &'a [f32; CHUNK]) -> &'a [f32] {
        &buf[..src.len()]
    }
    /// This value as f32.
    fn to_f32(self) -> f32;
    /// The whole row as f32 without a copy (`Some` for f32 only).
    #[doc(hidden)]
    fn as_f32_row(_row: &[Self]) -> Option<&[f32]> {
        None
    }
    /// The raw bits (a load the compiler must keep: the look-ahead touch of the row).
    #[doc(hidden)]
    fn bits(self) -> u32;
    /// `−inf` of this type.
    const NEG_INF: Self;
    /// `0` of this type.
    const ZERO: Self;
}

impl Logit for f32 {
    #[inline]
    fn widen<'a>(src: &'a [f32], _buf: &'a mut [f32; CHUNK]) -> &'a [f32] {
        src
    }
    #[inline]
    fn widened<'a>(src: &'a [f32], _buf: &'a [f32; CHUNK]) -> &'a [f32] {
        src
    }
    fn to_f32(self) -> f32 {
        self
    }
    #[inline]
    fn as_f32_row(row: &[f32]) -> Option<&[f32]> {
        Some(row)
    }
    #[inline(always)]
    fn bits(self) -> u32 {
        self.to_bits()
    }
    const NEG_INF: Self = f32::NEG_INFINITY;
    const ZERO: Self = 0.0;
}

impl Logit for bf16 {
    #[inline]
    fn widen<'a>(src: &'a [bf16], buf: &'a mut [f32; CHUNK]) -> &'a [f32] {
        let dst = &mut buf[..src.len()];
        widen_bf16(src, dst);
        dst
    }
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[inline(always)]
    fn bits(self) -> u32 {
        self.to_bits() as u32
    }
    const NEG_INF: Self = bf16::NEG_INFINITY;
    const ZERO: Self = bf16::ZERO;
}

/// bf16 is the top half of an f32: a shift, which vectorises (NaN payloads survive); compiled
/// for the CPU's vector width (the caller, generic over the element type, is not): a bf16 row
/// of 151 936 in L2 measured 36 → 31 µs on the Intel Xeon (criterion, builds alternated).
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "x86_64+avx"
))]
fn widen_bf16(src: &[bf16], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = f32::from_bits((s.to_bits() as u32) << 16);
    }
}

impl Logit for f16 {
    #[inline]
    fn widen<'a>(src: &'a [f16], buf: &'a mut [f32; CHUNK]) -> &'a [f32] {
        let dst = &mut buf[..src.len()];
        src.convert_to_f32_slice(dst);
        dst
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline(always)]
    fn bits(self) -> u32 {
        self.to_bits() as u32
    }
    const NEG_INF: Self = f16::NEG_INFINITY;
    const ZERO: Self = f16::ZERO;
}

/// Statistics of one row with top-`top_j` confidence (`1 ≤ top_j ≤ 64`).
///
/// `−inf` entries are masked tokens; NaN, `+inf`, an empty row or a row without a finite entry
/// is an error. If fewer than `top_j` entries are finite the confidence averages the finite ones.
pub fn token_stats<T: Logit>(row: &[T], top_j: u32) -> Result<TokenStats, Error> {
    token_stats_wide(row, top_j, None).map(|w| w.stats)
}

/// Entries per chunk of [`token_stats_mass`]'s probability masses (the statistics pass's
/// chunk).
pub const MASS_CHUNK: usize = 2048;

/// The number of [`MASS_CHUNK`]-entry chunks of a row of `vocab` entries: the length of the
/// `mass` slice [`token_stats_mass`] fills.
pub const fn mass_chunks(vocab: usize) -> usize {
    vocab.div_ceil(MASS_CHUNK)
}

/// [`token_stats`], handing back what its exp pass summed on the way: `mass[k] = Σ e^(x − max)`
/// over chunk `k` (entries `k·MASS_CHUNK ..`), relative to the row's max, so `Σ mass` is
/// `e^(log_sum_exp − max_logit)` up to rounding and `mass[k] / Σ mass` the probability of chunk
/// `k` at temperature 1. A sampler that already has the statistics then draws without another
/// pass over the row: it picks the chunk from the masses and searches that chunk alone
/// (`2048` exponentials at most instead of the row's).
///
/// The statistics are [`token_stats`]'s bit for bit. Each mass carries the kernel's error
/// (`exp` ≤ 6.5e-7 relative, f32 lane sums of ≤ 64 terms; tested ≤ 1e-5 relative against an
/// f64 reference); a chunk without finite entries has mass 0. `mass.len()` must be
/// [`mass_chunks`]`(row.len())`; on an error its contents are unspecified.
pub fn token_stats_mass<T: Logit>(
    row: &[T],
    top_j: u32,
    mass: &mut [f64],
) -> Result<TokenStats, Error> {
    token_stats_wide(row, top_j, Some(mass)).map(|w| w.stats)
}

/// [`TokenStats`] together with the entropy and confidence in f64, as computed before their
/// rounding to f32 (what the running normalisation of `M_t` takes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct WideStats {
    pub stats: TokenStats,
    pub entropy: f64,
    pub confidence: f64,
}

/// [`token_stats`] with the f64 entropy and confidence kept, and each chunk's mass written to
/// `mass` when given ([`token_stats_mass`]).
pub(crate) fn token_stats_wide<T: Logit>(
    row: &[T],
    top_j: u32,
    mut mass: Option<&mut [f64]>,
) -> Result<WideStats, Error> {
    if top_j == 0 || top_j as usize > TOP_J_CAPACITY {
        return Err(Error::TopJ(top_j));
    }
    if row.is_empty() {
        return Err(RowError::Empty.into());
    }
    if row.len() > u32::MAX as usize {
        return Err(Error::Size("a row longer than u32::MAX entries"));
    }
    if mass
        .as_deref()
        .is_some_and(|m| m.len() != mass_chunks(row.len()))
    {
        return Err(Error::Size(
            "mass must hold one entry per 2048-entry chunk of the row (mass_chunks(vocab))",
        ));
    }
    let mut acc = Accumulator::new(top_j as usize);
    // Whether the AVX-512 exp pass keeps its range mask (see `sums_and_scan`).
    let mut careful = false;
    // Software-pipelined: the exp pass over chunk k (in L1) runs in the same loop as the max
    // scan of chunk k + 1, so the scan's loads from memory overlap the exp arithmetic.
    let n = row.len().div_ceil(CHUNK);
    let raw = |k: usize| &row[k * CHUNK..row.len().min((k + 1) * CHUNK)];
    let mut bufs = [[0.0f32; CHUNK]; 2];
    let first = T::widen(raw(0), &mut bufs[0]);
    // An f32 row of two chunks (the tiny default's 4,096 entries) is read whole for its floor:
    // a tighter bound for both chunks' scans (bf16/f16 rows would need the second chunk
    // widened first, so they keep the first chunk's).
    let whole = if n == 2 { T::as_f32_row(row) } else { None };
    let cmax = scan_first(first, whole, &mut acc.top);
    let mut plan = acc.begin(first, cmax);
    for k in 0..n {
        let (a, b) = bufs.split_at_mut(1);
        let (cur_buf, next_buf) = if k % 2 == 0 {
            (&a[0], &mut b[0])
        } else {
            (&b[0], &mut a[0])
        };
        let cur = T::widened(raw(k), cur_buf);
        if k + 1 < n {
            let next = T::widen(raw(k + 1), next_buf);
            let cmax = match plan {
                Some(has_max) => {
                    let lo = row.len().min((k + 1 + TOUCH_AHEAD) * CHUNK);
                    let far = &row[lo..row.len().min(lo + CHUNK)];
                    let (sums, cmax) =
                        sums_and_scan(cur, acc.m, has_max, next, far, &mut acc.top, &mut careful);
                    acc.add(sums);
                    cmax
                }
                None => scan(next, &mut acc.top),
            };
            if let Some(ms) = mass.as_deref_mut() {
                ms[k] = acc.last_mass(plan);
            }
            plan = acc.begin(next, cmax);
            if let Some(ms) = mass.as_deref_mut() {
                // The running max moved: the earlier chunks' masses move with the sums.
                if acc.scale != 1.0 {
                    ms[..=k].iter_mut().for_each(|x| *x *= acc.scale);
                }
            }
        } else {
            if let Some(has_max) = plan {
                acc.add(sums(cur, acc.m, has_max));
            }
            if let Some(ms) = mass.as_deref_mut() {
                ms[k] = acc.last_mass(plan);
            }
        }
    }
    if acc.poisoned() {
        return Err(first_bad(row).into());
    }
    Ok(acc.finish(row.len())?)
}

/// The first NaN or `+inf` of a row known to hold one (cold path).
#[cold]
fn first_bad<T: Logit>(row: &[T]) -> RowError {
    for (index, x) in row.iter().enumerate() {
        let x = x.to_f32();
        if x.is_nan() {
            return RowError::NaN { index };
        }
        if x == f32::INFINITY {
            return RowError::PosInf { index };
        }
    }
    RowError::Empty
}

/// The j largest values seen, sorted descending, in a fixed buffer.
#[derive(Clone, Copy)]
struct TopJ {
    vals: [f32; TOP_J_CAPACITY],
    len: usize,
    j: usize,
    /// A value every candidate must exceed even before `j` are held: just below a lower bound
    /// of the row's `j`-th largest value ([`scan_first`]), else `−inf`.
    floor: f32,
}

impl TopJ {
    fn new(j: usize) -> Self {
        Self {
            vals: [f32::NEG_INFINITY; TOP_J_CAPACITY],
            len: 0,
            j,
            floor: f32::NEG_INFINITY,
        }
    }

    /// The value a candidate must exceed: the `j`-th held value, or the floor until `j` are
    /// held (the `j` held values are then all above the floor).
    #[inline]
    fn threshold(&self) -> f32 {
        if self.len < self.j {
            self.floor
        } else {
            self.vals[self.j - 1]
        }
    }

    /// Inserts `x`, which exceeds the threshold, after the held values `≥ x` (the smallest
    /// drops out when `j` are held). A linear walk from the bottom: candidates mostly land just
    /// above the threshold, so it is short.
    #[inline]
    fn insert(&mut self, x: f32) {
        let mut i = if self.len < self.j {
            self.len += 1;
            self.len - 1
        } else {
            self.j - 1
        };
        while i > 0 && self.vals[i - 1] < x {
            self.vals[i] = self.vals[i - 1];
            i -= 1;
        }
        self.vals[i] = x;
    }
}

impl TopJ {
    /// [`offer_block`] with the insertion `insert`.
    #[inline(always)]
    fn offer_block_with(&mut self, block: &[f32], mut insert: impl FnMut(&mut Self, f32)) {
        for group in block.chunks(LANES) {
            let mut thr = self.threshold();
            // NaN compares false, so it is never held.
            let mut above = group
                .iter()
                .enumerate()
                .fold(0u32, |mask, (l, &x)| mask | (((x > thr) as u32) << l));
            while above != 0 {
                let x = group[above.trailing_zeros() as usize];
                above &= above - 1;
                if x > thr {
                    insert(self, x);
                    thr = self.threshold();
                }
            }
        }
    }
}

/// Offers the entries of a block (≤ 64) whose maximum exceeds the threshold to the top-j
/// buffer: a bit mask of the entries above the threshold per 16-group (a vector compare), then
/// only those go to the insertion, each checked again against the threshold it may have raised.
/// On AVX-512F the insertion is the branch-free vector one, without that check (see
/// `x512::offer_block` for why it needs none).
#[cold]
#[inline(never)]
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "x86_64+avx"
))]
fn offer_block(top: &mut TopJ, block: &[f32]) {
    #[cfg(t2po_static_simd)]
    return top.offer_block_with(block, TopJ::insert);
    #[cfg(not(t2po_static_simd))]
    multiversion::target::match_target! {
        "x86_64+avx512f" => x512::offer_block(top, block),
        "x86_64+avx2" => x256::offer_block(top, block),
        _ => top.offer_block_with(block, TopJ::insert),
    }
}

/// [`offer_block`] on AVX2 (CPUs without AVX-512F): the insertion of `x512::offer_block` with
/// 8-lane registers. The held values live in one to eight `__m256` (by `j`) for the block; per
/// 8-entry group one compare gives the entries above the threshold as it stood when the group
/// began, and each goes in by a rotate, a blend and two compares per held register instead of
/// the scalar walk — the same values in the same places (see `x512::offer_block` for why the
/// group needs no re-check against the threshold its earlier insertions raised).
#[cfg(all(target_arch = "x86_64", not(t2po_static_simd)))]
mod x256 {
    use super::TopJ;
    use core::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx2")]
    fn load(x: &[f32]) -> __m256 {
        let a: &[f32; 8] = x[..8].try_into().expect("8 lanes");
        _mm256_setr_ps(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7])
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) fn offer_block(top: &mut TopJ, block: &[f32]) {
        match top.j.div_ceil(8) {
            1 => offer_in_registers::<1>(top, block),
            2 => offer_in_registers::<2>(top, block),
            3 => offer_in_registers::<3>(top, block),
            4 => offer_in_registers::<4>(top, block),
            5 => offer_in_registers::<5>(top, block),
            6 => offer_in_registers::<6>(top, block),
            7 => offer_in_registers::<7>(top, block),
            _ => offer_in_registers::<8>(top, block),
        }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn offer_in_registers<const NV: usize>(top: &mut TopJ, block: &[f32]) {
        let mut held = [_mm256_setzero_ps(); NV];
        for (h, v) in held.iter_mut().zip(top.vals.chunks_exact(8)) {
            *h = load(v);
        }
        // The threshold: lane `j − 1` of the last vector (`−inf` until `j` values are held),
        // at least the floor.
        let pick = _mm256_set1_epi32(((top.j - 1) % 8) as i32);
        let floor = _mm256_set1_ps(top.floor);
        for g in block.chunks(8) {
            let xs = if g.len() == 8 {
                load(g)
            } else {
                let mut padded = [f32::NEG_INFINITY; 8];
                padded[..g.len()].copy_from_slice(g);
                load(&padded)
            };
            let thr = _mm256_max_ps(_mm256_permutevar8x32_ps(held[NV - 1], pick), floor);
            // NaN compares false, so it is never held.
            let mut above = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(xs, thr)) as u32;
            while above != 0 {
                let at = _mm256_set1_epi32(above.trailing_zeros() as i32);
                insert(&mut held, _mm256_permutevar8x32_ps(xs, at));
                above &= above - 1;
            }
        }
        // Held: the lanes below `j` that are not `−inf`.
        let neg_inf = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut len = 0;
        for (i, (h, v)) in held.iter().zip(top.vals.chunks_exact_mut(8)).enumerate() {
            v.copy_from_slice(&bytemuck::cast::<__m256, [f32; 8]>(*h));
            let below_j = 0xffu32.checked_shr((8 * (i + 1)).saturating_sub(top.j) as u32);
            let finite = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_NEQ_OQ>(*h, neg_inf)) as u32;
            len += (finite & below_j.unwrap_or(0)).count_ones() as usize;
        }
        top.len = len;
    }

    /// `TopJ::insert` of `x` (broadcast) into the held vectors, as `x512::insert`: lane by
    /// lane the old value where it is `≥ x`, else `x` where the lane before it is `≥ x`, else
    /// the lane before it.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn insert<const NV: usize>(held: &mut [__m256; NV], x: __m256) {
        // Each register rotated up one lane ([old[7], old[0], …, old[6]]); the lane before
        // lane 0 of the first register is `+inf`: nothing but `x` moves into place 0.
        let rotate = _mm256_setr_epi32(7, 0, 1, 2, 3, 4, 5, 6);
        let mut rotated_before = _mm256_set1_ps(f32::INFINITY);
        for h in held.iter_mut() {
            let rotated = _mm256_permutevar8x32_ps(*h, rotate);
            // [before[7], old[0], …, old[6]]
            let prev = _mm256_blend_ps::<1>(rotated, rotated_before);
            let shift = _mm256_cmp_ps::<_CMP_LT_OQ>(*h, x);
            let from_prev = _mm256_cmp_ps::<_CMP_LT_OQ>(prev, x);
            *h = _mm256_blendv_ps(*h, _mm256_blendv_ps(x, prev, from_prev), shift);
            rotated_before = rotated;
        }
    }
}

struct Accumulator {
    /// Running max (`−inf` until a finite entry is seen).
    m: f32,
    /// `Σ e^(x−m)`.
    s: f64,
    /// `Σ e^(x−m)(x−m)` (≤ 0).
    t: f64,
    /// A NaN was seen in a chunk without finite entries (elsewhere NaN poisons `s`/`t`).
    nan: bool,
    top: TopJ,
    /// The factor the last [`begin`](Self::begin) scaled the sums by (1 when the max stayed).
    scale: f64,
    /// The last chunk's `Σ e^(x−m)`, as [`add`](Self::add) added it to `s`.
    last: f64,
}

impl Accumulator {
    fn new(j: usize) -> Self {
        Self {
            m: f32::NEG_INFINITY,
            s: 0.0,
            t: 0.0,
            nan: false,
            top: TopJ::new(j),
            scale: 1.0,
            last: 0.0,
        }
    }

    /// Takes a chunk's max (from its scan): moves the running max, rescaling the sums, and
    /// says whether the chunk's exp pass is needed (`None`: nothing finite in it) and whether
    /// the chunk holds the running max.
    #[inline]
    fn begin(&mut self, xs: &[f32], cmax: f32) -> Option<bool> {
        self.scale = 1.0;
        if cmax == f32::NEG_INFINITY {
            // Nothing finite here (the max ignores NaN, so look for one).
            self.nan |= xs.iter().any(|x| x.is_nan());
            return None;
        }
        if cmax > self.m {
            if self.m != f32::NEG_INFINITY {
                let shift = (self.m - cmax) as f64;
                let scale = libm::exp(shift);
                self.t = (self.t + shift * self.s) * scale;
                self.s *= scale;
                self.scale = scale;
            }
            self.m = cmax;
        }
        Some(cmax == self.m)
    }

    /// Adds a chunk's `(count of max entries, Σ e^(x−m), Σ e^(x−m)(x−m))`.
    #[inline]
    fn add(&mut self, (count_max, tail, tsum): (f32, f32, f32)) {
        self.last = count_max as f64 + tail as f64;
        self.s += self.last;
        self.t += tsum as f64;
    }

    /// The mass of the chunk whose exp pass `plan` said was needed or not.
    #[inline]
    fn last_mass(&self, plan: Option<bool>) -> f64 {
        if plan.is_some() {
            self.last
        } else {
            0.0
        }
    }

    /// Whether a NaN or `+inf` was seen.
    fn poisoned(&self) -> bool {
        self.nan || !(self.s.is_finite() && self.t.is_finite()) || self.m == f32::INFINITY
    }

    fn finish(&self, len: usize) -> Result<WideStats, RowError> {
        if self.m == f32::NEG_INFINITY {
            return Err(RowError::NoFinite { len });
        }
        let ln_s = libm::log(self.s);
        let lse = self.m as f64 + ln_s;
        let entropy = ln_s - self.t / self.s;
        let k = self.top.len;
        // Relative to the max, so huge magnitudes do not cancel: C = ln s − mean(x_(i) − m).
        let m = self.m as f64;
        let top_gap: f64 = self.top.vals[..k].iter().map(|&v| v as f64 - m).sum();
        let confidence_wide = ln_s - top_gap / k as f64;
        let (confidence, log_sum_exp) = (confidence_wide as f32, lse as f32);
        if !(confidence.is_finite() && log_sum_exp.is_finite()) {
            return Err(RowError::Range);
        }
        Ok(WideStats {
            stats: TokenStats {
                entropy: entropy as f32,
                confidence,
                max_logit: self.m,
                log_sum_exp,
                vocab: len as u32,
                top_count: k as u32,
            },
            entropy,
            confidence: confidence_wide,
        })
    }
}

/// Lanes of the vector passes: one AVX-512 register of f32, two AVX2 registers.
const LANES: usize = 16;

/// Lane-wise `max(a, b)` of 16 lanes (NaN in `b` ignored).
#[inline(always)]
fn vmax(a: [f32; LANES], b: &[f32]) -> [f32; LANES] {
    let mut out = a;
    for l in 0..LANES {
        out[l] = if b[l] > out[l] { b[l] } else { out[l] };
    }
    out
}

/// The max scan of one chunk: lane maxima, and a bit per 64-block whose max exceeds the top-j
/// threshold as it stood when the chunk began. Those blocks are offered to the top-j buffer
/// after the scan (which checks each entry against the live threshold), so the scan loop makes
/// no call and the exp pass interleaved with it keeps its accumulators in registers. Per block
/// the max stays a 16-lane vector (a two-level tree: no long dependency chain, no horizontal
/// reduction per block); one reduction per chunk.
struct Scan {
    cmax: [f32; LANES],
    thr: f32,
    flagged: u64,
    blocks: u32,
}

impl Scan {
    #[inline(always)]
    fn new(top: &TopJ) -> Self {
        Self {
            cmax: [f32::NEG_INFINITY; LANES],
            thr: top.threshold(),
            flagged: 0,
            blocks: 0,
        }
    }

    /// The whole scan of the chunk `xs` on its own (not interleaved with an exp pass): its max.
    #[inline(always)]
    fn run(xs: &[f32], top: &mut TopJ) -> f32 {
        let mut sc = Self::new(top);
        for block in xs.chunks_exact(BLOCK) {
            sc.block(block);
        }
        sc.finish(xs, top)
    }

    /// One full 64-block (at most `CHUNK / BLOCK` per chunk).
    #[inline(always)]
    fn block(&mut self, block: &[f32]) {
        // No `−inf` seed: a NaN in a block's first or third vector can stay in `bm` (and hide a
        // top-j candidate of its lane), but never in `cmax` (`vmax` drops a NaN `b`), and such
        // a row is an error anyway (the NaN poisons the exp pass).
        let first =
            |i: usize| -> [f32; LANES] { block[i..i + LANES].try_into().expect("16 lanes") };
        let lo = vmax(first(0), &block[LANES..2 * LANES]);
        let hi = vmax(first(2 * LANES), &block[3 * LANES..BLOCK]);
        let bm = vmax(lo, &hi);
        self.cmax = vmax(self.cmax, &bm);
        let above = bm.iter().fold(false, |any, &x| any | (x > self.thr));
        self.flagged |= (above as u64) << self.blocks;
        self.blocks += 1;
    }

    /// The last, partial block (< 64 entries) of the chunk `xs`, the offers of the flagged
    /// blocks, then the chunk's max.
    #[inline(always)]
    fn finish(mut self, xs: &[f32], top: &mut TopJ) -> f32 {
        let rest = &xs[self.blocks as usize * BLOCK..];
        while self.flagged != 0 {
            let b = self.flagged.trailing_zeros() as usize;
            self.flagged &= self.flagged - 1;
            offer_block(top, &xs[b * BLOCK..(b + 1) * BLOCK]);
        }
        let mut rmax = [f32::NEG_INFINITY; LANES];
        for (l, &x) in rest.iter().enumerate() {
            let l = l % LANES;
            rmax[l] = if x > rmax[l] { x } else { rmax[l] };
        }
        if rmax.iter().fold(false, |any, &x| any | (x > self.thr)) {
            offer_block(top, rest);
        }
        self.cmax = vmax(self.cmax, &rmax);
        self.cmax
            .iter()
            .fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a })
    }
}

/// One entry of a chunk's exp pass, against the running max `m`, into its lane's accumulators:
/// the count of entries equal to `m`, `Σ e^(x−m)` over the others and `Σ e^(x−m)(x−m)`.
/// Counting the max entries apart keeps the small tail exact relative to itself; only a chunk
/// holding the max (`HAS_MAX`) can have such entries, so the others skip that test.
#[inline(always)]
fn lane<const HAS_MAX: bool>(fma: bool, x: f32, m: f32, e: &mut f32, t: &mut f32, n: &mut u32) {
    let d = x - m;
    // Entries below e^−87 add nothing (masked −inf ones included). NaN is kept, so it flows
    // into the sums (checked once per row). Written as a negated `<` on purpose: that is one
    // unordered vector compare, where `d >= −87 || d.is_nan()` compiles to three ops.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    let mut keep = !(d < -87.0);
    if HAS_MAX {
        *n += (d == 0.0) as u32;
        keep &= d != 0.0;
    }
    let v = exp_neg(fma, d);
    // Selects, not branches: the compiler turns them into merge-masked vector adds and FMAs.
    *e = if keep { *e + v } else { *e };
    *t = if keep { madd(fma, v, d, *t) } else { *t };
}

/// 32 lane accumulators per sum (≤ 64 terms each for a chunk), which the compiler keeps in
/// vector registers as long as they are plain local arrays; then a sum across lanes.
type Lanes = ([f32; 2 * LANES], [f32; 2 * LANES], [u32; 2 * LANES]);

/// 32 entries, one per lane.
#[inline(always)]
fn group<const HAS_MAX: bool>(fma: bool, g: &[f32; 2 * LANES], m: f32, acc: &mut Lanes) {
    let (e, t, n) = acc;
    for l in 0..2 * LANES {
        lane::<HAS_MAX>(fma, g[l], m, &mut e[l], &mut t[l], &mut n[l]);
    }
}

/// Fewer than 32 entries (the end of a row), one per lane.
#[inline(always)]
fn partial_group<const HAS_MAX: bool>(fma: bool, g: &[f32], m: f32, acc: &mut Lanes) {
    let (e, t, n) = acc;
    for (l, &x) in g.iter().enumerate().take(2 * LANES) {
        lane::<HAS_MAX>(fma, x, m, &mut e[l], &mut t[l], &mut n[l]);
    }
}

#[inline(always)]
fn lanes_total(acc: &Lanes) -> (f32, f32, f32) {
    (
        acc.2.iter().sum::<u32>() as f32,
        fold_lanes(&acc.0),
        fold_lanes(&acc.1),
    )
}

/// The row's `j`-th largest value is at least the `j`-th largest of any `j` or more distinct
/// entries. For `j ≤ 32` the first chunk's 32 lane maxima (even and odd 64-blocks apart, so each
/// lane covers its own entries) give such a bound, set as the top-j floor before the chunk's
/// scan: the chunk's entries below it never reach the insertion. (The floor lets entries equal
/// to the bound through: ties at the `j`-th value are kept.) Where the caller passes the `whole`
/// row (two chunks, already in cache) and `j ≤ 64`, the bound comes from 64 lane maxima over all
/// of it (blocks by their index mod 4): twice the maxima over twice the entries, so a bound
/// nearer the `j`-th value, and fewer blocks flagged and fewer insertions in both chunks. Then
/// [`scan`] of the first chunk.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "x86_64+avx"
))]
fn scan_first(xs: &[f32], whole: Option<&[f32]>, top: &mut TopJ) -> f32 {
    match whole {
        Some(w) if top.j <= 4 * LANES && w.len() >= 4 * BLOCK => {
            // Four named accumulators, each over its own block of the group (as the pair
            // below): an array of them indexed in a loop vectorises across the wrong axis.
            let mut s0 = [f32::NEG_INFINITY; LANES];
            let (mut s1, mut s2, mut s3) = (s0, s0, s0);
            let mut quads = w.chunks_exact(4 * BLOCK);
            for quad in &mut quads {
                let (a, b) = quad.split_at(2 * BLOCK);
                for v in a[..BLOCK].chunks_exact(LANES) {
                    s0 = vmax(s0, v);
                }
                for v in a[BLOCK..].chunks_exact(LANES) {
                    s1 = vmax(s1, v);
                }
                for v in b[..BLOCK].chunks_exact(LANES) {
                    s2 = vmax(s2, v);
                }
                for v in b[BLOCK..].chunks_exact(LANES) {
                    s3 = vmax(s3, v);
                }
            }
            for v in quads.remainder().chunks_exact(LANES) {
                s0 = vmax(s0, v);
            }
            let mut maxima = [f32::NEG_INFINITY; 4 * LANES];
            for (m, set) in maxima.chunks_exact_mut(LANES).zip(&[s0, s1, s2, s3]) {
                m.copy_from_slice(set);
            }
            set_floor(&maxima, top);
        }
        _ if top.j <= 2 * LANES && xs.len() >= 2 * BLOCK => {
            let (mut even, mut odd) = ([f32::NEG_INFINITY; LANES], [f32::NEG_INFINITY; LANES]);
            let mut pairs = xs.chunks_exact(2 * BLOCK);
            for pair in &mut pairs {
                for v in pair[..BLOCK].chunks_exact(LANES) {
                    even = vmax(even, v);
                }
                for v in pair[BLOCK..].chunks_exact(LANES) {
                    odd = vmax(odd, v);
                }
            }
            for v in pairs.remainder().chunks_exact(LANES) {
                even = vmax(even, v);
            }
            let mut maxima = [f32::NEG_INFINITY; 2 * LANES];
            maxima[..LANES].copy_from_slice(&even);
            maxima[LANES..].copy_from_slice(&odd);
            set_floor(&maxima, top);
        }
        _ => {}
    }
    Scan::run(xs, top)
}

/// The top-j floor from `N` maxima of disjoint entries (`j ≤ N`): just below the largest value
/// with at least `j` maxima ≥ it (ties counted). `vmax` drops NaN, so the maxima are never NaN.
/// Written as lane-wise loops over the `N` (a broadcast compare per value, then a masked max),
/// which vectorise.
#[inline(always)]
fn set_floor<const N: usize>(maxima: &[f32; N], top: &mut TopJ) {
    let mut at_least = [0u32; N];
    for (n, &v) in at_least.iter_mut().zip(maxima) {
        *n = maxima.iter().map(|&w| (w >= v) as u32).sum();
    }
    let j = top.j as u32;
    let mut best = [f32::NEG_INFINITY; N];
    for ((b, &v), &n) in best.iter_mut().zip(maxima).zip(&at_least) {
        *b = if n >= j { v } else { f32::NEG_INFINITY };
    }
    let bound = best.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    top.floor = bound.next_down();
}

/// The max scan of one chunk after a chunk without finite entries.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "x86_64+avx"
))]
fn scan(xs: &[f32], top: &mut TopJ) -> f32 {
    Scan::run(xs, top)
}

/// The exp pass of one chunk (the row's last).
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "x86_64+avx"
))]
fn sums(xs: &[f32], m: f32, has_max: bool) -> (f32, f32, f32) {
    #[cfg(t2po_static_simd)]
    return portable_sums(
        multiversion::target::target_cfg_f!(target_feature = "fma"),
        xs,
        m,
        has_max,
    );
    #[cfg(not(t2po_static_simd))]
    multiversion::target::match_target! {
        "x86_64+avx512f" => if has_max {
            x512::last_sums::<true>(xs, m)
        } else {
            x512::last_sums::<false>(xs, m)
        },
        _ => {
            let fma = multiversion::target::target_cfg_f!(target_feature = "fma");
            portable_sums(fma, xs, m, has_max)
        },
    }
}

/// [`sums`] in the portable form (`fma`: the clone has FMA).
#[inline(always)]
fn portable_sums(fma: bool, xs: &[f32], m: f32, has_max: bool) -> (f32, f32, f32) {
    let mut acc: Lanes = ([0.0; 2 * LANES], [0.0; 2 * LANES], [0; 2 * LANES]);
    let mut groups = xs.chunks_exact(2 * LANES);
    for g in &mut groups {
        let g: &[f32; 2 * LANES] = g.try_into().expect("chunks_exact");
        if has_max {
            group::<true>(fma, g, m, &mut acc);
        } else {
            group::<false>(fma, g, m, &mut acc);
        }
    }
    let rest = groups.remainder();
    if has_max {
        partial_group::<true>(fma, rest, m, &mut acc);
    } else {
        partial_group::<false>(fma, rest, m, &mut acc);
    }
    lanes_total(&acc)
}

/// The exp pass of the full chunk `cur` interleaved, block by block, with the max scan of the
/// next chunk `next`: the sums of `cur` and the max of `next`.
///
/// On AVX-512 a chunk without the running max first runs without the range mask (one vector
/// compare fewer per 16 entries): an entry far below the max then adds exactly 0 (`d < −104`,
/// the scale underflows), a value below 1.7e-38 (`−104 ≤ d < −87`: nothing at the sums'
/// precision, `s ≥ 1`) or, for `−inf`, NaN and `|d|` beyond ~4e26 (the polynomial overflows),
/// a non-finite sum. A chunk whose sums come out non-finite is redone with the mask (a NaN
/// still poisons them there), and the rest of the row keeps it (`careful`), so rows with
/// masked tokens pay the redo once.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "x86_64+avx"
))]
fn sums_and_scan<T: Logit>(
    cur: &[f32],
    m: f32,
    has_max: bool,
    next: &[f32],
    far: &[T],
    top: &mut TopJ,
    careful: &mut bool,
) -> ((f32, f32, f32), f32) {
    #[cfg(t2po_static_simd)]
    return {
        let _ = (far, careful);
        let fma = multiversion::target::target_cfg_f!(target_feature = "fma");
        portable_interleaved(fma, cur, m, has_max, next, top)
    };
    #[cfg(not(t2po_static_simd))]
    multiversion::target::match_target! {
        "x86_64+avx512f" => if has_max {
            x512::interleaved::<true, true, T>(cur, m, next, far, top)
        } else if *careful {
            x512::interleaved::<false, true, T>(cur, m, next, far, top)
        } else {
            let ((count, es, ts), cmax) = x512::interleaved::<false, false, T>(cur, m, next, far, top);
            if es.is_finite() && ts.is_finite() {
                ((count, es, ts), cmax)
            } else {
                *careful = true;
                let (_, es, ts) = x512::last_sums::<false>(cur, m);
                ((count, es, ts), cmax)
            }
        },
        _ => {
            let _ = (far, careful);
            let fma = multiversion::target::target_cfg_f!(target_feature = "fma");
            portable_interleaved(fma, cur, m, has_max, next, top)
        },
    }
}

/// [`sums_and_scan`] in the portable form (`fma`: the clone has FMA).
#[inline(always)]
fn portable_interleaved(
    fma: bool,
    cur: &[f32],
    m: f32,
    has_max: bool,
    next: &[f32],
    top: &mut TopJ,
) -> ((f32, f32, f32), f32) {
    if has_max {
        interleaved::<true>(fma, cur, m, next, top)
    } else {
        interleaved::<false>(fma, cur, m, next, top)
    }
}

#[inline(always)]
fn interleaved<const HAS_MAX: bool>(
    fma: bool,
    cur: &[f32],
    m: f32,
    next: &[f32],
    top: &mut TopJ,
) -> ((f32, f32, f32), f32) {
    let mut acc: Lanes = ([0.0; 2 * LANES], [0.0; 2 * LANES], [0; 2 * LANES]);
    let mut sc = Scan::new(top);
    let mut next_blocks = next.chunks_exact(BLOCK);
    for pair in cur.chunks_exact(BLOCK) {
        let (lo, hi) = pair.split_at(2 * LANES);
        group::<HAS_MAX>(fma, lo.try_into().expect("a 64-block"), m, &mut acc);
        group::<HAS_MAX>(fma, hi.try_into().expect("a 64-block"), m, &mut acc);
        if let Some(block) = next_blocks.next() {
            sc.block(block);
        }
    }
    // `cur` is a full chunk, so every full block of `next` was scanned above.
    let cmax = sc.finish(next, top);
    (lanes_total(&acc), cmax)
}

/// The exp pass on AVX-512F, the hot loop on CPUs that have it (explicit intrinsics, all safe
/// inside `#[target_feature]` functions). `e^d = 2^⌊k/32⌋ · 2^((k mod 32)/32) · e^r` with
/// `k = round(32·d·log2 e)` and `r = d − (k/32)·ln 2 ∈ [−ln2/64, ln2/64]` (one fused step, as in
/// [`exp_neg`]'s FMA form); `e^r` by a degree-2 polynomial (≤ 5.4e-8 relative), the 32
/// `2^(i/32)` from two registers by one `vpermt2ps` (the low 5 bits of the rounding sum are
/// `k mod 32`) and the power of two by one `vscalefps`, which floors `k/32` itself. Against
/// [`exp_neg`]'s degree-5 form that is 12 instead of 14 vector operations per 16 entries; the
/// 16-entry table with a degree-3 polynomial before it took one FMA more (measured, same run,
/// Intel Xeon, a row of 151 936: L2-resident 26.7 → 24.6 µs, streamed from L3 with huge pages
/// 30.2 → 29.1 µs). AMD Zen 4 takes the same path, where it moves FMAs to the shuffle and scale
/// units.
#[cfg(all(target_arch = "x86_64", not(t2po_static_simd)))]
mod x512 {
    use super::{Logit, Scan, TopJ, BLOCK, CHUNK};
    use core::arch::x86_64::*;

    /// `PREFETCHT0` of every cache line of `block` (a hint: no fault, no read into the program).
    #[cfg(t2po_safe_prefetch)]
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn prefetch<T>(block: &[T]) {
        let per_line = (64 / core::mem::size_of::<T>()).max(1);
        for line in block.chunks(per_line) {
            _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast::<i8>());
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load(x: &[f32]) -> __m512 {
        let a: &[f32; 16] = x[..16].try_into().expect("16 lanes");
        _mm512_setr_ps(
            a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13],
            a[14], a[15],
        )
    }

    /// 1.5·2^23: `d·32·log2 e + MAGIC` rounds to the integer `k` and leaves `k mod 32` in the
    /// low 5 bits (the table index).
    const MAGIC: f32 = 12_582_912.0;
    /// `32·log2 e`.
    const LOG2_E_32: f32 = 46.166_24;
    /// `e^r ≈ 1 + r·(C2[0] + r·C2[1])`, relative-minimax on `[−ln2/64, ln2/64]` (5.3e-8).
    const C2: [f32; 2] = [1.000_014_7, 0.500_000_54];
    /// `2^(i/32)`, `i = 0..32`, rounded to f32.
    const TABLE: [f32; 32] = [
        1.0,
        1.021_897_2,
        1.044_273_7,
        1.067_140_5,
        1.090_507_7,
        1.114_386_8,
        1.138_788_6,
        1.163_724_9,
        1.189_207_1,
        1.215_247_4,
        1.241_857_8,
        1.269_051,
        1.296_839_6,
        1.325_236_7,
        1.354_255_6,
        1.383_91,
        core::f32::consts::SQRT_2,
        1.445_180_8,
        1.476_826_2,
        1.509_164_5,
        1.542_210_8,
        1.575_980_9,
        1.610_490_3,
        1.645_755_5,
        1.681_792_9,
        1.718_619_3,
        1.756_252_2,
        1.794_709_1,
        1.834_008_1,
        1.874_167_7,
        1.915_206_6,
        1.957_144_1,
    ];

    /// The table as two registers (entries 0–15, 16–31).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn table() -> (__m512, __m512) {
        (load(&TABLE[..16]), load(&TABLE[16..]))
    }

    /// One vector of the exp pass; without `MASK` (and `HAS_MAX`) no range mask: see
    /// [`super::sums_and_scan`] for what entries far below the max give then.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn lane<const HAS_MAX: bool, const MASK: bool>(
        x: __m512,
        m: __m512,
        tab: (__m512, __m512),
        e: &mut __m512,
        t: &mut __m512,
        n: &mut __m512i,
    ) {
        let d = _mm512_sub_ps(x, m);
        let mut keep = if MASK || HAS_MAX {
            _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(d, _mm512_set1_ps(-87.0))
        } else {
            0xffff
        };
        if HAS_MAX {
            let eq = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(d, _mm512_setzero_ps());
            *n = _mm512_mask_add_epi32(*n, eq, *n, _mm512_set1_epi32(1));
            keep &= !eq;
        }
        let z = _mm512_fmadd_ps(d, _mm512_set1_ps(LOG2_E_32), _mm512_set1_ps(MAGIC));
        // `z/32 − MAGIC/32` is `k/32` exactly (ulp 1/32 at 2^18).
        let q = _mm512_fmadd_ps(z, _mm512_set1_ps(1.0 / 32.0), _mm512_set1_ps(-MAGIC / 32.0));
        let r = _mm512_fnmadd_ps(q, _mm512_set1_ps(core::f32::consts::LN_2), d);
        let p = _mm512_fmadd_ps(_mm512_set1_ps(C2[1]), r, _mm512_set1_ps(C2[0]));
        let p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0));
        let tv = _mm512_permutex2var_ps(tab.0, _mm512_castps_si512(z), tab.1);
        let v = _mm512_scalef_ps(_mm512_mul_ps(p, tv), q);
        if MASK || HAS_MAX {
            *e = _mm512_mask_add_ps(*e, keep, *e, v);
            *t = _mm512_mask3_fmadd_ps(v, d, *t, keep);
        } else {
            *e = _mm512_add_ps(*e, v);
            *t = _mm512_fmadd_ps(v, d, *t);
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) fn interleaved<const HAS_MAX: bool, const MASK: bool, T: Logit>(
        cur: &[f32],
        m: f32,
        next: &[f32],
        far: &[T],
        top: &mut TopJ,
    ) -> ((f32, f32, f32), f32) {
        #[cfg(not(t2po_safe_prefetch))]
        let mut touch = 0u32;
        let tab = table();
        let mv = _mm512_set1_ps(m);
        let (mut e0, mut e1, mut t0, mut t1) = (
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
        );
        let (mut n0, mut n1) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        let mut sc = Scan::new(top);
        let mut next_blocks = next.chunks_exact(BLOCK);
        for (i, b) in cur.chunks_exact(BLOCK).enumerate() {
            // The block `TOUCH_AHEAD` chunks further on is brought in while this one's
            // arithmetic runs: a prefetch per cache line where the toolchain's `_mm_prefetch`
            // is safe, else one load per cache line (64 B lines: 16 f32 or 32 half entries).
            if far.len() == CHUNK {
                let at = i * BLOCK;
                #[cfg(t2po_safe_prefetch)]
                prefetch(&far[at..at + BLOCK]);
                #[cfg(not(t2po_safe_prefetch))]
                {
                    touch |= far[at].bits()
                        | far[at + 16].bits()
                        | far[at + 32].bits()
                        | far[at + 48].bits();
                }
            }
            lane::<HAS_MAX, MASK>(load(&b[..16]), mv, tab, &mut e0, &mut t0, &mut n0);
            lane::<HAS_MAX, MASK>(load(&b[16..32]), mv, tab, &mut e1, &mut t1, &mut n1);
            lane::<HAS_MAX, MASK>(load(&b[32..48]), mv, tab, &mut e0, &mut t0, &mut n0);
            lane::<HAS_MAX, MASK>(load(&b[48..64]), mv, tab, &mut e1, &mut t1, &mut n1);
            if let Some(block) = next_blocks.next() {
                sc.block(block);
            }
        }
        let cmax = sc.finish(next, top);
        #[cfg(not(t2po_safe_prefetch))]
        core::hint::black_box(touch);
        let count = _mm512_reduce_add_epi32(_mm512_add_epi32(n0, n1)) as f32;
        let es = _mm512_reduce_add_ps(_mm512_add_ps(e0, e1));
        let ts = _mm512_reduce_add_ps(_mm512_add_ps(t0, t1));
        ((count, es, ts), cmax)
    }

    /// [`super::offer_block`] on AVX-512F. The held values live in registers for the block (one
    /// to four vectors by `j`) and go back to the buffer once at its end; an insertion is a
    /// handful of vector operations without a walk or a branch. Every entry above the
    /// threshold as it stood when its 16-group began is inserted, without a check against the
    /// threshold the group's earlier insertions raised: inserting a value at or below the
    /// `j`-th held one changes only the lanes from `j` on, which are never read — so the
    /// insertions of a group depend on each other only through the held vectors.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) fn offer_block(top: &mut TopJ, block: &[f32]) {
        match top.j.div_ceil(16) {
            1 => offer_in_registers::<1>(top, block),
            2 => offer_in_registers::<2>(top, block),
            3 => offer_in_registers::<3>(top, block),
            _ => offer_in_registers::<4>(top, block),
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn offer_in_registers<const NV: usize>(top: &mut TopJ, block: &[f32]) {
        let mut held = [_mm512_setzero_ps(); NV];
        for (h, v) in held.iter_mut().zip(top.vals.chunks_exact(16)) {
            *h = load(v);
        }
        // The threshold: lane `j − 1` of the last vector (`−inf` until `j` values are held),
        // at least the floor.
        let pick = _mm512_set1_epi32(((top.j - 1) % 16) as i32);
        let floor = _mm512_set1_ps(top.floor);
        for g in block.chunks(16) {
            let xs = if g.len() == 16 {
                load(g)
            } else {
                let mut padded = [f32::NEG_INFINITY; 16];
                padded[..g.len()].copy_from_slice(g);
                load(&padded)
            };
            let thr = _mm512_max_ps(_mm512_permutexvar_ps(pick, held[NV - 1]), floor);
            // NaN compares false, so it is never held.
            let mut above = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(xs, thr);
            while above != 0 {
                let at = _mm512_set1_epi32(above.trailing_zeros() as i32);
                insert(&mut held, _mm512_permutexvar_ps(at, xs));
                above &= above - 1;
            }
        }
        // Held: the lanes below `j` that are not `−inf` (a vector compare per register).
        let neg_inf = _mm512_set1_ps(f32::NEG_INFINITY);
        let mut len = 0;
        for (i, (h, v)) in held.iter().zip(top.vals.chunks_exact_mut(16)).enumerate() {
            v.copy_from_slice(&bytemuck::cast::<__m512, [f32; 16]>(*h));
            let below_j = u16::MAX.checked_shr((16 * (i + 1)).saturating_sub(top.j) as u32);
            let finite = _mm512_cmp_ps_mask::<_CMP_NEQ_OQ>(*h, neg_inf);
            len += (finite & below_j.unwrap_or(0)).count_ones() as usize;
        }
        top.len = len;
    }

    /// [`TopJ::insert`] of `x` (broadcast) into the held vectors: lane by lane the old value
    /// where it is `≥ x`, else `x` where the lane before it is `≥ x`, else the lane before it —
    /// the values below `x` shift one place, `x` fills the gap. The same values in the same
    /// places as the walk (ties: `x` after the held values equal to it); the lanes from `j` on
    /// take whatever shifts in and are never read.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn insert<const NV: usize>(held: &mut [__m512; NV], x: __m512) {
        // The lane before lane 0 is `+inf`: nothing but `x` moves into place 0.
        let mut before = _mm512_castps_si512(_mm512_set1_ps(f32::INFINITY));
        for h in held.iter_mut() {
            let old = _mm512_castps_si512(*h);
            // [before[15], old[0], …, old[14]]
            let prev = _mm512_castsi512_ps(_mm512_alignr_epi32::<15>(old, before));
            let shift = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(*h, x);
            let from_prev = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(prev, x);
            *h = _mm512_mask_blend_ps(shift, *h, _mm512_mask_blend_ps(from_prev, x, prev));
            before = old;
        }
    }

    /// The exp pass with the range mask, for a chunk of any length: [`super::sums`] on
    /// AVX-512F (the row's last chunk), and the redo of a chunk whose unmasked sums came out
    /// non-finite. The partial last vector is padded with `−inf` (which the mask drops).
    /// `#[inline]`, not `inline(never)`: like the rest of this module it must only be compiled
    /// where a dispatch arm uses it (a bare-metal build without AVX-512 dispatch cannot lower
    /// it).
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) fn last_sums<const HAS_MAX: bool>(xs: &[f32], m: f32) -> (f32, f32, f32) {
        let (tab, mv) = (table(), _mm512_set1_ps(m));
        let (mut e0, mut t0, mut n0) = (
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
            _mm512_setzero_si512(),
        );
        let (mut e1, mut t1, mut n1) = (e0, t0, n0);
        let mut pairs = xs.chunks_exact(32);
        for v in &mut pairs {
            lane::<HAS_MAX, true>(load(&v[..16]), mv, tab, &mut e0, &mut t0, &mut n0);
            lane::<HAS_MAX, true>(load(&v[16..]), mv, tab, &mut e1, &mut t1, &mut n1);
        }
        for v in pairs.remainder().chunks(16) {
            let mut padded = [f32::NEG_INFINITY; 16];
            padded[..v.len()].copy_from_slice(v);
            lane::<HAS_MAX, true>(load(&padded), mv, tab, &mut e0, &mut t0, &mut n0);
        }
        (
            _mm512_reduce_add_epi32(_mm512_add_epi32(n0, n1)) as f32,
            _mm512_reduce_add_ps(_mm512_add_ps(e0, e1)),
            _mm512_reduce_add_ps(_mm512_add_ps(t0, t1)),
        )
    }

    /// `e^d` of 16 lanes by [`lane`] (for the accuracy tests), with or without the range mask.
    #[cfg(test)]
    #[target_feature(enable = "avx512f")]
    pub(super) fn exp_lanes<const MASK: bool>(d: &[f32; 16]) -> [f32; 16] {
        let (mut e, mut t, mut n) = (
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
            _mm512_setzero_si512(),
        );
        let tab = table();
        lane::<false, MASK>(load(d), _mm512_setzero_ps(), tab, &mut e, &mut t, &mut n);
        // Lane by lane without a store: the sum of one unmasked lane and zeros is that lane.
        core::array::from_fn(|l| _mm512_reduce_add_ps(_mm512_maskz_mov_ps(1 << l, e)))
    }
}

/// `a·b + c`, fused where the clone has FMA (the flag is a per-clone constant).
#[inline(always)]
fn madd(fma: bool, a: f32, b: f32, c: f32) -> f32 {
    #[cfg(feature = "std")]
    if fma {
        return a.mul_add(b, c);
    }
    let _ = fma;
    a * b + c
}

/// `e^d` for `d ∈ [−87, 0]`: `e^d = 2^n · e^r` with `n = round(d·log2 e)` and
/// `r = d − n·ln 2` by Cody–Waite (two-part ln 2, so `r` is exact to ~1 ulp for every `n`; one
/// fused step where the clone has FMA), and a degree-5 minimax polynomial for `e^r` on
/// `[−ln2/2, ln2/2]` (≤ 4e-7 relative, ≤ 6.5e-7 with the fused reduction at `d = −87`).
/// Branch-free; NaN propagates. Outside `[−87, 0]` the value is meaningless (callers mask it).
#[inline(always)]
fn exp_neg(fma: bool, d: f32) -> f32 {
    // 1.5·2^23 + 127: adding it rounds to an integer (ulp 1 in [2^23, 2^24)) and leaves
    // `n + 127`, the biased exponent of 2^n, in the low mantissa bits, so a shift by 23 alone
    // builds 2^n (the magic's own bits above bit 8 shift out).
    const MAGIC: f32 = 12_583_039.0;
    const LN2_HI: f32 = 0.693_359_4; // 355/512, exact in few bits: n·LN2_HI is exact
    const LN2_LO: f32 = -2.121_944_4e-4;
    const C: [f32; 6] = [
        1.0,
        1.0,
        0.499_990_85,
        0.166_664_56,
        0.041_894_68,
        0.008_371_909,
    ];
    let z = madd(fma, d, core::f32::consts::LOG2_E, MAGIC);
    let n = z - MAGIC;
    let r = if fma && cfg!(feature = "std") {
        // Fused, `n·ln 2` is exact inside the FMA: the only error is that of ln 2 in f32,
        // |n|·1.9e-9 ≤ 2.4e-7 absolute in `r`, and only for the smallest terms (n ≤ −126 is
        // e^d ≤ 1e-38); one step suffices.
        madd(fma, -n, core::f32::consts::LN_2, d)
    } else {
        madd(fma, -n, LN2_LO, madd(fma, -n, LN2_HI, d))
    };
    let mut p = C[5];
    p = madd(fma, p, r, C[4]);
    p = madd(fma, p, r, C[3]);
    p = madd(fma, p, r, C[2]);
    p = madd(fma, p, r, C[1]);
    p = madd(fma, p, r, C[0]);
    p * f32::from_bits(z.to_bits() << 23)
}

/// The across-lane sum of 32 lane accumulators: halves first, then the 16 in order.
#[inline(always)]
fn fold_lanes(acc: &[f32; 2 * LANES]) -> f32 {
    let mut half = [0f32; LANES];
    for l in 0..LANES {
        half[l] = acc[l] + acc[l + LANES];
    }
    half.iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_neg_is_accurate() {
        // Both forms: two-step Cody–Waite (no FMA), one fused step (FMA, std builds).
        for (fma, bound) in [(false, 6e-7), (true, 9e-7)] {
            let mut worst = 0f64;
            let mut d = -87.0f32;
            while d <= 0.0 {
                let got = exp_neg(fma, d) as f64;
                let want = (d as f64).exp();
                worst = worst.max(((got - want) / want).abs());
                d += 0.000_37;
            }
            // The minimax bound 2.3e-7 plus f32 rounding of the evaluation (plus ln 2's
            // rounding times |n| in the fused form).
            assert!(worst < bound, "fma={fma}: worst relative error {worst}");
            assert_eq!(exp_neg(fma, 0.0), 1.0);
        }
    }

    /// `e^d` of 16 lanes by the AVX-512 exp pass; `None` where the CPU lacks AVX-512F.
    #[multiversion::multiversion(targets("x86_64+avx512f"))]
    fn exp16(d: &[f32; 16]) -> Option<[f32; 16]> {
        #[cfg(t2po_static_simd)]
        return {
            let _ = d;
            None
        };
        #[cfg(not(t2po_static_simd))]
        multiversion::target::match_target! {
            "x86_64+avx512f" => Some(x512::exp_lanes::<true>(d)),
            _ => {
                let _ = d;
                None
            },
        }
    }

    #[test]
    fn avx512_exp_is_accurate() {
        let Some(one) = exp16(&[0.0; 16]) else {
            // Not silent: on a CPU without AVX-512F the dispatch must say so, and the portable
            // path is the one `exp_neg_is_accurate` covers.
            // Without `std` the dispatch is static (the build's target features), so the CPU
            // may have AVX-512F that this build does not use.
            assert!(
                cfg!(t2po_static_simd)
                    || !cfg!(feature = "std")
                    || !std::is_x86_feature_detected!("avx512f")
            );
            std::println!(
                "no AVX-512F dispatch in this build or CPU: the AVX-512 exp pass is not used"
            );
            return;
        };
        assert_eq!(one, [1.0; 16]);
        let mut worst = 0f64;
        let mut d = [0f32; 16];
        let mut x = -87.0f32;
        while x <= 0.0 {
            for (l, v) in d.iter_mut().enumerate() {
                *v = (x + l as f32 * 0.000_023).min(0.0);
            }
            let got = exp16(&d).expect("AVX-512F seen above");
            for (g, &di) in got.iter().zip(&d) {
                let want = (di as f64).exp();
                worst = worst.max(((*g as f64 - want) / want).abs());
            }
            x += 0.000_37;
        }
        // Polynomial 5.3e-8, f32 rounding of the evaluation and the table (a few 6e-8), and
        // ln 2's rounding times |k/32| ≤ 126 in the fused reduction (≤ 2.4e-7 at d = −87).
        std::println!("AVX-512 exp worst relative error {worst:.2e}");
        assert!(worst < 6e-7, "worst relative error {worst}");
    }

    /// [`exp16`] without the range mask.
    #[multiversion::multiversion(targets("x86_64+avx512f"))]
    fn exp16_unmasked(d: &[f32; 16]) -> Option<[f32; 16]> {
        #[cfg(t2po_static_simd)]
        return {
            let _ = d;
            None
        };
        #[cfg(not(t2po_static_simd))]
        multiversion::target::match_target! {
            "x86_64+avx512f" => Some(x512::exp_lanes::<false>(d)),
            _ => {
                let _ = d;
                None
            },
        }
    }

    #[test]
    fn avx512_exp_without_the_mask_is_exact_or_caught_far_below_the_max() {
        // What the unmasked fast path relies on: for every d below −87 the value is under
        // e^−87 = 1.65e-38, exactly 0, or not finite (then the chunk is redone masked).
        let mut ds = std::vec![f32::NEG_INFINITY, -f32::MAX, f32::MIN_POSITIVE - f32::MAX];
        let mut x = 87.0f32;
        while x < f32::MAX / 1.001 {
            ds.push(-x);
            x *= 1.001;
        }
        let (mut zero, mut tiny, mut caught) = (0, 0, 0);
        let mut first_caught = f32::NEG_INFINITY;
        for d in ds.chunks(16) {
            let mut lanes = [-100.0f32; 16];
            lanes[..d.len()].copy_from_slice(d);
            let Some(got) = exp16_unmasked(&lanes) else {
                // Without `std` the dispatch is static (the build's target features), so the CPU
                // may have AVX-512F that this build does not use.
                assert!(
                    cfg!(t2po_static_simd)
                        || !cfg!(feature = "std")
                        || !std::is_x86_feature_detected!("avx512f")
                );
                std::println!(
                    "no AVX-512F dispatch in this build or CPU: the unmasked pass is not used"
                );
                return;
            };
            for (&g, &di) in got.iter().zip(&lanes) {
                if !g.is_finite() {
                    caught += 1;
                    first_caught = first_caught.max(di);
                } else if g == 0.0 {
                    zero += 1;
                } else {
                    assert!(g > 0.0 && g < 1.7e-38 && di >= -104.0, "e^{di} gave {g}");
                    tiny += 1;
                }
            }
        }
        std::println!(
            "unmasked exp below -87: {zero} exact 0, {tiny} tiny, {caught} caught \
             (from d = {first_caught:e})"
        );
        assert!(caught > 0 && zero > 0 && tiny > 0);
    }

    /// The AVX-512F insertion, where the build and the CPU have it.
    #[multiversion::multiversion(targets("x86_64+avx512f"))]
    fn offer_avx512(top: &mut TopJ, block: &[f32]) -> bool {
        #[cfg(t2po_static_simd)]
        return {
            let _ = (top, block);
            false
        };
        #[cfg(not(t2po_static_simd))]
        multiversion::target::match_target! {
            "x86_64+avx512f" => {
                x512::offer_block(top, block);
                true
            },
            _ => {
                let _ = (top, block);
                false
            },
        }
    }

    /// The AVX2 insertion, where the build and the CPU have it (AVX-512F CPUs included, so
    /// both vector forms are checked there).
    #[multiversion::multiversion(targets("x86_64+avx2"))]
    fn offer_avx2(top: &mut TopJ, block: &[f32]) -> bool {
        #[cfg(t2po_static_simd)]
        return {
            let _ = (top, block);
            false
        };
        #[cfg(not(t2po_static_simd))]
        multiversion::target::match_target! {
            "x86_64+avx2" => {
                x256::offer_block(top, block);
                true
            },
            _ => {
                let _ = (top, block);
                false
            },
        }
    }

    #[test]
    fn vector_top_j_holds_what_the_walk_holds() {
        let mut rng = t2po_fixtures::Rng::new(15);
        let (mut avx512, mut avx2) = (false, false);
        for case in 0..3000 {
            let j = 1 + case % TOP_J_CAPACITY;
            let mut fresh = TopJ::new(j);
            if rng.below(3) == 0 {
                fresh.floor = (rng.normal() * 2.0) as f32;
            }
            let (mut walk, mut fast, mut fast2) = (fresh, fresh, fresh);
            // Blocks of every length up to 64 (the row's partial last block), values from a
            // small set half of the time (ties), with masked entries and the odd NaN.
            for _ in 0..1 + rng.below(12) {
                let n = if rng.below(4) == 0 {
                    1 + rng.below(64)
                } else {
                    64
                };
                let small = rng.below(2) == 0;
                let block: std::vec::Vec<f32> = (0..n)
                    .map(|_| match rng.below(40) {
                        0 => f32::NEG_INFINITY,
                        1 => f32::NAN,
                        _ if small => rng.below(6) as f32 - 2.0,
                        _ => (rng.normal() * 3.0) as f32,
                    })
                    .collect();
                walk.offer_block_with(&block, TopJ::insert);
                if offer_avx512(&mut fast, &block) {
                    avx512 = true;
                    assert_eq!(walk.len, fast.len, "AVX-512, case {case}, j = {j}");
                    assert_eq!(
                        walk.vals[..j],
                        fast.vals[..j],
                        "AVX-512, case {case}, j = {j}"
                    );
                }
                if offer_avx2(&mut fast2, &block) {
                    avx2 = true;
                    assert_eq!(walk.len, fast2.len, "AVX2, case {case}, j = {j}");
                    assert_eq!(
                        walk.vals[..j],
                        fast2.vals[..j],
                        "AVX2, case {case}, j = {j}"
                    );
                }
            }
        }
        // Not silent: say which vector forms this build and CPU could check.
        std::println!("top-j against the walk: AVX-512F {avx512}, AVX2 {avx2}");
        if !cfg!(t2po_static_simd) && cfg!(feature = "std") && std::is_x86_feature_detected!("avx2")
        {
            assert!(
                avx2,
                "the CPU has AVX2: its insertion must have been checked"
            );
        }
    }

    /// The floor `scan_first` sets lies strictly below the row's `j`-th largest value, from the
    /// first chunk's 32 maxima and from a two-chunk row's 64: rows with ties (at the bound
    /// itself), masked entries and the odd NaN, of lengths around the group sizes, every `j`.
    #[test]
    fn the_top_j_floor_is_below_the_jth_value() {
        let mut rng = t2po_fixtures::Rng::new(16);
        let (mut whole_rows, mut tightened) = (0, 0);
        for case in 0..2000 {
            let j = 1 + case % TOP_J_CAPACITY;
            let len = match rng.below(4) {
                0 => 1 + rng.below(2 * CHUNK),
                1 => CHUNK + 4 * BLOCK + rng.below(64),
                _ => CHUNK + 1 + rng.below(CHUNK),
            };
            let small = rng.below(2) == 0;
            let row: std::vec::Vec<f32> = (0..len)
                .map(|_| match rng.below(50) {
                    0 => f32::NEG_INFINITY,
                    1 if rng.below(4) == 0 => f32::NAN,
                    _ if small => rng.below(5) as f32,
                    _ => (rng.normal() * 2.0) as f32,
                })
                .collect();
            let mut sorted: std::vec::Vec<f32> =
                row.iter().copied().filter(|x| !x.is_nan()).collect();
            sorted.sort_by(|a, b| b.total_cmp(a));
            let first = &row[..len.min(CHUNK)];
            let whole = (len > CHUNK).then_some(&row[..]);
            let mut top = TopJ::new(j);
            scan_first(first, whole, &mut top);
            if top.floor == f32::NEG_INFINITY {
                continue;
            }
            let jth = sorted[j - 1];
            assert!(
                top.floor < jth,
                "case {case}: len {len}, j {j}: floor {} not below the j-th value {jth}",
                top.floor
            );
            if whole.is_some() && j <= 4 * LANES && len >= 4 * BLOCK {
                whole_rows += 1;
                let mut first_only = TopJ::new(j);
                scan_first(first, None, &mut first_only);
                tightened += (top.floor > first_only.floor) as usize;
            }
        }
        // Both forms ran, and the whole row's bound is the tighter one on most rows.
        assert!(whole_rows > 500, "{whole_rows} two-chunk rows");
        assert!(
            tightened * 2 > whole_rows,
            "{tightened} of {whole_rows} tightened"
        );
    }

    #[test]
    fn bad_rows_are_errors() {
        assert_eq!(token_stats::<f32>(&[], 1), Err(Error::Row(RowError::Empty)));
        let mut row = [0.5f32; 3000];
        row[2500] = f32::NAN;
        assert_eq!(
            token_stats(&row, 4),
            Err(Error::Row(RowError::NaN { index: 2500 }))
        );
        row[2500] = f32::INFINITY;
        assert_eq!(
            token_stats(&row, 4),
            Err(Error::Row(RowError::PosInf { index: 2500 }))
        );
        // C = −mean(x_(i) − m) = (2/3)·2·f32::MAX: beyond f32.
        let spread = [f32::MAX, -f32::MAX, -f32::MAX];
        assert_eq!(token_stats(&spread, 3), Err(Error::Row(RowError::Range)));
        let masked = [f32::NEG_INFINITY; 77];
        assert_eq!(
            token_stats(&masked, 4),
            Err(Error::Row(RowError::NoFinite { len: 77 }))
        );
        assert_eq!(token_stats(&[0.0f32], 0), Err(Error::TopJ(0)));
        assert_eq!(token_stats(&[0.0f32], 65), Err(Error::TopJ(65)));
    }

    #[test]
    fn tiny_rows() {
        let s = token_stats(&[3.0f32], 20).unwrap();
        assert_eq!((s.entropy, s.confidence, s.top_count), (0.0, 0.0, 1));
        let s = token_stats(&[1.0f32, 1.0], 1).unwrap();
        assert!((s.entropy as f64 - 2f64.ln()).abs() < 1e-7);
        assert!((s.confidence as f64 - 2f64.ln()).abs() < 1e-7);
    }
}
