//! Per-token statistics of one logits row in one pass: entropy, top-j confidence, max, log-sum-exp
//! (spec §1).
//!
//! Blockwise online softmax: the row is read once from memory, in chunks of 1024 that stay in L1.
//! For each chunk a max scan (per 64-block, for top-j), then `Σ e^(x−m)` and `Σ e^(x−m)(x−m)`
//! against the running max `m`, rescaled in f64 when `m` grows (`s ← s·e^(m−m')`,
//! `t ← (t + (m−m')·s)·e^(m−m')`), so `H = ln s − t/s` and `lse = m + ln s`. Top-j keeps the j
//! largest values in a fixed sorted buffer; 64-blocks whose max is below the current j-th value
//! are skipped. NaN and `+inf` poison the sums (NaN propagates through the exp pass), which is
//! checked once per row; only then is the row scanned for the offending index.
//! Error bound (f32 rows): `exp` by Cody–Waite and a degree-5 minimax polynomial (≤ 4e-7 relative), lane sums of
//! ≤ 32 terms in f32 then f64, entries equal to the max counted exactly: relative error of every
//! statistic ≤ 1e-5 (tested against an f64 two-pass reference; seen ≤ 3e-7), plus 1e-7 absolute
//! for values at 0.

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

impl TokenStats {
    /// `ln p_max = max_logit − log_sum_exp` (≤ 0).
    pub fn log_p_max(&self) -> f32 {
        self.max_logit - self.log_sum_exp
    }
}

const CHUNK: usize = 1024;
const BLOCK: usize = 64;

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::bf16 {}
    impl Sealed for half::f16 {}
}

/// An element type of a logits row: `f32`, `bf16` or `f16`.
pub trait Logit: Copy + sealed::Sealed {
    /// Widens a chunk of at most 1024 entries to f32 (no copy for f32).
    #[doc(hidden)]
    fn widen<'a>(src: &'a [Self], buf: &'a mut [f32; 1024]) -> &'a [f32];
    /// This value as f32.
    fn to_f32(self) -> f32;
    /// `−inf` of this type.
    const NEG_INF: Self;
    /// `0` of this type.
    const ZERO: Self;
}

impl Logit for f32 {
    #[inline]
    fn widen<'a>(src: &'a [f32], _buf: &'a mut [f32; 1024]) -> &'a [f32] {
        src
    }
    fn to_f32(self) -> f32 {
        self
    }
    const NEG_INF: Self = f32::NEG_INFINITY;
    const ZERO: Self = 0.0;
}

impl Logit for bf16 {
    #[inline]
    fn widen<'a>(src: &'a [bf16], buf: &'a mut [f32; 1024]) -> &'a [f32] {
        // bf16 is the top half of an f32: a shift, which vectorises (NaN payloads survive).
        let dst = &mut buf[..src.len()];
        for (d, s) in dst.iter_mut().zip(src) {
            *d = f32::from_bits((s.to_bits() as u32) << 16);
        }
        dst
    }
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    const NEG_INF: Self = bf16::NEG_INFINITY;
    const ZERO: Self = bf16::ZERO;
}

