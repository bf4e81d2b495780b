//! Flash-style attention for the CPU: `softmax(scale·q·kᵀ)·v` over the keys each query sees
//! (causal + left padding, as [`Visibility`] says), in blocks of 64 queries × 64 keys with an
//! online softmax, so the `[B, H, L, T]` scores and probabilities are never stored. The forward
//! keeps one log-sum-exp per query; the backward recomputes each block's probabilities from it
//! (FlashAttention-2's backward: `dV += Pᵀ·dO`, `dS = P∘(dO·Vᵀ − Δ)`, `dQ += scale·dS·K`,
//! `dK += scale·dSᵀ·Q`, `Δ = rowsum(dO∘O)`).
//!
//! Work splits over (batch row, KV head) pairs, each a sequential task on its own buffers (the
//! query heads of a GQA group share the task, so their `dK`/`dV` sums stay in one place and the
//! results do not depend on the thread count). The block products are register-tiled FMA loops
//! written with `pulp`'s safe SIMD types; each task runs under the best instruction set `pulp`
//! detects (AVX-512, AVX2 + FMA, or scalar). `head_dim` must be a multiple of 16.

use std::sync::{Arc, Mutex};

use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, CustomOp3, Layout, Result, Shape, Tensor};
use pulp::{Arch, Simd, WithSimd};
use rayon::prelude::*;

use super::{exp_neg, max_of, with_f32, Visibility, LANES};

/// Keys per block.
const BC: usize = 64;
/// Queries per block.
const BR: usize = 64;
/// Query rows are padded to a multiple of this (the row tiles of the products).
const RP: usize = 16;

/// A 4-D f32 view with any strides but a contiguous last dimension.
#[derive(Clone, Copy)]
struct View<'a> {
    data: &'a [f32],
    off: usize,
    st: [usize; 3],
    dims: [usize; 4],
}

impl<'a> View<'a> {
    fn new(s: &'a CpuStorage, l: &Layout, op: &str, what: &str) -> Result<Self> {
        let CpuStorage::F32(data) = s else {
            bail!("{op}: {what} must be f32, got {:?}", s.dtype())
        };
        let (dims, st) = (l.dims(), l.stride());
        if dims.len() != 4 || (dims[3] > 1 && st[3] != 1) {
            bail!("{op}: {what} must be 4-D with a contiguous last dimension, got {dims:?} / strides {st:?}");
        }
        Ok(Self {
            data,
            off: l.start_offset(),
            st: [st[0], st[1], st[2]],
            dims: [dims[0], dims[1], dims[2], dims[3]],
        })
    }

    #[inline]
    fn row(&self, a: usize, b: usize, c: usize) -> &'a [f32] {
        let o = self.off + a * self.st[0] + b * self.st[1] + c * self.st[2];
        &self.data[o..o + self.dims[3]]
    }
}

#[derive(Clone, Copy)]
struct Dims {
    h: usize,
    kv: usize,
    l: usize,
    t: usize,
    d: usize,
}

/// `out[r][c] = Σ_d x[r][d]·yt[d][c]` for `R` rows × `NV` vectors (= [`BC`] columns): `x` rows
/// of stride `d`, `yt` rows of stride `ys`; the accumulators stay in registers.
#[inline(always)]
fn tile_xyt<S: Simd, const R: usize, const NV: usize>(
    simd: S,
    x: &[f32],
    d: usize,
    yt: &[f32],
    ys: usize,
    out: &mut [f32],
) {
    let lanes = S::F32_LANES;
    let mut acc = [[simd.splat_f32s(0.0); NV]; R];
    let x = &x[..R * d];
    for dd in 0..d {
        // A fixed-length view, so the loops unroll and the accumulators stay in registers.
        let (y, _) = S::as_simd_f32s(&yt[dd * ys..dd * ys + NV * lanes]);
        let y = &y[..NV];
        for (r, a) in acc.iter_mut().enumerate() {
            let xv = simd.splat_f32s(x[r * d + dd]);
            for i in 0..NV {
                a[i] = simd.mul_add_e_f32s(xv, y[i], a[i]);
            }
        }
    }
    for (o, a) in out[..R * BC].chunks_exact_mut(BC).zip(&acc) {
        let (o, _) = S::as_mut_simd_f32s(o);
        o.copy_from_slice(a);
    }
}

