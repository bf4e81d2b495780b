//! The allocation-free decode step (`model::decode`) against the candle path it replaces in the
//! rollout (`Qwen3::decode`, fused kernels on, and the composed reference ops): the same logits
//! on left-padded batches over several steps, after dropping rows, for batch 1 and more, with
//! and without biases and tied heads; and the same rollout (tokens, log-probs) on the same seed;
//! a rollout on one thread and on two gives the same tokens and log-probs bit for bit.
//!
//! Tolerance: 1e-6 absolute on logits (random weights, |logit| ≲ 1): the products sum in a
//! different order than gemm's, each a dot of ≤ 48 f32 terms, twice per layer, so rounding
//! differences stay a few ulps (seen ≤ 1.2e-7 over 8 steps).

use candle_core::{DType, Device};
use reference_trainer::model::{DecodeState, Decoder, Qwen3, Qwen3Config};
use reference_trainer::rollout::{CandleDecode, Policy};

const TOL: f32 = 1e-6;

fn tiny(tied: bool, bias: bool) -> Qwen3Config {
    let mut c = Qwen3Config::small(97, 32, 48, 2, 4, 2, 8, 128);
    c.tie_word_embeddings = tied;
    c.attention_bias = bias;
    c
}

fn prompts() -> Vec<Vec<u32>> {
    vec![
        vec![3, 14, 15, 92, 65, 35, 89, 79, 32, 38],
        vec![1, 2, 3],
        vec![50, 60, 70, 80, 90, 11],
        vec![7],
        vec![8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19],
    ]
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Decodes `steps` tokens per row through both paths (the same tokens), dropping rows at the
/// listed steps, and compares the logits after every step.
fn compare(model: &Qwen3, prompts: &[Vec<u32>], steps: usize, drops: &[(usize, Vec<usize>)]) {
    let v = model.config().vocab_size;
    let reference = CandleDecode(model);
    let mut want = Vec::new();
    let mut got = Vec::new();
    let mut cache = reference.prefill(prompts, steps, &mut want).unwrap();
    let mut state = match Policy::prefill(model, prompts, steps, &mut got).unwrap() {
        reference_trainer::rollout::QwenCache::Direct(s) => s,
        other => panic!("f32 CPU with fused kernels should decode directly, got {other:?}"),
    };
    assert_eq!(want, got, "prefill logits are the same computation");
    let mut rows: Vec<usize> = (0..prompts.len()).collect();
    let mut worst = 0f32;
    for t in 0..steps {
        if let Some((_, keep)) = drops.iter().find(|(s, _)| *s == t) {
            reference.retain(&mut cache, keep).unwrap();
            state.retain(keep).unwrap();
            rows = keep.iter().map(|&k| rows[k]).collect();
        }
        let tokens: Vec<u32> = rows
            .iter()
            .map(|&r| ((r * 31 + t * 7 + 1) % v) as u32)
            .collect();
        reference.decode(&mut cache, &tokens, &mut want).unwrap();
        // Split over two threads on odd steps: the split must not change the logits.
        state.set_threads(1 + t % 2);
        state.step(&tokens, &mut got).unwrap();
        assert_eq!(got.len(), rows.len() * v);
        let d = max_diff(&want, &got);
        assert!(
            d <= TOL,
            "step {t}, rows {rows:?}: max abs diff {d} (tolerance {TOL})"
        );
        worst = worst.max(d);
    }
    eprintln!(
        "{} rows, {steps} steps: max abs diff {worst:e}",
        prompts.len()
    );
}

#[test]
fn direct_decode_equals_the_candle_decode_on_left_padded_batches() {
    for (tied, bias) in [(true, false), (false, true)] {
        let mut model = Qwen3::random(tiny(tied, bias), 5, DType::F32, &Device::Cpu).unwrap();
        if bias {
            // Random init zeroes biases; non-zero ones check they are added.
            let vars: Vec<_> = model
                .params()
                .iter()
                .filter(|(n, _)| n.ends_with(".bias"))
                .map(|(_, v)| v.clone())
                .collect();
            for (i, v) in vars.iter().enumerate() {
                let n = v.elem_count();
                let data: Vec<f32> = (0..n).map(|j| ((i * 7 + j) % 5) as f32 * 0.01).collect();
                v.set(&candle_core::Tensor::from_vec(data, n, &Device::Cpu).unwrap())
                    .unwrap();
            }
        }
        let p = prompts();
        compare(&model, &p, 8, &[]);
        compare(&model, &p[..1], 8, &[]);
        compare(&model, &p[3..4], 5, &[]);
        // Finished rows leave the batch: increasing (in place) and any order (copied).
        compare(&model, &p, 8, &[(2, vec![0, 2, 3, 4]), (5, vec![1, 3])]);
        compare(&model, &p, 4, &[(1, vec![4, 0, 2])]);
        // A batch large enough to be split over two threads.
        let many: Vec<Vec<u32>> = (0..24)
            .map(|r| p[r % 5].iter().map(|&t| (t + r as u32) % 97).collect())
            .collect();
        compare(
            &model,
            &many,
            5,
            &[(3, (0..24).filter(|r| r % 5 != 0).collect())],
        );
        // Against the composed reference ops too (the candle path of T2PO_COMPOSED_OPS=1).
        let (mut cache, mut want) = {
            model.set_fused(false).unwrap();
            let mut l = Vec::new();
            let c = CandleDecode(&model).prefill(&p, 3, &mut l).unwrap();
            (c, l)
        };
        model.set_fused(true).unwrap();
        let (c, _) = model.prefill(&p, 3).unwrap();
        let mut state = DecodeState::from_cache(Decoder::new(&model).unwrap(), &c).unwrap();
        model.set_fused(false).unwrap();
        let mut got = Vec::new();
        for t in 0..3u32 {
            let tokens: Vec<u32> = (0..p.len() as u32).map(|r| (r * 13 + t) % 97).collect();
            CandleDecode(&model)
                .decode(&mut cache, &tokens, &mut want)
                .unwrap();
            state.step(&tokens, &mut got).unwrap();
            let d = max_diff(&want, &got);
            assert!(d <= TOL, "composed ops, step {t}: max abs diff {d}");
        }
    }
}

#[test]
fn the_direct_state_rejects_bad_input_by_name() {
    let model = Qwen3::random(tiny(true, false), 1, DType::F32, &Device::Cpu).unwrap();
    let (c, _) = model.prefill(&prompts()[..2], 2).unwrap();
    let mut s = DecodeState::from_cache(Decoder::new(&model).unwrap(), &c).unwrap();
    let mut l = Vec::new();
    let e = s.step(&[1], &mut l).unwrap_err().to_string();
    assert!(e.contains("1 tokens for a batch of 2"), "{e}");
    let e = s.step(&[1, 97], &mut l).unwrap_err().to_string();
    assert!(e.contains("97 is outside the vocabulary"), "{e}");
    s.step(&[1, 2], &mut l).unwrap();
    s.step(&[1, 2], &mut l).unwrap();
    let e = s.step(&[1, 2], &mut l).unwrap_err().to_string();
    assert!(e.contains("cache is full"), "{e}");
    let e = s.retain(&[0, 2]).unwrap_err().to_string();
    assert!(e.contains("row 2 of a batch of 2"), "{e}");
    let bf16 = Qwen3::random(tiny(true, false), 1, DType::BF16, &Device::Cpu).unwrap();
    let e = Decoder::new(&bf16).unwrap_err().to_string();
    assert!(e.contains("f32 on the CPU"), "{e}");
}

/// Points `T2PO_CACHE` at one temporary folder for every test of this file, set once: the
/// variable is process-wide, so a folder per test would race with the tests running beside it.
fn shared_cache() {
    static CACHE: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    CACHE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        std::env::set_var("T2PO_CACHE", dir.path());
        dir
    });
}

