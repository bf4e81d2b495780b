//! GGUF in: files written here the way llama.cpp's converter writes them (its names, its q/k
//! row permutation for Llama, its tokenizer metadata) load to the model they were made from —
//! exactly for f32 tensors, within the quantisation error for Q8_0 —, `convert` writes a Hugging
//! Face folder that loads to the same model and tokenizer, and broken files are refused naming
//! the key or tensor. The real SmolLM2 file (`scripts/fetch_smollm2.sh`) is the ignored test at
//! the end.

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use reference_trainer::gguf;
use reference_trainer::model::{checkpoint, Arch, Qwen3, Qwen3Config};
use reference_trainer::tokenizer::Tokenizer;
use reference_trainer::Error;

/// GPT-2's byte → character table, written out independently of the library's.
fn byte_char(b: u8) -> char {
    let mut n = 0u32;
    for x in 0..=255u8 {
        let printable = (33..=126).contains(&x) || (161..=172).contains(&x) || x >= 174;
        if x == b {
            return if printable {
                char::from(x)
            } else {
                char::from_u32(256 + n).unwrap()
            };
        }
        if !printable {
            n += 1;
        }
    }
    unreachable!()
}

/// A byte-level vocabulary as llama.cpp stores it: 3 control tokens, the 256 bytes, merged
/// tokens, one user-defined token; with its merges and token types.
struct Vocab {
    tokens: Vec<String>,
    types: Vec<i32>,
    merges: Vec<String>,
}

fn vocab() -> Vocab {
    let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        .map(String::from)
        .to_vec();
    let mut types = vec![3; 3];
    for b in 0..=255u8 {
        tokens.push(byte_char(b).to_string());
        types.push(1);
    }
    let merges: Vec<String> = [
        "h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "Ġ t",
    ]
    .map(String::from)
    .to_vec();
    for m in &merges {
        tokens.push(m.replace(' ', ""));
        types.push(1);
    }
    tokens.push("<think>".into());
    types.push(4);
    Vocab {
        tokens,
        types,
        merges,
    }
}

fn tiny(arch: Arch, tied: bool, mlp: usize) -> Qwen3Config {
    let v = vocab().tokens.len();
    let mut c = Qwen3Config::small(v, 32, mlp, 2, 4, 2, 8, 128).with_arch(arch);
    c.tie_word_embeddings = tied;
    c.rope_theta = 100_000.0;
    c.rms_norm_eps = 1e-5;
    c
}

fn random(cfg: Qwen3Config, seed: u64) -> Qwen3 {
    let m = Qwen3::random(cfg, seed, DType::F32, &Device::Cpu).unwrap();
    for (i, (name, v)) in m
        .params()
        .iter()
        .filter(|(n, _)| n.ends_with(".bias") || n.ends_with("norm.weight"))
        .enumerate()
    {
        // Norm weights near 1, biases near 0, none equal: a tensor read into the wrong place shows.
        let n = v.elem_count();
        let base = if name.ends_with("norm.weight") {
            1.0
        } else {
            0.0
        };
        let data: Vec<f32> = (0..n)
            .map(|j| base + (((i * 5 + j * 3) % 7) as f32 - 3.0) * 0.03)
            .collect();
        v.set(&Tensor::from_vec(data, n, &Device::Cpu).unwrap())
            .unwrap();
    }
    m
}

/// llama.cpp's `permute` of a Llama q/k weight: `[heads, 2, hd/2, in]` → swap axes 1 and 2.
fn permute(w: &Tensor, heads: usize) -> Tensor {
    let (rows, cols) = w.dims2().unwrap();
    w.reshape((heads, 2, rows / heads / 2, cols))
        .unwrap()
        .transpose(1, 2)
        .unwrap()
        .contiguous()
        .unwrap()
        .reshape((rows, cols))
        .unwrap()
}

/// The llama.cpp name of a Hugging Face tensor name.
fn gguf_name(hf: &str) -> String {
    match hf {
        "model.embed_tokens.weight" => return "token_embd.weight".into(),
        "model.norm.weight" => return "output_norm.weight".into(),
        "lm_head.weight" => return "output.weight".into(),
        _ => {}
    }
    let rest = hf.strip_prefix("model.layers.").unwrap();
    let (layer, rest) = rest.split_once('.').unwrap();
    let (part, kind) = rest.rsplit_once('.').unwrap();
    let g = match part {
        "input_layernorm" => "attn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "self_attn.q_norm" => "attn_q_norm",
        "self_attn.k_norm" => "attn_k_norm",
        "post_attention_layernorm" => "ffn_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        other => panic!("{other}"),
    };
    format!("blk.{layer}.{g}.{kind}")
}

