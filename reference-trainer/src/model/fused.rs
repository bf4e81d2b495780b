//! Fused CPU kernels for the Qwen3 forward and backward, as candle custom ops with their own
//! backward: each op reads its inputs once and writes one output, where the composed form in
//! [`super::ops`] (kept as the tested reference) runs 4–12 elementwise candle ops, each with a
//! full-size temporary, a thread-pool round trip and its own backward.
//!
//! | op | forward | backward |
//! |---|---|---|
//! | [`rms_norm`] | `w · x / √(mean x² + ε)` | `dx = r·(g·w − x̂·mean(g·w·x̂))`, `dw = Σ g·x̂` |
//! | [`rope`] | rotate-half RoPE from one `[cos ‖ sin]` table row per position | the inverse rotation |
//! | [`masked_softmax`] | `softmax(scale·s)` over the keys a query sees (causal + left padding) | `scale·p·(g − Σ p·g)` |
//! | [`flash_attention`] | `softmax(scale·q·kᵀ)·v` in 64×64 blocks with an online softmax (no `[B, H, L, T]` tensor), one log-sum-exp per query kept | recomputes each block's `P` from it: `dV += Pᵀ·dO`, `dS = P∘(dO·Vᵀ − Δ)`, `dQ`, `dK` |
//! | [`swiglu`] | `silu(g) · u` | `dg = grad·u·silu′(g)`, `du = grad·silu(g)` |
//! | [`log_prob_entropy`] | `log p(target)`, entropy `H`, `lse` of `logits / T` per row | `(1/T)·(g_lp·(δ − p) − g_H·p·(log p + H))` |
//! | [`lm_head_log_prob_entropy`] | the same from `h·Wᵀ`, in row chunks (no `[N, V]` tensor in one piece) | from the kept chunks (up to 256 MiB) or recomputed ones: `dh = dz·W`, `dW = Σ dzᵀ·h` |
//!
//! The kernels take f32 contiguous CPU tensors (the model falls back to the composed ops for
//! other dtypes and devices) and split rows over rayon's pool in fixed-size chunks, so results do
//! not depend on the thread count or schedule. `exp` is a branch-free Cody–Waite + degree-5
//! polynomial (≤ 4e-7 relative on `[−87, 0]`) that the compiler vectorises, in clones for AVX-512,
//! AVX2 and the baseline picked at run time.

use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::{
    bail, CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor, D,
};
use rayon::prelude::*;

mod flash;
pub use flash::flash_attention;

/// Elements per parallel task: large enough that a task outweighs its scheduling.
const TASK_ELEMS: usize = 1 << 15;

fn rows_per_task(width: usize) -> usize {
    (TASK_ELEMS / width.max(1)).max(1)
}

fn f32s<'a>(s: &'a CpuStorage, l: &Layout, op: &str, what: &str) -> Result<&'a [f32]> {
    let CpuStorage::F32(v) = s else {
        bail!("{op}: {what} must be f32, got {:?}", s.dtype())
    };
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&v[a..b]),
        None => bail!("{op}: {what} must be contiguous"),
    }
}

fn u32s<'a>(s: &'a CpuStorage, l: &Layout, op: &str, what: &str) -> Result<&'a [u32]> {
    let CpuStorage::U32(v) = s else {
        bail!("{op}: {what} must be u32, got {:?}", s.dtype())
    };
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&v[a..b]),
        None => bail!("{op}: {what} must be contiguous"),
    }
}

/// `e^d` for `d ≤ 0`: `2^n · e^r`, `n = round(d·log₂e)`, `r = d − n·ln2` in two parts
/// (Cody–Waite), `e^r` by a degree-5 minimax polynomial on `[−ln2/2, ln2/2]`: ≤ 4e-7
/// relative for `d ∈ [−87, 0]`. Below −87 (`e^d < 1.7e-38`) it returns `e^−87`, an absolute
/// error no sum of these terms can see. NaN propagates. Branch-free, so loops vectorise.
#[inline(always)]
pub(crate) fn exp_neg(d: f32) -> f32 {
    // Adding 1.5·2^23 + 127 rounds to an integer and leaves n + 127 (2^n's biased exponent) in
    // the low mantissa bits; shifting the bits left by 23 builds 2^n.
    const MAGIC: f32 = 12_583_039.0;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let d = if d < -87.0 { -87.0 } else { d };
    let z = d * std::f32::consts::LOG2_E + MAGIC;
    let n = z - MAGIC;
    let r = (d - n * LN2_HI) - n * LN2_LO;
    let p = 0.008_371_909f32;
    let p = p * r + 0.041_894_68;
    let p = p * r + 0.166_664_56;
    let p = p * r + 0.499_990_85;
    let p = p * r + 1.0;
    let p = p * r + 1.0;
    p * f32::from_bits(z.to_bits() << 23)
}

/// The logistic function, `1 / (1 + e^−x)`, from [`exp_neg`] of `−|x|`: for `x < 0` as
/// `e^x / (1 + e^x)` (not `1 − σ(|x|)`, which cancels: at `x = −8` that lost 3e-4 relative).
#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    let e = exp_neg(-x.abs());
    let s = 1.0 / (1.0 + e);
    if x >= 0.0 {
        s
    } else {
        e * s
    }
}

const LANES: usize = 16;

#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for k in 0..LANES {
            acc[k] += x[k] * y[k];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

#[inline(always)]
pub(crate) fn max_of(a: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let c = a.chunks_exact(LANES);
    let r = c.remainder();
    for x in c {
        for k in 0..LANES {
            acc[k] = if x[k] > acc[k] { x[k] } else { acc[k] };
        }
    }
    let mut m = acc.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for &x in r {
        m = m.max(x);
    }
    m
}

// ---------------------------------------------------------------------------------------------
// RMSNorm

struct RmsNorm {
    eps: f32,
}

#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
pub(crate) fn rms_norm_rows(x: &[f32], w: &[f32], eps: f32, y: &mut [f32]) {
    let d = w.len();
    for (xr, yr) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)) {
        let r = 1.0 / (dot(xr, xr) / d as f32 + eps).sqrt();
        for ((o, &a), &b) in yr.iter_mut().zip(xr).zip(w) {
            *o = a * r * b;
        }
    }
}

impl CustomOp2 for RmsNorm {
    fn name(&self) -> &'static str {
        "t2po-rms-norm"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = f32s(s1, l1, self.name(), "x")?;
        let w = f32s(s2, l2, self.name(), "weight")?;
        let d = w.len();
        if l1.dims().last() != Some(&d) {
            bail!(
                "{}: x {:?} and weight {:?}",
                self.name(),
                l1.dims(),
                l2.dims()
            );
        }
        let mut y = vec![0f32; x.len()];
        let chunk = rows_per_task(d) * d;
        y.par_chunks_mut(chunk)
            .zip(x.par_chunks(chunk))
            .for_each(|(yc, xc)| rms_norm_rows(xc, w, self.eps, yc));
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let n = x.elem_count();
        let d = w.elem_count();
        let packed = x.apply_op3_no_bwd(
            &w.contiguous()?,
            &grad.contiguous()?,
            &RmsNormBwd { eps: self.eps },
        )?;
        let dx = packed.narrow(0, 0, n)?.reshape(x.shape())?;
        let dw = packed.narrow(0, n, d)?.reshape(w.shape())?;
        Ok((Some(dx), Some(dw)))
    }
}

struct RmsNormBwd {
    eps: f32,
}