/// The default model and tokenizer (seed 7) on a 200-product WebShop, and a two-turn rollout
/// config at sampling seed `seed`.
fn webshop_rollout(
    seed: u64,
) -> (
    reference_trainer::tokenizer::Tokenizer,
    Qwen3,
    reference_trainer::rollout::EnvPool,
    reference_trainer::rollout::RolloutConfig,
) {
    use reference_trainer::defaults;
    use reference_trainer::rollout::{
        ControlSwitches, EnvKind, EnvPool, RolloutConfig, SamplingParams,
    };
    shared_cache();
    let tok = defaults::tokenizer(7).unwrap();
    let c = tok.control_tokens().unwrap();
    let model = defaults::model(&tok, 7, &Device::Cpu).unwrap();
    let env = EnvKind::Webshop;
    let mut size = defaults::pool_size(env).unwrap();
    size.products = 200;
    let pool = EnvPool::generated(env, 7, size).unwrap();
    let cfg = RolloutConfig {
        control: ControlSwitches::default()
            .control_config_for(&c, env.response_tags())
            .unwrap(),
        mark_void: false,
        sampling: SamplingParams::default(),
        max_response_tokens: 64,
        max_prompt_tokens: 768,
        history_length: pool.history_length(),
        max_turns: 2,
        seed,
    };
    (tok, model, pool, cfg)
}

