//! GGUF files (llama.cpp's format) in: a Llama, Qwen2 or Qwen3 GGUF becomes the model and
//! tokenizer a Hugging Face folder of the same model would give, so `train --init FILE.gguf`
//! runs and `convert` writes that folder.
//!
//! - **Tensors** go through candle's GGUF reader and are dequantised to f32; llama.cpp's names
//!   are mapped to Hugging Face's (`token_embd` → `model.embed_tokens`, `blk.N.attn_q` →
//!   `model.layers.N.self_attn.q_proj`, …; no `output` means a tied head). llama.cpp's converter
//!   permutes the rows of a Llama's `attn_q`/`attn_k` for its interleaved RoPE; they are
//!   permuted back as transformers' GGUF loader does (`[heads, hd/2, 2, in]` → swap the middle
//!   two → `[heads·hd, in]`, with the KV heads for `attn_k`). Qwen2/Qwen3 files are not
//!   permuted by llama.cpp, so neither are they here.
//! - **Hyperparameters** come from `{arch}.block_count`, `.embedding_length`, … and the vocabulary
//!   size from the token list.
//! - **The tokenizer** is rebuilt from `tokenizer.ggml.*` the way transformers 5 builds a
//!   byte-level (`tokenizer.ggml.model = "gpt2"`) one (`integrations/gguf/gguf_tokenizer_mapping.py`):
//!   the byte-level vocabulary and the file's merges in a BPE, GPT-2's `ByteLevel` pre-tokenizer
//!   without a prefix space — or, when `tokenizer.ggml.pre` names a split of its own (Llama 3's,
//!   Qwen2's, …), that regex in front of a `ByteLevel` that only maps bytes —, a `ByteLevel`
//!   decoder, the control tokens (type 3) as special added tokens and the user-defined ones
//!   (type 4) as plain added tokens. SmolLM2's `pre = "smollm"` is not such a name, so it gets
//!   GPT-2's split, exactly as transformers does (candle's `Tokenizer::from_gguf` instead falls
//!   back to a prefix space and gives `Ġsystem` where the model saw `system`).
//!
//! Every failure names the file and the key or tensor: a missing key, an unsupported
//! architecture or RoPE, a tensor of the wrong shape or one this model has no place for, a
//! truncated file.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{BufReader, Read, Seek};
use std::path::Path;

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::{DType, Device, Tensor};
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, SplitDelimiterBehavior};

use crate::error::{Error, Result};
use crate::model::{checkpoint, Arch, Qwen3, Qwen3Config};
use crate::tokenizer::{Tokenizer, TokenizerError};

/// What a GGUF file holds, in Hugging Face form.
#[derive(Debug)]
pub struct GgufModel {
    /// The `config.json` of the model.
    pub config: Qwen3Config,
    /// Every tensor under its Hugging Face name, f32 on the CPU.
    pub weights: HashMap<String, Tensor>,
    /// The tokenizer (its `tokenizer_config.json` carries the file's chat template and special
    /// tokens).
    pub tokenizer: Tokenizer,
    /// `generation_config.json`: the file's bos/eos/pad ids.
    pub generation_config: serde_json::Value,
}

/// Whether `path` is a GGUF file (by its first four bytes, `GGUF`).
pub fn is_gguf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    path.is_file()
        && fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut magic))
            .is_ok()
        && &magic == b"GGUF"
}

/// Reads a GGUF file: config, dequantised weights and tokenizer.
pub fn read(path: &Path) -> Result<GgufModel> {
    let file = fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut reader = BufReader::new(file);
    let content = Content::read(&mut reader).map_err(|e| Error::Checkpoint {
        path: path.into(),
        tensor: "*".into(),
        message: format!("not a readable GGUF file: {e}"),
    })?;
    let meta = Meta {
        path,
        md: &content.metadata,
    };
    let arch = match meta.string("general.architecture")? {
        "llama" => Arch::Llama,
        "qwen2" => Arch::Qwen2,
        "qwen3" => Arch::Qwen3,
        other => {
            return Err(meta.bad(
                "general.architecture",
                format!("{other:?} is not supported (llama, qwen2, qwen3)"),
            ))
        }
    };
    let tokens = meta.strings("tokenizer.ggml.tokens")?;
    let has_output = content.tensor_infos.contains_key("output.weight");
    let config = config_of(&meta, arch, tokens.len(), has_output)?;
    let weights = weights_of(path, &content, &mut reader, &config)?;
    let tokenizer = tokenizer_of(&meta, &tokens, config.max_position_embeddings)?;
    let mut generation_config = serde_json::Map::new();
    for (key, name) in [
        ("tokenizer.ggml.bos_token_id", "bos_token_id"),
        ("tokenizer.ggml.eos_token_id", "eos_token_id"),
        ("tokenizer.ggml.padding_token_id", "pad_token_id"),
    ] {
        if let Some(id) = meta.opt_usize(key)? {
            generation_config.insert(name.into(), serde_json::json!(id));
        }
    }
    Ok(GgufModel {
        config,
        weights,
        tokenizer,
        generation_config: serde_json::Value::Object(generation_config),
    })
}

