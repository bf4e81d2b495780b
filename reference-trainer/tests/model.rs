//! The Qwen3 policy: it trains (every parameter gets a gradient; gradients match finite
//! differences in f64), its logits equal `candle_transformers::models::qwen3` on the same
//! weights, batched left-padded decoding equals unbatched decoding, and checkpoints round-trip
//! in the Hugging Face layout with clear errors for broken ones.

mod common;

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor, D};
use reference_trainer::model::{checkpoint, Qwen3, Qwen3Config};
use reference_trainer::Error;

fn tiny(tied: bool) -> Qwen3Config {
    let mut c = Qwen3Config::small(97, 32, 48, 2, 4, 2, 8, 128);
    c.tie_word_embeddings = tied;
    c
}

fn seqs() -> Vec<Vec<u32>> {
    vec![
        vec![3, 14, 15, 92, 65, 35, 89, 79, 32, 38],
        vec![1, 2, 3],
        vec![50, 60, 70, 80, 90, 11],
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
        .to_dtype(DType::F32)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

#[test]
fn every_parameter_gets_a_gradient() {
    for tied in [true, false] {
        let model = Qwen3::random(tiny(tied), 7, DType::F32, &Device::Cpu).unwrap();
        let s = seqs();
        let out = model.token_log_probs(&s, &[1, 1, 2]).unwrap();
        let loss = (out.log_probs.mean_all().unwrap().neg().unwrap()
            - (out.entropy.mean_all().unwrap() * 0.01).unwrap())
        .unwrap();
        let grads = loss.backward().unwrap();
        assert!(model.params().len() >= 20);
        common::assert_every_parameter_has_a_gradient(&model, &grads, &format!("tied = {tied}"));
    }
}

#[test]
fn gradients_match_finite_differences_in_f64() {
    // Tolerance: central differences with h = 1e-5 in f64 have truncation error ~h² · f''' and
    // rounding ~1e-16 / h, so 1e-6 relative (plus 1e-9 absolute) is a safe contract.
    let model = Qwen3::random(tiny(false), 3, DType::F64, &Device::Cpu).unwrap();
    let s = seqs();
    let start = [2, 1, 3];
    let loss_of = |m: &Qwen3| -> f64 {
        m.token_log_probs(&s, &start)
            .unwrap()
            .log_probs
            .sum_all()
            .unwrap()
            .to_scalar::<f64>()
            .unwrap()
    };
    let loss = model
        .token_log_probs(&s, &start)
        .unwrap()
        .log_probs
        .sum_all()
        .unwrap();
    let grads = loss.backward().unwrap();
    let h = 1e-5;
    let mut checked = 0;
    for (name, var) in model.params() {
        let g = grads.get(var.as_tensor()).unwrap().flatten_all().unwrap();
        let g: Vec<f64> = g.to_vec1().unwrap();
        let base: Vec<f64> = var.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
        // Three entries per tensor, spread over it.
        for &i in &[0, base.len() / 2, base.len() - 1] {
            let probe = |delta: f64| {
                let mut v = base.clone();
                v[i] += delta;
                var.set(&Tensor::from_vec(v, var.shape(), &Device::Cpu).unwrap())
                    .unwrap();
                loss_of(&model)
            };
            let numeric = (probe(h) - probe(-h)) / (2.0 * h);
            var.set(&Tensor::from_vec(base.clone(), var.shape(), &Device::Cpu).unwrap())
                .unwrap();
            let err = (numeric - g[i]).abs();
            assert!(
                err <= 1e-6 * g[i].abs().max(numeric.abs()) + 1e-9,
                "{name}[{i}]: analytic {} vs numeric {numeric}",
                g[i]
            );
            checked += 1;
        }
    }
    assert!(checked >= 60);
}

fn candle_transformers_model(
    model: &Qwen3,
) -> candle_transformers::models::qwen3::ModelForCausalLM {
    let cfg_json = serde_json::to_string(model.config()).unwrap();
    let cfg: candle_transformers::models::qwen3::Config = serde_json::from_str(&cfg_json).unwrap();
    let weights: HashMap<String, Tensor> = model
        .params()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_tensor().copy().unwrap()))
        .collect();
    let vb = candle_nn::VarBuilder::from_tensors(weights, DType::F32, &Device::Cpu);
    candle_transformers::models::qwen3::ModelForCausalLM::new(&cfg, vb).unwrap()
}