#[test]
fn the_direct_decode_rolls_out_the_same_episodes_as_the_candle_decode() {
    use reference_trainer::rollout::{rollout, EpisodeSpec, Split};
    let (tok, model, pool, cfg) = webshop_rollout(5);
    assert!(model.fused());
    let specs: Vec<_> = (0..6)
        .map(|i| EpisodeSpec {
            task: i % 3,
            group: i % 3,
        })
        .collect();
    let envs = || -> Vec<_> { (0..specs.len()).map(|_| pool.make(Split::Test)).collect() };
    let direct = rollout(&model, &tok, &mut envs(), &specs, &cfg, |_, _| {})
        .unwrap()
        .0;
    let candle = rollout(
        &CandleDecode(&model),
        &tok,
        &mut envs(),
        &specs,
        &cfg,
        |_, _| {},
    )
    .unwrap()
    .0;
    // Same seeds, logits equal to rounding: the same draws, TTI decisions and tokens — except
    // where a uniform draw falls within that rounding of a boundary of the inverse-CDF search
    // (token-id order), about Σ_k |ΔCDF(k)| ≈ vocab × 1e-7 per token: then the two decodes pick
    // neighbouring ids (seen on a Sapphire Rapids Xeon: 1872 against 1873 at token 41, log-probs
    // and M_t equal to 1e-5 up to it). The episode's later tokens see another context, so the
    // comparison of that episode stops there.
    let (mut tokens, mut flips) = (0, 0);
    for (a, b) in direct.iter().zip(&candle) {
        let mut flipped = false;
        for (ta, tb) in a.turns.iter().zip(&b.turns) {
            let (ga, gb) = (&ta.generation, &tb.generation);
            let same = ga
                .response_ids
                .iter()
                .zip(&gb.response_ids)
                .take_while(|(x, y)| x == y)
                .count();
            if same < ga.response_ids.len().max(gb.response_ids.len()) {
                let (x, y) = (ga.response_ids.get(same), gb.response_ids.get(same));
                let (Some(&x), Some(&y)) = (x, y) else {
                    panic!("one decode stopped at token {same}, the other did not: {x:?} vs {y:?}");
                };
                assert_eq!(
                    x.abs_diff(y),
                    1,
                    "token {same}: {x} vs {y} are not neighbours"
                );
                flipped = true;
            }
            assert_eq!(ga.forced[..same], gb.forced[..same]);
            if !flipped {
                assert_eq!(ga.forced, gb.forced);
                assert_eq!(ga.tti, gb.tti);
            }
            tokens += same;
            for (x, y) in ga.log_probs[..same].iter().zip(&gb.log_probs[..same]) {
                assert!((x - y).abs() <= 1e-5, "log-prob {x} vs {y}");
            }
            for (x, y) in ga.signal[..same].iter().zip(&gb.signal[..same]) {
                match (x, y) {
                    (Some(x), Some(y)) => assert!((x - y).abs() <= 1e-4, "M_t {x} vs {y}"),
                    _ => assert_eq!(x, y),
                }
            }
            if flipped {
                break;
            }
        }
        if flipped {
            flips += 1;
        } else {
            assert_eq!(a.turns.len(), b.turns.len());
        }
    }
    assert!(
        2 * flips <= direct.len(),
        "{flips} of {} episodes diverged",
        direct.len()
    );
    assert!(tokens > 300, "{tokens} tokens compared");
}

