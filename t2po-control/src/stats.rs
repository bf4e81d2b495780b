//! Per-token statistics of one logits row in one pass: entropy, top-j confidence, max, log-sum-exp
//! (spec §1).
//!
//! Blockwise online softmax: the row is read once, in chunks of 1024 that stay in L1. For each
//! chunk a max/validity scan, then `Σ e^(x−m)` and `Σ e^(x−m)(x−m)` against the running max `m`,
//! rescaled in f64 when `m` grows (`s ← s·e^(m−m')`, `t ← (t + (m−m')·s)·e^(m−m')`), so
//! `H = ln s − t/s` and `lse = m + ln s`. Top-j keeps the j largest values in a fixed sorted
//! buffer; 64-element blocks whose max is below the current j-th value are skipped.
//! Error bound (f32 rows): lane sums of ≤ 128 terms in f32 then f64, entries equal to the max
//! counted exactly, and an `exp` accurate to ~2 ulp: relative error of every statistic ≤ 1e-5
//! (tested against an f64 two-pass reference), plus 1e-7 absolute for values near 0.

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
const LANES: usize = 8;

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
        let dst = &mut buf[..src.len()];
        src.convert_to_f32_slice(dst);
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
    let mut buf = [0f32; CHUNK];
    for (c, chunk) in row.chunks(CHUNK).enumerate() {
        let xs = T::widen(chunk, &mut buf);
        acc.push(xs).map_err(|e| locate(e, c * CHUNK))?;
    }
    Ok(acc.finish(row.len())?)
}

/// Shifts a chunk-relative error index to the row.
fn locate(e: RowError, base: usize) -> RowError {
    match e {
        RowError::NaN { index } => RowError::NaN {
            index: base + index,
        },
        RowError::PosInf { index } => RowError::PosInf {
            index: base + index,
        },
        other => other,
    }
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
        if !(x > self.threshold()) {
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
    top: TopJ,
}

impl Accumulator {
    fn new(j: usize) -> Self {
        Self {
            m: f32::NEG_INFINITY,
            s: 0.0,
            t: 0.0,
            top: TopJ {
                vals: [f32::NEG_INFINITY; TOP_J_CAPACITY],
                len: 0,
                j,
            },
        }
    }

    #[inline]
    fn push(&mut self, xs: &[f32]) -> Result<(), RowError> {
        let mut block_max = [f32::NEG_INFINITY; CHUNK / BLOCK];
        let (cmax, bad) = scan(xs, &mut block_max);
        if bad {
            return Err(first_bad(xs));
        }
        for (block, &bm) in xs.chunks(BLOCK).zip(block_max.iter()) {
            if bm > self.top.threshold() {
                for &x in block {
                    self.top.offer(x);
                }
            }
        }
        if cmax == f32::NEG_INFINITY {
            return Ok(());
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
        let (count_max, tail, t) = exp_sums(xs, self.m);
        self.s += count_max as f64 + tail as f64;
        self.t += t as f64;
        Ok(())
    }

    fn finish(&self, len: usize) -> Result<TokenStats, RowError> {
        if self.m == f32::NEG_INFINITY {
            return Err(RowError::NoFinite { len });
        }
        let ln_s = libm::log(self.s);
        let lse = self.m as f64 + ln_s;
        let entropy = ln_s - self.t / self.s;
        let k = self.top.len;
        let top_sum: f64 = self.top.vals[..k].iter().map(|&v| v as f64).sum();
        let confidence = lse - top_sum / k as f64;
        Ok(TokenStats {
            entropy: entropy as f32,
            confidence: confidence as f32,
            max_logit: self.m,
            log_sum_exp: lse as f32,
            vocab: len as u32,
            top_count: k as u32,
        })
    }
}

/// The first NaN or `+inf` of a chunk already known to hold one (cold path).
#[cold]
fn first_bad(xs: &[f32]) -> RowError {
    for (index, &x) in xs.iter().enumerate() {
        if x.is_nan() {
            return RowError::NaN { index };
        }
        if x == f32::INFINITY {
            return RowError::PosInf { index };
        }
    }
    RowError::Empty
}

/// Max of each 64-block and of the chunk; whether any entry is NaN or `+inf`.
#[multiversion::multiversion(targets("x86_64+avx2+fma", "x86_64+avx"))]
fn scan(xs: &[f32], block_max: &mut [f32; CHUNK / BLOCK]) -> (f32, bool) {
    let mut cmax = f32::NEG_INFINITY;
    let mut bad = 0u32;
    for (block, out) in xs.chunks(BLOCK).zip(block_max.iter_mut()) {
        let mut vm = [f32::NEG_INFINITY; LANES];
        let mut vb = [0u32; LANES];
        let mut groups = block.chunks_exact(LANES);
        for g in &mut groups {
            for l in 0..LANES {
                let x = g[l];
                vm[l] = if x > vm[l] { x } else { vm[l] };
                vb[l] |= (!(x < f32::INFINITY)) as u32;
            }
        }
        for &x in groups.remainder() {
            vm[0] = if x > vm[0] { x } else { vm[0] };
            vb[0] |= (!(x < f32::INFINITY)) as u32;
        }
        let bm = vm
            .iter()
            .fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a });
        *out = bm;
        cmax = if bm > cmax { bm } else { cmax };
        bad |= vb.iter().fold(0, |a, &b| a | b);
    }
    (cmax, bad != 0)
}