/// What a test may change in the file it writes.
#[derive(Default)]
struct Edit {
    drop_key: Option<&'static str>,
    architecture: Option<&'static str>,
    extra_tensor: Option<&'static str>,
    /// Another vocabulary than [`vocab`], and its `tokenizer.ggml.pre`.
    vocab: Option<(Vocab, &'static str)>,
}

/// Writes `model` as llama.cpp would: its metadata, its names, Llama's q/k rows permuted, the
/// matrices in `quant` (norms and biases f32, as llama.cpp keeps them).
fn write_gguf(model: &Qwen3, quant: GgmlDType, path: &Path, edit: &Edit) {
    let cfg = model.config();
    let arch = edit.architecture.unwrap_or(cfg.arch().model_type());
    let a = cfg.arch().model_type();
    let (v, pre) = match &edit.vocab {
        Some((v, pre)) => (
            Vocab {
                tokens: v.tokens.clone(),
                types: v.types.clone(),
                merges: v.merges.clone(),
            },
            *pre,
        ),
        None => (vocab(), "smollm"),
    };
    let u32v = |x: usize| Value::U32(x as u32);
    let mut meta: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        (format!("{a}.block_count"), u32v(cfg.num_hidden_layers)),
        (
            format!("{a}.context_length"),
            u32v(cfg.max_position_embeddings),
        ),
        (format!("{a}.embedding_length"), u32v(cfg.hidden_size)),
        (
            format!("{a}.feed_forward_length"),
            u32v(cfg.intermediate_size),
        ),
        (
            format!("{a}.attention.head_count"),
            u32v(cfg.num_attention_heads),
        ),
        (
            format!("{a}.attention.head_count_kv"),
            u32v(cfg.num_key_value_heads),
        ),
        (format!("{a}.attention.key_length"), u32v(cfg.head_dim)),
        (format!("{a}.rope.dimension_count"), u32v(cfg.head_dim)),
        (
            format!("{a}.rope.freq_base"),
            Value::F32(cfg.rope_theta as f32),
        ),
        (
            format!("{a}.attention.layer_norm_rms_epsilon"),
            Value::F32(cfg.rms_norm_eps as f32),
        ),
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Value::String(pre.into())),
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(v.tokens.iter().map(|t| Value::String(t.clone())).collect()),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array(v.types.iter().map(|&t| Value::I32(t)).collect()),
        ),
        (
            "tokenizer.ggml.merges".into(),
            Value::Array(v.merges.iter().map(|m| Value::String(m.clone())).collect()),
        ),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(1)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(2)),
        ("tokenizer.ggml.padding_token_id".into(), Value::U32(2)),
        (
            "tokenizer.chat_template".into(),
            Value::String("{% for m in messages %}{{ m['content'] }}{% endfor %}".into()),
        ),
    ];
    if let Some(k) = edit.drop_key {
        meta.retain(|(key, _)| key != k);
    }
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    for (name, var) in model.params() {
        let mut t = var.as_tensor().clone();
        if cfg.arch() == Arch::Llama {
            if name.ends_with("q_proj.weight") {
                t = permute(&t, cfg.num_attention_heads);
            } else if name.ends_with("k_proj.weight") {
                t = permute(&t, cfg.num_key_value_heads);
            }
        }
        let dtype = if t.rank() == 2 { quant } else { GgmlDType::F32 };
        tensors.push((gguf_name(name), QTensor::quantize(&t, dtype).unwrap()));
    }
    if let Some(extra) = edit.extra_tensor {
        let t = Tensor::ones(4, DType::F32, &Device::Cpu).unwrap();
        tensors.push((extra.into(), QTensor::quantize(&t, GgmlDType::F32).unwrap()));
    }
    let meta_refs: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &meta_refs, &tensor_refs).unwrap();
}

