//! The policy's causal language model, read top to bottom: the config as `config.json` spells
//! it, the weights under their Hugging Face names, and the forward — embeddings → N × (RMSNorm →
//! GQA attention with RoPE → residual → RMSNorm → SwiGLU → residual) → RMSNorm → LM head (tied to
//! the embeddings or not).
//!
//! One model serves the three decoder families that share this skeleton; `config.json`'s
//! `model_type` picks one ([`Arch`]), as transformers' `AutoModelForCausalLM` does, and the
//! differences are flags, not copies of the forward:
//!
//! | `model_type` | class | QK-norm | q/k/v bias | o bias | MLP bias | `head_dim` |
//! |---|---|---|---|---|---|---|
//! | `qwen3` | `Qwen3ForCausalLM` | yes | `attention_bias` | `attention_bias` | no | required |
//! | `llama` | `LlamaForCausalLM` | no | `attention_bias` | `attention_bias` | `mlp_bias` | hidden / heads if absent |
//! | `qwen2` | `Qwen2ForCausalLM` | no | always | never | no | hidden / heads |
//!
//! The type keeps its first name, [`Qwen3`] (and [`Qwen3Config`]): the whole crate holds the
//! policy under it, and Qwen3 is still the architecture the trainer's default is built as.
//!
//! Every op records gradients (see [`super::ops`]), so the same forward serves rollout
//! (batched, left-padded, with a [`KvCache`]) and training (full sequences, log-probs).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use candle_core::{DType, Device, Tensor, Var, D};
use rand::SeedableRng;
use rand_chacha::ChaCha12Rng;
use serde::{Deserialize, Serialize};

use super::fused::{self, Visibility};
use super::kv_cache::KvCache;
use super::ops;
use crate::error::{Error, Result};

/// The architecture `Qwen3ForCausalLM` (the trainer's default).
pub const ARCHITECTURE: &str = "Qwen3ForCausalLM";

/// The decoder families this model runs (see the module docs for what differs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// Qwen3: QK-norm, no biases unless `attention_bias`, explicit `head_dim`.
    Qwen3,
    /// Llama (Llama 2/3, SmolLM2, …): no QK-norm, optional `attention_bias` / `mlp_bias`.
    Llama,
    /// Qwen2 / Qwen2.5: q/k/v biases, none on o_proj, no QK-norm.
    Qwen2,
}

impl Arch {
    /// Every supported architecture.
    pub const ALL: [Arch; 3] = [Arch::Qwen3, Arch::Llama, Arch::Qwen2];

    /// `config.json`'s `model_type`.
    pub fn model_type(self) -> &'static str {
        match self {
            Arch::Qwen3 => "qwen3",
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
        }
    }

    /// The transformers class, `config.json`'s `architectures[0]`.
    pub fn class_name(self) -> &'static str {
        match self {
            Arch::Qwen3 => ARCHITECTURE,
            Arch::Llama => "LlamaForCausalLM",
            Arch::Qwen2 => "Qwen2ForCausalLM",
        }
    }

    /// The architecture of a `model_type`, if supported.
    pub fn from_model_type(model_type: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.model_type() == model_type)
    }

    /// The architecture of a transformers class name, if supported.
    pub fn from_class_name(class: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.class_name() == class)
    }

    /// Whether q and k go through a per-head RMSNorm before RoPE.
    pub fn qk_norm(self) -> bool {
        self == Arch::Qwen3
    }
}

/// `config.json` of a Qwen3, Llama or Qwen2 model ([`Arch`]): the keys the forward needs; every
/// other key of a real config is kept verbatim (`extra`) and written back on save, so a saved
/// folder names the same `model_type` and `architectures` and transformers loads it as the same
/// class.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Qwen3Config {
    /// `["Qwen3ForCausalLM"]`, `["LlamaForCausalLM"]` or `["Qwen2ForCausalLM"]`.
    #[serde(default)]
    pub architectures: Vec<String>,
    /// `"qwen3"`, `"llama"` or `"qwen2"`: decides the architecture ([`Self::arch`]).
    #[serde(default)]
    pub model_type: String,
    /// Rows of the embedding and the LM head.
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU MLP.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (GQA).
    pub num_key_value_heads: usize,
    /// Width of one head. Qwen3 sets it explicitly (it need not be hidden / heads); a Llama
    /// config may leave it out and a Qwen2 config does: then it is hidden / heads, filled in by
    /// [`Self::from_json`] and written on save.
    pub head_dim: usize,
    /// Longest sequence the rotary tables cover.
    pub max_position_embeddings: usize,
    /// RoPE base θ.
    pub rope_theta: f64,
    /// RMSNorm ε.
    pub rms_norm_eps: f64,
    /// Whether the LM head reuses the embedding matrix.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Biases on the q/k/v/o projections (Qwen3 and Llama; false in their releases). Qwen2
    /// ignores the key, as transformers does: its q/k/v always have biases, its o_proj never.
    #[serde(default)]
    pub attention_bias: bool,
    /// Biases on the gate/up/down projections (Llama only; other architectures ignore it, as
    /// transformers does). Not written when false, so Qwen configs gain no key.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mlp_bias: bool,
    /// `"silu"` (the only activation Qwen3 uses).
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Std of the normal initialisation (HF `initializer_range`).
    #[serde(default = "default_init")]
    pub initializer_range: f64,
    /// Whether sliding-window attention is on (not supported; must be false).
    #[serde(default)]
    pub use_sliding_window: bool,
    /// Every other key, kept so a saved config round-trips.
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

fn default_act() -> String {
    "silu".into()
}

fn default_init() -> f64 {
    0.02
}

