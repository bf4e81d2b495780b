//! The rollout's decode step for f32 on the CPU, without candle tensors: the weights packed
//! once per generation for the matmul below, a key/value cache and every scratch buffer
//! preallocated for the batch and the generation's length, and the step written on raw slices,
//! so a decode step allocates nothing (tested by `tests/decode_alloc.rs`).
//!
//! The math is the fused forward's ([`super::fused`]: its RMSNorm, RoPE with the `[cos ‖ sin]`
//! table, masked softmax and SwiGLU row kernels are called as they are); only the products
//! differ: `y = x·Wᵀ` is [`matmul`] on `W` packed in panels of [`NR`] output columns (`k` × 32
//! floats each, so a tile of [`MR`] rows × 32 columns keeps its accumulators in registers and
//! streams the panel; tested against f64 below), and attention reads the keys transposed, 32
//! scores per register pair, each key and value once per GQA group. Summation order differs
//! from gemm's, so logits agree with [`Qwen3::decode`] to rounding (`tests/decode.rs`: ≤ 1e-6
//! absolute, seen ≤ 1.2e-7).
//!
//! Rows are independent in a decode step, so the batch is split into contiguous row ranges, one
//! per thread (one `rayon::join` per step, not one per op); the cache is laid out row-major
//! (`[B][layer][k|v][KV]…`, keys `[head_dim][capacity]`, values `[capacity][head_dim]`) so
//! each range owns one contiguous slice of it.

use std::sync::Arc;

use candle_core::{DType, Tensor};

use super::fused::{rms_norm_rows, rope_rows, softmax_range, swiglu_fwd};
use super::kv_cache::KvCache;
use super::ops;
use super::qwen3::Qwen3;
use crate::error::{Error, Result};

/// Output columns per packed panel (two AVX-512 registers).
pub const NR: usize = 32;
/// Rows per register tile.
pub const MR: usize = 4;
/// Fewest rows a thread gets: below it the join costs more than the rows.
const MIN_ROWS_PER_THREAD: usize = 8;
/// Threads a decode step splits its rows over unless told otherwise: rayon's pool (both cores
/// here). Measured with `cargo bench -p reference-trainer --bench rollout` on the 2-core Xeon
/// (README, "Kernel, environments, rollout"): whenever the second core was free, two threads
/// ran batch 32 / 64 1.5× faster than one (46.7 K vs 30.4 K, 50.5 K vs 32.9 K tok/s); while
/// another job held it, two were 0.6–0.9× one. Below 16 rows the step stays on one thread.
pub fn default_threads() -> usize {
    rayon::current_num_threads().max(1)
}

/// `W: [n, k]` (a Hugging Face `[out, in]` weight) packed for [`matmul`]: panel `p` holds
/// columns `p·NR .. p·NR + NR` of `Wᵀ` as `k` rows of `NR` floats (zero past `n`).
#[derive(Clone, Debug)]
pub struct Packed {
    n: usize,
    k: usize,
    data: Vec<f32>,
    bias: Option<Vec<f32>>,
    streamed: bool,
}

impl Packed {
    /// Packs a row-major `[n, k]` weight and its optional bias `[n]`.
    pub fn new(w: &[f32], n: usize, k: usize, bias: Option<Vec<f32>>) -> Result<Self> {
        if w.len() != n * k || bias.as_ref().is_some_and(|b| b.len() != n) {
            return Err(Error::invalid(
                "packed weight",
                format!(
                    "{} entries (bias {:?}) for a [{n}, {k}] matrix",
                    w.len(),
                    bias.as_ref().map(Vec::len)
                ),
            ));
        }
        let panels = n.div_ceil(NR);
        let mut data = vec![0f32; panels * k * NR];
        for (j, row) in w.chunks_exact(k).enumerate() {
            let (p, c) = (j / NR, j % NR);
            let panel = &mut data[p * k * NR..(p + 1) * k * NR];
            for (kk, &x) in row.iter().enumerate() {
                panel[kk * NR + c] = x;
            }
        }
        Ok(Self {
            n,
            k,
            data,
            bias,
            streamed: false,
        })
    }

    /// Marks the weight as read from memory at every use (`true`: a model whose weights outgrow
    /// the caches, as [`Decoder::new`] decides), so [`matmul`] hints each next panel into L2
    /// while its tiles run on the current one. Off by default: for weights that stay in cache
    /// the hints are only extra instructions. The sums are the same either way.
    pub fn streamed(mut self, on: bool) -> Self {
        self.streamed = on;
        self
    }

    /// Output width.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Input width.
    pub fn k(&self) -> usize {
        self.k
    }
}

#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// `acc[c] += a · w[c]` over one panel row (a loop the compiler turns into two vector FMAs).
#[inline(always)]
fn axpy<const FMA: bool>(acc: &mut [f32; NR], a: f32, w: &[f32; NR]) {
    for c in 0..NR {
        acc[c] = madd::<FMA>(a, w[c], acc[c]);
    }
}

#[inline(always)]
fn panel_row(panel: &[f32], kk: usize) -> &[f32; NR] {
    panel[kk * NR..(kk + 1) * NR]
        .try_into()
        .expect("a panel row is NR wide")
}

/// Where a tile's sums go: output columns `c0..c0 + cn` of `W` land at `y[c0 − off ..]` in
/// rows `ldy` apart (`off` > 0 when `y` holds only some of the columns: [`matmul_cols`]).
#[derive(Clone, Copy)]
struct Out<'a> {
    ldy: usize,
    off: usize,
    c0: usize,
    cn: usize,
    bias: Option<&'a [f32]>,
    add: bool,
}

/// Writes (or adds, with `add`) one tile row's sums to its columns of `y`, plus the bias.
#[inline(always)]
fn store(acc: &[f32; NR], y: &mut [f32], o: Out<'_>) {
    let yc = o.c0 - o.off;
    for (c, out) in y[yc..yc + o.cn].iter_mut().enumerate() {
        let mut s = acc[c];
        if let Some(b) = o.bias {
            s += b[o.c0 + c];
        }
        *out = if o.add { *out + s } else { s };
    }
}