/// A rollout run in parts (`rollout_part_until`, what `run_episodes` does past
/// `MAX_BATCH_EPISODES`) samples what one call over every episode samples: each episode draws
/// from the stream of its index in the whole, and the default model gives each row the same
/// logits whatever the batch around it (other prompts, other left padding).
#[test]
fn a_rollout_in_parts_samples_what_one_batch_samples() {
    use reference_trainer::rollout::{
        rollout, rollout_part_until, EpisodeSpec, RolloutStats, Split,
    };
    use std::ops::ControlFlow;
    let (tok, model, pool, cfg) = webshop_rollout(11);
    let specs: Vec<_> = (0..6)
        .map(|i| EpisodeSpec {
            task: i % 4,
            group: i % 4,
        })
        .collect();
    let envs = |n: usize| -> Vec<_> { (0..n).map(|_| pool.make(Split::Test)).collect() };
    let (whole, whole_stats) =
        rollout(&model, &tok, &mut envs(6), &specs, &cfg, |_, _| {}).unwrap();
    let mut parts = Vec::new();
    let mut stats = RolloutStats::default();
    for (first, chunk) in [(0, &specs[..2]), (2, &specs[2..])] {
        let (r, s) = rollout_part_until(
            &model,
            &tok,
            &mut envs(chunk.len()),
            chunk,
            first,
            &cfg,
            |_, _| ControlFlow::Continue(()),
        )
        .unwrap()
        .unwrap();
        parts.extend(r);
        stats.absorb(&s);
    }
    assert_eq!(stats.generations, whole_stats.generations);
    assert_eq!(stats.decoded_tokens, whole_stats.decoded_tokens);
    let mut tokens = 0;
    for (a, b) in whole.iter().zip(&parts) {
        assert_eq!((a.episode, a.task, a.group), (b.episode, b.task, b.group));
        assert_eq!((a.success, a.score), (b.success, b.score));
        assert_eq!(a.turns.len(), b.turns.len());
        for (ta, tb) in a.turns.iter().zip(&b.turns) {
            let (ga, gb) = (&ta.generation, &tb.generation);
            assert_eq!(ga.response_ids, gb.response_ids);
            assert_eq!(ga.tti, gb.tti);
            tokens += ga.response_ids.len();
            for (x, y) in ga.log_probs.iter().zip(&gb.log_probs) {
                assert!((x - y).abs() <= 1e-5, "log-prob {x} vs {y}");
            }
        }
    }
    assert!(tokens > 200, "{tokens} tokens compared");
    // The part's offset is what keeps the streams apart: the same part from index 0 differs.
    let (moved, _) = rollout(&model, &tok, &mut envs(4), &specs[2..], &cfg, |_, _| {}).unwrap();
    assert!(
        moved.iter().zip(&whole[2..]).any(|(a, b)| a
            .turns
            .iter()
            .zip(&b.turns)
            .any(|(x, y)| x.generation.response_ids != y.generation.response_ids)),
        "episodes 2..6 drew the same tokens from streams 0..4"
    );
}

/// The model without its prompt reuse: [`Policy::prefill_reusing`]'s default prefills every
/// try's prompt again (the rollout as it was before resamples reused their turn's prefill).
struct NoReuse<'a>(&'a Qwen3);

impl Policy for NoReuse<'_> {
    type Cache = reference_trainer::rollout::QwenCache;
    fn vocab_size(&self) -> usize {
        Policy::vocab_size(self.0)
    }
    fn prefill(
        &self,
        prompts: &[Vec<u32>],
        max_new: usize,
        logits: &mut Vec<f32>,
    ) -> reference_trainer::Result<Self::Cache> {
        Policy::prefill(self.0, prompts, max_new, logits)
    }
    fn decode(
        &self,
        cache: &mut Self::Cache,
        tokens: &[u32],
        logits: &mut Vec<f32>,
    ) -> reference_trainer::Result<()> {
        Policy::decode(self.0, cache, tokens, logits)
    }
    fn retain(&self, cache: &mut Self::Cache, rows: &[usize]) -> reference_trainer::Result<()> {
        Policy::retain(self.0, cache, rows)
    }
}

