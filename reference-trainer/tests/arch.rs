//! The Llama and Qwen2 families run by the same model as Qwen3 (`Arch` flags): on the same
//! random weights their logits equal `candle_transformers::models::llama` and `::qwen2` at
//! several lengths and through the KV cache; the allocation-free decode step token by token and
//! the composed reference ops equal the fused full forward; checkpoints round-trip with the
//! same `model_type` / `architectures`; configs transformers writes load (no `head_dim`), and
//! what this model cannot run is refused naming the key.
//!
//! Tolerance: 1e-4 absolute on logits against candle-transformers (|logit| ≲ 1 with these
//! weights; the two implementations sum in different orders and candle's Llama builds its RoPE
//! table in f32, ours in f64 rounded once), as `tests/model.rs` uses for Qwen3; 1e-5 between
//! our own paths (the same products, some in another order).

mod common;

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use reference_trainer::model::{checkpoint, Arch, Qwen3, Qwen3Config};
use reference_trainer::rollout::{Policy, QwenCache};
use reference_trainer::Error;

const TOL_REFERENCE: f32 = 1e-4;
const TOL_OURS: f32 = 1e-5;

/// A tiny config of `arch`: 4 heads of 8 over a width of 32 (`head_dim` = hidden / heads, which
/// candle-transformers' Llama and Qwen2 assume), 2 KV heads, 2 layers.
fn tiny(arch: Arch, tied: bool) -> Qwen3Config {
    let mut c = Qwen3Config::small(97, 32, 48, 2, 4, 2, 8, 128).with_arch(arch);
    c.tie_word_embeddings = tied;
    if arch == Arch::Llama {
        c.rope_theta = 10_000.0;
        c.rms_norm_eps = 1e-5;
    }
    c
}

/// A random model whose biases (zero at initialisation) are set to seeded non-zero values, so
/// a bias that is not added shows.
fn model(cfg: Qwen3Config, seed: u64) -> Qwen3 {
    let m = Qwen3::random(cfg, seed, DType::F32, &Device::Cpu).unwrap();
    for (i, (_, v)) in m
        .params()
        .iter()
        .filter(|(n, _)| n.ends_with(".bias"))
        .enumerate()
    {
        let n = v.elem_count();
        let data: Vec<f32> = (0..n)
            .map(|j| (((i * 13 + j * 7) % 11) as f32 - 5.0) * 0.02)
            .collect();
        v.set(&Tensor::from_vec(data, n, &Device::Cpu).unwrap())
            .unwrap();
    }
    m
}

fn tokens() -> Vec<u32> {
    (0..40).map(|i| (i * 37 + 5) % 97).collect()
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

fn weights(model: &Qwen3) -> HashMap<String, Tensor> {
    model
        .params()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_tensor().copy().unwrap()))
        .collect()
}