/// `x·ytᵀ` for `rows` (a multiple of 16) rows × [`BC`] columns into `out` (rows of [`BC`]).
#[inline(always)]
fn xyt<S: Simd>(simd: S, x: &[f32], rows: usize, d: usize, yt: &[f32], ys: usize, out: &mut [f32]) {
    match S::F32_LANES {
        16 => {
            for r in (0..rows).step_by(4) {
                tile_xyt::<S, 4, 4>(simd, &x[r * d..], d, yt, ys, &mut out[r * BC..]);
            }
        }
        8 => {
            for r in (0..rows).step_by(2) {
                tile_xyt::<S, 2, 8>(simd, &x[r * d..], d, yt, ys, &mut out[r * BC..]);
            }
        }
        _ => {
            for r in 0..rows {
                let o = &mut out[r * BC..(r + 1) * BC];
                o.fill(0.0);
                for dd in 0..d {
                    let xv = x[r * d + dd];
                    for (o, &y) in o.iter_mut().zip(&yt[dd * ys..dd * ys + BC]) {
                        *o += xv * y;
                    }
                }
            }
        }
    }
}

/// `acc[r][0..NV·lanes] += Σ_{c<n} p[r][c]·y[c][0..NV·lanes]` for `R` rows (`p` rows of stride
/// `ps`, `y` rows of stride `ys`, `acc` rows of stride `accs`), accumulating in registers.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn tile_py<S: Simd, const R: usize, const NV: usize>(
    simd: S,
    p: &[f32],
    ps: usize,
    n: usize,
    y: &[f32],
    ys: usize,
    acc: &mut [f32],
    accs: usize,
) {
    let w = NV * S::F32_LANES;
    let mut a = [[simd.splat_f32s(0.0); NV]; R];
    for c in 0..n {
        let (yr, _) = S::as_simd_f32s(&y[c * ys..c * ys + w]);
        let yr = &yr[..NV];
        for (r, ar) in a.iter_mut().enumerate() {
            let pv = simd.splat_f32s(p[r * ps + c]);
            for i in 0..NV {
                ar[i] = simd.mul_add_e_f32s(pv, yr[i], ar[i]);
            }
        }
    }
    for (r, ar) in a.iter().enumerate() {
        let (o, _) = S::as_mut_simd_f32s(&mut acc[r * accs..r * accs + w]);
        for (o, &x) in o.iter_mut().zip(ar) {
            *o = simd.add_f32s(*o, x);
        }
    }
}

/// `acc[rows × w] += p[rows × n]·y[n × w]` (`rows` a multiple of 16, `w` of 16), in register
/// tiles of 16 accumulators.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn py<S: Simd>(
    simd: S,
    p: &[f32],
    ps: usize,
    rows: usize,
    n: usize,
    y: &[f32],
    ys: usize,
    w: usize,
    acc: &mut [f32],
    accs: usize,
) {
    let lanes = S::F32_LANES;
    if lanes != 16 && lanes != 8 {
        for r in 0..rows {
            let o = &mut acc[r * accs..r * accs + w];
            for c in 0..n {
                let pv = p[r * ps + c];
                for (o, &yv) in o.iter_mut().zip(&y[c * ys..c * ys + w]) {
                    *o += pv * yv;
                }
            }
        }
        return;
    }
    let mut c0 = 0;
    while c0 < w {
        // Columns this pass: 64, 32 or 16, with 16 accumulator registers per tile.
        let cols = if w - c0 >= 64 {
            64
        } else if w - c0 >= 32 {
            32
        } else {
            16
        };
        for r in (0..rows).step_by(16) {
            let (pr, ar, yc) = (&p[r * ps..], &mut acc[r * accs + c0..], &y[c0..]);
            macro_rules! tiles {
                ($rows:literal, $nv:literal) => {
                    for q in (0..16).step_by($rows) {
                        tile_py::<S, $rows, $nv>(
                            simd,
                            &pr[q * ps..],
                            ps,
                            n,
                            yc,
                            ys,
                            &mut ar[q * accs..],
                            accs,
                        );
                    }
                };
            }
            match (lanes, cols) {
                (16, 64) => tiles!(4, 4),
                (16, 32) => tiles!(8, 2),
                (16, _) => tiles!(16, 1),
                (_, 64) => tiles!(2, 8),
                (_, 32) => tiles!(4, 4),
                _ => tiles!(8, 2),
            }
        }
        c0 += cols;
    }
}