impl Qwen3Config {
    /// A config for a small model in the Qwen3 layout (the rest of the keys as Qwen3 writes
    /// them).
    #[allow(clippy::too_many_arguments)]
    pub fn small(
        vocab_size: usize,
        hidden_size: usize,
        intermediate_size: usize,
        num_hidden_layers: usize,
        num_attention_heads: usize,
        num_key_value_heads: usize,
        head_dim: usize,
        max_position_embeddings: usize,
    ) -> Self {
        let mut extra = BTreeMap::new();
        extra.insert("torch_dtype".into(), serde_json::json!("float32"));
        extra.insert("attention_dropout".into(), serde_json::json!(0.0));
        extra.insert(
            "max_window_layers".into(),
            serde_json::json!(num_hidden_layers),
        );
        extra.insert("sliding_window".into(), serde_json::Value::Null);
        extra.insert("use_cache".into(), serde_json::json!(true));
        extra.insert("rope_scaling".into(), serde_json::Value::Null);
        Self {
            architectures: vec![ARCHITECTURE.into()],
            model_type: "qwen3".into(),
            vocab_size,
            hidden_size,
            intermediate_size,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            max_position_embeddings,
            rope_theta: 1_000_000.0,
            rms_norm_eps: 1e-6,
            tie_word_embeddings: true,
            attention_bias: false,
            mlp_bias: false,
            hidden_act: default_act(),
            initializer_range: default_init(),
            use_sliding_window: false,
            extra,
        }
    }

    /// The same config as another architecture: `model_type` and `architectures` as that
    /// family's `config.json` names them (every size key kept).
    pub fn with_arch(mut self, arch: Arch) -> Self {
        self.model_type = arch.model_type().into();
        self.architectures = vec![arch.class_name().into()];
        self
    }

    /// The architecture `model_type` names (`architectures` when `model_type` is absent);
    /// [`Self::validate`] has checked it is one of [`Arch::ALL`], and this falls back to Qwen3
    /// for a config that was never validated.
    pub fn arch(&self) -> Arch {
        Arch::from_model_type(&self.model_type)
            .or_else(|| {
                self.architectures
                    .iter()
                    .find_map(|a| Arch::from_class_name(a))
            })
            .unwrap_or(Arch::Qwen3)
    }

    /// Whether q/k/v have biases.
    pub fn qkv_bias(&self) -> bool {
        match self.arch() {
            Arch::Qwen2 => true,
            Arch::Qwen3 | Arch::Llama => self.attention_bias,
        }
    }

    /// Whether o_proj has a bias.
    pub fn o_bias(&self) -> bool {
        match self.arch() {
            Arch::Qwen2 => false,
            Arch::Qwen3 | Arch::Llama => self.attention_bias,
        }
    }

    /// Whether gate/up/down have biases.
    pub fn mlp_biased(&self) -> bool {
        self.arch() == Arch::Llama && self.mlp_bias
    }

    /// Parses `config.json` text; `path` names the file in errors.
    ///
    /// The architecture comes from `model_type` (or, without it, `architectures`); an unknown
    /// one is an error naming it. A missing or null `head_dim` is hidden / heads (Llama, Qwen2).
    ///
    /// Both spellings of the RoPE base load: the top-level `rope_theta` of transformers 4, and
    /// the `rope_parameters: {rope_theta, rope_type}` object transformers 5 writes instead (kept
    /// verbatim in `extra`, so a save writes it back beside the top-level key). Only
    /// `rope_type = "default"` (plain RoPE) is accepted; when both spellings are present they
    /// must agree.
    pub fn from_json(text: &str, path: &Path) -> Result<Self> {
        let not_config = |e: serde_json::Error| Error::Json {
            path: path.into(),
            message: format!("not a config.json of a Qwen3, Llama or Qwen2 model: {e}"),
        };
        let mut value: serde_json::Value = serde_json::from_str(text).map_err(not_config)?;
        Self::lift_rope_parameters(&mut value, path)?;
        Self::default_head_dim(&mut value);
        let cfg: Self = serde_json::from_value(value).map_err(not_config)?;
        cfg.validate(path)?;
        Ok(cfg)
    }

    /// Fills a missing or null `head_dim` with hidden / heads, as transformers' Llama and Qwen2
    /// configs do (an unreadable size is left for serde and [`Self::validate`] to name).
    fn default_head_dim(value: &mut serde_json::Value) {
        let Some(obj) = value.as_object_mut() else {
            return;
        };
        if !matches!(obj.get("head_dim"), None | Some(serde_json::Value::Null)) {
            return;
        }
        let size = |k: &str| obj.get(k).and_then(serde_json::Value::as_u64);
        if let (Some(hidden), Some(heads)) = (size("hidden_size"), size("num_attention_heads")) {
            if heads > 0 && hidden % heads == 0 {
                obj.insert("head_dim".into(), serde_json::json!(hidden / heads));
            }
        }
    }

    /// Reads transformers 5's `rope_parameters` into the top-level `rope_theta` the forward
    /// uses (see [`Self::from_json`]).
    fn lift_rope_parameters(value: &mut serde_json::Value, path: &Path) -> Result<()> {
        let bad = |key: &str, message: String| Error::Config {
            path: path.into(),
            key: key.into(),
            message,
        };
        let Some(obj) = value.as_object_mut() else {
            return Ok(()); // serde names the shape error
        };
        let params = match obj.get("rope_parameters") {
            None | Some(serde_json::Value::Null) => return Ok(()),
            Some(serde_json::Value::Object(p)) => p,
            Some(other) => {
                return Err(bad(
                    "rope_parameters",
                    format!("{other}: expected an object {{rope_theta, rope_type}}"),
                ))
            }
        };
        match params.get("rope_type").and_then(|t| t.as_str()) {
            None | Some("default") => {}
            Some(other) => {
                return Err(bad(
                    "rope_parameters.rope_type",
                    format!("{other:?}: only \"default\" (plain RoPE) is supported"),
                ))
            }
        }
        // Only the θ value is taken out (the object itself stays in `extra`).
        let Some(theta) = params.get("rope_theta").cloned() else {
            return Ok(()); // the top-level key, if any, decides
        };
        let Some(theta_f) = theta.as_f64() else {
            return Err(bad(
                "rope_parameters.rope_theta",
                format!("{theta}: must be a number"),
            ));
        };
        match obj.get("rope_theta") {
            None | Some(serde_json::Value::Null) => {
                obj.insert("rope_theta".into(), theta);
            }
            Some(top) if top.as_f64() == Some(theta_f) => {}
            Some(top) => {
                return Err(bad(
                    "rope_parameters.rope_theta",
                    format!("{theta} disagrees with the top-level rope_theta = {top}"),
                ))
            }
        }
        Ok(())
    }