fn row(ids: &[u32]) -> Tensor {
    Tensor::new(ids, &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap()
}

/// Our last-position logits of `ids`, full forward.
fn ours_last(model: &Qwen3, ids: &[u32]) -> Tensor {
    model
        .forward_logits(&[ids.to_vec()])
        .unwrap()
        .get(0)
        .unwrap()
        .get(ids.len() - 1)
        .unwrap()
}

/// A reference implementation: logits `[V]` of the last of `ids` fed at `offset` (with a
/// cache of what came before when `offset > 0`).
trait Reference {
    fn step(&mut self, ids: &[u32], offset: usize) -> Tensor;
}

struct CandleLlama {
    model: candle_transformers::models::llama::Llama,
    cache: candle_transformers::models::llama::Cache,
}

impl CandleLlama {
    fn new(model: &Qwen3, use_kv_cache: bool) -> Self {
        let cfg_json = serde_json::to_string(model.config()).unwrap();
        let cfg: candle_transformers::models::llama::LlamaConfig =
            serde_json::from_str(&cfg_json).unwrap();
        let cfg = cfg.into_config(false);
        let vb = candle_nn::VarBuilder::from_tensors(weights(model), DType::F32, &Device::Cpu);
        Self {
            model: candle_transformers::models::llama::Llama::load(vb, &cfg).unwrap(),
            cache: candle_transformers::models::llama::Cache::new(
                use_kv_cache,
                DType::F32,
                &cfg,
                &Device::Cpu,
            )
            .unwrap(),
        }
    }
}

impl Reference for CandleLlama {
    fn step(&mut self, ids: &[u32], offset: usize) -> Tensor {
        self.model
            .forward(&row(ids), offset, &mut self.cache)
            .unwrap()
            .squeeze(0)
            .unwrap()
    }
}

struct CandleQwen2(candle_transformers::models::qwen2::ModelForCausalLM);

impl CandleQwen2 {
    fn new(model: &Qwen3) -> Self {
        let mut cfg_json = serde_json::to_value(model.config()).unwrap();
        // candle's Qwen2 config wants a number here; Qwen2 configs write one (the attention is
        // full-width while `use_sliding_window` is false, as here).
        cfg_json["sliding_window"] = serde_json::json!(model.config().max_position_embeddings);
        let cfg: candle_transformers::models::qwen2::Config =
            serde_json::from_value(cfg_json).unwrap();
        let vb = candle_nn::VarBuilder::from_tensors(weights(model), DType::F32, &Device::Cpu);
        Self(candle_transformers::models::qwen2::ModelForCausalLM::new(&cfg, vb).unwrap())
    }
}

impl Reference for CandleQwen2 {
    fn step(&mut self, ids: &[u32], offset: usize) -> Tensor {
        self.0
            .forward(&row(ids), offset)
            .unwrap()
            .squeeze(0)
            .unwrap()
            .squeeze(0)
            .unwrap()
    }
}

fn reference(model: &Qwen3, use_kv_cache: bool) -> Box<dyn Reference> {
    match model.config().arch() {
        Arch::Llama => Box::new(CandleLlama::new(model, use_kv_cache)),
        Arch::Qwen2 => Box::new(CandleQwen2::new(model)),
        Arch::Qwen3 => unreachable!("tests/model.rs compares Qwen3"),
    }
}

/// Full forward at several lengths, then prefill + cached decode one token at a time, against
/// the reference on the same weights.
fn equals_reference(model: &Qwen3, what: &str) {
    let t = tokens();
    for len in [1usize, 2, 7, 16, 40] {
        let want = reference(model, false).step(&t[..len], 0);
        let d = max_abs_diff(&ours_last(model, &t[..len]), &want);
        assert!(d <= TOL_REFERENCE, "{what}, length {len}: max abs diff {d}");
    }
    let mut r = reference(model, true);
    let (mut cache, first) = model.prefill(&[t[..9].to_vec()], 31).unwrap();
    let want = r.step(&t[..9], 0);
    let d = max_abs_diff(&first.squeeze(0).unwrap(), &want);
    assert!(d <= TOL_REFERENCE, "{what}, prefill: max abs diff {d}");
    for i in 9..40 {
        let got = model.decode(&mut cache, &[t[i]]).unwrap();
        let want = r.step(&t[i..i + 1], i);
        let d = max_abs_diff(&got.squeeze(0).unwrap(), &want);
        assert!(
            d <= TOL_REFERENCE,
            "{what}, cached step {i}: max abs diff {d}"
        );
    }
}

#[test]
fn llama_logits_equal_candle_transformers_llama() {
    for tied in [true, false] {
        let m = model(tiny(Arch::Llama, tied), 11);
        assert!(!m
            .params()
            .keys()
            .any(|n| n.contains("norm.weight") && (n.contains("q_norm") || n.contains("k_norm"))));
        equals_reference(&m, &format!("llama tied {tied}"));
    }
}

#[test]
fn qwen2_logits_equal_candle_transformers_qwen2() {
    for tied in [true, false] {
        let m = model(tiny(Arch::Qwen2, tied), 12);
        let names: Vec<&String> = m.params().keys().collect();
        assert!(names.iter().any(|n| n.ends_with("q_proj.bias")));
        assert!(!names.iter().any(|n| n.ends_with("o_proj.bias")));
        assert!(!names.iter().any(|n| n.contains("q_norm")));
        equals_reference(&m, &format!("qwen2 tied {tied}"));
    }
}

/// The allocation-free decode step (`Policy::prefill` on an f32 CPU model decodes directly),
/// token by token on a left-padded batch, equals the full forward of each row's whole sequence.
fn direct_decode_equals_full_forward(model: &Qwen3, what: &str) {
    let v = model.config().vocab_size;
    let prompts: Vec<Vec<u32>> = vec![
        vec![3, 14, 15, 92, 65, 35, 89, 79, 32, 38],
        vec![1, 2, 3],
        vec![50, 60, 70, 80, 90, 11],
    ];
    let steps = 6;
    let mut logits = Vec::new();
    let mut state = match Policy::prefill(model, &prompts, steps, &mut logits).unwrap() {
        QwenCache::Direct(s) => s,
        other => panic!("{what}: f32 CPU should decode directly, got {other:?}"),
    };
    let mut seqs = prompts.clone();
    for t in 0..=steps {
        for (r, s) in seqs.iter().enumerate() {
            let want = ours_last(model, s);
            let got = Tensor::from_slice(&logits[r * v..(r + 1) * v], v, &Device::Cpu).unwrap();
            let d = max_abs_diff(&got, &want);
            assert!(d <= TOL_OURS, "{what}, row {r}, step {t}: max abs diff {d}");
        }
        if t == steps {
            break;
        }
        let next: Vec<u32> = (0..seqs.len())
            .map(|r| ((r * 31 + t * 7 + 1) % v) as u32)
            .collect();
        for (s, &n) in seqs.iter_mut().zip(&next) {
            s.push(n);
        }
        state.step(&next, &mut logits).unwrap();
    }
}

/// The composed reference ops (the path on other dtypes and devices) equal the fused kernels.
fn composed_equals_fused(model: &mut Qwen3, what: &str) {
    let seqs = vec![tokens()[..17].to_vec(), tokens()[5..9].to_vec()];
    let fused = model.forward_logits(&seqs).unwrap();
    let fused_lp = model.token_log_probs(&seqs, &[3, 1]).unwrap().log_probs;
    model.set_fused(false).unwrap();
    let composed = model.forward_logits(&seqs).unwrap();
    let composed_lp = model.token_log_probs(&seqs, &[3, 1]).unwrap().log_probs;
    model.set_fused(true).unwrap();
    // Only the real positions: the second row's padding is not compared.
    for (r, s) in seqs.iter().enumerate() {
        let a = fused.get(r).unwrap().narrow(0, 0, s.len()).unwrap();
        let b = composed.get(r).unwrap().narrow(0, 0, s.len()).unwrap();
        let d = max_abs_diff(&a, &b);
        assert!(d <= TOL_OURS, "{what}, row {r}: fused vs composed {d}");
    }
    let d = max_abs_diff(&fused_lp, &composed_lp);
    assert!(d <= TOL_OURS, "{what}: log-probs fused vs composed {d}");
}

#[test]
fn every_path_agrees_for_every_architecture() {
    let mut cases = Vec::new();
    for arch in Arch::ALL {
        for tied in [true, false] {
            cases.push((tiny(arch, tied), format!("{arch:?} tied {tied}")));
        }
    }
    // Llama's optional biases: `attention_bias` on q/k/v/o, `mlp_bias` on gate/up/down.
    let mut biased = tiny(Arch::Llama, false);
    biased.attention_bias = true;
    biased.mlp_bias = true;
    cases.push((biased, "Llama with attention_bias and mlp_bias".into()));
    for (cfg, what) in cases {
        let mut m = model(cfg, 21);
        if what.contains("mlp_bias") {
            let n = m.params().keys().filter(|n| n.ends_with(".bias")).count();
            assert_eq!(n, 2 * 7, "{what}: 7 biases per layer");
        }
        direct_decode_equals_full_forward(&m, &what);
        composed_equals_fused(&mut m, &what);
    }
}

#[test]
fn every_parameter_of_every_architecture_gets_a_gradient() {
    let mut biased = tiny(Arch::Llama, false);
    biased.attention_bias = true;
    biased.mlp_bias = true;
    for cfg in [tiny(Arch::Llama, true), tiny(Arch::Qwen2, false), biased] {
        let m = model(cfg, 3);
        let seqs = vec![tokens()[..12].to_vec(), tokens()[20..25].to_vec()];
        let loss = m
            .token_log_probs(&seqs, &[1, 2])
            .unwrap()
            .log_probs
            .mean_all()
            .unwrap();
        let grads = loss.backward().unwrap();
        common::assert_every_parameter_has_a_gradient(
            &m,
            &grads,
            &format!("{:?}", m.config().arch()),
        );
    }
}

#[test]
fn checkpoints_round_trip_for_every_architecture() {
    for arch in Arch::ALL {
        for tied in [true, false] {
            let m = model(tiny(arch, tied), 31);
            let dir = tempfile::tempdir().unwrap();
            checkpoint::save(&m, dir.path(), usize::MAX).unwrap();
            let saved: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(dir.path().join("config.json")).unwrap(),
            )
            .unwrap();
            assert_eq!(saved["model_type"], arch.model_type());
            assert_eq!(
                saved["architectures"],
                serde_json::json!([arch.class_name()])
            );
            let loaded = checkpoint::load(dir.path(), DType::F32, &Device::Cpu).unwrap();
            assert_eq!(loaded.config().arch(), arch);
            assert_eq!(loaded.config(), m.config());
            let seqs = vec![tokens()[..10].to_vec()];
            assert_eq!(
                max_abs_diff(
                    &m.forward_logits(&seqs).unwrap(),
                    &loaded.forward_logits(&seqs).unwrap()
                ),
                0.0,
                "{arch:?} tied {tied}"
            );
        }
    }
}