/// `Σ x` in [`LANES`] partial sums (vectorises; a sequential sum would not).
#[inline(always)]
fn sum_of(x: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let c = x.chunks_exact(LANES);
    let rest: f32 = c.remainder().iter().sum();
    for v in c {
        for k in 0..LANES {
            acc[k] += v[k];
        }
    }
    acc.iter().sum::<f32>() + rest
}

/// Visible columns `[c0, c1)` of key block `j0` for a query that sees keys `[lo, hi]`.
#[inline(always)]
fn cols(lo: usize, hi: usize, j0: usize) -> (usize, usize) {
    (
        lo.saturating_sub(j0).min(BC),
        (hi + 1).saturating_sub(j0).min(BC),
    )
}

/// `Kᵀ` (`[d × tp]`, zero-padded to `tp` keys) and the rows of `V` (`[tp × d]`) of one
/// (batch row, KV head).
fn gather_kv(
    k: &View,
    v: &View,
    b: usize,
    kvh: usize,
    t: usize,
    tp: usize,
) -> (Vec<f32>, Vec<f32>) {
    let d = k.dims[3];
    let mut kt = vec![0f32; d * tp];
    let mut vr = vec![0f32; tp * d];
    for j in 0..t {
        for (dd, &x) in k.row(b, kvh, j).iter().enumerate() {
            kt[dd * tp + j] = x;
        }
        vr[j * d..(j + 1) * d].copy_from_slice(v.row(b, kvh, j));
    }
    (kt, vr)
}

/// The forward of one (batch row, KV head): the outputs `[G, L, d]` and log-sum-exps `[G, L]`
/// of its query heads.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn fwd_task<S: Simd>(
    simd: S,
    q: View,
    k: View,
    v: View,
    vis: &Visibility,
    scale: f32,
    dm: Dims,
    b: usize,
    kvh: usize,
) -> (Vec<f32>, Vec<f32>) {
    let (groups, l, t, d) = (dm.h / dm.kv, dm.l, dm.t, dm.d);
    let tp = t.div_ceil(BC) * BC;
    let (kt, vr) = gather_kv(&k, &v, b, kvh, t, tp);
    let mut o = vec![0f32; groups * l * d];
    let mut lse = vec![0f32; groups * l];
    let mut qb = vec![0f32; BR * d];
    let mut s = vec![0f32; BR * BC];
    let mut acc = vec![0f32; BR * d];
    let mut m = [0f32; BR];
    let mut sum = [0f32; BR];
    let mut ranges = [(0usize, 0usize); BR];
    for g in 0..groups {
        let h = kvh * groups + g;
        for i0 in (0..l).step_by(BR) {
            let rows = BR.min(l - i0);
            let rp = rows.div_ceil(RP) * RP;
            qb[rows * d..rp * d].fill(0.0);
            for r in 0..rows {
                qb[r * d..(r + 1) * d].copy_from_slice(q.row(b, h, i0 + r));
                ranges[r] = vis.range(b, i0 + r);
            }
            acc[..rp * d].fill(0.0);
            m.fill(f32::NEG_INFINITY);
            sum.fill(0.0);
            let klo = ranges[..rows].iter().map(|r| r.0).min().unwrap_or(0);
            let khi = ranges[..rows].iter().map(|r| r.1).max().unwrap_or(0);
            for j0 in (klo / BC * BC..=khi).step_by(BC) {
                xyt(simd, &qb, rp, d, &kt[j0..], tp, &mut s);
                for r in 0..rows {
                    let (c0, c1) = cols(ranges[r].0, ranges[r].1, j0);
                    let sr = &mut s[r * BC..(r + 1) * BC];
                    if c0 >= c1 {
                        sr.fill(0.0);
                        continue;
                    }
                    let mn = m[r].max(max_of(&sr[c0..c1]) * scale);
                    for (c, x) in sr.iter_mut().enumerate() {
                        let e = exp_neg(*x * scale - mn);
                        *x = if c >= c0 && c < c1 { e } else { 0.0 };
                    }
                    let part = sum_of(sr);
                    if m[r] == f32::NEG_INFINITY {
                        sum[r] = part;
                    } else if mn > m[r] {
                        let alpha = exp_neg(m[r] - mn);
                        sum[r] = sum[r] * alpha + part;
                        for a in &mut acc[r * d..(r + 1) * d] {
                            *a *= alpha;
                        }
                    } else {
                        sum[r] += part;
                    }
                    m[r] = mn;
                }
                s[rows * BC..rp * BC].fill(0.0);
                py(simd, &s, BC, rp, BC, &vr[j0 * d..], d, d, &mut acc, d);
            }
            for r in 0..rows {
                let inv = 1.0 / sum[r];
                let row = (g * l + i0 + r) * d;
                for (o, &a) in o[row..row + d].iter_mut().zip(&acc[r * d..(r + 1) * d]) {
                    *o = a * inv;
                }
                lse[g * l + i0 + r] = m[r] + sum[r].ln();
            }
        }
    }
    (o, lse)
}