#[test]
fn logits_equal_candle_transformers_qwen3() {
    for tied in [true, false] {
        let model = Qwen3::random(tiny(tied), 11, DType::F32, &Device::Cpu).unwrap();
        let tokens: Vec<u32> = (0..40).map(|i| (i * 37 + 5) % 97).collect();
        // Full-sequence forward, last position, at several lengths.
        for len in [1usize, 2, 7, 16, 40] {
            let mut reference = candle_transformers_model(&model);
            let input = Tensor::new(&tokens[..len], &Device::Cpu)
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            let want = reference
                .forward(&input, 0)
                .unwrap()
                .squeeze(0)
                .unwrap()
                .squeeze(0)
                .unwrap();
            let ours = model.forward_logits(&[tokens[..len].to_vec()]).unwrap();
            let got = ours.get(0).unwrap().get(len - 1).unwrap();
            let d = max_abs_diff(&got, &want);
            assert!(d <= 1e-4, "tied {tied}, length {len}: max abs diff {d}");
        }
        // With the KV cache: prefill 9 tokens, then decode one at a time.
        let mut reference = candle_transformers_model(&model);
        let (mut cache, first) = model.prefill(&[tokens[..9].to_vec()], 31).unwrap();
        let input = Tensor::new(&tokens[..9], &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let want = reference.forward(&input, 0).unwrap().squeeze(0).unwrap();
        assert!(max_abs_diff(&first, &want) <= 1e-4);
        for t in 9..40 {
            let got = model.decode(&mut cache, &[tokens[t]]).unwrap();
            let input = Tensor::new(&tokens[t..t + 1], &Device::Cpu)
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            let want = reference.forward(&input, t).unwrap().squeeze(0).unwrap();
            let d = max_abs_diff(&got, &want);
            assert!(d <= 1e-4, "tied {tied}, cached step {t}: max abs diff {d}");
        }
    }
}

#[test]
fn batched_left_padded_decoding_equals_each_row_alone() {
    let model = Qwen3::random(tiny(true), 5, DType::F32, &Device::Cpu).unwrap();
    let prompts = seqs();
    let steps = 6;
    let follow: Vec<Vec<u32>> = (0..prompts.len())
        .map(|r| {
            (0..steps)
                .map(|t| ((r * 31 + t * 7 + 1) % 97) as u32)
                .collect()
        })
        .collect();
    let (mut cache, mut logits) = model.prefill(&prompts, steps).unwrap();
    let mut batched = vec![logits.clone()];
    for t in 0..steps {
        let tokens: Vec<u32> = follow.iter().map(|f| f[t]).collect();
        logits = model.decode(&mut cache, &tokens).unwrap();
        batched.push(logits.clone());
    }
    for (r, p) in prompts.iter().enumerate() {
        let (mut c, mut l) = model.prefill(std::slice::from_ref(p), steps).unwrap();
        for (t, b) in batched.iter().enumerate() {
            let d = max_abs_diff(&l.get(0).unwrap(), &b.get(r).unwrap());
            assert!(d <= 1e-5, "row {r}, step {t}: max abs diff {d}");
            if t < steps {
                l = model.decode(&mut c, &[follow[r][t]]).unwrap();
            }
        }
    }
    // Dropping a finished row keeps the others exact.
    let (mut cache, _) = model.prefill(&prompts, 2).unwrap();
    cache.retain(&[2, 0]).unwrap();
    let got = model
        .decode(&mut cache, &[follow[2][0], follow[0][0]])
        .unwrap();
    for (k, r) in [2usize, 0].into_iter().enumerate() {
        let (mut c, _) = model.prefill(&[prompts[r].clone()], 2).unwrap();
        let want = model.decode(&mut c, &[follow[r][0]]).unwrap();
        assert!(max_abs_diff(&got.get(k).unwrap(), &want.get(0).unwrap()) <= 1e-5);
    }
}

/// A batch past `PREFILL_CHUNK_TOKENS` padded tokens is prefilled in row chunks into one cache:
/// its logits and the decode steps after it equal the batch's halves prefilled in one piece
/// each (the rows never interact; the same kernels run on the same rows).
#[test]
fn a_prefill_in_row_chunks_equals_the_prefill_in_one_piece() {
    use reference_trainer::model::qwen3::PREFILL_CHUNK_TOKENS;
    let model = Qwen3::random(tiny(true), 6, DType::F32, &Device::Cpu).unwrap();
    let l = 100;
    let rows = PREFILL_CHUNK_TOKENS / l + 9; // chunks of 81 and 9 rows
    let prompts: Vec<Vec<u32>> = (0..rows)
        .map(|r| {
            let n = l - (r * 13) % 40; // ragged: left padding differs by row
            (0..n).map(|t| ((r * 7 + t * 3 + 1) % 97) as u32).collect()
        })
        .collect();
    assert!(rows * l > PREFILL_CHUNK_TOKENS);
    let steps = 3;
    let (mut cache, logits) = model.prefill(&prompts, steps).unwrap();
    assert_eq!(cache.len(), l);
    // The halves, each within the budget; the second half padded to the same length as in the
    // batch (a row of length l keeps every row's padding the batch's).
    let split = rows / 2;
    let mut second: Vec<Vec<u32>> = prompts[split..].to_vec();
    second[0] = prompts[0].clone();
    let (mut c1, l1) = model.prefill(&prompts[..split], steps).unwrap();
    let (mut c2, l2) = model.prefill(&second, steps).unwrap();
    let want = |r: usize, a: &Tensor, b: &Tensor| -> Vec<f32> {
        if r < split {
            a.get(r)
        } else {
            b.get(r - split)
        }
        .unwrap()
        .to_vec1()
        .unwrap()
    };
    let mut got = logits;
    let (mut w1, mut w2) = (l1, l2);
    for step in 0..=steps {
        for r in (0..rows).filter(|&r| r != split) {
            assert_eq!(
                got.get(r).unwrap().to_vec1::<f32>().unwrap(),
                want(r, &w1, &w2),
                "row {r}, step {step}"
            );
        }
        if step == steps {
            break;
        }
        let tokens: Vec<u32> = (0..rows).map(|r| ((r + step * 5) % 97) as u32).collect();
        got = model.decode(&mut cache, &tokens).unwrap();
        w1 = model.decode(&mut c1, &tokens[..split]).unwrap();
        let mut t2 = tokens[split..].to_vec();
        t2[0] = tokens[0];
        w2 = model.decode(&mut c2, &t2).unwrap();
    }
}

/// Prefill and decode are inference: what they return carries no autograd graph (the weights
/// are `Var`s; a graph behind the logits kept every layer's activations of the batch alive).
#[test]
fn prefill_and_decode_return_no_autograd_graph() {
    for fused in [true, false] {
        let model = Qwen3::random(tiny(fused), 6, DType::F32, &Device::Cpu).unwrap();
        let prompts = vec![vec![1u32, 2, 3, 4], vec![5, 6]];
        let (mut cache, logits) = model.prefill(&prompts, 2).unwrap();
        assert!(!logits.track_op(), "prefill logits, fused {fused}");
        for li in 0..cache.layers() {
            let (k, v) = cache.layer(li);
            assert!(!k.track_op() && !v.track_op(), "cache layer {li}");
        }
        let next = model.decode(&mut cache, &[7, 8]).unwrap();
        assert!(!next.track_op(), "decode logits, fused {fused}");
        // Training's forward still records the graph.
        let out = model.token_log_probs(&prompts, &[1, 1]).unwrap();
        assert!(out.log_probs.track_op());
    }
}

#[test]
fn a_prefill_reusing_kept_prompts_equals_a_fresh_prefill() {
    let model = Qwen3::random(tiny(true), 6, DType::F32, &Device::Cpu).unwrap();
    let prompt = |r: usize, n: usize| -> Vec<u32> {
        (0..n).map(|t| ((r * 7 + t * 3 + 1) % 97) as u32).collect()
    };
    // The first batch keeps rows 0 and 2 (ragged: their padding here is 4 and 9 slots).
    let first = vec![prompt(0, 20), prompt(1, 24), prompt(2, 15)];
    let (_, _, kept) = model
        .prefill_reusing(&first, 4, &[None, None, None], &[true, false, true])
        .unwrap();
    assert!(kept[0].is_some() && kept[1].is_none() && kept[2].is_some());
    assert_eq!(kept[2].as_ref().unwrap().tokens(), &first[2][..]);
    // The second batch: the kept rows around a new, longer prompt (every padding changes) and
    // a short one; its logits and decode steps against a prefill of the same batch.
    let batch = vec![
        first[0].clone(),
        prompt(3, 31),
        first[2].clone(),
        prompt(4, 5),
    ];
    let reuse = [kept[0].as_ref(), None, kept[2].as_ref(), None];
    let steps = 3;
    let (mut got_cache, mut got, again) = model
        .prefill_reusing(&batch, steps, &reuse, &[true; 4])
        .unwrap();
    // Reused rows are not kept again (the caller holds them); fresh ones are.
    assert!(again[0].is_none() && again[1].is_some() && again[2].is_none() && again[3].is_some());
    let (mut want_cache, mut want) = model.prefill(&batch, steps).unwrap();
    assert_eq!(got_cache.len(), want_cache.len());
    let mut worst = 0f32;
    for step in 0..=steps {
        let (g, w): (Vec<Vec<f32>>, Vec<Vec<f32>>) =
            (got.to_vec2().unwrap(), want.to_vec2().unwrap());
        for (r, (g, w)) in g.iter().zip(&w).enumerate() {
            for (a, b) in g.iter().zip(w) {
                let d = (a - b).abs();
                worst = worst.max(d);
                // Tolerance: f32 rounding of matrix products over another batch shape.
                assert!(d <= 1e-5, "row {r}, step {step}: {a} vs {b}");
            }
        }
        if step == steps {
            break;
        }
        let tokens: Vec<u32> = (0..batch.len())
            .map(|r| ((r + step * 5) % 97) as u32)
            .collect();
        got = model.decode(&mut got_cache, &tokens).unwrap();
        want = model.decode(&mut want_cache, &tokens).unwrap();
    }
    eprintln!("largest logit difference, reused vs fresh prefill: {worst:e}");
    // A kept prompt given for another prompt is refused, naming the row.
    let err = model
        .prefill_reusing(&[prompt(5, 20)], 4, &[kept[0].as_ref()], &[false])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("row 0") && err.contains("not this prompt's"),
        "{err}"
    );
    let err = model
        .prefill_reusing(&first, 4, &[None], &[false])
        .unwrap_err()
        .to_string();
    assert!(err.contains("3 prompts with 1 reuse"), "{err}");
}