    /// Checks that this is a config the forward can run: a supported `model_type` (or, without
    /// one, a supported class in `architectures`), `architectures` naming that family's causal
    /// LM when it names any, plain RoPE, SiLU, consistent sizes.
    pub fn validate(&self, path: &Path) -> Result<()> {
        let bad = |key: &str, message: String| Error::Config {
            path: path.into(),
            key: key.into(),
            message,
        };
        let supported = Arch::ALL.map(Arch::model_type).join(", ");
        let arch = if self.model_type.is_empty() {
            self.architectures
                .iter()
                .find_map(|a| Arch::from_class_name(a))
                .ok_or_else(|| {
                    bad(
                        "architectures",
                        format!(
                            "{:?} without a model_type: expected one of {:?}",
                            self.architectures,
                            Arch::ALL.map(Arch::class_name)
                        ),
                    )
                })?
        } else {
            Arch::from_model_type(&self.model_type).ok_or_else(|| {
                bad(
                    "model_type",
                    format!(
                        "{:?} is not a supported architecture (supported: {supported})",
                        self.model_type
                    ),
                )
            })?
        };
        if !self.architectures.is_empty()
            && !self.architectures.iter().any(|a| a == arch.class_name())
        {
            return Err(bad(
                "architectures",
                format!(
                    "{:?} does not name {} (model_type {:?})",
                    self.architectures,
                    arch.class_name(),
                    arch.model_type()
                ),
            ));
        }
        if self.hidden_act != "silu" {
            return Err(bad(
                "hidden_act",
                format!("{:?}: only \"silu\" is supported", self.hidden_act),
            ));
        }
        if self.use_sliding_window {
            return Err(bad(
                "use_sliding_window",
                "sliding-window attention is not supported".into(),
            ));
        }
        if let Some(v) = self.extra.get("rope_scaling") {
            if !v.is_null() {
                return Err(bad(
                    "rope_scaling",
                    format!("{v}: only plain RoPE is supported"),
                ));
            }
        }
        for (key, value) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("max_position_embeddings", self.max_position_embeddings),
        ] {
            if value == 0 {
                return Err(bad(key, "must be at least 1".into()));
            }
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return Err(bad(
                "head_dim",
                format!("{}: must be even and ≥ 2 (RoPE)", self.head_dim),
            ));
        }
        if !self
            .num_attention_heads
            .is_multiple_of(self.num_key_value_heads)
        {
            return Err(bad(
                "num_key_value_heads",
                format!(
                    "{} does not divide num_attention_heads = {}",
                    self.num_key_value_heads, self.num_attention_heads
                ),
            ));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return Err(bad(
                "rope_theta",
                format!("{}: must be positive", self.rope_theta),
            ));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps > 0.0) {
            return Err(bad(
                "rms_norm_eps",
                format!("{}: must be positive", self.rms_norm_eps),
            ));
        }
        Ok(())
    }

    /// Every tensor a checkpoint of this config holds: Hugging Face name → shape.
    pub fn tensor_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let (d, f) = (self.hidden_size, self.intermediate_size);
        let (q, kv) = (
            self.num_attention_heads * self.head_dim,
            self.num_key_value_heads * self.head_dim,
        );
        let mut out = vec![(
            "model.embed_tokens.weight".to_string(),
            vec![self.vocab_size, d],
        )];
        for i in 0..self.num_hidden_layers {
            let p = format!("model.layers.{i}");
            out.push((format!("{p}.input_layernorm.weight"), vec![d]));
            out.push((format!("{p}.self_attn.q_proj.weight"), vec![q, d]));
            out.push((format!("{p}.self_attn.k_proj.weight"), vec![kv, d]));
            out.push((format!("{p}.self_attn.v_proj.weight"), vec![kv, d]));
            out.push((format!("{p}.self_attn.o_proj.weight"), vec![d, q]));
            if self.qkv_bias() {
                out.push((format!("{p}.self_attn.q_proj.bias"), vec![q]));
                out.push((format!("{p}.self_attn.k_proj.bias"), vec![kv]));
                out.push((format!("{p}.self_attn.v_proj.bias"), vec![kv]));
            }
            if self.o_bias() {
                out.push((format!("{p}.self_attn.o_proj.bias"), vec![d]));
            }
            if self.arch().qk_norm() {
                out.push((format!("{p}.self_attn.q_norm.weight"), vec![self.head_dim]));
                out.push((format!("{p}.self_attn.k_norm.weight"), vec![self.head_dim]));
            }
            out.push((format!("{p}.post_attention_layernorm.weight"), vec![d]));
            out.push((format!("{p}.mlp.gate_proj.weight"), vec![f, d]));
            out.push((format!("{p}.mlp.up_proj.weight"), vec![f, d]));
            out.push((format!("{p}.mlp.down_proj.weight"), vec![d, f]));
            if self.mlp_biased() {
                out.push((format!("{p}.mlp.gate_proj.bias"), vec![f]));
                out.push((format!("{p}.mlp.up_proj.bias"), vec![f]));
                out.push((format!("{p}.mlp.down_proj.bias"), vec![d]));
            }
        }
        out.push(("model.norm.weight".to_string(), vec![d]));
        if !self.tie_word_embeddings {
            out.push(("lm_head.weight".to_string(), vec![self.vocab_size, d]));
        }
        out
    }
}

/// One projection: `[out, in]` weight and optional bias.
#[derive(Clone, Debug)]
struct Proj {
    w: Tensor,
    b: Option<Tensor>,
}