/// Lines of the next panel a tile hints into L2 while it runs (see [`matmul_impl`]): `lines`
/// floats of it, one 64-byte line every `every` steps of the tile's `k` loop.
#[derive(Clone, Copy)]
struct Ahead<'a> {
    lines: &'a [f32],
    every: usize,
}

/// Rows `x0..x3` (each `k` long) times one panel: 4 × [`NR`] sums held in registers over `k`;
/// with `ahead`, hints its lines of the next panel into L2 along the way.
#[inline(always)]
fn tile4<const FMA: bool>(
    x: &[f32],
    k: usize,
    panel: &[f32],
    y: &mut [f32],
    o: Out<'_>,
    ahead: Option<Ahead<'_>>,
    hint: &impl Fn(&[f32]),
) {
    let (x0, rest) = x.split_at(k);
    let (x1, rest) = rest.split_at(k);
    let (x2, rest) = rest.split_at(k);
    let x3 = &rest[..k];
    let (mut a0, mut a1, mut a2, mut a3) = ([0f32; NR], [0f32; NR], [0f32; NR], [0f32; NR]);
    let (lines, every) = ahead.map_or((&[][..], 1), |a| (a.lines, a.every.max(1)));
    let (mut line, mut wait) = (0, 0);
    for kk in 0..k {
        if line < lines.len() {
            if wait == 0 {
                hint(&lines[line..]);
                line += 16;
                wait = every;
            }
            wait -= 1;
        }
        let w = panel_row(panel, kk);
        axpy::<FMA>(&mut a0, x0[kk], w);
        axpy::<FMA>(&mut a1, x1[kk], w);
        axpy::<FMA>(&mut a2, x2[kk], w);
        axpy::<FMA>(&mut a3, x3[kk], w);
    }
    for (r, a) in [a0, a1, a2, a3].iter().enumerate() {
        store(a, &mut y[r * o.ldy..], o);
    }
}

/// One row times one panel, the sum over `k` split four ways (independent FMA chains).
#[inline(always)]
fn tile1<const FMA: bool>(x: &[f32], k: usize, panel: &[f32], y: &mut [f32], o: Out<'_>) {
    let x = &x[..k];
    let (mut a0, mut a1, mut a2, mut a3) = ([0f32; NR], [0f32; NR], [0f32; NR], [0f32; NR]);
    let quads = x.chunks_exact(4);
    let rest = quads.remainder();
    for (xq, wq) in quads.zip(panel.chunks_exact(4 * NR)) {
        let (w0, r) = wq.split_at(NR);
        let (w1, r) = r.split_at(NR);
        let (w2, w3) = r.split_at(NR);
        for c in 0..NR {
            a0[c] = madd::<FMA>(xq[0], w0[c], a0[c]);
            a1[c] = madd::<FMA>(xq[1], w1[c], a1[c]);
            a2[c] = madd::<FMA>(xq[2], w2[c], a2[c]);
            a3[c] = madd::<FMA>(xq[3], w3[c], a3[c]);
        }
    }
    let base = k - rest.len();
    for (j, &xr) in rest.iter().enumerate() {
        axpy::<FMA>(&mut a0, xr, panel_row(panel, base + j));
    }
    let mut sum = [0f32; NR];
    for c in 0..NR {
        sum[c] = (a0[c] + a1[c]) + (a2[c] + a3[c]);
    }
    store(&sum, y, o);
}

/// Panels `panels` of `w` (output columns `panels.start·NR ..`) for the rows of `x`, into `y`
/// with rows `ldy` apart and column `panels.start·NR` at `y[0]`.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn matmul_impl(
    x: &[f32],
    w: &Packed,
    panels: std::ops::Range<usize>,
    y: &mut [f32],
    ldy: usize,
    add: bool,
) {
    const FMA: bool = multiversion::target::target_cfg_f!(target_feature = "fma");
    // `PREFETCHT1` of a line (a hint: no fault, nothing read into the program) in the AVX2 and
    // AVX-512 versions, where the toolchain's `_mm_prefetch` is safe to call from them (the
    // closure inherits their target features); `build.rs` sets `t2po_safe_prefetch`. Elsewhere
    // (the declared minimum Rust, or a build whose baseline has AVX2) a no-op.
    let hint = |line: &[f32]| {
        #[cfg(t2po_safe_prefetch)]
        multiversion::target::match_target! {
            "x86_64+avx2" => core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T1 }>(
                line.as_ptr().cast::<i8>(),
            ),
            _ => {}
        }
        let _ = line;
    };
    let (n, k) = (w.n, w.k);
    let m = x.len() / k.max(1);
    let off = panels.start * NR;
    // With several register tiles per panel, the first one reads the panel from memory and the
    // rest from L2, where the hardware's stream prefetch has no reason to run ahead: so for a
    // streamed weight ([`Packed::streamed`]) each tile hints its share of the next panel's lines
    // into L2 while it computes, and the next panel's first tile finds it there (a real model's
    // weights come from memory every step: SmolLM2-135M's 538 MB of f32;
    // `benches/decode_matmul.rs`).
    let tiles = m / MR;
    let share = (k * NR).div_ceil(tiles.max(1)).next_multiple_of(16);
    let every = k / (share / 16).max(1);
    let chunks = w.data.chunks_exact(k * NR).enumerate();
    for (p, panel) in chunks.skip(panels.start).take(panels.len()) {
        let next = (w.streamed && tiles >= 2 && p + 1 < panels.end)
            .then(|| &w.data[(p + 1) * k * NR..(p + 2) * k * NR]);
        let c0 = p * NR;
        let o = Out {
            ldy,
            off,
            c0,
            cn: NR.min(n - c0),
            bias: w.bias.as_deref(),
            add,
        };
        let mut r = 0;
        while r + MR <= m {
            let t = r / MR;
            let ahead = next.map(|n| Ahead {
                lines: &n[(t * share).min(n.len())..((t + 1) * share).min(n.len())],
                every,
            });
            tile4::<FMA>(&x[r * k..], k, panel, &mut y[r * ldy..], o, ahead, &hint);
            r += MR;
        }
        while r < m {
            tile1::<FMA>(&x[r * k..], k, panel, &mut y[r * ldy..], o);
            r += 1;
        }
    }
}