#[test]
fn token_log_probs_equal_the_full_forward() {
    let model = Qwen3::random(tiny(true), 9, DType::F32, &Device::Cpu).unwrap();
    let s = seqs();
    let out = model.token_log_probs(&s, &[4, 1, 5]).unwrap();
    let got: Vec<f32> = out.log_probs.to_vec1().unwrap();
    let mut want = Vec::new();
    for (seq, st) in s.iter().zip([4usize, 1, 5]) {
        let logits = model
            .forward_logits(std::slice::from_ref(seq))
            .unwrap()
            .get(0)
            .unwrap();
        let logp = candle_nn::ops::log_softmax(&logits, D::Minus1).unwrap();
        for (t, &token) in seq.iter().enumerate().skip(st) {
            want.push(
                logp.get(t - 1)
                    .unwrap()
                    .get(token as usize)
                    .unwrap()
                    .to_scalar::<f32>()
                    .unwrap(),
            );
        }
    }
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-5, "{g} vs {w}");
    }
    let ent: Vec<f32> = out.entropy.to_vec1().unwrap();
    assert!(ent.iter().all(|&e| e > 0.0 && e <= (97f32).ln() + 1e-4));
}

fn same_logits(a: &Qwen3, b: &Qwen3) {
    let x = a.forward_logits(&seqs()).unwrap();
    let y = b.forward_logits(&seqs()).unwrap();
    assert_eq!(max_abs_diff(&x, &y), 0.0);
}