impl Proj {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        ops::linear(x, &self.w, self.b.as_ref())
    }
}

#[derive(Clone, Debug)]
struct Layer {
    input_layernorm: Tensor,
    q_proj: Proj,
    k_proj: Proj,
    v_proj: Proj,
    o_proj: Proj,
    /// Qwen3's per-head RMSNorm of q and k (none in Llama and Qwen2).
    q_norm: Option<Tensor>,
    k_norm: Option<Tensor>,
    post_attention_layernorm: Tensor,
    gate_proj: Proj,
    up_proj: Proj,
    down_proj: Proj,
}

/// Per-position log-probabilities (and entropies) of a batch of sequences.
#[derive(Debug)]
pub struct TokenLogProbs {
    /// `log p(token)` of every scored position, row after row: `[N]`.
    pub log_probs: Tensor,
    /// The entropy of the model's distribution at each of those positions: `[N]`.
    pub entropy: Tensor,
}

/// The most padded tokens (rows × prompt length) [`Qwen3::prefill`] puts through the model at
/// once; a longer batch is prefilled in row chunks.
pub const PREFILL_CHUNK_TOKENS: usize = 8192;

/// A layer's output on a forward with a KV cache (a prefill or a decode step: inference, as
/// the cache is written in place and cannot be differentiated) detached from the graph that
/// made it. The weights are `Var`s, so every op records its inputs for a backward pass; without
/// the cut the returned logits keep every layer's activations of the whole batch alive (35
/// SmolLM2 prompts of ~1 K tokens held ~18 GB until the prefill's logits were dropped).
fn inference_cut(x: Tensor, inference: bool) -> Tensor {
    if inference {
        x.detach()
    } else {
        x
    }
}

/// A prompt after [`Qwen3::prefill_reusing`]: every layer's keys and values at its positions
/// and the logits of its last position, to start another generation of the same prompt from.
#[derive(Clone, Debug)]
pub struct PrefilledPrompt {
    tokens: Vec<u32>,
    slots: Vec<(Tensor, Tensor)>,
    logits: Tensor,
}

impl PrefilledPrompt {
    /// The prompt's tokens.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }
}

/// A Qwen3, Llama or Qwen2 causal LM ([`Arch`]) whose parameters are candle [`Var`]s
/// (trainable) under their Hugging Face names.
#[derive(Debug)]
pub struct Qwen3 {
    cfg: Qwen3Config,
    params: BTreeMap<String, Var>,
    embed_tokens: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    lm_head: Tensor,
    cos: Tensor,
    sin: Tensor,
    /// `[positions, head_dim]`: `[cos ‖ sin]` per position, the fused RoPE's table.
    cos_sin: Tensor,
    /// Whether the forward runs the fused kernels ([`fused`]) or the composed reference ops.
    fused: bool,
    dtype: DType,
    device: Device,
}

impl Qwen3 {
    /// A model from named weights (e.g. a checkpoint): every tensor of the config must be
    /// there with its shape (converted to `dtype`); `source` names the checkpoint in errors.
    /// A tied model's `lm_head.weight`, if present, is ignored; any other unexpected tensor is
    /// an error (it would mean another architecture).
    pub fn from_weights(
        cfg: Qwen3Config,
        mut weights: HashMap<String, Tensor>,
        dtype: DType,
        device: &Device,
        source: &Path,
    ) -> Result<Self> {
        cfg.validate(source)?;
        let mut params = BTreeMap::new();
        for (name, shape) in cfg.tensor_shapes() {
            let t = weights.remove(&name).ok_or_else(|| Error::Checkpoint {
                path: source.into(),
                tensor: name.clone(),
                message: "missing".into(),
            })?;
            if t.dims() != shape.as_slice() {
                return Err(Error::Checkpoint {
                    path: source.into(),
                    tensor: name,
                    message: format!(
                        "shape {:?}, expected {:?} from config.json",
                        t.dims(),
                        shape
                    ),
                });
            }
            let t = t.to_dtype(dtype)?.to_device(device)?;
            params.insert(name, Var::from_tensor(&t)?);
        }
        if cfg.tie_word_embeddings {
            weights.remove("lm_head.weight");
        }
        if let Some(name) = weights.keys().min() {
            return Err(Error::Checkpoint {
                path: source.into(),
                tensor: name.clone(),
                message: format!(
                    "not a tensor of {} with this config ({} unexpected tensors)",
                    cfg.arch().class_name(),
                    weights.len()
                ),
            });
        }
        Self::assemble(cfg, params, dtype, device)
    }