/// `y = x·Wᵀ (+ bias)` for `x: [m, k]`, `y: [m, n]` row-major, or `y += x·Wᵀ (+ bias)` with
/// `add` (the residual stream). Panics if the slices do not have those shapes.
pub fn matmul(x: &[f32], w: &Packed, y: &mut [f32], add: bool) {
    let m = x.len() / w.k.max(1);
    assert!(
        x.len() == m * w.k && y.len() == m * w.n,
        "matmul: x {} / y {} entries for k {} n {}",
        x.len(),
        y.len(),
        w.k,
        w.n
    );
    matmul_impl(x, w, 0..w.n.div_ceil(NR), y, w.n, add);
}

/// Weights of at least this many entries (1 MiB of f32) are split by columns over two threads
/// when a step's rows stay on one thread: a real model's small-batch step streams every weight
/// from memory, and one core's loads do not fill the memory bus (SmolLM2-135M at batch 1:
/// `benches/real_model.rs`, README "Training and decode speed"). Of the default model only
/// the head (4096 × 128) is that large; its layers' weights (≤ 64 K entries) are not worth a
/// thread hand-off.
const SPLIT_COLS_MIN_ENTRIES: usize = 1 << 18;

/// [`matmul`] with the panels split in two over `threads` ≥ 2 when `w` has at least
/// [`SPLIT_COLS_MIN_ENTRIES`] entries and `spill` holds the right half's `[m, n − n₁]`: that half
/// is computed into `spill` (without `add`), then written or added to `y` — the same sums
/// (`y + (acc + bias)`) as [`matmul`] computes, bit for bit.
fn matmul_cols(x: &[f32], w: &Packed, y: &mut [f32], add: bool, threads: usize, spill: &mut [f32]) {
    let panels = w.n.div_ceil(NR);
    let m = x.len() / w.k.max(1);
    let left = panels / 2;
    let (n1, n) = (left * NR, w.n);
    if threads < 2 || w.n * w.k < SPLIT_COLS_MIN_ENTRIES || left == 0 || spill.len() < m * (n - n1)
    {
        return matmul(x, w, y, add);
    }
    assert!(
        x.len() == m * w.k && y.len() == m * n,
        "matmul_cols: x {} / y {} entries for k {} n {}",
        x.len(),
        y.len(),
        w.k,
        n
    );
    let spill = &mut spill[..m * (n - n1)];
    rayon::join(
        || matmul_impl(x, w, 0..left, y, n, add),
        || matmul_impl(x, w, left..panels, spill, n - n1, false),
    );
    for (yr, sr) in y.chunks_exact_mut(n).zip(spill.chunks_exact(n - n1)) {
        for (o, &s) in yr[n1..].iter_mut().zip(sr) {
            *o = if add { *o + s } else { s };
        }
    }
}

/// A model whose packed weights total at least this many entries (64 MiB of f32, past this
/// machine's 32 MiB L3) has them marked [`Packed::streamed`]: SmolLM2-135M (134 M) is, the
/// default model (~1 M) and the 5 M one are not.
const STREAMED_MIN_ENTRIES: usize = 1 << 24;

#[derive(Clone, Debug)]
struct LayerWeights {
    input_layernorm: Vec<f32>,
    q: Packed,
    k: Packed,
    v: Packed,
    o: Packed,
    /// Qwen3's QK-norm weights (none in Llama and Qwen2).
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
    post_attention_layernorm: Vec<f32>,
    gate: Packed,
    up: Packed,
    down: Packed,
}

/// A model's weights laid out for the decode step (copied and packed from a [`Qwen3`]).
#[derive(Clone, Debug)]
pub struct Decoder {
    vocab: usize,
    d: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    mlp: usize,
    eps: f32,
    embed: Vec<f32>,
    layers: Vec<LayerWeights>,
    norm: Vec<f32>,
    lm_head: Packed,
    /// `[positions, head_dim]`: `[cos ‖ sin]` per position (the model's table).
    cos_sin: Vec<f32>,
}

/// `n` zeros, written: a zeroed allocation (`vec![0.0; n]`, calloc) maps its pages on first
/// touch, which would move page faults (the kernel zeroing pages) into the decode steps that
/// first write each cache slot.
fn resident(n: usize) -> Vec<f32> {
    let mut v = Vec::with_capacity(n);
    v.resize(n, 0.0);
    v
}

fn host(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.flatten_all()?.to_vec1::<f32>()?)
}