#[test]
fn tds_resamples_reuse_their_turns_prefill_and_roll_out_the_same_episodes() {
    use reference_trainer::defaults;
    use reference_trainer::rollout::{
        rollout, ControlSwitches, EnvKind, EnvPool, EpisodeSpec, RolloutConfig, SamplingParams,
        Split,
    };
    shared_cache();
    let tok = defaults::tokenizer(7).unwrap();
    let c = tok.control_tokens().unwrap();
    let model = defaults::model(&tok, 7, &Device::Cpu).unwrap();
    let env = EnvKind::Search;
    let mut size = defaults::pool_size(env).unwrap();
    size.passages = 2000;
    let pool = EnvPool::generated(env, 7, size).unwrap();
    let mut control = ControlSwitches::default()
        .control_config_for(&c, env.response_tags())
        .unwrap();
    // A wide η: most turns after the first are hesitant, so resamples are many.
    control.eta = 10.0;
    let cfg = RolloutConfig {
        control,
        mark_void: false,
        sampling: SamplingParams::default(),
        max_response_tokens: 24,
        max_prompt_tokens: 768,
        history_length: pool.history_length(),
        max_turns: 3,
        seed: 5,
    };
    let specs: Vec<_> = (0..6)
        .map(|i| EpisodeSpec {
            task: i % 3,
            group: i % 3,
        })
        .collect();
    let envs = || -> Vec<_> { (0..specs.len()).map(|_| pool.make(Split::Test)).collect() };
    let (reused, with) = rollout(&model, &tok, &mut envs(), &specs, &cfg, |_, _| {}).unwrap();
    let (fresh, without) =
        rollout(&NoReuse(&model), &tok, &mut envs(), &specs, &cfg, |_, _| {}).unwrap();
    let resamples: u32 = reused.iter().map(|e| e.resamples).sum();
    assert!(resamples >= 4, "{resamples} resamples");
    eprintln!(
        "{resamples} resamples; prompt tokens prefilled {} + reused {} (without reuse {})",
        with.prefill_tokens, with.prefill_tokens_reused, without.prefill_tokens
    );
    for (a, b) in reused.iter().zip(&fresh) {
        assert_eq!(a.resamples, b.resamples);
        assert_eq!(a.turns.len(), b.turns.len());
        for (ta, tb) in a.turns.iter().zip(&b.turns) {
            // The same draws from logits equal to rounding (a reused prefill differs from a
            // fresh one by ~1e-7: another batch shape in the matrix products).
            assert_eq!(ta.generation.response_ids, tb.generation.response_ids);
            assert_eq!(ta.discarded.len(), tb.discarded.len());
            for (x, y) in ta.generation.log_probs.iter().zip(&tb.generation.log_probs) {
                assert!((x - y).abs() <= 1e-5, "log-prob {x} vs {y}");
            }
        }
    }
    // Every resample's prompt came from its first try's prefill, and nothing else did.
    assert_eq!(without.prefill_tokens_reused, 0);
    assert!(with.prefill_tokens_reused > 0);
    assert_eq!(
        with.prefill_tokens + with.prefill_tokens_reused,
        without.prefill_tokens
    );
    assert_eq!(with.generations, without.generations);
}

#[test]
fn a_rollout_is_the_same_bit_for_bit_on_one_thread_and_on_two() {
    use reference_trainer::rollout::{rollout, EpisodeSpec, Split};
    let (tok, model, pool, cfg) = webshop_rollout(13);
    // 20 episodes: the decode splits ≥ 16 rows over the threads, fewer rows by columns.
    let specs: Vec<_> = (0..20)
        .map(|i| EpisodeSpec {
            task: i % 5,
            group: i % 5,
        })
        .collect();
    let run = |threads: usize| {
        let pool_t = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool_t.install(|| {
            let mut envs: Vec<_> = specs.iter().map(|_| pool.make(Split::Test)).collect();
            rollout(&model, &tok, &mut envs, &specs, &cfg, |_, _| {})
                .unwrap()
                .0
        })
    };
    let (one, two) = (run(1), run(2));
    let mut tokens = 0;
    for (a, b) in one.iter().zip(&two) {
        assert_eq!((a.success, a.score), (b.success, b.score));
        assert_eq!(a.turns.len(), b.turns.len());
        for (ta, tb) in a.turns.iter().zip(&b.turns) {
            let (ga, gb) = (&ta.generation, &tb.generation);
            assert_eq!(ga.response_ids, gb.response_ids);
            tokens += ga.response_ids.len();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&ga.log_probs), bits(&gb.log_probs));
        }
    }
    assert!(tokens > 500, "{tokens} tokens compared");
}