#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn rms_norm_bwd_rows(
    x: &[f32],
    w: &[f32],
    g: &[f32],
    eps: f32,
    dx: &mut [f32],
    dw: &mut [f32],
    gw: &mut [f32],
) {
    let d = w.len();
    for ((xr, gr), dxr) in x
        .chunks_exact(d)
        .zip(g.chunks_exact(d))
        .zip(dx.chunks_exact_mut(d))
    {
        let r = 1.0 / (dot(xr, xr) / d as f32 + eps).sqrt();
        for ((o, &a), &b) in gw.iter_mut().zip(gr).zip(w) {
            *o = a * b;
        }
        // mean(g·w·x̂) = r·mean(g·w·x)
        let c = r * dot(gw, xr) / d as f32;
        for (((o, &gwi), &xi), (dwi, &gi)) in dxr
            .iter_mut()
            .zip(gw.iter())
            .zip(xr)
            .zip(dw.iter_mut().zip(gr))
        {
            let xh = xi * r;
            *o = r * (gwi - xh * c);
            *dwi += gi * xh;
        }
    }
}

impl CustomOp3 for RmsNormBwd {
    fn name(&self) -> &'static str {
        "t2po-rms-norm-bwd"
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
        let x = f32s(s1, l1, self.name(), "x")?;
        let w = f32s(s2, l2, self.name(), "weight")?;
        let g = f32s(s3, l3, self.name(), "grad")?;
        let d = w.len();
        let n = x.len();
        let mut out = vec![0f32; n + d];
        let (dx, dw_out) = out.split_at_mut(n);
        let chunk = rows_per_task(d) * d;
        // Per-chunk partial dw, summed in chunk order (deterministic for any thread count).
        let partials: Vec<Vec<f32>> = dx
            .par_chunks_mut(chunk)
            .zip(x.par_chunks(chunk).zip(g.par_chunks(chunk)))
            .map(|(dxc, (xc, gc))| {
                let mut dw = vec![0f32; d];
                let mut gw = vec![0f32; d];
                rms_norm_bwd_rows(xc, w, gc, self.eps, dxc, &mut dw, &mut gw);
                dw
            })
            .collect();
        for p in &partials {
            for (o, v) in dw_out.iter_mut().zip(p) {
                *o += v;
            }
        }
        Ok((CpuStorage::F32(out), Shape::from(n + d)))
    }
}

/// `Qwen3RMSNorm` over the last dimension of a contiguous f32 `x`, weight `[D]`.
pub fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    x.contiguous()?
        .apply_op2(weight, RmsNorm { eps: eps as f32 })
}

// ---------------------------------------------------------------------------------------------
// RoPE

/// Rotate-half RoPE on `x: [rows, D]` where row `r` is at table row `r / heads`; the table
/// `cs: [positions, D]` holds `[cos ‖ sin]` (each `D/2`). `inverse` rotates by `−angle` (the
/// backward of the forward rotation).
struct Rope {
    heads: usize,
    inverse: bool,
}

#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
pub(crate) fn rope_rows(
    x: &[f32],
    cs: &[f32],
    d: usize,
    heads: usize,
    row0: usize,
    inv: bool,
    y: &mut [f32],
) {
    let half = d / 2;
    for (i, (xr, yr)) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)).enumerate() {
        let p = (row0 + i) / heads;
        let t = &cs[p * d..(p + 1) * d];
        let (c, s) = t.split_at(half);
        let (x1, x2) = xr.split_at(half);
        let (y1, y2) = yr.split_at_mut(half);
        if inv {
            for k in 0..half {
                y1[k] = x1[k] * c[k] + x2[k] * s[k];
                y2[k] = x2[k] * c[k] - x1[k] * s[k];
            }
        } else {
            for k in 0..half {
                y1[k] = x1[k] * c[k] - x2[k] * s[k];
                y2[k] = x2[k] * c[k] + x1[k] * s[k];
            }
        }
    }
}

impl CustomOp2 for Rope {
    fn name(&self) -> &'static str {
        "t2po-rope"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = f32s(s1, l1, self.name(), "x")?;
        let cs = f32s(s2, l2, self.name(), "table")?;
        let d = *l1.dims().last().unwrap_or(&0);
        let rows = x.len() / d.max(1);
        if d == 0 || !d.is_multiple_of(2) || l2.dims() != [rows / self.heads.max(1), d] {
            bail!(
                "{}: x {:?} with {} heads needs a [{}, {d}] table, got {:?}",
                self.name(),
                l1.dims(),
                self.heads,
                rows / self.heads.max(1),
                l2.dims()
            );
        }
        let mut y = vec![0f32; x.len()];
        let per = rows_per_task(d);
        y.par_chunks_mut(per * d)
            .zip(x.par_chunks(per * d))
            .enumerate()
            .for_each(|(i, (yc, xc))| rope_rows(xc, cs, d, self.heads, i * per, self.inverse, yc));
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        cs: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let op = Rope {
            heads: self.heads,
            inverse: !self.inverse,
        };
        Ok((Some(grad.contiguous()?.apply_op2_no_bwd(cs, &op)?), None))
    }
}

/// RoPE on `x: [B, L, H, D]` (contiguous) with `cs: [B·L, D]`, the `[cos ‖ sin]` table row of
/// each (batch row, position).
pub fn rope(x: &Tensor, cs: &Tensor) -> Result<Tensor> {
    let heads = x.dim(2)?;
    x.contiguous()?.apply_op2(
        &cs.contiguous()?,
        Rope {
            heads,
            inverse: false,
        },
    )
}

// ---------------------------------------------------------------------------------------------
// Masked softmax (attention probabilities)

/// Which keys each query row sees: the mask of [`super::ops::attention_mask`] without the
/// tensor. Rows are `[B, …, L]` flattened with the query index fastest; the row's batch is
/// `row / (rows / B)`.
#[derive(Clone, Debug)]
pub struct Visibility {
    /// Leading padding slots of each batch row.
    pub pad: Arc<[usize]>,
    /// Cached slots before the new queries.
    pub past: usize,
    /// New queries per (batch, head) block.
    pub new: usize,
}

impl Visibility {
    /// The visible key range `[lo, hi]` of query `i` (slot `past + i`) of batch row `b`: keys
    /// up to the query itself, not padding; a padding query sees only itself.
    #[inline]
    fn range(&self, b: usize, i: usize) -> (usize, usize) {
        let q = self.past + i;
        let p = self.pad[b];
        (if q >= p { p } else { q }, q)
    }
}

struct MaskedSoftmax {
    scale: f32,
    vis: Visibility,
}

#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
pub(crate) fn softmax_range(s: &[f32], scale: f32, out: &mut [f32]) {
    let m = max_of(s) * scale;
    let mut acc = [0f32; LANES];
    let cs = s.chunks_exact(LANES);
    let rs = cs.remainder();
    let mut co = out.chunks_exact_mut(LANES);
    for (x, o) in cs.zip(&mut co) {
        for k in 0..LANES {
            let e = exp_neg(x[k] * scale - m);
            o[k] = e;
            acc[k] += e;
        }
    }
    let mut sum: f32 = acc.iter().sum();
    for (x, o) in rs.iter().zip(co.into_remainder()) {
        let e = exp_neg(x * scale - m);
        *o = e;
        sum += e;
    }
    let inv = 1.0 / sum;
    for o in out.iter_mut() {
        *o *= inv;
    }
}

impl CustomOp1 for MaskedSoftmax {
    fn name(&self) -> &'static str {
        "t2po-masked-softmax"
    }
    fn cpu_fwd(&self, st: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let s = f32s(st, l, self.name(), "scores")?;
        let t = *l.dims().last().unwrap_or(&0);
        let rows = s.len() / t.max(1);
        let b = self.vis.pad.len();
        let v = &self.vis;
        if t != v.past + v.new || b == 0 || !rows.is_multiple_of(b * v.new.max(1)) {
            bail!(
                "{}: scores {:?} for {b} batch rows, {} cached + {} new slots",
                self.name(),
                l.dims(),
                v.past,
                v.new
            );
        }
        let per_batch = rows / b;
        let mut p = vec![0f32; s.len()];
        let per = rows_per_task(t);
        p.par_chunks_mut(per * t)
            .zip(s.par_chunks(per * t))
            .enumerate()
            .for_each(|(c, (pc, sc))| {
                for (k, (pr, sr)) in pc.chunks_exact_mut(t).zip(sc.chunks_exact(t)).enumerate() {
                    let row = c * per + k;
                    let (lo, hi) = v.range(row / per_batch, row % v.new);
                    softmax_range(&sr[lo..=hi], self.scale, &mut pr[lo..=hi]);
                }
            });
        Ok((CpuStorage::F32(p), l.shape().clone()))
    }

    fn bwd(&self, _s: &Tensor, p: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(p.apply_op2_no_bwd(
            &grad.contiguous()?,
            &SoftmaxBwd { scale: self.scale },
        )?))
    }
}