impl Decoder {
    /// Copies and packs the weights of an f32 CPU model.
    pub fn new(model: &Qwen3) -> Result<Self> {
        if model.dtype() != DType::F32 || !model.device().is_cpu() {
            return Err(Error::invalid(
                "decoder",
                format!(
                    "the allocation-free decode runs f32 on the CPU; this model is {:?} on {:?}",
                    model.dtype(),
                    model.device()
                ),
            ));
        }
        let cfg = model.config();
        let params = model.params();
        let get = |name: &str| -> Result<Vec<f32>> {
            let v = params
                .get(name)
                .ok_or_else(|| Error::invalid("decoder", format!("no tensor `{name}`")))?;
            host(v.as_tensor())
        };
        let opt = |name: &str| -> Result<Option<Vec<f32>>> {
            params.get(name).map(|v| host(v.as_tensor())).transpose()
        };
        let (d, f) = (cfg.hidden_size, cfg.intermediate_size);
        let (hq, hkv) = (
            cfg.num_attention_heads * cfg.head_dim,
            cfg.num_key_value_heads * cfg.head_dim,
        );
        let proj = |name: &str, n: usize, k: usize| -> Result<Packed> {
            Packed::new(
                &get(&format!("{name}.weight"))?,
                n,
                k,
                opt(&format!("{name}.bias"))?,
            )
        };
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let p = format!("model.layers.{i}");
            layers.push(LayerWeights {
                input_layernorm: get(&format!("{p}.input_layernorm.weight"))?,
                q: proj(&format!("{p}.self_attn.q_proj"), hq, d)?,
                k: proj(&format!("{p}.self_attn.k_proj"), hkv, d)?,
                v: proj(&format!("{p}.self_attn.v_proj"), hkv, d)?,
                o: proj(&format!("{p}.self_attn.o_proj"), d, hq)?,
                q_norm: opt(&format!("{p}.self_attn.q_norm.weight"))?,
                k_norm: opt(&format!("{p}.self_attn.k_norm.weight"))?,
                post_attention_layernorm: get(&format!("{p}.post_attention_layernorm.weight"))?,
                gate: proj(&format!("{p}.mlp.gate_proj"), f, d)?,
                up: proj(&format!("{p}.mlp.up_proj"), f, d)?,
                down: proj(&format!("{p}.mlp.down_proj"), d, f)?,
            });
        }
        let embed = get("model.embed_tokens.weight")?;
        let mut head = if cfg.tie_word_embeddings {
            Packed::new(&embed, cfg.vocab_size, d, None)?
        } else {
            Packed::new(&get("lm_head.weight")?, cfg.vocab_size, d, None)?
        };
        // A step reads every weight once; past the caches they come from memory each time.
        let entries: usize = layers
            .iter()
            .flat_map(|l| [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down])
            .chain([&head])
            .map(|p| p.n * p.k)
            .sum();
        if entries >= STREAMED_MIN_ENTRIES {
            for l in &mut layers {
                for p in [
                    &mut l.q,
                    &mut l.k,
                    &mut l.v,
                    &mut l.o,
                    &mut l.gate,
                    &mut l.up,
                    &mut l.down,
                ] {
                    p.streamed = true;
                }
            }
            head.streamed = true;
        }
        let (cos, sin) = ops::rope_tables(
            cfg.head_dim,
            cfg.rope_theta,
            cfg.max_position_embeddings,
            DType::F32,
            model.device(),
        )?;
        let cos_sin = host(&Tensor::cat(&[&cos, &sin], 1)?)?;
        Ok(Self {
            vocab: cfg.vocab_size,
            d,
            heads: cfg.num_attention_heads,
            kv_heads: cfg.num_key_value_heads,
            head_dim: cfg.head_dim,
            mlp: f,
            eps: cfg.rms_norm_eps as f32,
            embed,
            layers,
            norm: get("model.norm.weight")?,
            lm_head: head,
            cos_sin,
        })
    }

    /// Entries per logits row.
    pub fn vocab_size(&self) -> usize {
        self.vocab
    }

    fn max_positions(&self) -> usize {
        self.cos_sin.len() / self.head_dim
    }

    /// Floats of one batch row's cache: every layer's keys and values.
    fn row_cache(&self, capacity: usize) -> usize {
        self.layers.len() * 2 * self.kv_heads * capacity * self.head_dim
    }
}

/// Per-row widths of the scratch buffers.
#[derive(Clone, Copy, Debug)]
struct Widths {
    d: usize,
    q: usize,
    kv: usize,
    mlp: usize,
    hd: usize,
    cap: usize,
}

/// Every per-step temporary, `[batch, width]` each, allocated once per generation.
#[derive(Debug)]
struct Scratch {
    x: Vec<f32>,
    hn: Vec<f32>,
    q: Vec<f32>,
    qt: Vec<f32>,
    k: Vec<f32>,
    kt: Vec<f32>,
    v: Vec<f32>,
    ctx: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    act: Vec<f32>,
    cs: Vec<f32>,
    scores: Vec<f32>,
    probs: Vec<f32>,
    /// The right half of a column-split matmul ([`matmul_cols`]): rows that stay on one
    /// thread (fewer than `2 · MIN_ROWS_PER_THREAD`) × the widest output (the vocabulary).
    spill: Vec<f32>,
}

impl Scratch {
    fn new(b: usize, w: Widths, widest: usize) -> Self {
        let z = |n: usize| resident(b * n);
        Self {
            spill: resident(b.min(2 * MIN_ROWS_PER_THREAD - 1) * widest),
            x: z(w.d),
            hn: z(w.d),
            q: z(w.q),
            qt: z(w.q),
            k: z(w.kv),
            kt: z(w.kv),
            v: z(w.kv),
            ctx: z(w.q),
            gate: z(w.mlp),
            up: z(w.mlp),
            act: z(w.mlp),
            cs: z(w.hd),
            scores: z(2 * w.cap),
            probs: z(2 * w.cap),
        }
    }

    fn rows(&mut self, b: usize, w: Widths) -> (Rows<'_>, &mut [f32]) {
        let rows = Rows {
            x: &mut self.x[..b * w.d],
            hn: &mut self.hn[..b * w.d],
            q: &mut self.q[..b * w.q],
            qt: &mut self.qt[..b * w.q],
            k: &mut self.k[..b * w.kv],
            kt: &mut self.kt[..b * w.kv],
            v: &mut self.v[..b * w.kv],
            ctx: &mut self.ctx[..b * w.q],
            gate: &mut self.gate[..b * w.mlp],
            up: &mut self.up[..b * w.mlp],
            act: &mut self.act[..b * w.mlp],
            cs: &mut self.cs[..b * w.hd],
            scores: &mut self.scores[..b * 2 * w.cap],
            probs: &mut self.probs[..b * 2 * w.cap],
        };
        (rows, &mut self.spill)
    }
}

/// The scratch of a contiguous range of rows.
struct Rows<'a> {
    x: &'a mut [f32],
    hn: &'a mut [f32],
    q: &'a mut [f32],
    qt: &'a mut [f32],
    k: &'a mut [f32],
    kt: &'a mut [f32],
    v: &'a mut [f32],
    ctx: &'a mut [f32],
    gate: &'a mut [f32],
    up: &'a mut [f32],
    act: &'a mut [f32],
    cs: &'a mut [f32],
    scores: &'a mut [f32],
    probs: &'a mut [f32],
}