#[test]
fn checkpoints_round_trip_single_and_sharded() {
    let dir = tempfile::tempdir().unwrap();
    let model = Qwen3::random(tiny(false), 13, DType::F32, &Device::Cpu).unwrap();
    checkpoint::save(&model, dir.path(), usize::MAX).unwrap();
    assert!(dir.path().join("model.safetensors").is_file());
    same_logits(
        &model,
        &checkpoint::load(dir.path(), DType::F32, &Device::Cpu).unwrap(),
    );

    let sharded = tempfile::tempdir().unwrap();
    checkpoint::save(&model, sharded.path(), 20_000).unwrap();
    assert!(sharded
        .path()
        .join("model.safetensors.index.json")
        .is_file());
    assert!(!sharded.path().join("model.safetensors").exists());
    same_logits(
        &model,
        &checkpoint::load(sharded.path(), DType::F32, &Device::Cpu).unwrap(),
    );

    // A crash between a sharded save's index and its removal of an older single file leaves
    // both: the index (the newer) wins.
    let stale = Qwen3::random(tiny(false), 99, DType::F32, &Device::Cpu).unwrap();
    let stale_dir = tempfile::tempdir().unwrap();
    checkpoint::save(&stale, stale_dir.path(), usize::MAX).unwrap();
    std::fs::copy(
        stale_dir.path().join("model.safetensors"),
        sharded.path().join("model.safetensors"),
    )
    .unwrap();
    same_logits(
        &model,
        &checkpoint::load(sharded.path(), DType::F32, &Device::Cpu).unwrap(),
    );

    // A bf16 checkpoint loads, converted to f32.
    let bf = tempfile::tempdir().unwrap();
    let weights: HashMap<String, Tensor> = model
        .params()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_tensor().to_dtype(DType::BF16).unwrap()))
        .collect();
    let half = Qwen3::from_weights(
        model.config().clone(),
        weights,
        DType::BF16,
        &Device::Cpu,
        Path::new("x"),
    )
    .unwrap();
    checkpoint::save(&half, bf.path(), usize::MAX).unwrap();
    let loaded = checkpoint::load(bf.path(), DType::F32, &Device::Cpu).unwrap();
    assert_eq!(loaded.dtype(), DType::F32);
    let d = max_abs_diff(
        &loaded.forward_logits(&seqs()).unwrap(),
        &model.forward_logits(&seqs()).unwrap(),
    );
    assert!(d < 0.05, "bf16 rounding moved logits by {d}");
}