fn seqs() -> Vec<Vec<u32>> {
    vec![
        (0..23).map(|i| (i * 37 + 5) % 270).collect(),
        vec![1, 2, 3, 200],
    ]
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

#[test]
fn an_f32_gguf_loads_to_the_model_it_was_written_from() {
    for (arch, tied) in [
        (Arch::Llama, true),
        (Arch::Llama, false),
        (Arch::Qwen2, true),
        (Arch::Qwen3, false),
    ] {
        let model = random(tiny(arch, tied, 48), 7);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        write_gguf(&model, GgmlDType::F32, &path, &Edit::default());
        assert!(gguf::is_gguf(&path));
        let (loaded, tok) = gguf::load(&path, DType::F32, &Device::Cpu).unwrap();
        let got = loaded.config();
        assert_eq!(got.arch(), arch);
        assert_eq!(got.tie_word_embeddings, tied);
        assert_eq!(
            got.rms_norm_eps, 1e-5,
            "the f32 epsilon read back as written"
        );
        assert_eq!(got.rope_theta, 100_000.0);
        assert_eq!(tok.id_bound(), got.vocab_size);
        let d = max_abs_diff(
            &loaded.forward_logits(&seqs()).unwrap(),
            &model.forward_logits(&seqs()).unwrap(),
        );
        assert_eq!(d, 0.0, "{arch:?} tied {tied}: logits moved by {d}");
    }
}

#[test]
fn the_llama_row_permutation_is_undone_and_matters() {
    let model = random(tiny(Arch::Llama, true, 48), 8);
    let q = model.params()["model.layers.0.self_attn.q_proj.weight"].as_tensor();
    let back = gguf::unpermute_rows(&permute(q, 4), 4).unwrap();
    assert_eq!(max_abs_diff(&back, q), 0.0);
    assert!(max_abs_diff(&permute(q, 4), q) > 0.0);
    let k = model.params()["model.layers.1.self_attn.k_proj.weight"].as_tensor();
    assert_eq!(
        max_abs_diff(&gguf::unpermute_rows(&permute(k, 2), 2).unwrap(), k),
        0.0
    );
    assert!(
        gguf::unpermute_rows(q, 5).is_err(),
        "32 rows are not 5 heads"
    );
}

#[test]
fn a_q8_0_gguf_loads_within_the_quantisation_error() {
    // Q8_0 blocks are 32 wide: every matrix's input width must be a multiple of 32.
    let model = random(tiny(Arch::Llama, false, 64), 9);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q8.gguf");
    write_gguf(&model, GgmlDType::Q8_0, &path, &Edit::default());
    let (loaded, _) = gguf::load(&path, DType::F32, &Device::Cpu).unwrap();
    // Per weight the error is ≤ scale / 2 = max|w| / 254 (~0.1/254 here); through two layers the
    // logits (|logit| ≲ 1) move by well under 1e-2.
    let d = max_abs_diff(
        &loaded.forward_logits(&seqs()).unwrap(),
        &model.forward_logits(&seqs()).unwrap(),
    );
    assert!(d > 0.0 && d < 1e-2, "Q8_0 moved logits by {d}");
}

#[test]
fn the_tokenizer_is_byte_level_bpe_without_a_prefix_space() {
    let model = random(tiny(Arch::Llama, true, 48), 10);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    write_gguf(&model, GgmlDType::F32, &path, &Edit::default());
    let (_, tok) = gguf::load(&path, DType::F32, &Device::Cpu).unwrap();
    let v = vocab();
    let id = |t: &str| v.tokens.iter().position(|x| x == t).unwrap() as u32;
    // "hello" merges fully; " world" is one token with its space; no prefix space at the start.
    assert_eq!(
        tok.encode("hello world").unwrap(),
        vec![id("hello"), id("Ġworld")]
    );
    assert_eq!(tok.encode("\n").unwrap(), vec![id("Ċ")]);
    // Control tokens stay whole; the user-defined `<think>` too.
    assert_eq!(
        tok.encode("<|im_start|>hello<|im_end|><think>").unwrap(),
        vec![1, id("hello"), 2, id("<think>")]
    );
    // Any text round-trips.
    for s in [
        "héllo wörld 🙂",
        "  two  spaces\t\r\n",
        "1234 + 5678 = 6912",
    ] {
        assert_eq!(tok.decode(&tok.encode(s).unwrap()).unwrap(), s);
    }
}

#[test]
fn convert_writes_a_hugging_face_folder_of_the_same_model() {
    let model = random(tiny(Arch::Llama, true, 48), 11);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    write_gguf(&model, GgmlDType::F32, &path, &Edit::default());
    let out = dir.path().join("hf");
    gguf::convert(&path, &out).unwrap();
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ] {
        assert!(out.join(f).is_file(), "{f}");
    }
    let loaded = checkpoint::load(&out, DType::F32, &Device::Cpu).unwrap();
    assert_eq!(loaded.config().arch(), Arch::Llama);
    assert_eq!(
        max_abs_diff(
            &loaded.forward_logits(&seqs()).unwrap(),
            &model.forward_logits(&seqs()).unwrap()
        ),
        0.0
    );
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["model_type"], "llama");
    assert_eq!(
        cfg["architectures"],
        serde_json::json!(["LlamaForCausalLM"])
    );
    assert_eq!(cfg["bos_token_id"], 1);
    assert_eq!(cfg["eos_token_id"], 2);
    let tc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("tokenizer_config.json")).unwrap())
            .unwrap();
    assert_eq!(tc["eos_token"], "<|im_end|>");
    assert_eq!(tc["bos_token"], "<|im_start|>");
    assert!(tc["chat_template"].as_str().unwrap().contains("messages"));
    let gen: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("generation_config.json")).unwrap())
            .unwrap();
    assert_eq!(gen["eos_token_id"], 2);
    let (_, from_gguf) = gguf::load(&path, DType::F32, &Device::Cpu).unwrap();
    let from_folder = Tokenizer::load(&out).unwrap();
    for s in [
        "hello world",
        "<|im_start|>user\nhello<|im_end|>\n",
        "x 🙂 y",
    ] {
        assert_eq!(from_folder.encode(s).unwrap(), from_gguf.encode(s).unwrap());
    }
    // Saving the loaded folder's tokenizer keeps its config (chat template, special tokens).
    let again = dir.path().join("again");
    from_folder.save(&again).unwrap();
    let tc2: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(again.join("tokenizer_config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(tc2, tc);
}

fn load_err(edit: Edit) -> Error {
    let model = random(tiny(Arch::Llama, true, 48), 12);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.gguf");
    write_gguf(&model, GgmlDType::F32, &path, &edit);
    gguf::load(&path, DType::F32, &Device::Cpu).unwrap_err()
}

#[test]
fn broken_files_are_refused_naming_the_key_or_tensor() {
    let e = load_err(Edit {
        drop_key: Some("llama.block_count"),
        ..Edit::default()
    });
    assert!(
        matches!(&e, Error::Config { key, .. } if key == "llama.block_count"),
        "{e}"
    );
    let e = load_err(Edit {
        drop_key: Some("tokenizer.ggml.merges"),
        ..Edit::default()
    });
    assert!(
        matches!(&e, Error::Config { key, .. } if key == "tokenizer.ggml.merges"),
        "{e}"
    );
    let e = load_err(Edit {
        architecture: Some("gpt2"),
        ..Edit::default()
    });
    assert!(
        matches!(&e, Error::Config { key, message, .. }
            if key == "general.architecture" && message.contains("gpt2")),
        "{e}"
    );
    let e = load_err(Edit {
        extra_tensor: Some("rope_freqs.weight"),
        ..Edit::default()
    });
    assert!(
        matches!(&e, Error::Checkpoint { tensor, .. } if tensor == "rope_freqs.weight"),
        "{e}"
    );

    // Truncated: the header reads, a tensor's bytes are missing.
    let model = random(tiny(Arch::Llama, true, 48), 13);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.gguf");
    write_gguf(&model, GgmlDType::F32, &path, &Edit::default());
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 1000]).unwrap();
    let e = gguf::load(&path, DType::F32, &Device::Cpu).unwrap_err();
    assert!(
        matches!(&e, Error::Checkpoint { tensor, message, .. }
            if tensor != "*" && message.contains("bytes")),
        "{e}"
    );
    // Cut inside the header: not readable at all, and said so.
    std::fs::write(&path, &bytes[..100]).unwrap();
    let e = gguf::load(&path, DType::F32, &Device::Cpu).unwrap_err();
    assert!(e.to_string().contains("not a readable GGUF file"), "{e}");
    // Not a GGUF file.
    std::fs::write(&path, b"not a gguf file at all").unwrap();
    assert!(!gguf::is_gguf(&path));
    assert!(gguf::load(&path, DType::F32, &Device::Cpu).is_err());
}