impl<'a> Rows<'a> {
    /// The first `r` rows and the rest.
    fn split(self, r: usize, w: Widths) -> (Rows<'a>, Rows<'a>) {
        let (x, x2) = self.x.split_at_mut(r * w.d);
        let (hn, hn2) = self.hn.split_at_mut(r * w.d);
        let (q, q2) = self.q.split_at_mut(r * w.q);
        let (qt, qt2) = self.qt.split_at_mut(r * w.q);
        let (k, k2) = self.k.split_at_mut(r * w.kv);
        let (kt, kt2) = self.kt.split_at_mut(r * w.kv);
        let (v, v2) = self.v.split_at_mut(r * w.kv);
        let (ctx, ctx2) = self.ctx.split_at_mut(r * w.q);
        let (gate, gate2) = self.gate.split_at_mut(r * w.mlp);
        let (up, up2) = self.up.split_at_mut(r * w.mlp);
        let (act, act2) = self.act.split_at_mut(r * w.mlp);
        let (cs, cs2) = self.cs.split_at_mut(r * w.hd);
        let (scores, scores2) = self.scores.split_at_mut(r * 2 * w.cap);
        let (probs, probs2) = self.probs.split_at_mut(r * 2 * w.cap);
        (
            Rows {
                x,
                hn,
                q,
                qt,
                k,
                kt,
                v,
                ctx,
                gate,
                up,
                act,
                cs,
                scores,
                probs,
            },
            Rows {
                x: x2,
                hn: hn2,
                q: q2,
                qt: qt2,
                k: k2,
                kt: kt2,
                v: v2,
                ctx: ctx2,
                gate: gate2,
                up: up2,
                act: act2,
                cs: cs2,
                scores: scores2,
                probs: probs2,
            },
        )
    }
}

/// What one step's rows share (read-only).
struct StepInput<'a> {
    dec: &'a Decoder,
    w: Widths,
    tokens: &'a [u32],
    pad: &'a [usize],
    past: usize,
}

/// Attention of `G` query heads sharing one key/value head: `q`, `ctx: [G, hd]`, keys
/// `keys: [hd, cap]` (transposed, so the scores of 16 keys are one vector FMA per head
/// dimension, with no horizontal sum per key), values `vals: [cap, hd]`, slots `lo..=hi`;
/// `scores`/`probs` hold `G` rows of `cap`. The `G` heads go through the cache together: the
/// cache is the step's largest read (it outgrows L2 at batch 64), so each key and value is
/// loaded once per group, not once per head.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn attend_group<const G: usize, const FMA: bool>(
    q: &[f32],
    keys: &[f32],
    vals: &[f32],
    hd: usize,
    cap: usize,
    lo: usize,
    hi: usize,
    scale: f32,
    scores: &mut [f32],
    probs: &mut [f32],
    ctx: &mut [f32],
) {
    let n = hi - lo + 1;
    // Scores of 32 (then 16) keys at a time for every head, in registers, over the head dims.
    let mut t0 = 0;
    while t0 + 32 <= n {
        let mut acc = [[[0f32; 16]; 2]; G];
        for c in 0..hd {
            let kr = &keys[c * cap + lo + t0..c * cap + lo + t0 + 32];
            for (g, ag) in acc.iter_mut().enumerate() {
                let qc = q[g * hd + c];
                for (j, a) in ag.iter_mut().enumerate() {
                    for i in 0..16 {
                        a[i] = madd::<FMA>(qc, kr[16 * j + i], a[i]);
                    }
                }
            }
        }
        for (g, ag) in acc.iter().enumerate() {
            for (j, a) in ag.iter().enumerate() {
                let o = g * cap + t0 + 16 * j;
                scores[o..o + 16].copy_from_slice(a);
            }
        }
        t0 += 32;
    }
    while t0 < n {
        let w = 16.min(n - t0);
        let mut acc = [[0f32; 16]; G];
        for c in 0..hd {
            let kr = &keys[c * cap + lo + t0..c * cap + lo + t0 + w];
            for (g, a) in acc.iter_mut().enumerate() {
                let qc = q[g * hd + c];
                for (ai, &k) in a.iter_mut().zip(kr) {
                    *ai = madd::<FMA>(qc, k, *ai);
                }
            }
        }
        for (g, a) in acc.iter().enumerate() {
            scores[g * cap + t0..g * cap + t0 + w].copy_from_slice(&a[..w]);
        }
        t0 += w;
    }
    for g in 0..G {
        softmax_range(
            &scores[g * cap..g * cap + n],
            scale,
            &mut probs[g * cap..g * cap + n],
        );
    }
    // ctx = Σ p_t·v_t, 16 dimensions at a time in registers, even and odd keys in two sums
    // per head (a sum in memory would chain every key through a store and a reload).
    let mut c0 = 0;
    while c0 < hd {
        let w = 16.min(hd - c0);
        let mut acc = [[[0f32; 16]; 2]; G];
        for t in 0..n {
            let v = &vals[(lo + t) * hd + c0..(lo + t) * hd + c0 + w];
            for (g, ag) in acc.iter_mut().enumerate() {
                let p = probs[g * cap + t];
                let a = &mut ag[t % 2];
                for (ai, &vi) in a.iter_mut().zip(v) {
                    *ai = madd::<FMA>(p, vi, *ai);
                }
            }
        }
        for (g, ag) in acc.iter().enumerate() {
            for i in 0..w {
                ctx[g * hd + c0 + i] = ag[0][i] + ag[1][i];
            }
        }
        c0 += w;
    }
}