/// The backward of one (batch row, KV head): `dQ` of its query heads `[G, L, d]`, `dK` and
/// `dV` `[T, d]`. `o` and `dout` are the forward's output and its gradient, `[B, L, H·d]`
/// contiguous; `lse` the forward's `[B, H, L]`.
///
/// Each block is computed transposed (rows = keys, columns = queries), so every product reads
/// its operands row by row and nothing is transposed per block: `Sᵀ = K·Qᵀ`, `dPᵀ = V·dOᵀ`,
/// `dV += Pᵀ·dO`, `dK += dSᵀ·Q`, `dQᵀ += Kᵀ·dSᵀ`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn bwd_task<S: Simd>(
    simd: S,
    q: View,
    k: View,
    v: View,
    o: &[f32],
    dout: &[f32],
    lse: &[f32],
    vis: &Visibility,
    scale: f32,
    dm: Dims,
    b: usize,
    kvh: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let (groups, l, t, d, h_all) = (dm.h / dm.kv, dm.l, dm.t, dm.d, dm.h);
    let tp = t.div_ceil(BC) * BC;
    let lp = l.div_ceil(BR) * BR;
    let (kt, kr) = gather_kv(&k, &k, b, kvh, t, tp);
    let (_, vr) = gather_kv(&v, &v, b, kvh, t, tp);
    // Per query head, zero-padded to lp queries: Q and dO as rows and transposed, lse, and
    // Δ = rowsum(dO∘O).
    let mut qs = vec![0f32; groups * lp * d];
    let mut dos = vec![0f32; groups * lp * d];
    let mut qts = vec![0f32; groups * d * lp];
    let mut dots = vec![0f32; groups * d * lp];
    let mut lses = vec![0f32; groups * lp];
    let mut deltas = vec![0f32; groups * lp];
    for g in 0..groups {
        let h = kvh * groups + g;
        for i in 0..l {
            let at = (g * lp + i) * d;
            let qrow = q.row(b, h, i);
            let src = ((b * l + i) * h_all + h) * d;
            let dorow = &dout[src..src + d];
            qs[at..at + d].copy_from_slice(qrow);
            dos[at..at + d].copy_from_slice(dorow);
            for dd in 0..d {
                qts[(g * d + dd) * lp + i] = qrow[dd];
                dots[(g * d + dd) * lp + i] = dorow[dd];
            }
            lses[g * lp + i] = lse[(b * h_all + h) * l + i];
            deltas[g * lp + i] = dorow.iter().zip(&o[src..src + d]).map(|(x, y)| x * y).sum();
        }
    }
    // Visible keys [lo, hi] per query; padding queries (i ≥ l) see none.
    let mut lo = vec![i64::MAX; lp];
    let mut hi = vec![i64::MIN; lp];
    for i in 0..l {
        let (a, z) = vis.range(b, i);
        (lo[i], hi[i]) = (a as i64, z as i64);
    }
    let mut dqts = vec![0f32; groups * d * lp];
    let mut dk = vec![0f32; tp * d];
    let mut dv = vec![0f32; tp * d];
    let mut pt = vec![0f32; BC * BR];
    let mut dst = vec![0f32; BC * BR];
    for j0 in (0..t).step_by(BC) {
        for i0 in (0..l).step_by(BR) {
            let rows = BR.min(l - i0);
            let (lo_b, hi_b) = (&lo[i0..i0 + BR], &hi[i0..i0 + BR]);
            let first = lo_b[..rows].iter().min().copied().unwrap_or(i64::MAX);
            let last = hi_b[..rows].iter().max().copied().unwrap_or(i64::MIN);
            if last < j0 as i64 || first >= (j0 + BC) as i64 {
                continue;
            }
            for g in 0..groups {
                let at = g * lp + i0;
                xyt(
                    simd,
                    &kr[j0 * d..],
                    BC,
                    d,
                    &qts[g * d * lp + i0..],
                    lp,
                    &mut pt,
                );
                xyt(
                    simd,
                    &vr[j0 * d..],
                    BC,
                    d,
                    &dots[g * d * lp + i0..],
                    lp,
                    &mut dst,
                );
                let (ls, de) = (&lses[at..at + BR], &deltas[at..at + BR]);
                for c in 0..BC {
                    let key = (j0 + c) as i64;
                    let (pr, dr) = (
                        &mut pt[c * BR..(c + 1) * BR],
                        &mut dst[c * BR..(c + 1) * BR],
                    );
                    for r in 0..BR {
                        let e = exp_neg(pr[r] * scale - ls[r]);
                        let e = if lo_b[r] <= key && key <= hi_b[r] {
                            e
                        } else {
                            0.0
                        };
                        pr[r] = e;
                        dr[r] = scale * e * (dr[r] - de[r]);
                    }
                }
                let (qb, dob) = (&qs[at * d..(at + BR) * d], &dos[at * d..(at + BR) * d]);
                py(simd, &pt, BR, BC, BR, dob, d, d, &mut dv[j0 * d..], d);
                py(simd, &dst, BR, BC, BR, qb, d, d, &mut dk[j0 * d..], d);
                py(
                    simd,
                    &kt[j0..],
                    tp,
                    d,
                    BC,
                    &dst,
                    BR,
                    BR,
                    &mut dqts[g * d * lp + i0..],
                    lp,
                );
            }
        }
    }
    let mut dq = vec![0f32; groups * l * d];
    for g in 0..groups {
        for dd in 0..d {
            let row = &dqts[(g * d + dd) * lp..(g * d + dd) * lp + l];
            for (i, &x) in row.iter().enumerate() {
                dq[(g * l + i) * d + dd] = x;
            }
        }
    }
    (dq, dk, dv)
}