fn save_tensors(dir: &Path, tensors: &HashMap<String, Tensor>) {
    candle_core::safetensors::save(tensors, dir.join("model.safetensors")).unwrap();
}

#[test]
fn broken_checkpoints_name_what_is_wrong() {
    let model = Qwen3::random(tiny(false), 1, DType::F32, &Device::Cpu).unwrap();
    let good: HashMap<String, Tensor> = model
        .params()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_tensor().copy().unwrap()))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    checkpoint::save(&model, dir.path(), usize::MAX).unwrap();

    let mut missing = good.clone();
    missing.remove("model.layers.1.mlp.up_proj.weight");
    save_tensors(dir.path(), &missing);
    let e = checkpoint::load(dir.path(), DType::F32, &Device::Cpu).unwrap_err();
    assert!(
        matches!(&e, Error::Checkpoint { tensor, message, .. } if tensor == "model.layers.1.mlp.up_proj.weight" && message == "missing"),
        "{e}"
    );

    let mut wrong = good.clone();
    wrong.insert(
        "model.norm.weight".into(),
        Tensor::ones(31, DType::F32, &Device::Cpu).unwrap(),
    );
    save_tensors(dir.path(), &wrong);
    let e = checkpoint::load(dir.path(), DType::F32, &Device::Cpu).unwrap_err();
    assert!(
        e.to_string().contains("model.norm.weight") && e.to_string().contains("[31]"),
        "{e}"
    );

    let mut extra = good.clone();
    extra.insert(
        "model.layers.0.mlp.fc1.weight".into(),
        Tensor::ones(3, DType::F32, &Device::Cpu).unwrap(),
    );
    save_tensors(dir.path(), &extra);
    let e = checkpoint::load(dir.path(), DType::F32, &Device::Cpu).unwrap_err();
    assert!(
        e.to_string().contains("model.layers.0.mlp.fc1.weight"),
        "{e}"
    );

    save_tensors(dir.path(), &good);
    checkpoint::load(dir.path(), DType::F32, &Device::Cpu).unwrap();

    let cfg_path = dir.path().join("config.json");
    let text = std::fs::read_to_string(&cfg_path).unwrap();
    std::fs::write(
        &cfg_path,
        text.replace("Qwen3ForCausalLM", "LlamaForCausalLM"),
    )
    .unwrap();
    let e = checkpoint::load(dir.path(), DType::F32, &Device::Cpu).unwrap_err();
    assert!(
        matches!(&e, Error::Config { key, .. } if key == "architectures")
            && e.to_string().contains("config.json"),
        "{e}"
    );
    std::fs::write(&cfg_path, "{\"architectures\": [\"Qwen3ForCausalLM\"]}").unwrap();
    let e = checkpoint::load(dir.path(), DType::F32, &Device::Cpu).unwrap_err();
    assert!(
        e.to_string().contains("config.json") && e.to_string().contains("vocab_size"),
        "{e}"
    );

    std::fs::remove_file(&cfg_path).unwrap();
    let e = checkpoint::load(dir.path(), DType::F32, &Device::Cpu).unwrap_err();
    assert!(matches!(e, Error::Io { .. }) && e.to_string().contains("config.json"));

    std::fs::write(
        dir.path().join("model.safetensors"),
        b"not a safetensors file",
    )
    .unwrap();
    let e = checkpoint::load_weights(dir.path()).unwrap_err();
    assert!(e.to_string().contains("model.safetensors"), "{e}");
}