/// Loads a GGUF file as a model computing in `dtype` on `device`, and its tokenizer.
pub fn load(path: &Path, dtype: DType, device: &Device) -> Result<(Qwen3, Tokenizer)> {
    let g = read(path)?;
    let model = Qwen3::from_weights(g.config, g.weights, dtype, device, path)?;
    Ok((model, g.tokenizer))
}

/// Writes the Hugging Face folder of a GGUF file into `out` (created if missing):
/// `config.json`, `model.safetensors` (f32), `tokenizer.json`, `tokenizer_config.json` and
/// `generation_config.json`.
pub fn convert(path: &Path, out: &Path) -> Result<()> {
    let g = read(path)?;
    let model = Qwen3::from_weights(g.config, g.weights, DType::F32, &Device::Cpu, path)?;
    checkpoint::save(&model, out, usize::MAX)?;
    g.tokenizer.save(out)?;
    let text = serde_json::to_string_pretty(&g.generation_config).expect("a JSON object");
    checkpoint::write_atomic(&out.join("generation_config.json"), text.as_bytes())
}

/// The metadata of one file, read with errors that name the file and key.
struct Meta<'a> {
    path: &'a Path,
    md: &'a HashMap<String, Value>,
}

impl Meta<'_> {
    fn bad(&self, key: &str, message: String) -> Error {
        Error::Config {
            path: self.path.into(),
            key: key.into(),
            message,
        }
    }

    fn get(&self, key: &str) -> Result<&Value> {
        self.md
            .get(key)
            .ok_or_else(|| self.bad(key, "missing from the GGUF metadata".into()))
    }

    fn string(&self, key: &str) -> Result<&str> {
        match self.get(key)? {
            Value::String(s) => Ok(s),
            other => Err(self.bad(key, format!("{other:?}: expected a string"))),
        }
    }

    fn opt_string(&self, key: &str) -> Result<Option<&str>> {
        match self.md.get(key) {
            None => Ok(None),
            Some(_) => self.string(key).map(Some),
        }
    }

    fn strings(&self, key: &str) -> Result<Vec<String>> {
        let Value::Array(items) = self.get(key)? else {
            return Err(self.bad(key, "expected an array of strings".into()));
        };
        items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(self.bad(key, format!("{other:?} in an array of strings"))),
            })
            .collect()
    }

    fn opt_ints(&self, key: &str) -> Result<Option<Vec<i64>>> {
        let Some(v) = self.md.get(key) else {
            return Ok(None);
        };
        let Value::Array(items) = v else {
            return Err(self.bad(key, "expected an array of integers".into()));
        };
        items
            .iter()
            .map(|v| int(v).ok_or_else(|| self.bad(key, format!("{v:?}: not an integer"))))
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    fn usize(&self, key: &str) -> Result<usize> {
        let v = self.get(key)?;
        int(v)
            .and_then(|i| usize::try_from(i).ok())
            .ok_or_else(|| self.bad(key, format!("{v:?}: expected a non-negative integer")))
    }

    fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        match self.md.get(key) {
            None => Ok(None),
            Some(_) => self.usize(key).map(Some),
        }
    }

    fn f64(&self, key: &str) -> Result<f64> {
        match self.get(key)? {
            Value::F32(x) => Ok(f64::from(*x)),
            Value::F64(x) => Ok(*x),
            other => int(other)
                .map(|i| i as f64)
                .ok_or_else(|| self.bad(key, format!("{other:?}: expected a number"))),
        }
    }
}

