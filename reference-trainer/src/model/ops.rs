//! Differentiable building blocks of the Qwen3 forward, composed of candle ops that record
//! gradients. candle's fused `rms_norm`, `rope` and `softmax_last_dim` have no backward (a model
//! built on them silently trains only some parameters), so the training path never calls them.
//! Each op follows the Hugging Face `modeling_qwen3.py` formula it names.

use candle_core::{DType, Device, Result, Tensor, D};

/// `Qwen3RMSNorm`: `w · x / sqrt(mean(x²) + eps)` over the last dimension.
pub fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    let mean_sq = x.sqr()?.mean_keepdim(D::Minus1)?;
    let inv = (mean_sq + eps)?.sqrt()?.recip()?;
    x.broadcast_mul(&inv)?.broadcast_mul(weight)
}

/// `x · Wᵀ (+ b)` for `x` of any rank ≥ 2 and `W` of shape `[out, in]` (the PyTorch layout).
pub fn linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let dims = x.dims();
    let (inner, last) = dims.split_at(dims.len() - 1);
    let rows: usize = inner.iter().product();
    let y = x.reshape((rows, last[0]))?.matmul(&weight.t()?)?;
    let y = match bias {
        Some(b) => y.broadcast_add(b)?,
        None => y,
    };
    let mut out = inner.to_vec();
    out.push(weight.dim(0)?);
    y.reshape(out)
}

/// The rotary tables `cos`/`sin` of shape `[positions, head_dim / 2]`: angle `p · θ^(−2i/d)`,
/// computed in f64 and rounded once to `dtype`.
pub fn rope_tables(
    head_dim: usize,
    theta: f64,
    positions: usize,
    dtype: DType,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let half = head_dim / 2;
    let mut cos = Vec::with_capacity(positions * half);
    let mut sin = Vec::with_capacity(positions * half);
    for p in 0..positions {
        for i in 0..half {
            // HF rounds the inverse frequency to f32 before multiplying by the position.
            let inv = (1.0 / theta.powf((2 * i) as f64 / head_dim as f64)) as f32;
            let angle = p as f64 * inv as f64;
            cos.push(angle.cos());
            sin.push(angle.sin());
        }
    }
    let cos = Tensor::from_vec(cos, (positions, half), device)?.to_dtype(dtype)?;
    let sin = Tensor::from_vec(sin, (positions, half), device)?.to_dtype(dtype)?;
    Ok((cos, sin))
}

/// `apply_rotary_pos_emb` (rotate-half form) on `x: [B, H, L, D]` with `cos`/`sin` of shape
/// `[B, 1, L, D/2]` (each row its own positions).
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let half = x.dim(D::Minus1)? / 2;
    let x1 = x.narrow(D::Minus1, 0, half)?;
    let x2 = x.narrow(D::Minus1, half, half)?;
    let out1 = (x1.broadcast_mul(cos)? - x2.broadcast_mul(sin)?)?;
    let out2 = (x2.broadcast_mul(cos)? + x1.broadcast_mul(sin)?)?;
    Tensor::cat(&[out1, out2], D::Minus1)
}

/// Scaled dot-product attention with grouped KV heads (GQA) and an additive mask.
///
/// `q: [B, H, L, D]`, `k`/`v: [B, KV, T, D]` (`H` a multiple of `KV`; query head `h` reads KV
/// head `h / (H/KV)`, as `repeat_kv` does), `mask: [B, 1, 1, L, T]` with 0 for visible and −∞
/// for hidden keys. The query heads of one KV head are folded into the row dimension, so K and V
/// are never copied per query head.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor, scale: f64) -> Result<Tensor> {
    let (b, h, l, d) = q.dims4()?;
    let kv = k.dim(1)?;
    let t = k.dim(2)?;
    let groups = h / kv;
    let q = q.contiguous()?.reshape((b, kv, groups * l, d))?;
    let scores = (q.matmul(&k.t()?)? * scale)?;
    let scores = scores.reshape((b, kv, groups, l, t))?.broadcast_add(mask)?;
    let probs = softmax_last(&scores)?.reshape((b, kv, groups * l, t))?;
    probs.matmul(v)?.reshape((b, h, l, d))
}

/// Softmax over the last dimension: `exp(x − max) / Σ exp(x − max)`.
pub fn softmax_last(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?;
    let e = x.broadcast_sub(&max)?.exp()?;
    let sum = e.sum_keepdim(D::Minus1)?;
    e.broadcast_div(&sum)
}

/// Log-softmax over the last dimension.
pub fn log_softmax_last(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?;
    let shifted = x.broadcast_sub(&max)?;
    let lse = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
    shifted.broadcast_sub(&lse)
}

/// `log p(target)` per position: `logits: [N, V]`, `targets: [N]` (u32) → `[N]`.
pub fn gather_log_probs(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let logp = log_softmax_last(logits)?;
    logp.gather(&targets.unsqueeze(1)?, 1)?.squeeze(1)
}

/// The additive attention mask `[B, 1, 1, L, T]` for `L` new positions appended after
/// `past` cached ones (`T = past + L`), where row `b` starts with `pad[b]` padding slots.
///
/// Query `i` (absolute slot `past + i`) sees key `j` iff `j ≤ past + i` and `j` is not padding;
/// a padding query sees itself only, which keeps its (unused) output finite so no NaN can leak
/// through a zero attention weight.
pub fn attention_mask(
    pad: &[usize],
    past: usize,
    new: usize,
    dtype: DType,
    device: &Device,
) -> Result<Tensor> {
    let total = past + new;
    let mut m = vec![0f32; pad.len() * new * total];
    for (b, &p) in pad.iter().enumerate() {
        for i in 0..new {
            let q = past + i;
            let row = &mut m[(b * new + i) * total..(b * new + i + 1) * total];
            for (j, x) in row.iter_mut().enumerate() {
                let visible = j <= q && (j >= p || j == q);
                if !visible {
                    *x = f32::NEG_INFINITY;
                }
            }
        }
    }
    Tensor::from_vec(m, (pad.len(), 1, 1, new, total), device)?.to_dtype(dtype)
}