/// One forward task, run under the best SIMD instruction set [`Arch`] finds.
struct FwdTask<'a> {
    q: View<'a>,
    k: View<'a>,
    v: View<'a>,
    vis: &'a Visibility,
    scale: f32,
    dm: Dims,
    b: usize,
    kvh: usize,
}

impl WithSimd for FwdTask<'_> {
    type Output = (Vec<f32>, Vec<f32>);
    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> Self::Output {
        let t = self;
        fwd_task(simd, t.q, t.k, t.v, t.vis, t.scale, t.dm, t.b, t.kvh)
    }
}

/// One backward task, run under the best SIMD instruction set [`Arch`] finds.
struct BwdTask<'a> {
    q: View<'a>,
    k: View<'a>,
    v: View<'a>,
    o: &'a [f32],
    dout: &'a [f32],
    lse: &'a [f32],
    vis: &'a Visibility,
    scale: f32,
    dm: Dims,
    b: usize,
    kvh: usize,
}

impl WithSimd for BwdTask<'_> {
    type Output = (Vec<f32>, Vec<f32>, Vec<f32>);
    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> Self::Output {
        let t = self;
        bwd_task(
            simd, t.q, t.k, t.v, t.o, t.dout, t.lse, t.vis, t.scale, t.dm, t.b, t.kvh,
        )
    }
}