impl Logit for f16 {
    #[inline]
    fn widen<'a>(src: &'a [f16], buf: &'a mut [f32; 1024]) -> &'a [f32] {
        let dst = &mut buf[..src.len()];
        src.convert_to_f32_slice(dst);
        dst
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    const NEG_INF: Self = f16::NEG_INFINITY;
    const ZERO: Self = f16::ZERO;
}

/// Statistics of one row with top-`top_j` confidence (`1 ≤ top_j ≤ 64`).
///
/// `−inf` entries are masked tokens; NaN, `+inf`, an empty row or a row without a finite entry
/// is an error. If fewer than `top_j` entries are finite the confidence averages the finite ones.
pub fn token_stats<T: Logit>(row: &[T], top_j: u32) -> Result<TokenStats, Error> {
    if top_j == 0 || top_j as usize > TOP_J_CAPACITY {
        return Err(Error::TopJ(top_j));
    }
    if row.is_empty() {
        return Err(RowError::Empty.into());
    }
    if row.len() > u32::MAX as usize {
        return Err(Error::Size("a row longer than u32::MAX entries"));
    }
    let mut acc = Accumulator::new(top_j as usize);
    let mut scratch = Scratch {
        widened: [0.0; CHUNK],
        e: [0.0; CHUNK],
        t: [0.0; CHUNK],
    };
    for chunk in row.chunks(CHUNK) {
        let xs = T::widen(chunk, &mut scratch.widened);
        acc.push(xs, &mut scratch.e, &mut scratch.t);
    }
    if acc.poisoned() {
        return Err(first_bad(row).into());
    }
    Ok(acc.finish(row.len())?)
}

/// Per-row buffers (24 KiB of stack), set up once per row rather than per chunk.
struct Scratch {
    widened: [f32; CHUNK],
    e: [f32; CHUNK],
    t: [f32; CHUNK],
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
struct TopJ {
    vals: [f32; TOP_J_CAPACITY],
    len: usize,
    j: usize,
}

impl TopJ {
    /// The value a candidate must exceed; `−inf` until `j` finite values are held.
    #[inline]
    fn threshold(&self) -> f32 {
        if self.len < self.j {
            f32::NEG_INFINITY
        } else {
            self.vals[self.j - 1]
        }
    }

    #[inline]
    fn offer(&mut self, x: f32) {
        // NaN compares false, so it is never held.
        if x.partial_cmp(&self.threshold()) != Some(core::cmp::Ordering::Greater) {
            return;
        }
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
}

impl Accumulator {
    fn new(j: usize) -> Self {
        Self {
            m: f32::NEG_INFINITY,
            s: 0.0,
            t: 0.0,
            nan: false,
            top: TopJ {
                vals: [f32::NEG_INFINITY; TOP_J_CAPACITY],
                len: 0,
                j,
            },
        }
    }

    #[inline]
    fn push(&mut self, xs: &[f32], e: &mut [f32; CHUNK], t: &mut [f32; CHUNK]) {
        let mut block_max = [f32::NEG_INFINITY; CHUNK / BLOCK];
        let cmax = block_maxima(xs, &mut block_max);
        for (block, &bm) in xs.chunks(BLOCK).zip(block_max.iter()) {
            if bm > self.top.threshold() {
                // Only 16-groups holding a candidate go to the scalar insertion.
                for group in block.chunks(16) {
                    let thr = self.top.threshold();
                    if group.iter().fold(false, |any, &x| any | (x > thr)) {
                        for &x in group {
                            self.top.offer(x);
                        }
                    }
                }
            }
        }
        if cmax == f32::NEG_INFINITY {
            // Nothing finite here (the max ignores NaN, so look for one).
            self.nan |= xs.iter().any(|x| x.is_nan());
            return;
        }
        if cmax > self.m {
            if self.m != f32::NEG_INFINITY {
                let shift = (self.m - cmax) as f64;
                let scale = libm::exp(shift);
                self.t = (self.t + shift * self.s) * scale;
                self.s *= scale;
            }
            self.m = cmax;
        }
        let (count_max, tail, tsum) = exp_sums(xs, self.m, e, t);
        self.s += count_max as f64 + tail as f64;
        self.t += tsum as f64;
    }

    /// Whether a NaN or `+inf` was seen.
    fn poisoned(&self) -> bool {
        self.nan || !(self.s.is_finite() && self.t.is_finite()) || self.m == f32::INFINITY
    }