/// Writes `model`'s checkpoint with `config.json` edited by `edit`; loads it.
fn load_edited(
    model: &Qwen3,
    edit: impl Fn(&mut serde_json::Map<String, serde_json::Value>),
) -> reference_trainer::Result<Qwen3> {
    let dir = tempfile::tempdir().unwrap();
    checkpoint::save(model, dir.path(), usize::MAX).unwrap();
    let path = dir.path().join("config.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(v.as_object_mut().unwrap());
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    checkpoint::load(dir.path(), DType::F32, &Device::Cpu)
}

#[test]
fn configs_as_transformers_writes_them_load_and_the_rest_is_refused() {
    let seqs = vec![tokens()[..10].to_vec()];
    for arch in [Arch::Llama, Arch::Qwen2] {
        let m = model(tiny(arch, true), 41);
        // No head_dim (Qwen2 never writes it, older Llama configs neither): hidden / heads.
        for absent in [None, Some(serde_json::Value::Null)] {
            let loaded = load_edited(&m, |o| {
                o.remove("head_dim");
                if let Some(v) = &absent {
                    o.insert("head_dim".into(), v.clone());
                }
            })
            .unwrap();
            assert_eq!(loaded.config().head_dim, 8);
            assert_eq!(
                max_abs_diff(
                    &m.forward_logits(&seqs).unwrap(),
                    &loaded.forward_logits(&seqs).unwrap()
                ),
                0.0
            );
        }
        // Without model_type, `architectures` decides.
        let loaded = load_edited(&m, |o| {
            o.remove("model_type");
        })
        .unwrap();
        assert_eq!(loaded.config().arch(), arch);
    }

    let llama = model(tiny(Arch::Llama, true), 42);
    // Llama 3.1's scaled RoPE is not implemented: refused naming the key.
    let e = load_edited(&llama, |o| {
        o.insert(
            "rope_scaling".into(),
            serde_json::json!({"rope_type": "llama3", "factor": 32.0}),
        );
    })
    .unwrap_err();
    assert!(
        matches!(&e, Error::Config { key, .. } if key == "rope_scaling"),
        "{e}"
    );
    // An architecture this model does not run: named.
    let e = load_edited(&llama, |o| {
        o.insert("model_type".into(), serde_json::json!("mistral"));
        o.insert(
            "architectures".into(),
            serde_json::json!(["MistralForCausalLM"]),
        );
    })
    .unwrap_err();
    assert!(
        matches!(&e, Error::Config { key, .. } if key == "model_type")
            && e.to_string().contains("mistral"),
        "{e}"
    );
    // model_type and architectures that disagree.
    let e = load_edited(&llama, |o| {
        o.insert(
            "architectures".into(),
            serde_json::json!(["Qwen2ForCausalLM"]),
        );
    })
    .unwrap_err();
    assert!(
        matches!(&e, Error::Config { key, .. } if key == "architectures")
            && e.to_string().contains("LlamaForCausalLM"),
        "{e}"
    );
    // A Qwen3 folder without its QK-norm weights is not silently run as Llama.
    let dir = tempfile::tempdir().unwrap();
    let llama_untied = model(tiny(Arch::Llama, false), 43);
    checkpoint::save(&llama_untied, dir.path(), usize::MAX).unwrap();
    let path = dir.path().join("config.json");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("\"llama\"", "\"qwen3\"")
            .replace("LlamaForCausalLM", "Qwen3ForCausalLM"),
    )
    .unwrap();
    let e = checkpoint::load(dir.path(), DType::F32, &Device::Cpu).unwrap_err();
    assert!(
        matches!(&e, Error::Checkpoint { tensor, message, .. }
            if tensor.ends_with("q_norm.weight") && message == "missing"),
        "{e}"
    );
}