/// `$HOME/.cache/t2po-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`, as `scripts/fetch_smollm2.sh`
/// leaves it (or `T2PO_SMOLLM2_GGUF`).
fn smollm2() -> PathBuf {
    let path = std::env::var_os("T2PO_SMOLLM2_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME"))
                .join(".cache/t2po-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
        });
    assert!(
        path.is_file(),
        "{} is missing: run scripts/fetch_smollm2.sh",
        path.display()
    );
    path
}

/// Greedy continuation of `prompt` for `n` tokens, through the KV cache.
fn greedy(model: &Qwen3, ids: &[u32], n: usize) -> Vec<u32> {
    let (mut cache, mut logits) = model.prefill(&[ids.to_vec()], n).unwrap();
    let mut out = Vec::new();
    for _ in 0..n {
        let next = logits
            .squeeze(0)
            .unwrap()
            .argmax(0)
            .unwrap()
            .to_scalar::<u32>()
            .unwrap();
        out.push(next);
        logits = model.decode(&mut cache, &[next]).unwrap();
    }
    out
}

#[test]
#[ignore = "needs the SmolLM2 GGUF: scripts/fetch_smollm2.sh"]
fn the_real_smollm2_gguf_speaks_english() {
    let path = smollm2();
    let (model, tok) = gguf::load(&path, DType::F32, &Device::Cpu).unwrap();
    let cfg = model.config();
    assert_eq!(cfg.arch(), Arch::Llama);
    assert_eq!(
        (cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size),
        (30, 576, 49152)
    );
    assert!(cfg.tie_word_embeddings);
    // What candle's own GGUF tokenizer gets wrong on this file: no prefix space.
    let chat = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
    let ids = tok.encode(chat).unwrap();
    assert_eq!(&ids[..3], &[1, 9690, 198], "{ids:?}");
    let logits = model.forward_logits(std::slice::from_ref(&ids)).unwrap();
    let last = logits.get(0).unwrap().get(ids.len() - 1).unwrap();
    let mut scored: Vec<(usize, f32)> = last
        .to_vec1::<f32>()
        .unwrap()
        .into_iter()
        .enumerate()
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (i, s) in &scored[..5] {
        eprintln!("top: {:?} {s:.3}", tok.decode(&[*i as u32]).unwrap());
    }
    let answer = tok.decode(&greedy(&model, &ids, 12)).unwrap();
    eprintln!("chat answer: {answer:?}");
    assert!(answer.contains("Paris"), "{answer:?}");

    let ids = tok.encode("The capital of France is").unwrap();
    let text = tok.decode(&greedy(&model, &ids, 8)).unwrap();
    eprintln!("continuation: {text:?}");
    assert!(text.contains("Paris"), "{text:?}");
}