fn int(v: &Value) -> Option<i64> {
    Some(match v {
        Value::U8(x) => i64::from(*x),
        Value::I8(x) => i64::from(*x),
        Value::U16(x) => i64::from(*x),
        Value::I16(x) => i64::from(*x),
        Value::U32(x) => i64::from(*x),
        Value::I32(x) => i64::from(*x),
        Value::U64(x) => i64::try_from(*x).ok()?,
        Value::I64(x) => *x,
        _ => return None,
    })
}

/// The `config.json` a Hugging Face folder of this model would hold.
fn config_of(meta: &Meta<'_>, arch: Arch, vocab: usize, has_output: bool) -> Result<Qwen3Config> {
    let a = arch.model_type();
    let key = |k: &str| format!("{a}.{k}");
    let hidden = meta.usize(&key("embedding_length"))?;
    let heads = meta.usize(&key("attention.head_count"))?;
    if heads == 0 || hidden % heads != 0 && meta.md.get(&key("attention.key_length")).is_none() {
        return Err(meta.bad(
            &key("attention.head_count"),
            format!("{heads} heads do not divide embedding_length = {hidden}"),
        ));
    }
    let head_dim = match meta.opt_usize(&key("attention.key_length"))? {
        Some(k) => k,
        None => hidden / heads,
    };
    if let Some(rot) = meta.opt_usize(&key("rope.dimension_count"))? {
        if rot != head_dim {
            return Err(meta.bad(
                &key("rope.dimension_count"),
                format!("{rot}: partial rotary embeddings are not supported (head_dim {head_dim})"),
            ));
        }
    }
    if let Some(kind) = meta.opt_string(&key("rope.scaling.type"))? {
        if kind != "none" {
            return Err(meta.bad(
                &key("rope.scaling.type"),
                format!("{kind:?}: only plain RoPE is supported"),
            ));
        }
    }
    let mut cfg = Qwen3Config::small(
        vocab,
        hidden,
        meta.usize(&key("feed_forward_length"))?,
        meta.usize(&key("block_count"))?,
        heads,
        meta.opt_usize(&key("attention.head_count_kv"))?
            .unwrap_or(heads),
        head_dim,
        meta.usize(&key("context_length"))?,
    )
    .with_arch(arch);
    cfg.rope_theta = match meta.md.get(&key("rope.freq_base")) {
        Some(_) => meta.f64(&key("rope.freq_base"))?,
        // llama.cpp's default when a file does not say.
        None => 10_000.0,
    };
    // f32 in the file: 1e-5 reads back as 9.99999974e-6; the shortest decimal that rounds to
    // the same f32 is what the original config.json held.
    let eps = meta.f64(&key("attention.layer_norm_rms_epsilon"))?;
    cfg.rms_norm_eps = shortest_f32(eps);
    cfg.rope_theta = shortest_f32(cfg.rope_theta);
    cfg.tie_word_embeddings = !has_output;
    if arch == Arch::Llama {
        // Qwen's sliding-window keys; a Llama config has none.
        cfg.extra.remove("max_window_layers");
        cfg.extra.remove("sliding_window");
    }
    for (key, name) in [
        ("tokenizer.ggml.bos_token_id", "bos_token_id"),
        ("tokenizer.ggml.eos_token_id", "eos_token_id"),
        ("tokenizer.ggml.padding_token_id", "pad_token_id"),
    ] {
        if let Some(id) = meta.opt_usize(key)? {
            cfg.extra.insert(name.into(), serde_json::json!(id));
        }
    }
    cfg.validate(meta.path)?;
    Ok(cfg)
}

/// The shortest decimal that reads back as the same f32: the value the source `config.json`
/// held before llama.cpp stored it as an f32 (`1e-5`, not `9.99999974e-6`).
fn shortest_f32(x: f64) -> f64 {
    let f = x as f32;
    format!("{f}").parse().unwrap_or(x)
}