#[test]
fn random_init_is_deterministic_and_sized() {
    let a = Qwen3::random(tiny(true), 42, DType::F32, &Device::Cpu).unwrap();
    let b = Qwen3::random(tiny(true), 42, DType::F32, &Device::Cpu).unwrap();
    same_logits(&a, &b);
    let c = Qwen3::random(tiny(true), 43, DType::F32, &Device::Cpu).unwrap();
    assert!(
        max_abs_diff(
            &a.forward_logits(&seqs()).unwrap(),
            &c.forward_logits(&seqs()).unwrap()
        ) > 0.0
    );
    // Tied: the embedding is counted once.
    let cfg = tiny(true);
    let per_layer = 32 + 32 * 32 + 2 * (16 * 32) + 32 * 32 + 8 + 8 + 32 + 3 * 48 * 32;
    assert_eq!(a.num_parameters(), 97 * 32 + 2 * per_layer + 32);
    assert!(!cfg
        .tensor_shapes()
        .iter()
        .any(|(n, _)| n == "lm_head.weight"));
}

#[test]
fn the_frozen_copy_does_not_move_when_the_policy_does() {
    let model = Qwen3::random(tiny(true), 21, DType::F32, &Device::Cpu).unwrap();
    let frozen = model.frozen_copy().unwrap();
    let before = frozen.forward_logits(&seqs()).unwrap();
    same_logits(&model, &frozen);
    // An optimizer step writes the policy's variables in place.
    let w = &model.params()["model.norm.weight"];
    w.set(&(w.as_tensor() * 3.0).unwrap()).unwrap();
    assert!(max_abs_diff(&model.forward_logits(&seqs()).unwrap(), &before) > 0.0);
    assert_eq!(
        max_abs_diff(&frozen.forward_logits(&seqs()).unwrap(), &before),
        0.0
    );
}