#[test]
fn control_tags_a_tokenizer_lacks_are_added_and_the_embedding_grows() {
    let model = random(tiny(Arch::Llama, true, 48), 14);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    write_gguf(&model, GgmlDType::F32, &path, &Edit::default());
    let (loaded, tok) = gguf::load(&path, DType::F32, &Device::Cpu).unwrap();
    let before = tok.id_bound();
    assert!(
        tok.control_tokens().is_err(),
        "no </think> in this vocabulary"
    );
    let (grown, tok, added) =
        reference_trainer::train::run::with_control_tags(loaded, tok).unwrap();
    // `<think>` is a user-defined token of the file already; `</think>` is new.
    assert_eq!(added, vec!["</think>".to_string()]);
    let ct = tok.control_tokens().unwrap();
    assert_eq!(ct.think_close as usize, before);
    assert_eq!(grown.config().vocab_size, before + 1);
    // The old logits are untouched; the new token's row is the mean embedding.
    let old = model.forward_logits(&seqs()).unwrap();
    let new = grown.forward_logits(&seqs()).unwrap();
    assert_eq!(max_abs_diff(&new.narrow(2, 0, before).unwrap(), &old), 0.0);
    let emb = grown.params()["model.embed_tokens.weight"].as_tensor();
    let mean = emb.narrow(0, 0, before).unwrap().mean(0).unwrap();
    assert!(max_abs_diff(&emb.get(before).unwrap(), &mean) < 1e-7);
    // A tokenizer that has them all is left as it is.
    let (_, again, added) = reference_trainer::train::run::with_control_tags(grown, tok).unwrap();
    assert!(added.is_empty());
    assert_eq!(again.id_bound(), before + 1);
}