    fn finish(&self, len: usize) -> Result<TokenStats, RowError> {
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
        let confidence = ln_s - top_gap / k as f64;
        let (confidence, log_sum_exp) = (confidence as f32, lse as f32);
        if !(confidence.is_finite() && log_sum_exp.is_finite()) {
            return Err(RowError::Range);
        }
        Ok(TokenStats {
            entropy: entropy as f32,
            confidence,
            max_logit: self.m,
            log_sum_exp,
            vocab: len as u32,
            top_count: k as u32,
        })
    }
}

/// Max of each 64-block and of the chunk (NaN ignored).
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "x86_64+avx"
))]
fn block_maxima(xs: &[f32], block_max: &mut [f32; CHUNK / BLOCK]) -> f32 {
    let mut cmax = f32::NEG_INFINITY;
    for (block, out) in xs.chunks(BLOCK).zip(block_max.iter_mut()) {
        let mut acc = [f32::NEG_INFINITY; 16];
        let mut groups = block.chunks_exact(16);
        for g in &mut groups {
            for l in 0..16 {
                acc[l] = if g[l] > acc[l] { g[l] } else { acc[l] };
            }
        }
        for (l, &x) in groups.remainder().iter().enumerate() {
            acc[l] = if x > acc[l] { x } else { acc[l] };
        }
        let bm = acc
            .iter()
            .fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a });
        *out = bm;
        cmax = if bm > cmax { bm } else { cmax };
    }
    cmax
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
/// `r = d − n·ln 2` by Cody–Waite (two-part ln 2, so `r` is exact to ~1 ulp for every `n`), and a
/// degree-5 minimax polynomial for `e^r` on `[−ln2/2, ln2/2]` (≤ 4e-7 relative). Branch-free;
/// NaN propagates.
#[inline(always)]
fn exp_neg(fma: bool, d: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5·2^23: adding it rounds to an integer
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
    let ni = z.to_bits().wrapping_sub(MAGIC.to_bits()) as i32;
    let r = madd(fma, -n, LN2_HI, d);
    let r = madd(fma, -n, LN2_LO, r);
    let mut p = C[5];
    p = madd(fma, p, r, C[4]);
    p = madd(fma, p, r, C[3]);
    p = madd(fma, p, r, C[2]);
    p = madd(fma, p, r, C[1]);
    p = madd(fma, p, r, C[0]);
    p * f32::from_bits((ni.wrapping_add(127) as u32) << 23)
}

/// Against the running max `m`: (count of entries equal to `m`, `Σ e^(x−m)` over the others,
/// `Σ e^(x−m)(x−m)`). Counting the max entries apart keeps the small tail exact relative to
/// itself. An element-wise pass into L1 buffers (which the loop vectoriser handles), then sums
/// over 32 lanes.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "x86_64+avx"
))]
fn exp_sums(xs: &[f32], m: f32, e: &mut [f32; CHUNK], t: &mut [f32; CHUNK]) -> (f32, f32, f32) {
    let fma = multiversion::target::target_cfg_f!(target_feature = "fma");
    let n = xs.len().min(CHUNK);
    let xs = &xs[..n];
    let mut count = 0u32;
    for ((&x, e), t) in xs.iter().zip(e[..n].iter_mut()).zip(t[..n].iter_mut()) {
        let d = x - m;
        // `d < −87` is false for NaN, so NaN flows into the sums (checked once per row).
        let dc = if d < -87.0 { -87.0 } else { d };
        let v = exp_neg(fma, dc);
        let v = if d < -87.0 || d == 0.0 { 0.0 } else { v };
        count += (d == 0.0) as u32;
        *e = v;
        *t = v * dc;
    }
    (count as f32, lane_sum(&e[..n]), lane_sum(&t[..n]))
}

/// Sum over 32 lane accumulators (≤ 32 terms each for a chunk), then across lanes.
#[inline(always)]
fn lane_sum(xs: &[f32]) -> f32 {
    const W: usize = 32;
    let mut acc = [0f32; W];
    let mut groups = xs.chunks_exact(W);
    for g in &mut groups {
        for l in 0..W {
            acc[l] += g[l];
        }
    }
    for (l, &x) in groups.remainder().iter().enumerate() {
        acc[l] += x;
    }
    let mut half = [0f32; W / 2];
    for l in 0..W / 2 {
        half[l] = acc[l] + acc[l + W / 2];
    }
    half.iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_neg_is_accurate() {
        let mut worst = 0f64;
        let mut d = -87.0f32;
        while d <= 0.0 {
            let got = exp_neg(false, d) as f64;
            let want = (d as f64).exp();
            worst = worst.max(((got - want) / want).abs());
            d += 0.000_37;
        }
        // The minimax bound 2.3e-7 plus f32 rounding of the evaluation.
        assert!(worst < 6e-7, "worst relative error {worst}");
        assert_eq!(exp_neg(false, 0.0), 1.0);
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