struct SoftmaxBwd {
    scale: f32,
}

#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn softmax_bwd_rows(p: &[f32], g: &[f32], t: usize, scale: f32, ds: &mut [f32]) {
    for ((pr, gr), dr) in p
        .chunks_exact(t)
        .zip(g.chunks_exact(t))
        .zip(ds.chunks_exact_mut(t))
    {
        let c = dot(pr, gr);
        for ((o, &pi), &gi) in dr.iter_mut().zip(pr).zip(gr) {
            *o = scale * pi * (gi - c);
        }
    }
}

impl CustomOp2 for SoftmaxBwd {
    fn name(&self) -> &'static str {
        "t2po-masked-softmax-bwd"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let p = f32s(s1, l1, self.name(), "probs")?;
        let g = f32s(s2, l2, self.name(), "grad")?;
        let t = *l1.dims().last().unwrap_or(&1);
        let mut ds = vec![0f32; p.len()];
        let chunk = rows_per_task(t) * t;
        ds.par_chunks_mut(chunk)
            .zip(p.par_chunks(chunk).zip(g.par_chunks(chunk)))
            .for_each(|(dc, (pc, gc))| softmax_bwd_rows(pc, gc, t, self.scale, dc));
        Ok((CpuStorage::F32(ds), l1.shape().clone()))
    }
}

/// `softmax(scale · scores)` over the keys each query sees (masked keys get probability 0):
/// `scores: [B, …, L·k, T]` contiguous, query index fastest within each batch row's block.
pub fn masked_softmax(scores: &Tensor, scale: f64, vis: &Visibility) -> Result<Tensor> {
    scores.contiguous()?.apply_op1(MaskedSoftmax {
        scale: scale as f32,
        vis: vis.clone(),
    })
}

/// Scaled dot-product attention with GQA, as [`super::ops::attention`] but with the mask given
/// by `vis` and the softmax fused: `q: [B, H, L, D]`, `k`/`v: [B, KV, T, D]`.
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    vis: &Visibility,
    scale: f64,
) -> Result<Tensor> {
    let (b, h, l, d) = q.dims4()?;
    let kv = k.dim(1)?;
    let groups = h / kv;
    // [B, KV, G·L, D]: the query index is fastest within each (batch, kv-head, group) block.
    let q = q.contiguous()?.reshape((b, kv, groups * l, d))?;
    let scores = q.matmul(&k.t()?)?;
    let probs = masked_softmax(&scores, scale, vis)?;
    probs.matmul(v)?.reshape((b, h, l, d))
}

// ---------------------------------------------------------------------------------------------
// SwiGLU

struct SwiGlu;

#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
pub(crate) fn swiglu_fwd(g: &[f32], u: &[f32], y: &mut [f32]) {
    for ((o, &a), &b) in y.iter_mut().zip(g).zip(u) {
        *o = a * sigmoid(a) * b;
    }
}

impl CustomOp2 for SwiGlu {
    fn name(&self) -> &'static str {
        "t2po-swiglu"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let g = f32s(s1, l1, self.name(), "gate")?;
        let u = f32s(s2, l2, self.name(), "up")?;
        if l1.dims() != l2.dims() {
            bail!(
                "{}: gate {:?} and up {:?}",
                self.name(),
                l1.dims(),
                l2.dims()
            );
        }
        let mut y = vec![0f32; g.len()];
        y.par_chunks_mut(TASK_ELEMS)
            .zip(g.par_chunks(TASK_ELEMS).zip(u.par_chunks(TASK_ELEMS)))
            .for_each(|(yc, (gc, uc))| swiglu_fwd(gc, uc, yc));
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(
        &self,
        g: &Tensor,
        u: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let n = g.elem_count();
        let packed = g.apply_op3_no_bwd(u, &grad.contiguous()?, &SwiGluBwd)?;
        let dg = packed.narrow(0, 0, n)?.reshape(g.shape())?;
        let du = packed.narrow(0, n, n)?.reshape(u.shape())?;
        Ok((Some(dg), Some(du)))
    }
}

struct SwiGluBwd;

#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn swiglu_bwd(g: &[f32], u: &[f32], gr: &[f32], dg: &mut [f32], du: &mut [f32]) {
    for i in 0..g.len() {
        let s = sigmoid(g[i]);
        let silu = g[i] * s;
        du[i] = gr[i] * silu;
        dg[i] = gr[i] * u[i] * (s * (1.0 + g[i] * (1.0 - s)));
    }
}

impl CustomOp3 for SwiGluBwd {
    fn name(&self) -> &'static str {
        "t2po-swiglu-bwd"
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
        let g = f32s(s1, l1, self.name(), "gate")?;
        let u = f32s(s2, l2, self.name(), "up")?;
        let gr = f32s(s3, l3, self.name(), "grad")?;
        let n = g.len();
        let mut out = vec![0f32; 2 * n];
        let (dg, du) = out.split_at_mut(n);
        dg.par_chunks_mut(TASK_ELEMS)
            .zip(du.par_chunks_mut(TASK_ELEMS))
            .zip(g.par_chunks(TASK_ELEMS).zip(u.par_chunks(TASK_ELEMS)))
            .zip(gr.par_chunks(TASK_ELEMS))
            .for_each(|(((dgc, duc), (gc, uc)), grc)| swiglu_bwd(gc, uc, grc, dgc, duc));
        Ok((CpuStorage::F32(out), Shape::from(2 * n)))
    }
}

/// `silu(gate) · up`, elementwise (same shapes, made contiguous).
pub fn swiglu(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    gate.contiguous()?.apply_op2(&up.contiguous()?, SwiGlu)
}

/// SwiGLU of one matmul's output: each row of `[…, 2m]` is `[gate ‖ up]`.
struct SwiGluPacked;

impl CustomOp1 for SwiGluPacked {
    fn name(&self) -> &'static str {
        "t2po-swiglu-packed"
    }
    fn cpu_fwd(&self, st: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let gu = f32s(st, l, self.name(), "gate-up")?;
        let w = *l.dims().last().unwrap_or(&0);
        if w == 0 || !w.is_multiple_of(2) {
            bail!(
                "{}: gate-up {:?} needs an even last dimension",
                self.name(),
                l.dims()
            );
        }
        let m = w / 2;
        let rows = gu.len() / w;
        let mut y = vec![0f32; rows * m];
        let per = rows_per_task(w);
        y.par_chunks_mut(per * m)
            .zip(gu.par_chunks(per * w))
            .for_each(|(yc, gc)| {
                for (yr, gr) in yc.chunks_exact_mut(m).zip(gc.chunks_exact(w)) {
                    swiglu_fwd(&gr[..m], &gr[m..], yr);
                }
            });
        let mut dims = l.dims().to_vec();
        if let Some(last) = dims.last_mut() {
            *last = m;
        }
        Ok((CpuStorage::F32(y), Shape::from(dims)))
    }

    fn bwd(&self, gu: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(
            gu.apply_op2_no_bwd(&grad.contiguous()?, &SwiGluPackedBwd)?,
        ))
    }
}

struct SwiGluPackedBwd;