/// `e^d` for `d ∈ [−87, 0]` (Cephes `expf`: Cody–Waite reduction, degree-6 polynomial; ~2 ulp).
#[inline(always)]
fn exp_neg(d: f32) -> f32 {
    const LOG2E: f32 = core::f32::consts::LOG2_E;
    const MAGIC: f32 = 12_582_912.0; // 1.5·2^23: adding it rounds to an integer
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let z = d * LOG2E + MAGIC;
    let n = z - MAGIC;
    let ni = z.to_bits() as i32 - MAGIC.to_bits() as i32;
    let r = d - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 5.000_000_1e-1;
    let y = p * (r * r) + r + 1.0;
    y * f32::from_bits(((ni + 127) << 23) as u32)
}

/// Against the running max `m`: (count of entries equal to `m`, `Σ e^(x−m)` over the others,
/// `Σ e^(x−m)(x−m)`). Counting the max entries apart keeps the small tail exact relative to itself.
#[multiversion::multiversion(targets("x86_64+avx2+fma", "x86_64+avx"))]
fn exp_sums(xs: &[f32], m: f32) -> (f32, f32, f32) {
    let mut lc = [0f32; LANES];
    let mut ls = [0f32; LANES];
    let mut lt = [0f32; LANES];
    #[inline(always)]
    fn term(x: f32, m: f32) -> (f32, f32, f32) {
        let d = x - m;
        let dc = if d < -87.0 { -87.0 } else { d };
        let e = exp_neg(dc);
        let e = if d < -87.0 { 0.0 } else { e };
        let is_max = d == 0.0;
        (
            if is_max { 1.0 } else { 0.0 },
            if is_max { 0.0 } else { e },
            e * dc,
        )
    }
    let mut groups = xs.chunks_exact(LANES);
    for g in &mut groups {
        for l in 0..LANES {
            let (c, s, t) = term(g[l], m);
            lc[l] += c;
            ls[l] += s;
            lt[l] += t;
        }
    }
    for &x in groups.remainder() {
        let (c, s, t) = term(x, m);
        lc[0] += c;
        ls[0] += s;
        lt[0] += t;
    }
    (lc.iter().sum(), ls.iter().sum(), lt.iter().sum())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::vec::Vec;

    /// The f64 two-pass reference of spec §1: (H, C, max, lse, k).
    pub(crate) fn reference(row: &[f64], j: usize) -> (f64, f64, f64, f64, usize) {
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|&x| (x - m).exp()).sum();
        let lse = m + s.ln();
        let h: f64 = row
            .iter()
            .filter(|x| x.is_finite())
            .map(|&x| {
                let lp = x - lse;
                -lp.exp() * lp
            })
            .sum();
        let mut fin: Vec<f64> = row.iter().cloned().filter(|x| x.is_finite()).collect();
        fin.sort_by(|a, b| b.partial_cmp(a).unwrap());
        let k = j.min(fin.len());
        let c = -fin[..k].iter().map(|&x| x - lse).sum::<f64>() / k as f64;
        (h, c, m, lse, k)
    }

    #[test]
    fn exp_neg_is_accurate() {
        let mut worst = 0f64;
        let mut d = -87.0f32;
        while d <= 0.0 {
            let got = exp_neg(d) as f64;
            let want = (d as f64).exp();
            worst = worst.max(((got - want) / want).abs());
            d += 0.000_37;
        }
        // ~2 ulp of f32 (ulp = 1.19e-7).
        assert!(worst < 3e-7, "worst relative error {worst}");
        assert_eq!(exp_neg(0.0), 1.0);
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