/// Attention of one row's queries `q: [H, hd]` over its cached keys `kc: [KV, hd, cap]` and
/// values `vc: [KV, cap, hd]` at slots `lo..=hi`, into `ctx: [H, hd]`: the query heads of each
/// key/value head two at a time ([`attend_group`]).
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
#[allow(clippy::too_many_arguments)]
fn attend_row(
    q: &[f32],
    kc: &[f32],
    vc: &[f32],
    heads: usize,
    kv_heads: usize,
    hd: usize,
    cap: usize,
    lo: usize,
    hi: usize,
    scale: f32,
    scores: &mut [f32],
    probs: &mut [f32],
    ctx: &mut [f32],
) {
    const FMA: bool = multiversion::target::target_cfg_f!(target_feature = "fma");
    let groups = heads / kv_heads;
    for g in 0..kv_heads {
        let keys = &kc[g * hd * cap..(g + 1) * hd * cap];
        let vals = &vc[g * cap * hd..(g + 1) * cap * hd];
        let mut h = g * groups;
        while h < (g + 1) * groups {
            let (qh, ch) = (&q[h * hd..], &mut ctx[h * hd..]);
            if h + 2 <= (g + 1) * groups {
                attend_group::<2, FMA>(qh, keys, vals, hd, cap, lo, hi, scale, scores, probs, ch);
                h += 2;
            } else {
                attend_group::<1, FMA>(qh, keys, vals, hd, cap, lo, hi, scale, scores, probs, ch);
                h += 1;
            }
        }
    }
}

/// The step for a contiguous range of rows: their tokens, padding, cache rows and logits rows;
/// its matmuls split by columns over `threads` where [`matmul_cols`] does (with `spill`).
#[allow(clippy::too_many_arguments)]
fn step_rows(
    inp: &StepInput<'_>,
    s: Rows<'_>,
    tokens: &[u32],
    pad: &[usize],
    kv: &mut [f32],
    logits: &mut [f32],
    threads: usize,
    spill: &mut [f32],
) {
    let matmul = |x: &[f32], w: &Packed, y: &mut [f32], add: bool, spill: &mut [f32]| {
        matmul_cols(x, w, y, add, threads, spill)
    };
    let dec = inp.dec;
    let w = inp.w;
    let (d, hd) = (dec.d, dec.head_dim);
    let (h, kvh) = (dec.heads, dec.kv_heads);
    let cap = w.cap;
    let row_cache = dec.row_cache(cap);
    let layer_cache = 2 * kvh * cap * hd;
    let scale = 1.0 / (hd as f32).sqrt();
    let past = inp.past;
    for (r, &t) in tokens.iter().enumerate() {
        let t = t as usize;
        s.x[r * d..(r + 1) * d].copy_from_slice(&dec.embed[t * d..(t + 1) * d]);
        let pos = past - pad[r];
        s.cs[r * hd..(r + 1) * hd].copy_from_slice(&dec.cos_sin[pos * hd..(pos + 1) * hd]);
    }
    for (li, l) in dec.layers.iter().enumerate() {
        rms_norm_rows(s.x, &l.input_layernorm, dec.eps, s.hn);
        // q and k end in `qt`/`kt`, rotated: with QK-norm the projection goes to `qt`, the norm
        // to `q`, RoPE back to `qt`; without, the projection goes to `q` directly.
        match &l.q_norm {
            Some(w) => {
                matmul(s.hn, &l.q, s.qt, false, spill);
                rms_norm_rows(s.qt, w, dec.eps, s.q);
            }
            None => matmul(s.hn, &l.q, s.q, false, spill),
        }
        match &l.k_norm {
            Some(w) => {
                matmul(s.hn, &l.k, s.kt, false, spill);
                rms_norm_rows(s.kt, w, dec.eps, s.k);
            }
            None => matmul(s.hn, &l.k, s.k, false, spill),
        }
        matmul(s.hn, &l.v, s.v, false, spill);
        rope_rows(s.q, s.cs, hd, h, 0, false, s.qt);
        rope_rows(s.k, s.cs, hd, kvh, 0, false, s.kt);
        for (r, row) in kv.chunks_exact_mut(row_cache).enumerate() {
            let lc = &mut row[li * layer_cache..(li + 1) * layer_cache];
            let (kc, vc) = lc.split_at_mut(kvh * cap * hd);
            for g in 0..kvh {
                let src = (r * kvh + g) * hd;
                for (c, &k) in s.kt[src..src + hd].iter().enumerate() {
                    kc[(g * hd + c) * cap + past] = k;
                }
                let slot = (g * cap + past) * hd;
                vc[slot..slot + hd].copy_from_slice(&s.v[src..src + hd]);
            }
            attend_row(
                &s.qt[r * h * hd..(r + 1) * h * hd],
                kc,
                vc,
                h,
                kvh,
                hd,
                cap,
                pad[r],
                past,
                scale,
                &mut s.scores[r * 2 * cap..(r + 1) * 2 * cap],
                &mut s.probs[r * 2 * cap..(r + 1) * 2 * cap],
                &mut s.ctx[r * h * hd..(r + 1) * h * hd],
            );
        }
        matmul(s.ctx, &l.o, s.x, true, spill);
        rms_norm_rows(s.x, &l.post_attention_layernorm, dec.eps, s.hn);
        matmul(s.hn, &l.gate, s.gate, false, spill);
        matmul(s.hn, &l.up, s.up, false, spill);
        swiglu_fwd(s.gate, s.up, s.act);
        matmul(s.act, &l.down, s.x, true, spill);
    }
    rms_norm_rows(s.x, &dec.norm, dec.eps, s.hn);
    matmul(s.hn, &dec.lm_head, logits, false, spill);
}