impl CustomOp2 for SwiGluPackedBwd {
    fn name(&self) -> &'static str {
        "t2po-swiglu-packed-bwd"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let gu = f32s(s1, l1, self.name(), "gate-up")?;
        let gr = f32s(s2, l2, self.name(), "grad")?;
        let w = *l1.dims().last().unwrap_or(&0);
        let m = w / 2;
        if w == 0 || gr.len() * 2 != gu.len() {
            bail!(
                "{}: gate-up {:?} and grad {:?}",
                self.name(),
                l1.dims(),
                l2.dims()
            );
        }
        let mut d = vec![0f32; gu.len()];
        let per = rows_per_task(w);
        d.par_chunks_mut(per * w)
            .zip(gu.par_chunks(per * w).zip(gr.par_chunks(per * m)))
            .for_each(|(dc, (gc, grc))| {
                for ((dr, gr), g) in dc
                    .chunks_exact_mut(w)
                    .zip(gc.chunks_exact(w))
                    .zip(grc.chunks_exact(m))
                {
                    let (dg, du) = dr.split_at_mut(m);
                    swiglu_bwd(&gr[..m], &gr[m..], g, dg, du);
                }
            });
        Ok((CpuStorage::F32(d), l1.shape().clone()))
    }
}

/// `silu(gate) · up` where each row of `gate_up: […, 2m]` is `[gate ‖ up]` (the output of one
/// matmul with the stacked gate and up weights) → `[…, m]`; its gradient is one `[…, 2m]`
/// tensor, so the two projections' backward is one matmul each way.
pub fn swiglu_packed(gate_up: &Tensor) -> Result<Tensor> {
    gate_up.contiguous()?.apply_op1(SwiGluPacked)
}

// ---------------------------------------------------------------------------------------------
// Log-probability of the target + entropy

struct LogProbEntropy {
    inv_t: f32,
}

/// `(log p(target), H, lse)` of one row `y = z / T`.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn lpe_row(z: &[f32], target: usize, inv_t: f32) -> [f32; 3] {
    let m = max_of(z) * inv_t;
    let mut se = [0f32; LANES];
    let mut sey = [0f32; LANES];
    let c = z.chunks_exact(LANES);
    let r = c.remainder();
    for x in c {
        for k in 0..LANES {
            let y = x[k] * inv_t - m;
            let e = exp_neg(y);
            se[k] += e;
            sey[k] += e * y;
        }
    }
    let (mut s, mut sy): (f32, f32) = (se.iter().sum(), sey.iter().sum());
    for &x in r {
        let y = x * inv_t - m;
        let e = exp_neg(y);
        s += e;
        sy += e * y;
    }
    // With y' = y − m: lse = m + ln s, and H = lse − Σ p·y = ln s − Σ p·y'.
    let ln_s = s.ln();
    let lse = m + ln_s;
    let h = ln_s - sy / s;
    [z[target] * inv_t - lse, h, lse]
}

impl CustomOp2 for LogProbEntropy {
    fn name(&self) -> &'static str {
        "t2po-log-prob-entropy"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let z = f32s(s1, l1, self.name(), "logits")?;
        let t = u32s(s2, l2, self.name(), "targets")?;
        let (n, v) = l1.shape().dims2()?;
        if t.len() != n {
            bail!("{}: {n} rows and {} targets", self.name(), t.len());
        }
        if let Some(&bad) = t.iter().find(|&&x| x as usize >= v) {
            bail!("{}: target {bad} outside a vocabulary of {v}", self.name());
        }
        let mut out = vec![0f32; 3 * n];
        let per = rows_per_task(v);
        out.par_chunks_mut(3 * per)
            .zip(z.par_chunks(per * v).zip(t.par_chunks(per)))
            .for_each(|(oc, (zc, tc))| {
                for ((o, zr), &ti) in oc.chunks_exact_mut(3).zip(zc.chunks_exact(v)).zip(tc) {
                    o.copy_from_slice(&lpe_row(zr, ti as usize, self.inv_t));
                }
            });
        Ok((CpuStorage::F32(out), Shape::from((n, 3))))
    }

    fn bwd(
        &self,
        z: &Tensor,
        targets: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        // [lse, H, g_lp, g_H] per row.
        let aux = Tensor::cat(
            &[
                res.narrow(1, 2, 1)?,
                res.narrow(1, 1, 1)?,
                grad.narrow(1, 0, 1)?,
                grad.narrow(1, 1, 1)?,
            ],
            1,
        )?;
        let dz = z.apply_op3_no_bwd(targets, &aux, &LogProbEntropyBwd { inv_t: self.inv_t })?;
        Ok((Some(dz), None))
    }
}

struct LogProbEntropyBwd {
    inv_t: f32,
}

#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn lpe_bwd_row(z: &[f32], target: usize, aux: &[f32], inv_t: f32, dz: &mut [f32]) {
    let (lse, h, g_lp, g_h) = (aux[0], aux[1], aux[2], aux[3]);
    // dz = (1/T)·(−g_lp·p − g_H·p·(log p + H)) + δ_target·g_lp/T, log p = y − lse.
    for (o, &x) in dz.iter_mut().zip(z) {
        let lp = x * inv_t - lse;
        let p = exp_neg(lp);
        *o = -inv_t * p * (g_lp + g_h * (lp + h));
    }
    dz[target] += inv_t * g_lp;
}

impl CustomOp3 for LogProbEntropyBwd {
    fn name(&self) -> &'static str {
        "t2po-log-prob-entropy-bwd"
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
        let z = f32s(s1, l1, self.name(), "logits")?;
        let t = u32s(s2, l2, self.name(), "targets")?;
        let aux = f32s(s3, l3, self.name(), "aux")?;
        let (n, v) = l1.shape().dims2()?;
        let mut dz = vec![0f32; n * v];
        let per = rows_per_task(v);
        dz.par_chunks_mut(per * v)
            .zip(z.par_chunks(per * v))
            .zip(t.par_chunks(per).zip(aux.par_chunks(4 * per)))
            .for_each(|((dc, zc), (tc, ac))| {
                for (((dr, zr), &ti), ar) in dc
                    .chunks_exact_mut(v)
                    .zip(zc.chunks_exact(v))
                    .zip(tc)
                    .zip(ac.chunks_exact(4))
                {
                    lpe_bwd_row(zr, ti as usize, ar, self.inv_t, dr);
                }
            });
        Ok((CpuStorage::F32(dz), l1.shape().clone()))
    }
}

/// `log p(target)` and the entropy of `softmax(logits / temperature)` per row:
/// `logits: [N, V]` f32, `targets: [N]` u32 → (`[N]`, `[N]`), both differentiable.
pub fn log_prob_entropy(
    logits: &Tensor,
    targets: &Tensor,
    temperature: f64,
) -> Result<(Tensor, Tensor)> {
    let out = logits.contiguous()?.apply_op2(
        &targets.contiguous()?,
        LogProbEntropy {
            inv_t: (1.0 / temperature) as f32,
        },
    )?;
    Ok((
        out.narrow(D::Minus1, 0, 1)?.squeeze(D::Minus1)?,
        out.narrow(D::Minus1, 1, 1)?.squeeze(D::Minus1)?,
    ))
}

// ---------------------------------------------------------------------------------------------
// LM head + log-probability of the target + entropy, in row chunks

/// Rows per LM-head chunk. Up to a vocabulary of 8,192 a chunk is a `[rows, V]` logits block of
/// about 2 MB (64–256 rows), reused in cache rather than a `[N, V]` tensor (64 MB at N = V =
/// 4096) allocated, faulted in and freed per step. Above it a 2 MB chunk would be a few rows,
/// and every chunk streams the whole head weight through the gemm's packing four times (the
/// forward, the backward's recomputed logits, `dz·W`, `dzᵀ·h`) and adds a `[V, d]` partial
/// gradient: at SmolLM2's 49,152 entries (10 rows) that was ~10 ms a row, three quarters of a
/// training step. So larger vocabularies take 256 rows, at most 64 MB of logits per chunk
/// (~1.6 ms a row there: `benches/real_model.rs`).
fn head_rows(vocab: usize) -> usize {
    let v = vocab.max(1);
    let cached = (1 << 19) / v;
    if cached >= 64 {
        cached.min(256)
    } else {
        ((1 << 24) / v).clamp(cached.max(1), 256)
    }
}