/// The Hugging Face name of a llama.cpp tensor name, if this model has one.
pub fn hf_name(gguf: &str) -> Option<String> {
    match gguf {
        "token_embd.weight" => return Some("model.embed_tokens.weight".into()),
        "output_norm.weight" => return Some("model.norm.weight".into()),
        "output.weight" => return Some("lm_head.weight".into()),
        _ => {}
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (part, kind) = rest.rsplit_once('.')?;
    if kind != "weight" && kind != "bias" {
        return None;
    }
    let hf = match part {
        "attn_norm" => "input_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "ffn_norm" => "post_attention_layernorm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}.{kind}"))
}

/// Every tensor dequantised to f32 under its Hugging Face name, Llama's q/k rows un-permuted.
fn weights_of<R: Read + Seek>(
    path: &Path,
    content: &Content,
    reader: &mut R,
    cfg: &Qwen3Config,
) -> Result<HashMap<String, Tensor>> {
    let bad = |tensor: &str, message: String| Error::Checkpoint {
        path: path.into(),
        tensor: tensor.into(),
        message,
    };
    // In name order, so the first problem reported does not depend on hashing.
    let names: BTreeMap<&String, _> = content.tensor_infos.iter().collect();
    let mut out = HashMap::with_capacity(names.len());
    for (name, info) in names {
        let hf = hf_name(name).ok_or_else(|| {
            let why = if name.starts_with("rope_freqs") {
                " (a scaled RoPE, which is not supported)"
            } else {
                ""
            };
            bad(
                name,
                format!("no place for it in a {}{why}", cfg.arch().class_name()),
            )
        })?;
        let t = info
            .read(reader, content.tensor_data_offset, &Device::Cpu)
            .and_then(|q| q.dequantize(&Device::Cpu))
            .and_then(|t| t.to_dtype(DType::F32))
            .map_err(|e| bad(name, format!("{:?}: {e}", info.ggml_dtype)))?;
        let t = if cfg.arch() == Arch::Llama
            && (name.ends_with("attn_q.weight") || name.ends_with("attn_k.weight"))
        {
            let heads = if name.ends_with("attn_q.weight") {
                cfg.num_attention_heads
            } else {
                cfg.num_key_value_heads
            };
            unpermute_rows(&t, heads).map_err(|e| bad(name, e.to_string()))?
        } else {
            t
        };
        out.insert(hf, t);
    }
    Ok(out)
}

/// Undoes llama.cpp's `permute` of a Llama q/k weight `[heads·hd, in]` (its rows reordered
/// from halves to interleaved pairs per head): `[heads, hd/2, 2, in]` → swap axes 1 and 2.
pub fn unpermute_rows(w: &Tensor, heads: usize) -> candle_core::Result<Tensor> {
    let (rows, cols) = w.dims2()?;
    if heads == 0 || rows % (2 * heads) != 0 {
        candle_core::bail!("{rows} rows cannot be {heads} heads of an even width");
    }
    w.reshape((heads, rows / heads / 2, 2, cols))?
        .transpose(1, 2)?
        .contiguous()?
        .reshape((rows, cols))
}

/// The pre-tokenizer splits transformers 5 knows by `tokenizer.ggml.pre` name (the ones that
/// differ from GPT-2's, which `ByteLevel` applies itself).
fn split_regex(pre: &str) -> Option<&'static str> {
    const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const QWEN2: &str = crate::tokenizer::QWEN_SPLIT_REGEX;
    const QWEN35: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    Some(match pre {
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" | "dbrx" | "smaug-bpe" => LLAMA3,
        "tekken" => TEKKEN,
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "megrez" => QWEN2,
        "qwen35" => QWEN35,
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => GPT4O,
        _ => return None,
    })
}

/// GPT-2's byte → printable character table (`bytes_to_unicode`).
fn byte_chars() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..=255u8 {
        let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
        table[b as usize] = if printable {
            char::from(b)
        } else {
            let c = char::from_u32(256 + n).expect("a valid code point");
            n += 1;
            c
        };
    }
    table
}