/// transformers 5 writes `rope_parameters: {rope_theta, rope_type}` and `dtype` in place of the
/// top-level `rope_theta` and `torch_dtype` of transformers 4 (what `save_pretrained` gives for
/// a Qwen3 folder today). Such a folder loads to the same model; a RoPE variant we do not
/// implement, or two spellings that disagree, is refused naming the key.
#[test]
fn transformers_5_rope_parameters_load() {
    let model = Qwen3::random(tiny(true), 3, DType::F32, &Device::Cpu).unwrap();
    let dir = tempfile::tempdir().unwrap();
    checkpoint::save(&model, dir.path(), usize::MAX).unwrap();
    let cfg_path = dir.path().join("config.json");
    let v4: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    let theta = v4["rope_theta"].clone();
    let write = |edit: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>)| {
        let mut v = v4.clone();
        edit(v.as_object_mut().unwrap());
        std::fs::write(&cfg_path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    };

    // transformers 5 form: no top-level key.
    write(&|o| {
        let t = o.remove("rope_theta").unwrap();
        o.remove("rope_scaling");
        let dtype = o.remove("torch_dtype").unwrap();
        o.insert("dtype".into(), dtype);
        o.insert(
            "rope_parameters".into(),
            serde_json::json!({"rope_theta": t, "rope_type": "default"}),
        );
    });
    let loaded = checkpoint::load(dir.path(), DType::F32, &Device::Cpu).unwrap();
    assert_eq!(
        loaded.config().rope_theta,
        theta.as_f64().unwrap(),
        "rope_theta from rope_parameters"
    );
    same_logits(&model, &loaded);
    // Saving keeps transformers 5's object and adds the top-level key; that folder loads too.
    let dir2 = tempfile::tempdir().unwrap();
    checkpoint::save(&loaded, dir2.path(), usize::MAX).unwrap();
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir2.path().join("config.json")).unwrap())
            .unwrap();
    assert_eq!(saved["rope_parameters"]["rope_theta"], theta);
    assert_eq!(saved["rope_theta"], theta);
    same_logits(
        &model,
        &checkpoint::load(dir2.path(), DType::F32, &Device::Cpu).unwrap(),
    );

    // Both spellings, agreeing: fine.
    write(&|o| {
        let t = o["rope_theta"].clone();
        o.insert(
            "rope_parameters".into(),
            serde_json::json!({"rope_theta": t, "rope_type": "default"}),
        );
    });
    checkpoint::load(dir.path(), DType::F32, &Device::Cpu).unwrap();

    // Disagreeing, a scaled RoPE, a malformed object: refused, naming the key.
    for (params, key) in [
        (
            serde_json::json!({"rope_theta": 10000.0, "rope_type": "default"}),
            "rope_parameters.rope_theta",
        ),
        (
            serde_json::json!({"rope_theta": theta, "rope_type": "yarn", "factor": 4.0}),
            "rope_parameters.rope_type",
        ),
        (serde_json::json!([1, 2]), "rope_parameters"),
    ] {
        write(&|o| {
            o.insert("rope_parameters".into(), params.clone());
        });
        let e = checkpoint::load(dir.path(), DType::F32, &Device::Cpu).unwrap_err();
        assert!(
            matches!(&e, Error::Config { key: k, .. } if k == key)
                && e.to_string().contains("config.json"),
            "{key}: {e}"
        );
    }
}