/// `logits = h·Wᵀ` of one chunk, as host data (candle's gemm does the product).
fn chunk_logits(h: &[f32], rows: usize, d: usize, w_t: &Tensor) -> Result<Tensor> {
    Tensor::from_slice(h, (rows, d), &candle_core::Device::Cpu)?.matmul(w_t)
}

/// Runs `f` on the data of a contiguous f32 CPU tensor (errors name `op` and `what`).
fn with_f32<T>(t: &Tensor, op: &str, what: &str, f: impl FnOnce(&[f32]) -> Result<T>) -> Result<T> {
    let (st, l) = t.storage_and_layout();
    match &*st {
        candle_core::Storage::Cpu(cpu) => f(f32s(cpu, l, op, what)?),
        _ => bail!("{op}: {what} must be on the CPU"),
    }
}

/// [`with_f32`] for the LM-head ops' logits chunks.
fn host_f32(t: &Tensor, f: impl FnOnce(&[f32]) -> Result<()>) -> Result<()> {
    with_f32(t, "t2po-lm-head", "logits", f)
}

/// The most logits (bytes) the LM-head op keeps from its forward for the backward; above it the
/// backward recomputes each chunk's logits (one more `h·Wᵀ`: at the default vocabulary the LM
/// head is half the model's matmul work, so keeping them saves a sixth of a training step).
const KEEP_LOGITS_BYTES: usize = 256 << 20;

struct LmHeadLogProb {
    inv_t: f32,
    /// Keep the forward's logits when they take at most this many bytes.
    keep_bytes: usize,
    /// The forward's logits chunks, when they fit [`KEEP_LOGITS_BYTES`].
    kept: std::sync::Mutex<Option<Arc<Vec<Tensor>>>>,
}

impl CustomOp3 for LmHeadLogProb {
    fn name(&self) -> &'static str {
        "t2po-lm-head"
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
        let h = f32s(s1, l1, self.name(), "hidden")?;
        let w = f32s(s2, l2, self.name(), "weight")?;
        let t = u32s(s3, l3, self.name(), "targets")?;
        let (n, d) = l1.shape().dims2()?;
        let (v, dw) = l2.shape().dims2()?;
        if d != dw || t.len() != n {
            bail!(
                "{}: hidden {:?}, weight {:?}, {} targets",
                self.name(),
                l1.dims(),
                l2.dims(),
                t.len()
            );
        }
        if let Some(&bad) = t.iter().find(|&&x| x as usize >= v) {
            bail!("{}: target {bad} outside a vocabulary of {v}", self.name());
        }
        let w_t = Tensor::from_slice(w, (v, d), &candle_core::Device::Cpu)?.t()?;
        let mut out = vec![0f32; 3 * n];
        let rows = head_rows(v);
        let keep = n * v * 4 <= self.keep_bytes;
        let mut kept = Vec::new();
        for (c, oc) in out.chunks_mut(3 * rows).enumerate() {
            let r = oc.len() / 3;
            let z = chunk_logits(&h[c * rows * d..(c * rows + r) * d], r, d, &w_t)?;
            host_f32(&z, |z| {
                oc.par_chunks_mut(3)
                    .zip(z.par_chunks(v))
                    .zip(t[c * rows..c * rows + r].par_iter())
                    .for_each(|((o, zr), &ti)| {
                        o.copy_from_slice(&lpe_row(zr, ti as usize, self.inv_t))
                    });
                Ok(())
            })?;
            if keep {
                kept.push(z);
            }
        }
        match self.kept.lock() {
            Ok(mut slot) => *slot = keep.then(|| Arc::new(kept)),
            Err(_) => bail!("{}: the kept-logits slot is poisoned", self.name()),
        }
        Ok((CpuStorage::F32(out), Shape::from((n, 3))))
    }

    fn bwd(
        &self,
        h: &Tensor,
        w: &Tensor,
        targets: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        // [lse, H, g_lp, g_H, target] per row (targets < 2^24 are exact in f32).
        let aux = Tensor::cat(
            &[
                res.narrow(1, 2, 1)?,
                res.narrow(1, 1, 1)?,
                grad.narrow(1, 0, 1)?,
                grad.narrow(1, 1, 1)?,
                targets.to_dtype(candle_core::DType::F32)?.unsqueeze(1)?,
            ],
            1,
        )?;
        let kept = match self.kept.lock() {
            Ok(slot) => slot.clone(),
            Err(_) => bail!("{}: the kept-logits slot is poisoned", self.name()),
        };
        let packed = h.apply_op3_no_bwd(
            w,
            &aux,
            &LmHeadLogProbBwd {
                inv_t: self.inv_t,
                kept,
            },
        )?;
        let (nh, nw) = (h.elem_count(), w.elem_count());
        let dh = packed.narrow(0, 0, nh)?.reshape(h.shape())?;
        let dw = packed.narrow(0, nh, nw)?.reshape(w.shape())?;
        Ok((Some(dh), Some(dw), None))
    }
}

struct LmHeadLogProbBwd {
    inv_t: f32,
    /// The forward's logits chunks, if it kept them (else they are recomputed).
    kept: Option<Arc<Vec<Tensor>>>,
}

impl CustomOp3 for LmHeadLogProbBwd {
    fn name(&self) -> &'static str {
        "t2po-lm-head-bwd"
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
        let h = f32s(s1, l1, self.name(), "hidden")?;
        let w = f32s(s2, l2, self.name(), "weight")?;
        let aux = f32s(s3, l3, self.name(), "aux")?;
        let (n, d) = l1.shape().dims2()?;
        let (v, _) = l2.shape().dims2()?;
        let cpu = candle_core::Device::Cpu;
        let w_mat = Tensor::from_slice(w, (v, d), &cpu)?;
        let w_t = w_mat.t()?;
        let mut out = vec![0f32; n * d + v * d];
        let (dh, dw) = out.split_at_mut(n * d);
        let rows = head_rows(v);
        let mut dz = Vec::new();
        for (c, dhc) in dh.chunks_mut(rows * d).enumerate() {
            let r = dhc.len() / d;
            let hc = &h[c * rows * d..(c * rows + r) * d];
            let z = match self.kept.as_ref().and_then(|k| k.get(c)) {
                Some(z) if z.dims() == [r, v] => z.clone(),
                _ => chunk_logits(hc, r, d, &w_t)?,
            };
            dz.resize(r * v, 0f32);
            host_f32(&z, |z| {
                dz.par_chunks_mut(v)
                    .zip(z.par_chunks(v))
                    .zip(aux[c * rows * 5..(c * rows + r) * 5].par_chunks(5))
                    .for_each(|((dr, zr), a)| {
                        lpe_bwd_row(zr, a[4] as usize, &a[..4], self.inv_t, dr)
                    });
                Ok(())
            })?;
            let dzt = Tensor::from_slice(&dz, (r, v), &cpu)?;
            // dh = dz·W, dW += dzᵀ·h (chunks summed in order: deterministic).
            host_f32(&dzt.matmul(&w_mat)?, |x| {
                dhc.copy_from_slice(x);
                Ok(())
            })?;
            let hct = Tensor::from_slice(hc, (r, d), &cpu)?;
            host_f32(&dzt.t()?.matmul(&hct)?, |x| {
                for (o, &a) in dw.iter_mut().zip(x) {
                    *o += a;
                }
                Ok(())
            })?;
        }
        Ok((CpuStorage::F32(out), Shape::from(n * d + v * d)))
    }
}

/// `log p(target)` and the entropy of `softmax(h·Wᵀ / temperature)` per row, without the
/// `[N, V]` logits: `hidden: [N, d]`, `weight: [V, d]` (the LM head), `targets: [N]` u32 →
/// (`[N]`, `[N]`), differentiable in `hidden` and `weight`. The logits are computed in chunks
/// of rows, forward and (recomputed) backward.
pub fn lm_head_log_prob_entropy(
    hidden: &Tensor,
    weight: &Tensor,
    targets: &Tensor,
    temperature: f64,
) -> Result<(Tensor, Tensor)> {
    lm_head_lpe(hidden, weight, targets, temperature, KEEP_LOGITS_BYTES)
}