fn dims_of(op: &str, q: &View, k: &View, v: &View, vis: &Visibility) -> Result<Dims> {
    let [b, h, l, d] = q.dims;
    let [bk, kv, t, dk] = k.dims;
    if k.dims != v.dims
        || bk != b
        || dk != d
        || kv == 0
        || !h.is_multiple_of(kv)
        || b != vis.pad.len()
        || l != vis.new
        || t != vis.past + vis.new
        || !d.is_multiple_of(16)
        || d == 0
    {
        bail!(
            "{op}: q {:?}, k {:?}, v {:?} for {} batch rows with {} cached + {} new slots \
             (head_dim must be a multiple of 16)",
            q.dims,
            k.dims,
            v.dims,
            vis.pad.len(),
            vis.past,
            vis.new
        );
    }
    Ok(Dims { h, kv, l, t, d })
}

struct FlashAttention {
    vis: Visibility,
    scale: f32,
    /// The forward's log-sum-exp per query, `[B, H, L]`, kept for the backward.
    lse: Mutex<Option<Arc<Vec<f32>>>>,
}

impl CustomOp3 for FlashAttention {
    fn name(&self) -> &'static str {
        "t2po-flash-attention"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        let q = View::new(s1, l1, name, "q")?;
        let k = View::new(s2, l2, name, "k")?;
        let v = View::new(s3, l3, name, "v")?;
        let dm = dims_of(name, &q, &k, &v, &self.vis)?;
        let (b, groups) = (self.vis.pad.len(), dm.h / dm.kv);
        let (l, d) = (dm.l, dm.d);
        let parts: Vec<(Vec<f32>, Vec<f32>)> = (0..b * dm.kv)
            .into_par_iter()
            .map(|task| {
                Arch::new().dispatch(FwdTask {
                    q,
                    k,
                    v,
                    vis: &self.vis,
                    scale: self.scale,
                    dm,
                    b: task / dm.kv,
                    kvh: task % dm.kv,
                })
            })
            .collect();
        let mut out = vec![0f32; b * l * dm.h * d];
        let mut lse = vec![0f32; b * dm.h * l];
        for (task, (o, ls)) in parts.iter().enumerate() {
            let (bi, kvh) = (task / dm.kv, task % dm.kv);
            for g in 0..groups {
                let h = kvh * groups + g;
                for i in 0..l {
                    let dst = ((bi * l + i) * dm.h + h) * d;
                    out[dst..dst + d].copy_from_slice(&o[(g * l + i) * d..(g * l + i + 1) * d]);
                }
                lse[(bi * dm.h + h) * l..(bi * dm.h + h + 1) * l]
                    .copy_from_slice(&ls[g * l..(g + 1) * l]);
            }
        }
        match self.lse.lock() {
            Ok(mut slot) => *slot = Some(Arc::new(lse)),
            Err(_) => bail!("{name}: the log-sum-exp slot is poisoned"),
        }
        Ok((CpuStorage::F32(out), Shape::from((b, l, dm.h * d))))
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let lse = match self.lse.lock() {
            Ok(slot) => slot.clone(),
            Err(_) => bail!("{}: the log-sum-exp slot is poisoned", self.name()),
        };
        let Some(lse) = lse else {
            bail!("{}: backward before the forward", self.name())
        };
        let op = FlashAttentionBwd {
            vis: self.vis.clone(),
            scale: self.scale,
            out: res.contiguous()?,
            dout: grad.contiguous()?,
            lse,
        };
        let packed = q.apply_op3_no_bwd(k, v, &op)?;
        let (b, h, l, d) = q.dims4()?;
        let (_, kv, t, _) = k.dims4()?;
        let (nq, nk) = (b * l * h * d, b * t * kv * d);
        let dq = packed
            .narrow(0, 0, nq)?
            .reshape((b, l, h, d))?
            .transpose(1, 2)?;
        let dk = packed
            .narrow(0, nq, nk)?
            .reshape((b, t, kv, d))?
            .transpose(1, 2)?;
        let dv = packed
            .narrow(0, nq + nk, nk)?
            .reshape((b, t, kv, d))?
            .transpose(1, 2)?;
        Ok((Some(dq), Some(dk), Some(dv)))
    }
}