/// The byte-level tokenizer `tokenizer.ggml.*` describes (see the module docs).
fn tokenizer_of(meta: &Meta<'_>, tokens: &[String], max_len: usize) -> Result<Tokenizer> {
    let kind = meta.string("tokenizer.ggml.model")?;
    if kind != "gpt2" {
        return Err(meta.bad(
            "tokenizer.ggml.model",
            format!("{kind:?}: only byte-level BPE (\"gpt2\") tokenizers are supported"),
        ));
    }
    let build = |component: &'static str| {
        move |source: tokenizers::Error| {
            Error::Tokenizer(TokenizerError::Build { component, source })
        }
    };
    // A token whose characters are not all in the byte alphabet is stored raw: respell it in
    // the alphabet, as the merges spell it (transformers' `byte_level_tokenizer`).
    let chars = byte_chars();
    let alphabet: std::collections::HashSet<char> = chars.iter().copied().collect();
    let spelled: Vec<String> = tokens
        .iter()
        .map(|t| {
            if t.chars().all(|c| alphabet.contains(&c)) {
                t.clone()
            } else {
                t.bytes().map(|b| chars[b as usize]).collect()
            }
        })
        .collect();
    // A later duplicate overwrites an earlier one, as a Python dict comprehension does.
    let vocab: Vocab = spelled
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let merges: Vec<(String, String)> = meta
        .strings("tokenizer.ggml.merges")?
        .into_iter()
        .map(|m| match m.split_once(' ') {
            Some((a, b)) => Ok((a.to_string(), b.to_string())),
            None => Err(meta.bad("tokenizer.ggml.merges", format!("{m:?} is not two tokens"))),
        })
        .collect::<Result<_>>()?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(build("GGUF BPE model"))?;
    let mut inner = tokenizers::Tokenizer::new(bpe);
    let pre = meta.opt_string("tokenizer.ggml.pre")?;
    let pre_tokenizer: PreTokenizerWrapper = match pre.and_then(split_regex) {
        Some(regex) => Sequence::new(vec![
            Split::new(
                SplitPattern::Regex(regex.into()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(build("GGUF pre-tokenizer split"))?
            .into(),
            ByteLevel::new(false, true, false).into(),
        ])
        .into(),
        None => ByteLevel::new(false, true, true).into(),
    };
    inner.with_pre_tokenizer(Some(pre_tokenizer));
    inner.with_decoder(Some(ByteLevel::default()));
    let types = meta
        .opt_ints("tokenizer.ggml.token_type")?
        .unwrap_or_default();
    let control: Vec<AddedToken> = tokens
        .iter()
        .zip(&types)
        .filter(|(t, &ty)| ty == 3 && t.chars().all(|c| alphabet.contains(&c)))
        .map(|(t, _)| AddedToken::from(t.clone(), true).normalized(false))
        .collect();
    inner
        .add_special_tokens(control)
        .map_err(build("GGUF control tokens"))?;
    let user: Vec<AddedToken> = spelled
        .iter()
        .zip(&types)
        .filter(|(_, &ty)| ty == 4)
        .map(|(t, _)| AddedToken::from(t.clone(), false).normalized(false))
        .collect();
    inner
        .add_tokens(user)
        .map_err(build("GGUF user-defined tokens"))?;

    let token = |key: &str| -> Result<Option<String>> {
        Ok(match meta.opt_usize(key)? {
            Some(id) => Some(
                tokens
                    .get(id)
                    .ok_or_else(|| {
                        meta.bad(key, format!("{id} is past the {} tokens", tokens.len()))
                    })?
                    .clone(),
            ),
            None => None,
        })
    };
    let mut config = serde_json::Map::new();
    config.insert("tokenizer_class".into(), "PreTrainedTokenizerFast".into());
    for (name, key) in [
        ("bos_token", "tokenizer.ggml.bos_token_id"),
        ("eos_token", "tokenizer.ggml.eos_token_id"),
        ("unk_token", "tokenizer.ggml.unknown_token_id"),
        ("pad_token", "tokenizer.ggml.padding_token_id"),
    ] {
        config.insert(name.into(), token(key)?.into());
    }
    for (name, key) in [
        ("add_bos_token", "tokenizer.ggml.add_bos_token"),
        ("add_eos_token", "tokenizer.ggml.add_eos_token"),
    ] {
        if let Some(Value::Bool(b)) = meta.md.get(key) {
            config.insert(name.into(), (*b).into());
        }
    }
    if let Some(t) = meta.opt_string("tokenizer.chat_template")? {
        config.insert("chat_template".into(), t.into());
    }
    config.insert("clean_up_tokenization_spaces".into(), false.into());
    config.insert("model_max_length".into(), max_len.into());
    Ok(Tokenizer::from_parts(inner, config)?)
}