fn lm_head_lpe(
    hidden: &Tensor,
    weight: &Tensor,
    targets: &Tensor,
    temperature: f64,
    keep_bytes: usize,
) -> Result<(Tensor, Tensor)> {
    let out = hidden.contiguous()?.apply_op3(
        &weight.contiguous()?,
        &targets.contiguous()?,
        LmHeadLogProb {
            inv_t: (1.0 / temperature) as f32,
            keep_bytes,
            kept: std::sync::Mutex::new(None),
        },
    )?;
    Ok((
        out.narrow(D::Minus1, 0, 1)?.squeeze(D::Minus1)?,
        out.narrow(D::Minus1, 1, 1)?.squeeze(D::Minus1)?,
    ))
}

#[cfg(test)]
mod tests {
    //! Each fused op against the composed reference ops of [`super::super::ops`] run in f64
    //! (forward values and gradients of a random linear functional of the output), and against
    //! central finite differences of the fused forward itself.
    //!
    //! Tolerances (f32 kernels against the f64 reference), norm-wise `max|a − r| / max|r|`:
    //! forward ≤ 1e-6, gradients ≤ 2e-6 (measured: ≤ 1.4e-7 forward, ≤ 4.8e-7 gradients, the
    //! largest SwiGLU's through the polynomial `exp` in saturated sigmoids); finite differences
    //! (f32, step 1e-2 on small tensors) ≤ 2e-3 of the largest gradient. The whole model, fused
    //! f32 against composed f64, is checked the same way on log-probs, entropies and every
    //! parameter's gradient (≤ 1e-5: errors compound over the layers).
    use super::*;
    use crate::model::ops;
    use candle_core::{DType, Device, Var};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha12Rng;