    /// A randomly initialised model, as `transformers` initialises these models (weights
    /// `N(0, initializer_range)`, biases 0, norm weights 1), from a seeded ChaCha12 stream:
    /// the same seed gives the same weights on every machine.
    pub fn random(cfg: Qwen3Config, seed: u64, dtype: DType, device: &Device) -> Result<Self> {
        use rand::Rng;
        cfg.validate(Path::new("<config>"))?;
        let mut rng = ChaCha12Rng::seed_from_u64(seed);
        let std = cfg.initializer_range;
        let mut weights = HashMap::new();
        for (name, shape) in cfg.tensor_shapes() {
            let n: usize = shape.iter().product();
            let data: Vec<f32> = if name.ends_with("norm.weight") {
                vec![1.0; n]
            } else if name.ends_with(".bias") {
                vec![0.0; n]
            } else {
                // Box–Muller on the seeded stream (rand_distr would be one more dependency).
                (0..n)
                    .map(|_| {
                        let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
                        let u2: f64 = rng.random::<f64>();
                        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos() * std) as f32
                    })
                    .collect()
            };
            weights.insert(name, Tensor::from_vec(data, shape, &Device::Cpu)?);
        }
        Self::from_weights(cfg, weights, dtype, device, Path::new("<random init>"))
    }

    fn assemble(
        cfg: Qwen3Config,
        params: BTreeMap<String, Var>,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let get = |name: &str| params[name].as_tensor().clone();
        let opt = |name: &str| params.get(name).map(|v| v.as_tensor().clone());
        let proj = |name: &str| Proj {
            w: get(&format!("{name}.weight")),
            b: opt(&format!("{name}.bias")),
        };
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| {
                let p = format!("model.layers.{i}");
                Layer {
                    input_layernorm: get(&format!("{p}.input_layernorm.weight")),
                    q_proj: proj(&format!("{p}.self_attn.q_proj")),
                    k_proj: proj(&format!("{p}.self_attn.k_proj")),
                    v_proj: proj(&format!("{p}.self_attn.v_proj")),
                    o_proj: proj(&format!("{p}.self_attn.o_proj")),
                    q_norm: opt(&format!("{p}.self_attn.q_norm.weight")),
                    k_norm: opt(&format!("{p}.self_attn.k_norm.weight")),
                    post_attention_layernorm: get(&format!("{p}.post_attention_layernorm.weight")),
                    gate_proj: proj(&format!("{p}.mlp.gate_proj")),
                    up_proj: proj(&format!("{p}.mlp.up_proj")),
                    down_proj: proj(&format!("{p}.mlp.down_proj")),
                }
            })
            .collect();
        let embed_tokens = get("model.embed_tokens.weight");
        let lm_head = if cfg.tie_word_embeddings {
            embed_tokens.clone()
        } else {
            get("lm_head.weight")
        };
        let (cos, sin) = ops::rope_tables(
            cfg.head_dim,
            cfg.rope_theta,
            cfg.max_position_embeddings,
            dtype,
            device,
        )?;
        let cos_sin = Tensor::cat(&[&cos, &sin], 1)?;
        Ok(Self {
            norm: get("model.norm.weight"),
            cfg,
            params,
            embed_tokens,
            layers,
            lm_head,
            cos,
            sin,
            cos_sin,
            // `T2PO_COMPOSED_OPS=1` runs a whole program on the composed reference ops (A/B runs).
            fused: Self::can_fuse(dtype, device)
                && std::env::var_os("T2PO_COMPOSED_OPS").is_none_or(|v| v != "1"),
            dtype,
            device: device.clone(),
        })
    }

    fn can_fuse(dtype: DType, device: &Device) -> bool {
        dtype == DType::F32 && device.is_cpu()
    }

    /// Whether the forward and backward run the fused kernels of [`fused`] (the default for f32
    /// on the CPU, unless the environment sets `T2PO_COMPOSED_OPS=1`) or the composed candle ops
    /// of [`ops`] (the reference; the only path on other dtypes and devices).
    pub fn fused(&self) -> bool {
        self.fused
    }

    /// Switches between the fused kernels and the composed reference ops. The fused kernels
    /// exist for f32 on the CPU only: asking for them elsewhere is an error.
    pub fn set_fused(&mut self, on: bool) -> Result<()> {
        if on && !Self::can_fuse(self.dtype, &self.device) {
            return Err(Error::invalid(
                "fused kernels",
                format!(
                    "they run on f32 CPU tensors; this model is {:?} on {:?}",
                    self.dtype, self.device
                ),
            ));
        }
        self.fused = on;
        Ok(())
    }

    /// The model's config.
    pub fn config(&self) -> &Qwen3Config {
        &self.cfg
    }

    /// The dtype the model computes in.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The trainable parameters by Hugging Face name.
    pub fn params(&self) -> &BTreeMap<String, Var> {
        &self.params
    }

    /// Number of scalar parameters.
    pub fn num_parameters(&self) -> usize {
        self.params.values().map(|v| v.elem_count()).sum()
    }

    /// This model with `vocab_size` rows of embedding (and of an untied LM head), for a
    /// tokenizer that gained tokens: the new rows are the mean of the old ones (transformers'
    /// `resize_token_embeddings` starts from the same mean), so a new token starts as an average
    /// token rather than as noise that could dominate the softmax. A size at or below the current
    /// one returns the model unchanged (Qwen3 pads its embedding past the tokenizer already).
    pub fn with_vocab_size(self, vocab_size: usize) -> Result<Self> {
        if vocab_size <= self.cfg.vocab_size {
            return Ok(self);
        }
        let extra = vocab_size - self.cfg.vocab_size;
        let grow = |t: &Tensor| -> Result<Tensor> {
            let mean = t.mean_keepdim(0)?;
            let rows = mean.broadcast_as((extra, t.dim(1)?))?.contiguous()?;
            Ok(Tensor::cat(&[t, &rows], 0)?)
        };
        let fused = self.fused;
        let (mut cfg, mut params) = (self.cfg, self.params);
        for name in ["model.embed_tokens.weight", "lm_head.weight"] {
            if let Some(v) = params.get(name) {
                let grown = grow(v.as_tensor())?;
                params.insert(name.into(), Var::from_tensor(&grown)?);
            }
        }
        cfg.vocab_size = vocab_size;
        let mut model = Self::assemble(cfg, params, self.dtype, &self.device)?;
        model.fused = fused;
        Ok(model)
    }

    /// A deep copy whose weights no optimizer step touches (the frozen reference policy of the
    /// KL term, or a snapshot).
    pub fn frozen_copy(&self) -> Result<Self> {
        let mut params = BTreeMap::new();
        for (name, v) in &self.params {
            params.insert(
                name.clone(),
                Var::from_tensor(&v.as_tensor().copy()?.detach())?,
            );
        }
        let mut copy = Self::assemble(self.cfg.clone(), params, self.dtype, &self.device)?;
        copy.fused = self.fused;
        Ok(copy)
    }

    /// The final hidden states `[B, L, d]` of `tokens: [B, L]` at `positions: [B, L]` (u32),
    /// each query seeing the keys `vis` allows; with a cache, the new keys/values are appended
    /// to it (the caller advances it).
    fn forward_hidden(
        &self,
        tokens: &Tensor,
        positions: &Tensor,
        vis: &Visibility,
        mut cache: Option<&mut KvCache>,
    ) -> Result<Tensor> {
        let (b, l) = tokens.dims2()?;
        let cfg = &self.cfg;
        let (h, kv, hd) = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let flat_pos = positions.flatten_all()?;
        let scale = 1.0 / (hd as f64).sqrt();
        let eps = cfg.rms_norm_eps;
        let mut x = self
            .embed_tokens
            .index_select(&tokens.flatten_all()?, 0)?
            .reshape((b, l, cfg.hidden_size))?;
        if self.fused {
            let cs = self.cos_sin.index_select(&flat_pos, 0)?;
            let flash = l > 1 && hd.is_multiple_of(16);
            for (i, layer) in self.layers.iter().enumerate() {
                let hn = fused::rms_norm(&x, &layer.input_layernorm, eps)?;
                let qkv = |p: &Proj, heads: usize, norm: Option<&Tensor>, rope: bool| {
                    let mut t = p.forward(&hn)?.reshape((b, l, heads, hd))?;
                    if let Some(w) = norm {
                        t = fused::rms_norm(&t, w, eps)?;
                    }
                    if rope {
                        t = fused::rope(&t, &cs)?;
                    }
                    Ok::<_, Error>(t.transpose(1, 2)?)
                };
                let q = qkv(&layer.q_proj, h, layer.q_norm.as_ref(), true)?;
                let k = qkv(&layer.k_proj, kv, layer.k_norm.as_ref(), true)?;
                let v = qkv(&layer.v_proj, kv, None, false)?;
                let (k, v) = match cache.as_deref_mut() {
                    Some(c) => c.append(i, &k, &v)?,
                    None => (k, v),
                };
                // Blocked attention (no [B, H, L, T] scores) for training and prefill; a
                // decode step's single query row stays on the matmul path.
                let ctx = if flash {
                    fused::flash_attention(&q, &k, &v, vis, scale)?
                } else {
                    fused::attention(&q, &k.contiguous()?, &v.contiguous()?, vis, scale)?
                        .transpose(1, 2)?
                        .reshape((b, l, h * hd))?
                };
                x = (x + layer.o_proj.forward(&ctx)?)?;
                let hn = fused::rms_norm(&x, &layer.post_attention_layernorm, eps)?;
                // One matmul for gate and up (their weights stacked: a [2m, d] copy per step,
                // split again by cat's backward): one read of hn, one gradient for it.
                let gate_up = Tensor::cat(&[&layer.gate_proj.w, &layer.up_proj.w], 0)?;
                let gate_up_b = match (&layer.gate_proj.b, &layer.up_proj.b) {
                    (Some(g), Some(u)) => Some(Tensor::cat(&[g, u], 0)?),
                    _ => None,
                };
                let act = fused::swiglu_packed(&ops::linear(&hn, &gate_up, gate_up_b.as_ref())?)?;
                x = (&x + layer.down_proj.forward(&act)?)?;
                x = inference_cut(x, cache.is_some());
            }
            if let Some(c) = cache {
                c.advance(l);
            }
            return Ok(fused::rms_norm(&x, &self.norm, eps)?);
        }
        let cos = self
            .cos
            .index_select(&flat_pos, 0)?
            .reshape((b, 1, l, hd / 2))?;
        let sin = self
            .sin
            .index_select(&flat_pos, 0)?
            .reshape((b, 1, l, hd / 2))?;
        let mask = ops::attention_mask(&vis.pad, vis.past, l, self.dtype, &self.device)?;
        for (i, layer) in self.layers.iter().enumerate() {
            let hn = ops::rms_norm(&x, &layer.input_layernorm, eps)?;
            let q = layer
                .q_proj
                .forward(&hn)?
                .reshape((b, l, h, hd))?
                .transpose(1, 2)?;
            let k = layer
                .k_proj
                .forward(&hn)?
                .reshape((b, l, kv, hd))?
                .transpose(1, 2)?;
            let v = layer
                .v_proj
                .forward(&hn)?
                .reshape((b, l, kv, hd))?
                .transpose(1, 2)?;
            let norm = |t: Tensor, w: &Option<Tensor>| match w {
                Some(w) => ops::rms_norm(&t, w, eps),
                None => Ok(t),
            };
            let q = ops::rope(&norm(q, &layer.q_norm)?, &cos, &sin)?;
            let k = ops::rope(&norm(k, &layer.k_norm)?, &cos, &sin)?;
            let (k, v) = match cache.as_deref_mut() {
                Some(c) => c.append(i, &k, &v)?,
                None => (k, v.contiguous()?),
            };
            let ctx = ops::attention(&q, &k, &v, &mask, scale)?;
            let ctx = ctx.transpose(1, 2)?.reshape((b, l, h * hd))?;
            x = (x + layer.o_proj.forward(&ctx)?)?;
            let hn = ops::rms_norm(&x, &layer.post_attention_layernorm, eps)?;
            let act = (layer.gate_proj.forward(&hn)?.silu()? * layer.up_proj.forward(&hn)?)?;
            x = (&x + layer.down_proj.forward(&act)?)?;
            x = inference_cut(x, cache.is_some());
        }
        if let Some(c) = cache {
            c.advance(l);
        }
        Ok(ops::rms_norm(&x, &self.norm, eps)?)
    }

    /// Logits of hidden states (`[…, d]` → `[…, V]`).
    pub fn lm_head(&self, hidden: &Tensor) -> Result<Tensor> {
        Ok(ops::linear(hidden, &self.lm_head, None)?)
    }

    /// Logits `[B, L, V]` at every position of right-padded sequences (positions from 0; a
    /// row's padding never influences its real positions, so those logits are exact).
    pub fn forward_logits(&self, seqs: &[Vec<u32>]) -> Result<Tensor> {
        let (tokens, positions, vis) = self.right_padded(seqs)?;
        let hidden = self.forward_hidden(&tokens, &positions, &vis, None)?;
        self.lm_head(&hidden)
    }

    fn right_padded(&self, seqs: &[Vec<u32>]) -> Result<(Tensor, Tensor, Visibility)> {
        let l = seqs.iter().map(Vec::len).max().unwrap_or(0);
        if seqs.is_empty() || l == 0 {
            return Err(Error::invalid(
                "sequences",
                "need at least one non-empty sequence",
            ));
        }
        self.check_len(l)?;
        let b = seqs.len();
        let mut tokens = vec![0u32; b * l];
        for (r, s) in seqs.iter().enumerate() {
            tokens[r * l..r * l + s.len()].copy_from_slice(s);
            self.check_tokens(s)?;
        }
        let positions: Vec<u32> = (0..b).flat_map(|_| 0..l as u32).collect();
        let tokens = Tensor::from_vec(tokens, (b, l), &self.device)?;
        let positions = Tensor::from_vec(positions, (b, l), &self.device)?;
        let vis = Visibility {
            pad: vec![0; b].into(),
            past: 0,
            new: l,
        };
        Ok((tokens, positions, vis))
    }

    fn check_len(&self, l: usize) -> Result<()> {
        if l > self.cfg.max_position_embeddings {
            return Err(Error::invalid(
                "sequence length",
                format!(
                    "{l} tokens exceed max_position_embeddings = {}",
                    self.cfg.max_position_embeddings
                ),
            ));
        }
        Ok(())
    }

    fn check_tokens(&self, s: &[u32]) -> Result<()> {
        if let Some(&t) = s.iter().find(|&&t| t as usize >= self.cfg.vocab_size) {
            return Err(Error::invalid(
                "token id",
                format!(
                    "{t} is outside the vocabulary (vocab_size = {})",
                    self.cfg.vocab_size
                ),
            ));
        }
        Ok(())
    }

    /// `log p(s[t] | s[..t])` and the entropy at that position for `t ≥ start[r]` of every
    /// sequence `r` (e.g. the response tokens after a prompt), concatenated row after row.
    /// Only the scored positions go through the LM head, which keeps the `[N, V]` temporary
    /// as small as the loss needs.
    pub fn token_log_probs(&self, seqs: &[Vec<u32>], start: &[usize]) -> Result<TokenLogProbs> {
        self.token_log_probs_at(seqs, start, 1.0)
    }

    /// [`token_log_probs`](Self::token_log_probs) of the distribution the sampler draws from at
    /// `temperature` (logits divided by it), so PPO's ratios compare like with like.
    pub fn token_log_probs_at(
        &self,
        seqs: &[Vec<u32>],
        start: &[usize],
        temperature: f64,
    ) -> Result<TokenLogProbs> {
        if !(temperature.is_finite() && temperature > 0.0) {
            return Err(Error::invalid(
                "temperature",
                format!("{temperature}: must be a positive number"),
            ));
        }
        if start.len() != seqs.len() {
            return Err(Error::invalid("start", "one start per sequence"));
        }
        let (tokens, positions, vis) = self.right_padded(seqs)?;
        let (b, l) = tokens.dims2()?;
        let hidden = self.forward_hidden(&tokens, &positions, &vis, None)?;
        let mut rows = Vec::new();
        let mut targets = Vec::new();
        for (r, (s, &st)) in seqs.iter().zip(start).enumerate() {
            if st == 0 || st > s.len() {
                return Err(Error::invalid(
                    "start",
                    format!(
                        "{st} for a sequence of {} tokens: must be in 1..=len",
                        s.len()
                    ),
                ));
            }
            for (t, &token) in s.iter().enumerate().skip(st) {
                rows.push((r * l + t - 1) as u32);
                targets.push(token);
            }
        }
        let n = rows.len();
        let rows = Tensor::from_vec(rows, n, &self.device)?;
        let targets = Tensor::from_vec(targets, n, &self.device)?;
        let picked = hidden
            .reshape((b * l, self.cfg.hidden_size))?
            .index_select(&rows, 0)?;
        if self.fused {
            let (log_probs, entropy) =
                fused::lm_head_log_prob_entropy(&picked, &self.lm_head, &targets, temperature)?;
            return Ok(TokenLogProbs { log_probs, entropy });
        }
        let mut logits = self.lm_head(&picked)?;
        if temperature != 1.0 {
            logits = (logits / temperature)?;
        }
        let logp = ops::log_softmax_last(&logits)?;
        let log_probs = logp.gather(&targets.unsqueeze(1)?, 1)?.squeeze(1)?;
        let entropy = (logp.exp()? * &logp)?.sum(D::Minus1)?.neg()?;
        Ok(TokenLogProbs { log_probs, entropy })
    }

    /// Prefills left-padded prompts into a fresh cache with room for `max_new` more tokens;
    /// returns the cache and the logits `[B, V]` of each prompt's last position.
    ///
    /// Rows go through the model in chunks of at most [`PREFILL_CHUNK_TOKENS`] padded tokens
    /// (at least one row), each written into its rows of the one cache: a batch's prefill
    /// holds one chunk's activations and attention scores at a time, not the whole batch's
    /// (35 SmolLM2 prompts of ~1 K tokens peaked at 15 GB in one piece). The rows do not
    /// interact, so the result is the one-piece prefill's.
    pub fn prefill(&self, prompts: &[Vec<u32>], max_new: usize) -> Result<(KvCache, Tensor)> {
        let n = prompts.len();
        let (cache, logits, _) =
            self.prefill_reusing(prompts, max_new, &vec![None; n], &vec![false; n])?;
        Ok((cache, logits))
    }

    /// [`prefill`](Self::prefill) where `reuse[i]`, when given, is row `i`'s prompt prefilled
    /// before (by this model, for the same tokens): its keys, values and last logits are copied
    /// in and the model runs over the other rows only. A TDS resample generates its turn again
    /// from the same prompt, so it need not prefill it again. For every row prefilled here with
    /// `keep[i]`, the third result holds its [`PrefilledPrompt`] for a later call.
    ///
    /// A row's keys and values do not depend on its padding or on the other rows (positions
    /// count from each row's first token, padding is masked), so the cache is `prefill`'s up
    /// to the rounding of a different batch shape in the matrix products (~1e-7 relative;
    /// `tests/model.rs` checks the logits of every decode step after it within 1e-5).
    pub fn prefill_reusing(
        &self,
        prompts: &[Vec<u32>],
        max_new: usize,
        reuse: &[Option<&PrefilledPrompt>],
        keep: &[bool],
    ) -> Result<(KvCache, Tensor, Vec<Option<PrefilledPrompt>>)> {
        let n = prompts.len();
        if reuse.len() != n || keep.len() != n {
            return Err(Error::invalid(
                "prefill",
                format!(
                    "{n} prompts with {} reuse and {} keep entries",
                    reuse.len(),
                    keep.len()
                ),
            ));
        }
        if prompts.is_empty() || prompts.iter().any(Vec::is_empty) {
            return Err(Error::invalid(
                "prompts",
                "need at least one prompt, none empty",
            ));
        }
        let l = prompts.iter().map(Vec::len).max().unwrap_or(0);
        self.check_len(l + max_new)?;
        for (i, (p, r)) in prompts.iter().zip(reuse).enumerate() {
            self.check_tokens(p)?;
            if let Some(r) = r {
                let layers_ok = r.slots.len() == self.cfg.num_hidden_layers
                    && r.logits.dims() == [self.cfg.vocab_size];
                if r.tokens != *p || !layers_ok {
                    return Err(Error::invalid(
                        "prefill",
                        format!(
                            "row {i}: the prefilled prompt given for reuse is not this prompt's"
                        ),
                    ));
                }
            }
        }
        let pad: Vec<usize> = prompts.iter().map(|p| l - p.len()).collect();
        let cfg = &self.cfg;
        let cache_for = |pad: Vec<usize>| {
            KvCache::new(
                cfg.num_hidden_layers,
                pad.len(),
                cfg.num_key_value_heads,
                cfg.head_dim,
                l + max_new,
                pad,
                self.dtype,
                &self.device,
            )
        };
        let mut cache = cache_for(pad.clone())?;
        let mut last: Vec<Option<Tensor>> = vec![None; n];
        let fresh: Vec<usize> = (0..n).filter(|&i| reuse[i].is_none()).collect();
        for chunk in fresh.chunks((PREFILL_CHUNK_TOKENS / l).max(1)) {
            let chunk_prompts: Vec<Vec<u32>> = chunk.iter().map(|&i| prompts[i].clone()).collect();
            let mut part = cache_for(chunk.iter().map(|&i| pad[i]).collect())?;
            let logits = self.prefill_rows(&chunk_prompts, l, &mut part)?;
            for (j, &i) in chunk.iter().enumerate() {
                cache.copy_row(i, &part, j)?;
                last[i] = Some(logits.get(j)?);
            }
        }
        for (i, r) in reuse.iter().enumerate() {
            if let Some(r) = r {
                cache.set_row_slots(i, pad[i], &r.slots)?;
                last[i] = Some(r.logits.clone());
            }
        }
        cache.advance(l);
        let last: Vec<Tensor> = last.into_iter().map(|t| t.expect("every row")).collect();
        let mut kept = Vec::with_capacity(n);
        for i in 0..n {
            kept.push(if keep[i] && reuse[i].is_none() {
                Some(PrefilledPrompt {
                    tokens: prompts[i].clone(),
                    slots: cache.row_slots(i, pad[i], prompts[i].len())?,
                    logits: last[i].force_contiguous()?,
                })
            } else {
                None
            });
        }
        Ok((cache, Tensor::stack(&last, 0)?, kept))
    }

    /// [`prefill`](Self::prefill) of `prompts` (each at most `l` tokens, left-padded to `l`)
    /// into `cache` (theirs alone); returns the last positions' logits.
    fn prefill_rows(&self, prompts: &[Vec<u32>], l: usize, cache: &mut KvCache) -> Result<Tensor> {
        let b = prompts.len();
        let mut tokens = vec![0u32; b * l];
        let mut positions = vec![0u32; b * l];
        for (r, p) in prompts.iter().enumerate() {
            let off = l - p.len();
            tokens[r * l + off..(r + 1) * l].copy_from_slice(p);
            for (i, pos) in positions[r * l + off..(r + 1) * l].iter_mut().enumerate() {
                *pos = i as u32;
            }
        }
        let tokens = Tensor::from_vec(tokens, (b, l), &self.device)?;
        let positions = Tensor::from_vec(positions, (b, l), &self.device)?;
        let vis = Visibility {
            pad: cache.pad().to_vec().into(),
            past: 0,
            new: l,
        };
        let hidden = self.forward_hidden(&tokens, &positions, &vis, Some(cache))?;
        let last = hidden.narrow(1, l - 1, 1)?.squeeze(1)?;
        Ok(self.lm_head(&last)?.detach())
    }

    /// One decode step: appends one token per row and returns the next logits `[B, V]`.
    pub fn decode(&self, cache: &mut KvCache, tokens: &[u32]) -> Result<Tensor> {
        let b = cache.batch();
        if tokens.len() != b {
            return Err(Error::invalid(
                "tokens",
                format!("{} tokens for a batch of {b}", tokens.len()),
            ));
        }
        self.check_tokens(tokens)?;
        let past = cache.len();
        if past + 1 > cache.capacity() {
            return Err(Error::invalid(
                "decode",
                "the cache is full (raise max_new)",
            ));
        }
        let positions: Vec<u32> = cache.pad().iter().map(|&p| (past - p) as u32).collect();
        let vis = Visibility {
            pad: cache.pad().into(),
            past,
            new: 1,
        };
        let tokens = Tensor::from_vec(tokens.to_vec(), (b, 1), &self.device)?;
        let positions = Tensor::from_vec(positions, (b, 1), &self.device)?;
        let hidden = self.forward_hidden(&tokens, &positions, &vis, Some(cache))?;
        Ok(self.lm_head(&hidden.squeeze(1)?)?.detach())
    }
}