/// Splits the rows over `threads` (halving, one `rayon::join` per split) and runs them; rows
/// too few to split keep the threads for their matmuls' columns ([`matmul_cols`], with `spill`).
#[allow(clippy::too_many_arguments)]
fn run(
    inp: &StepInput<'_>,
    threads: usize,
    s: Rows<'_>,
    tokens: &[u32],
    pad: &[usize],
    kv: &mut [f32],
    logits: &mut [f32],
    spill: &mut [f32],
) {
    let b = tokens.len();
    if threads <= 1 || b < 2 * MIN_ROWS_PER_THREAD {
        return step_rows(inp, s, tokens, pad, kv, logits, threads, spill);
    }
    // Split on a tile boundary so both halves run whole register tiles.
    let mid = (b / 2).div_ceil(MR) * MR;
    let (s1, s2) = s.split(mid, inp.w);
    let (kv1, kv2) = kv.split_at_mut(mid * inp.dec.row_cache(inp.w.cap));
    let (l1, l2) = logits.split_at_mut(mid * inp.dec.vocab);
    let (t1, t2) = tokens.split_at(mid);
    let (p1, p2) = pad.split_at(mid);
    let left = threads / 2;
    rayon::join(
        || run(inp, left, s1, t1, p1, kv1, l1, &mut []),
        || run(inp, threads - left, s2, t2, p2, kv2, l2, &mut []),
    );
}

/// The decode state of one batch: the packed weights, the cache and the scratch.
#[derive(Debug)]
pub struct DecodeState {
    dec: Arc<Decoder>,
    kv: Vec<f32>,
    pad: Vec<usize>,
    batch: usize,
    len: usize,
    capacity: usize,
    threads: usize,
    scratch: Scratch,
}

impl DecodeState {
    /// Takes over a prefilled candle cache (its keys and values are copied once, into the
    /// row-major layout) with the weights of `dec` (a [`Decoder`], or one shared by every
    /// generation of a rollout: `Arc<Decoder>`).
    pub fn from_cache(dec: impl Into<Arc<Decoder>>, cache: &KvCache) -> Result<Self> {
        let dec: Arc<Decoder> = dec.into();
        let (b, cap) = (cache.batch(), cache.capacity());
        if cache.layers() != dec.layers.len() {
            return Err(Error::invalid(
                "decode state",
                format!(
                    "a cache of {} layers for a model of {}",
                    cache.layers(),
                    dec.layers.len()
                ),
            ));
        }
        if cap > dec.max_positions() {
            return Err(Error::invalid(
                "decode state",
                format!(
                    "capacity {cap} exceeds max_position_embeddings = {}",
                    dec.max_positions()
                ),
            ));
        }
        let (kvh, hd) = (dec.kv_heads, dec.head_dim);
        let block = kvh * cap * hd;
        let row_cache = dec.row_cache(cap);
        let mut kv = resident(b * row_cache);
        for li in 0..dec.layers.len() {
            let (k, v) = cache.layer(li);
            for (which, t) in [k, v].into_iter().enumerate() {
                if t.dims() != [b, kvh, cap, hd] || t.dtype() != DType::F32 {
                    return Err(Error::invalid(
                        "decode state",
                        format!(
                            "layer {li}: a {:?} {:?} cache for [{b}, {kvh}, {cap}, {hd}] f32",
                            t.dims(),
                            t.dtype()
                        ),
                    ));
                }
                let data = host(t)?;
                for r in 0..b {
                    let dst = r * row_cache + (li * 2 + which) * block;
                    let (src, dst) = (&data[r * block..(r + 1) * block], &mut kv[dst..dst + block]);
                    if which == 1 {
                        dst.copy_from_slice(src);
                        continue;
                    }
                    // Keys transposed per head: [cap, hd] → [hd, cap].
                    for g in 0..kvh {
                        for t in 0..cap {
                            for c in 0..hd {
                                dst[(g * hd + c) * cap + t] = src[(g * cap + t) * hd + c];
                            }
                        }
                    }
                }
            }
        }
        let w = Widths {
            d: dec.d,
            q: dec.heads * hd,
            kv: kvh * hd,
            mlp: dec.mlp,
            hd,
            cap,
        };
        Ok(Self {
            scratch: Scratch::new(
                b,
                w,
                [w.d, w.q, w.kv, w.mlp, dec.vocab]
                    .into_iter()
                    .max()
                    .unwrap_or(0),
            ),
            dec,
            kv,
            pad: cache.pad().to_vec(),
            batch: b,
            len: cache.len(),
            capacity: cap,
            threads: default_threads(),
        })
    }

    /// Rows in the batch.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Slots filled so far (padding included).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Leading padding slots of each row.
    pub fn pad(&self) -> &[usize] {
        &self.pad[..self.batch]
    }

    /// Threads a step splits its rows over (default [`default_threads`]).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Sets the threads a step splits its rows over (at least 1).
    pub fn set_threads(&mut self, threads: usize) {
        self.threads = threads.max(1);
    }

    fn widths(&self) -> Widths {
        Widths {
            d: self.dec.d,
            q: self.dec.heads * self.dec.head_dim,
            kv: self.dec.kv_heads * self.dec.head_dim,
            mlp: self.dec.mlp,
            hd: self.dec.head_dim,
            cap: self.capacity,
        }
    }