    fn randn(rng: &mut ChaCha12Rng, shape: &[usize], std: f32) -> Tensor {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| (rng.random::<f32>() * 2.0 - 1.0) * std * 1.7)
            .collect();
        Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
    }

    fn f64s(t: &Tensor) -> Vec<f64> {
        t.to_dtype(DType::F64)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    }

    /// `max |a − r| / max |r|`.
    fn rel(a: &Tensor, r: &Tensor) -> f64 {
        let (a, r) = (f64s(a), f64s(r));
        assert_eq!(a.len(), r.len());
        let scale = r.iter().fold(0f64, |m, x| m.max(x.abs())).max(1e-30);
        a.iter()
            .zip(&r)
            .fold(0f64, |m, (x, y)| m.max((x - y).abs()))
            / scale
    }

    /// Forward and gradients of `Σ out·R` for the fused op (f32) and the reference (f64) on
    /// the same inputs; `grad_of` marks which inputs are differentiated.
    fn check(
        name: &str,
        inputs: &[Tensor],
        grad_of: &[bool],
        fused: impl Fn(&[Tensor]) -> Tensor,
        reference: impl Fn(&[Tensor]) -> Tensor,
    ) {
        let mut rng = ChaCha12Rng::seed_from_u64(99);
        let run = |dtype: DType, f: &dyn Fn(&[Tensor]) -> Tensor, r: &Tensor| {
            let vars: Vec<Option<Var>> = inputs
                .iter()
                .zip(grad_of)
                .map(|(t, &g)| g.then(|| Var::from_tensor(&t.to_dtype(dtype).unwrap()).unwrap()))
                .collect();
            let ins: Vec<Tensor> = inputs
                .iter()
                .zip(&vars)
                .map(|(t, v)| match v {
                    Some(v) => v.as_tensor().clone(),
                    None if t.dtype() == DType::U32 => t.clone(),
                    None => t.to_dtype(dtype).unwrap(),
                })
                .collect();
            let out = f(&ins);
            let loss = (&out * r.to_dtype(dtype).unwrap())
                .unwrap()
                .sum_all()
                .unwrap();
            let grads = loss.backward().unwrap();
            let g: Vec<Option<Tensor>> = vars
                .iter()
                .map(|v| {
                    v.as_ref()
                        .map(|v| grads.get(v.as_tensor()).unwrap().clone())
                })
                .collect();
            (out, g)
        };
        let probe = fused(inputs);
        let r = randn(&mut rng, probe.dims(), 1.0);
        let (out_f, g_f) = run(DType::F32, &fused, &r);
        let (out_r, g_r) = run(DType::F64, &reference, &r);
        let e = rel(&out_f, &out_r);
        eprintln!("{name}: forward {e:.1e}");
        assert!(e <= 1e-6, "{name}: forward off by {e:e} (norm-wise)");
        for (i, (a, b)) in g_f.iter().zip(&g_r).enumerate() {
            if let (Some(a), Some(b)) = (a, b) {
                let e = rel(a, b);
                eprintln!("{name}: gradient {i} {e:.1e}");
                assert!(e <= 2e-6, "{name}: gradient of input {i} off by {e:e}");
            }
        }
        // Central differences of the fused forward (f32) at a few coordinates of each input.
        for (i, g) in g_f.iter().enumerate() {
            let Some(g) = g else { continue };
            let g = f64s(g);
            let gmax = g.iter().fold(0f64, |m, x| m.max(x.abs())).max(1e-12);
            let base = f64s(&inputs[i]);
            for c in [0, base.len() / 3, base.len() - 1] {
                let at = |delta: f64| {
                    let mut v = base.clone();
                    v[c] += delta;
                    let t = Tensor::from_vec(
                        v.iter().map(|&x| x as f32).collect::<Vec<_>>(),
                        inputs[i].dims(),
                        &Device::Cpu,
                    )
                    .unwrap();
                    let mut ins = inputs.to_vec();
                    ins[i] = t;
                    let out = fused(&ins);
                    f64s(&(out * &r).unwrap().sum_all().unwrap())[0]
                };
                let h = 1e-2;
                let fd = (at(h) - at(-h)) / (2.0 * h);
                assert!(
                    (fd - g[c]).abs() <= 2e-3 * gmax,
                    "{name}: input {i}[{c}]: finite difference {fd} vs gradient {}",
                    g[c]
                );
            }
        }
    }

    #[test]
    fn rms_norm_matches_the_composed_op() {
        let mut rng = ChaCha12Rng::seed_from_u64(1);
        for (shape, d) in [(vec![3, 5, 32], 32), (vec![7, 40], 40), (vec![2, 3], 3)] {
            let x = randn(&mut rng, &shape, 1.0);
            let w = (randn(&mut rng, &[d], 0.3) + 1.0).unwrap();
            check(
                "rms_norm",
                &[x, w],
                &[true, true],
                |t| rms_norm(&t[0], &t[1], 1e-6).unwrap(),
                |t| ops::rms_norm(&t[0], &t[1], 1e-6).unwrap(),
            );
        }
    }

    #[test]
    fn rope_matches_the_composed_op() {
        let mut rng = ChaCha12Rng::seed_from_u64(2);
        let (b, l, h, d) = (2, 5, 3, 16);
        let (cos, sin) = ops::rope_tables(d, 10_000.0, 64, DType::F32, &Device::Cpu).unwrap();
        let pos: Vec<u32> = (0..b * l).map(|i| ((i * 7) % 64) as u32).collect();
        let pos = Tensor::from_vec(pos, b * l, &Device::Cpu).unwrap();
        let c = cos.index_select(&pos, 0).unwrap();
        let s = sin.index_select(&pos, 0).unwrap();
        let cs = Tensor::cat(&[&c, &s], 1).unwrap();
        let x = randn(&mut rng, &[b, l, h, d], 1.0);
        check(
            "rope",
            &[x, cs, c, s],
            &[true, false, false, false],
            |t| rope(&t[0], &t[1]).unwrap(),
            |t| {
                let c = t[2].reshape((b, 1, l, d / 2)).unwrap();
                let s = t[3].reshape((b, 1, l, d / 2)).unwrap();
                ops::rope(&t[0].transpose(1, 2).unwrap(), &c, &s)
                    .unwrap()
                    .transpose(1, 2)
                    .unwrap()
            },
        );
    }

    #[test]
    fn attention_matches_the_composed_op_with_padding_and_a_cache() {
        let mut rng = ChaCha12Rng::seed_from_u64(3);
        // (pad per row, past, new): training (no pad), prefill (left pad), decode (past > 0).
        for (pad, past, new) in [
            (vec![0, 0], 0, 6),
            (vec![0, 3], 0, 6),
            (vec![2, 0, 4], 5, 1),
            (vec![1, 0], 4, 3),
        ] {
            check_attention(&mut rng, &pad, past, new, (4, 2, 8), false);
        }
    }

    #[test]
    fn flash_attention_matches_the_composed_op_across_blocks() {
        let mut rng = ChaCha12Rng::seed_from_u64(31);
        // (pad per row, past, new, (heads, kv heads, head_dim)): one block, several query and
        // key blocks with partial last blocks, left padding longer than a block, a cache
        // (past > 0), GQA groups of 1, 2 and 4, head_dim 16 / 32 / 64.
        for (pad, past, new, shape) in [
            (vec![0], 0, 5, (2, 1, 16)),
            (vec![0, 0], 0, 150, (4, 2, 32)),
            (vec![0, 70], 0, 133, (2, 2, 16)),
            (vec![3, 0], 30, 70, (4, 1, 64)),
            (vec![0, 2, 65], 0, 67, (2, 1, 32)),
        ] {
            check_attention(&mut rng, &pad, past, new, shape, true);
        }
    }

    /// [`check`] of [`attention`] (or [`flash_attention`], whose output is `[B, L, H·D]`)
    /// against the composed op with the same mask, on random q/k/v of `(heads, kv, head_dim)`.
    fn check_attention(
        rng: &mut ChaCha12Rng,
        pad: &[usize],
        past: usize,
        new: usize,
        (h, kv, d): (usize, usize, usize),
        flash: bool,
    ) {
        let (b, t) = (pad.len(), past + new);
        let q = randn(rng, &[b, h, new, d], 1.0);
        let k = randn(rng, &[b, kv, t, d], 1.0);
        let v = randn(rng, &[b, kv, t, d], 1.0);
        let vis = Visibility {
            pad: pad.to_vec().into(),
            past,
            new,
        };
        let scale = 1.0 / (d as f64).sqrt();
        check(
            if flash {
                "flash_attention"
            } else {
                "attention"
            },
            &[q, k, v],
            &[true, true, true],
            |x| {
                if flash {
                    flash_attention(&x[0], &x[1], &x[2], &vis, scale).unwrap()
                } else {
                    attention(&x[0], &x[1], &x[2], &vis, scale).unwrap()
                }
            },
            |x| {
                let mask = ops::attention_mask(pad, past, new, x[0].dtype(), &Device::Cpu).unwrap();
                let o = ops::attention(&x[0], &x[1], &x[2], &mask, scale).unwrap();
                if flash {
                    o.transpose(1, 2).unwrap().reshape((b, new, h * d)).unwrap()
                } else {
                    o
                }
            },
        );
    }

    #[test]
    fn flash_attention_takes_strided_inputs_and_names_bad_shapes() {
        let mut rng = ChaCha12Rng::seed_from_u64(32);
        let (b, l, h, kv, d) = (2, 20, 4, 2, 16);
        // q/k/v as the model makes them: [B, L, heads, D] transposed to [B, heads, L, D].
        let q = randn(&mut rng, &[b, l, h, d], 1.0).transpose(1, 2).unwrap();
        let k = randn(&mut rng, &[b, l, kv, d], 1.0)
            .transpose(1, 2)
            .unwrap();
        let v = randn(&mut rng, &[b, l, kv, d], 1.0)
            .transpose(1, 2)
            .unwrap();
        let vis = Visibility {
            pad: vec![0, 0].into(),
            past: 0,
            new: l,
        };
        let strided = flash_attention(&q, &k, &v, &vis, 0.25).unwrap();
        let dense = flash_attention(
            &q.contiguous().unwrap(),
            &k.contiguous().unwrap(),
            &v.contiguous().unwrap(),
            &vis,
            0.25,
        )
        .unwrap();
        assert_eq!(f64s(&strided), f64s(&dense));
        let odd = randn(&mut rng, &[b, h, l, 12], 1.0);
        let err = flash_attention(&odd, &odd, &odd, &vis, 0.25).unwrap_err();
        assert!(err.to_string().contains("t2po-flash-attention"), "{err}");
        let short = Visibility {
            pad: vec![0].into(),
            past: 0,
            new: l,
        };
        let err = flash_attention(&q, &k, &v, &short, 0.25).unwrap_err();
        assert!(err.to_string().contains("batch rows"), "{err}");
    }

    #[test]
    fn packed_swiglu_matches_the_composed_op() {
        let mut rng = ChaCha12Rng::seed_from_u64(41);
        for (rows, m) in [(3, 16), (700, 48), (1, 1)] {
            let gate = (randn(&mut rng, &[rows, m], 4.0) - 0.5).unwrap();
            let up = randn(&mut rng, &[rows, m], 1.0);
            let gu = Tensor::cat(&[&gate, &up], 1).unwrap();
            check(
                "swiglu_packed",
                &[gu],
                &[true],
                |t| swiglu_packed(&t[0]).unwrap(),
                |t| {
                    let g = t[0].narrow(1, 0, m).unwrap();
                    let u = t[0].narrow(1, m, m).unwrap();
                    (g.silu().unwrap() * u).unwrap()
                },
            );
        }
        let odd = randn(&mut rng, &[2, 5], 1.0);
        let e = swiglu_packed(&odd).unwrap_err().to_string();
        assert!(
            e.contains("t2po-swiglu-packed") && e.contains("even"),
            "{e}"
        );
    }

    #[test]
    fn swiglu_matches_the_composed_op() {
        let mut rng = ChaCha12Rng::seed_from_u64(4);
        // Gate values across the range where sigmoid saturates in both directions.
        let g = (randn(&mut rng, &[4, 37], 1.0) * 12.0).unwrap();
        let u = randn(&mut rng, &[4, 37], 1.0);
        check(
            "swiglu",
            &[g, u],
            &[true, true],
            |t| swiglu(&t[0], &t[1]).unwrap(),
            |t| (t[0].silu().unwrap() * &t[1]).unwrap(),
        );
    }

    #[test]
    fn log_prob_entropy_matches_the_composed_ops() {
        let mut rng = ChaCha12Rng::seed_from_u64(5);
        for (n, v, temperature, std) in [(5, 97, 1.0, 3.0), (3, 1000, 0.7, 8.0), (4, 16, 1.3, 0.1)]
        {
            let z = randn(&mut rng, &[n, v], std);
            let tg: Vec<u32> = (0..n).map(|i| ((i * 31 + 7) % v) as u32).collect();
            let tg = Tensor::from_vec(tg, n, &Device::Cpu).unwrap();
            let both = |lp: Tensor, h: Tensor| Tensor::stack(&[lp, h], 1).unwrap();
            check(
                "log_prob_entropy",
                &[z, tg],
                &[true, false],
                |t| {
                    let (lp, h) = log_prob_entropy(&t[0], &t[1], temperature).unwrap();
                    both(lp, h)
                },
                |t| {
                    let logp = ops::log_softmax_last(&(&t[0] / temperature).unwrap()).unwrap();
                    let lp = logp
                        .gather(&t[1].unsqueeze(1).unwrap(), 1)
                        .unwrap()
                        .squeeze(1)
                        .unwrap();
                    let h = (logp.exp().unwrap() * &logp)
                        .unwrap()
                        .sum(D::Minus1)
                        .unwrap()
                        .neg()
                        .unwrap();
                    both(lp, h)
                },
            );
        }
    }

    #[test]
    fn exp_neg_is_accurate_on_its_range() {
        let mut worst = 0f64;
        for i in 0..=200_000 {
            let d = -87.0 * i as f64 / 200_000.0;
            let got = exp_neg(d as f32) as f64;
            let want = (d as f32 as f64).exp();
            worst = worst.max((got - want).abs() / want);
        }
        assert!(worst <= 4e-7, "worst relative error {worst:e}");
        assert!(exp_neg(f32::NAN).is_nan());
        assert!(exp_neg(-1e30) <= 1.7e-38 && exp_neg(f32::NEG_INFINITY) <= 1.7e-38);
    }

    #[test]
    fn sigmoid_is_accurate_in_both_tails() {
        // Relative error against f64 on [−80, 80] (the negative tail is where 1 − σ(|x|) used
        // to cancel).
        let mut worst = 0f64;
        for i in 0..=160_000 {
            let x = (-80.0 + i as f64 / 1000.0) as f32;
            let want = 1.0 / (1.0 + (-(x as f64)).exp());
            worst = worst.max((sigmoid(x) as f64 - want).abs() / want);
        }
        assert!(worst <= 1e-6, "worst relative error {worst:e}");
    }

    #[test]
    fn bad_inputs_are_errors_naming_the_op() {
        let z = Tensor::zeros((2, 8), DType::F32, &Device::Cpu).unwrap();
        let tg = Tensor::from_vec(vec![1u32, 8], 2, &Device::Cpu).unwrap();
        let e = log_prob_entropy(&z, &tg, 1.0).unwrap_err().to_string();
        assert!(
            e.contains("t2po-log-prob-entropy") && e.contains("target 8"),
            "{e}"
        );
        let z64 = z.to_dtype(DType::F64).unwrap();
        let w = Tensor::ones(8, DType::F64, &Device::Cpu).unwrap();
        let e = rms_norm(&z64, &w, 1e-6).unwrap_err().to_string();
        assert!(e.contains("must be f32"), "{e}");
    }

    #[test]
    fn the_fused_model_matches_the_composed_reference_in_f64() {
        // head_dim 8 runs the matmul attention; 16 the flash attention (with a sequence longer
        // than one 64-query block).
        for hd in [8, 16] {
            model_matches_reference(hd);
        }
    }

    fn model_matches_reference(hd: usize) {
        use crate::model::{Qwen3, Qwen3Config};
        let cfg = Qwen3Config::small(97, 32, 64, 2, 4, 2, hd, 160);
        let fused = Qwen3::random(cfg.clone(), 7, DType::F32, &Device::Cpu).unwrap();
        let mut reference = Qwen3::random(cfg, 7, DType::F64, &Device::Cpu).unwrap();
        assert!(fused.fused() && !reference.fused());
        assert!(
            reference.set_fused(true).is_err(),
            "f64 has no fused kernels"
        );
        let seqs = vec![
            vec![3u32, 9, 27, 81, 50, 1, 2],
            vec![5, 6, 7],
            vec![90, 91, 92, 93, 94],
            (0..150u32).map(|i| (i * 37 + 11) % 97).collect(),
        ];
        let start = [2usize, 1, 4, 60];
        for temperature in [1.0, 0.6] {
            let f = fused
                .token_log_probs_at(&seqs, &start, temperature)
                .unwrap();
            let r = reference
                .token_log_probs_at(&seqs, &start, temperature)
                .unwrap();
            let (el, eh) = (rel(&f.log_probs, &r.log_probs), rel(&f.entropy, &r.entropy));
            eprintln!("model hd={hd} T={temperature}: log-probs {el:.1e}, entropy {eh:.1e}");
            assert!(el <= 1e-5 && eh <= 1e-5, "log-probs {el:e}, entropy {eh:e}");
            let loss = |t: &crate::model::TokenLogProbs| {
                ((&t.log_probs * 1.5).unwrap() - (&t.entropy * 0.3).unwrap())
                    .unwrap()
                    .sum_all()
                    .unwrap()
            };
            let (gf, gr) = (loss(&f).backward().unwrap(), loss(&r).backward().unwrap());
            for (name, var) in fused.params() {
                let a = gf.get(var.as_tensor()).unwrap();
                let b = gr.get(reference.params()[name].as_tensor()).unwrap();
                let e = rel(a, b);
                assert!(
                    e <= 1e-5,
                    "T={temperature}: gradient of {name} off by {e:e}"
                );
            }
        }
        // Prefill + decode with left padding: the fused path against the composed one.
        let prompts = vec![vec![1u32, 2, 3, 4], vec![8, 9], (0..70u32).collect()];
        let (mut cf, lf) = fused.prefill(&prompts, 3).unwrap();
        let (mut cr, lr) = reference.prefill(&prompts, 3).unwrap();
        assert!(rel(&lf, &lr) <= 1e-5);
        for step in [[5u32, 10, 1], [6, 11, 2], [7, 12, 3]] {
            let (a, b) = (
                fused.decode(&mut cf, &step).unwrap(),
                reference.decode(&mut cr, &step).unwrap(),
            );
            let e = rel(&a, &b);
            assert!(e <= 1e-5, "decode logits off by {e:e}");
        }
    }

    #[test]
    fn lm_head_chunks_stay_cache_sized_for_small_vocabularies_and_amortise_the_weight_above() {
        // The default vocabulary's chunking (and so its sums' order) is unchanged.
        assert_eq!(head_rows(4096), 128);
        assert_eq!(head_rows(300), 256);
        assert_eq!(head_rows(8192), 64);
        // Above 8,192 entries: 256 rows while a chunk stays within 64 MB of logits.
        assert_eq!(head_rows(20000), 256);
        assert_eq!(head_rows(49152), 256);
        assert_eq!(head_rows(151936), 110);
        assert_eq!(head_rows(1 << 26), 1);
    }

    #[test]
    fn lm_head_log_prob_entropy_matches_the_composed_ops() {
        let mut rng = ChaCha12Rng::seed_from_u64(6);
        // More rows than one chunk (head_rows(300) = 256) so chunk boundaries are crossed.
        // keep 0: the backward recomputes the logits; usize::MAX: it reuses the forward's.
        for (n, d, v, temperature, keep) in [
            (600, 16, 300, 0.8, 0),
            (600, 16, 300, 0.8, usize::MAX),
            (5, 8, 97, 1.0, 0),
            (5, 8, 97, 1.0, usize::MAX),
            // A vocabulary above the cache-sized chunks (head_rows(20000) = 256).
            (300, 8, 20000, 1.0, 0),
        ] {
            let h = randn(&mut rng, &[n, d], 1.0);
            let w = randn(&mut rng, &[v, d], 0.5);
            let tg: Vec<u32> = (0..n).map(|i| ((i * 31 + 7) % v) as u32).collect();
            let tg = Tensor::from_vec(tg, n, &Device::Cpu).unwrap();
            let both = |lp: Tensor, h: Tensor| Tensor::stack(&[lp, h], 1).unwrap();
            check(
                "lm_head_log_prob_entropy",
                &[h, w, tg],
                &[true, true, false],
                |t| {
                    let (lp, h) = lm_head_lpe(&t[0], &t[1], &t[2], temperature, keep).unwrap();
                    both(lp, h)
                },
                |t| {
                    let z = (ops::linear(&t[0], &t[1], None).unwrap() / temperature).unwrap();
                    let logp = ops::log_softmax_last(&z).unwrap();
                    let lp = logp
                        .gather(&t[2].unsqueeze(1).unwrap(), 1)
                        .unwrap()
                        .squeeze(1)
                        .unwrap();
                    let h = (logp.exp().unwrap() * &logp)
                        .unwrap()
                        .sum(D::Minus1)
                        .unwrap()
                        .neg()
                        .unwrap();
                    both(lp, h)
                },
            );
        }
    }
}