/// `train --init FILE.gguf` end to end on tiny settings: a Llama GGUF whose tokenizer is a
/// tokenizer trained as the default is (smaller), its vocabulary and merges with `<think>`/`</think>` demoted to ordinary
/// entries (as a real Llama's lacks them as added tokens), behind Qwen2's split.
#[test]
fn train_starts_from_a_gguf_file() {
    use reference_trainer::rollout::EnvKind;
    use reference_trainer::train::TrainConfig;

    let corpus = reference_trainer::defaults::corpus(2026, 40).unwrap();
    let tok = reference_trainer::tokenizer::build_default(corpus, 1024).unwrap();
    let json: serde_json::Value = serde_json::from_str(&tok.to_json().unwrap()).unwrap();
    let mut tokens = vec![String::new(); tok.id_bound()];
    for (t, id) in json["model"]["vocab"].as_object().unwrap() {
        tokens[id.as_u64().unwrap() as usize] = t.clone();
    }
    let mut types = vec![1; tokens.len()];
    for a in json["added_tokens"].as_array().unwrap() {
        let id = a["id"].as_u64().unwrap() as usize;
        tokens[id] = a["content"].as_str().unwrap().to_string();
        let tag = &tokens[id];
        types[id] = if tag == "<think>" || tag == "</think>" {
            1
        } else {
            3
        };
    }
    let merges = json["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| match m {
            serde_json::Value::String(s) => s.clone(),
            pair => format!(
                "{} {}",
                pair[0].as_str().unwrap(),
                pair[1].as_str().unwrap()
            ),
        })
        .collect();
    let mut cfg = Qwen3Config::small(tokens.len(), 32, 64, 1, 4, 2, 8, 2048).with_arch(Arch::Llama);
    cfg.rms_norm_eps = 1e-5;
    let model = random(cfg, 15);
    let work = tempfile::tempdir().unwrap();
    let path = work.path().join("init.gguf");
    write_gguf(
        &model,
        GgmlDType::F32,
        &path,
        &Edit {
            vocab: Some((
                Vocab {
                    tokens,
                    types,
                    merges,
                },
                "qwen2",
            )),
            ..Edit::default()
        },
    );

    let mut c = TrainConfig::default_for(EnvKind::Search).unwrap();
    c.rollout.tasks_per_iteration = 2;
    c.rollout.group_size = 2;
    c.rollout.max_turns = 2;
    c.rollout.max_response_tokens = 24;
    c.rollout.max_prompt_tokens = 400;
    c.control.max_think = 16;
    c.control.min_len = 4;
    c.optim.micro_batch_tokens = 1024;
    c.optim.mini_batches = 1;
    c.data.train_questions = c.data.train_questions.min(200);
    c.data.passages = c.data.passages.min(3000);
    c.rft.demo_tasks = 2;
    c.rft.rounds = 0;
    c.rft.epochs = 1;
    c.train.iterations = 1;
    c.train.eval_every = 1;
    c.train.eval_tasks = 1;
    c.train.checkpoint_every = 1;
    let config = work.path().join("search.toml");
    std::fs::write(&config, c.to_toml().unwrap()).unwrap();
    let out_dir = work.path().join("run");
    let cache = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_reference-trainer"))
        .env("T2PO_CACHE", cache.path())
        .env("RAYON_NUM_THREADS", "1")
        .args(["train", "--quiet", "--init"])
        .arg(&path)
        .arg("--config")
        .arg(&config)
        .arg("--out")
        .arg(&out_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The checkpoint is a Llama folder whose tokenizer holds the added tags.
    let ck = out_dir.join("cold-start");
    let saved = checkpoint::load(&ck, DType::F32, &Device::Cpu).unwrap();
    assert_eq!(saved.config().arch(), Arch::Llama);
    let saved_tok = Tokenizer::load(&ck).unwrap();
    saved_tok.control_tokens().unwrap();
    assert_eq!(saved.config().vocab_size, saved_tok.id_bound());

    // `eval` takes the GGUF file itself, and scores it exactly as the Hugging Face folder
    // `convert` writes from it (same weights, same tokenizer, greedy).
    let eval = |checkpoint: &Path| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_reference-trainer"))
            .env("T2PO_CACHE", cache.path())
            .env("RAYON_NUM_THREADS", "1")
            .args(["eval", "--json", "--tasks", "2", "--checkpoint"])
            .arg(checkpoint)
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "eval --checkpoint {}: {}",
            checkpoint.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut summary = serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap();
        // Everything but the clock.
        let fields = summary.as_object_mut().unwrap();
        fields.remove("seconds").unwrap();
        fields.remove("tokens_per_second").unwrap();
        summary
    };
    let converted = work.path().join("converted");
    let conv = std::process::Command::new(env!("CARGO_BIN_EXE_reference-trainer"))
        .arg("convert")
        .arg(&path)
        .arg(&converted)
        .output()
        .unwrap();
    assert!(
        conv.status.success(),
        "{}",
        String::from_utf8_lossy(&conv.stderr)
    );
    let from_gguf = eval(&path);
    assert_eq!(from_gguf["episodes"], 2, "{from_gguf}");
    assert_eq!(from_gguf, eval(&converted));
}