    /// One decode step: appends one token per row and writes the next logits `[B, V]` into
    /// `logits` (resized; it keeps its allocation once it has held a full batch).
    pub fn step(&mut self, tokens: &[u32], logits: &mut Vec<f32>) -> Result<()> {
        let b = self.batch;
        if tokens.len() != b {
            return Err(Error::invalid(
                "tokens",
                format!("{} tokens for a batch of {b}", tokens.len()),
            ));
        }
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= self.dec.vocab) {
            return Err(Error::invalid(
                "token id",
                format!(
                    "{t} is outside the vocabulary (vocab_size = {})",
                    self.dec.vocab
                ),
            ));
        }
        if self.len + 1 > self.capacity {
            return Err(Error::invalid(
                "decode",
                "the cache is full (raise max_new)",
            ));
        }
        logits.resize(b * self.dec.vocab, 0.0);
        let w = self.widths();
        let inp = StepInput {
            dec: &self.dec,
            w,
            tokens,
            pad: &self.pad[..b],
            past: self.len,
        };
        let (rows, spill) = self.scratch.rows(b, w);
        let kv = &mut self.kv[..b * self.dec.row_cache(self.capacity)];
        run(
            &inp,
            self.threads,
            rows,
            inp.tokens,
            inp.pad,
            kv,
            logits,
            spill,
        );
        self.len += 1;
        Ok(())
    }

    /// Keeps only `rows` (in that order), e.g. to drop finished sequences. Increasing rows
    /// (what the rollout drops) move in place; any other order copies the cache once.
    pub fn retain(&mut self, rows: &[usize]) -> Result<()> {
        let b = self.batch;
        if let Some(&r) = rows.iter().find(|&&r| r >= b) {
            return Err(Error::invalid(
                "retain",
                format!("row {r} of a batch of {b}"),
            ));
        }
        if rows.len() > b {
            return Err(Error::invalid(
                "retain",
                format!("{} rows of a batch of {b}", rows.len()),
            ));
        }
        let block = self.dec.row_cache(self.capacity);
        if rows.windows(2).all(|w| w[0] < w[1]) {
            for (i, &r) in rows.iter().enumerate() {
                if r != i {
                    self.kv.copy_within(r * block..(r + 1) * block, i * block);
                    self.pad[i] = self.pad[r];
                }
            }
        } else {
            let mut kv = resident(self.kv.len());
            let mut pad = self.pad.clone();
            for (i, &r) in rows.iter().enumerate() {
                kv[i * block..(i + 1) * block]
                    .copy_from_slice(&self.kv[r * block..(r + 1) * block]);
                pad[i] = self.pad[r];
            }
            self.kv = kv;
            self.pad = pad;
        }
        self.batch = rows.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The column split gives `matmul`'s outputs bit for bit (same sums in the same order) for
    /// 1–15 rows, with and without bias and accumulation, split or not (too small, one
    /// thread, no spill room); both halves run on rayon's pool.
    #[test]
    fn matmul_cols_equals_matmul_bit_for_bit() {
        let mut seed = 7u64;
        let mut rnd = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        // n·k ≥ SPLIT_COLS_MIN_ENTRIES (split: an odd panel count and a partial last panel),
        // and one below it (not split).
        for (n, k) in [(2 * 1024 + 40, 130), (100, 60)] {
            let w: Vec<f32> = (0..n * k).map(|_| rnd()).collect();
            let b: Vec<f32> = (0..n).map(|_| rnd()).collect();
            for m in [1usize, 3, 4, 5, 15] {
                let x: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
                let y0: Vec<f32> = (0..m * n).map(|_| rnd()).collect();
                for (bias, add) in [(false, false), (true, false), (true, true)] {
                    let p = Packed::new(&w, n, k, bias.then(|| b.clone())).unwrap();
                    let mut want = y0.clone();
                    matmul(&x, &p, &mut want, add);
                    for (threads, room) in [(2, m * n), (1, m * n), (2, 0)] {
                        let mut spill = vec![0f32; room];
                        let mut got = y0.clone();
                        matmul_cols(&x, &p, &mut got, add, threads, &mut spill);
                        let same = got
                            .iter()
                            .zip(&want)
                            .all(|(a, b)| a.to_bits() == b.to_bits());
                        assert!(
                            same,
                            "n {n} k {k} m {m} bias {bias} add {add} threads {threads}"
                        );
                    }
                }
            }
        }
    }

    /// `matmul` against an f64 reference on shapes that exercise every tile (4-row and 1-row
    /// tiles, a partial panel, `k` not a multiple of 4; 9 and 17 rows: two and four tiles per
    /// panel, which hint the next panel's lines, the last tile's share past its end), with bias
    /// and accumulation, streamed ([`Packed::streamed`]: the hints) or not, the two bit for bit
    /// equal. Tolerance: 1e-5 relative to `Σ|x·w|` (f32 sums of ≤ 70 terms round to a few 1e-7).
    #[test]
    fn matmul_matches_f64() {
        let mut seed = 1u64;
        let mut rnd = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        for (m, n, k) in [
            (1, 5, 3),
            (4, 32, 16),
            (9, 37, 13),
            (6, 70, 70),
            (2, 64, 1),
            (17, 100, 70),
        ] {
            let x: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
            let w: Vec<f32> = (0..n * k).map(|_| rnd()).collect();
            let b: Vec<f32> = (0..n).map(|_| rnd()).collect();
            let y0: Vec<f32> = (0..m * n).map(|_| rnd()).collect();
            for (bias, add) in [(false, false), (true, false), (true, true)] {
                for streamed in [false, true] {
                    let p = Packed::new(&w, n, k, bias.then(|| b.clone()))
                        .unwrap()
                        .streamed(streamed);
                    let mut y = y0.clone();
                    matmul(&x, &p, &mut y, add);
                    for i in 0..m {
                        for j in 0..n {
                            let (mut s, mut mag) = (0f64, 0f64);
                            for t in 0..k {
                                let v = x[i * k + t] as f64 * w[j * k + t] as f64;
                                s += v;
                                mag += v.abs();
                            }
                            if bias {
                                s += b[j] as f64;
                                mag += (b[j] as f64).abs();
                            }
                            if add {
                                s += y0[i * n + j] as f64;
                                mag += (y0[i * n + j] as f64).abs();
                            }
                            let got = y[i * n + j] as f64;
                            assert!(
                            (got - s).abs() <= 1e-5 * mag.max(1e-30),
                            "[{m}, {k}] x [{n}, {k}] bias {bias} add {add} streamed {streamed}: y[{i}][{j}] = {got}, want {s}"
                        );
                        }
                    }
                    // The hints change no sum.
                    let mut plain = y0.clone();
                    matmul(&x, &p.clone().streamed(false), &mut plain, add);
                    assert!(
                        y.iter()
                            .zip(&plain)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "[{m}, {k}] x [{n}, {k}] bias {bias} add {add}: streamed differs"
                    );
                }
            }
        }
    }

    #[test]
    fn packing_checks_its_shapes() {
        let e = Packed::new(&[0.0; 5], 2, 3, None).unwrap_err().to_string();
        assert!(e.contains("5 entries"), "{e}");
        let e = Packed::new(&[0.0; 6], 2, 3, Some(vec![0.0; 3]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("[2, 3]"), "{e}");
    }
}