struct FlashAttentionBwd {
    vis: Visibility,
    scale: f32,
    out: Tensor,
    dout: Tensor,
    lse: Arc<Vec<f32>>,
}

impl CustomOp3 for FlashAttentionBwd {
    fn name(&self) -> &'static str {
        "t2po-flash-attention-bwd"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        let q = View::new(s1, l1, name, "q")?;
        let k = View::new(s2, l2, name, "k")?;
        let v = View::new(s3, l3, name, "v")?;
        let dm = dims_of(name, &q, &k, &v, &self.vis)?;
        let (b, groups) = (self.vis.pad.len(), dm.h / dm.kv);
        let (l, t, d) = (dm.l, dm.t, dm.d);
        let n_out = b * l * dm.h * d;
        if self.out.elem_count() != n_out
            || self.dout.elem_count() != n_out
            || self.lse.len() != b * dm.h * l
        {
            bail!("{name}: output, gradient or log-sum-exp of the wrong size");
        }
        let parts = with_f32(&self.out, name, "output", |o| {
            with_f32(&self.dout, name, "gradient", |g| {
                Ok((0..b * dm.kv)
                    .into_par_iter()
                    .map(|task| {
                        Arch::new().dispatch(BwdTask {
                            q,
                            k,
                            v,
                            o,
                            dout: g,
                            lse: &self.lse,
                            vis: &self.vis,
                            scale: self.scale,
                            dm,
                            b: task / dm.kv,
                            kvh: task % dm.kv,
                        })
                    })
                    .collect::<Vec<_>>())
            })
        })?;
        let nk = b * t * dm.kv * d;
        let mut packed = vec![0f32; n_out + 2 * nk];
        let (dq, rest) = packed.split_at_mut(n_out);
        let (dk, dv) = rest.split_at_mut(nk);
        for (task, (pq, pk, pv)) in parts.iter().enumerate() {
            let (bi, kvh) = (task / dm.kv, task % dm.kv);
            for g in 0..groups {
                let h = kvh * groups + g;
                for i in 0..l {
                    let dst = ((bi * l + i) * dm.h + h) * d;
                    dq[dst..dst + d].copy_from_slice(&pq[(g * l + i) * d..(g * l + i + 1) * d]);
                }
            }
            for j in 0..t {
                let dst = ((bi * t + j) * dm.kv + kvh) * d;
                dk[dst..dst + d].copy_from_slice(&pk[j * d..(j + 1) * d]);
                dv[dst..dst + d].copy_from_slice(&pv[j * d..(j + 1) * d]);
            }
        }
        Ok((CpuStorage::F32(packed), Shape::from(n_out + 2 * nk)))
    }
}

/// Scaled dot-product attention with GQA over the keys `vis` lets each query see, without the
/// `[B, H, L, T]` scores: `q: [B, H, L, D]`, `k`/`v: [B, KV, T, D]` (any strides with the last
/// dimension contiguous; `D` a multiple of 16) → `[B, L, H·D]` (the layout the output projection
/// takes). Differentiable in `q`, `k` and `v`.
pub fn flash_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    vis: &Visibility,
    scale: f64,
) -> Result<Tensor> {
    let last_contiguous = |t: &Tensor| -> Result<Tensor> {
        if t.stride().last() == Some(&1) {
            Ok(t.clone())
        } else {
            t.contiguous()
        }
    };
    last_contiguous(q)?.apply_op3(
        &last_contiguous(k)?,
        &last_contiguous(v)?,
        FlashAttention {
            vis: vis.clone(),
            scale: scale as f32,
            lse: Mutex::new(None),
        },
    )
}
