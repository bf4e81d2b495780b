//! Positive controls: the RL update learns what its advantages say.
//!
//! `a_successful_episode_gains_and_failed_ones_lose`: one GRPO/GiGPO group where one episode
//! succeeds and the others fail goes through `compute_advantages` → `flatten_rows` → `update`
//! (one and several mini-batches, so the PPO ratio moves off 1 after the first step); the
//! successful response's tokens must gain log-probability and every failed one's must lose it.
//! The same group with the advantages' signs flipped must move them the other way — the update
//! follows the advantages, not some property of the responses.

use candle_core::{DType, Device};
use reference_trainer::algo::{
    compute_advantages, flatten_rows, AdvantageConfig, Estimator, LossConfig, NormMode,
    StepGrouping, TrainingRow,
};
use reference_trainer::model::{Qwen3, Qwen3Config};
use reference_trainer::rollout::{EpisodeRecord, Generation, TurnRecord};
use reference_trainer::train::ppo::{update, UpdateConfig};
use reference_trainer::train::{AdamW, AdamWConfig};

const PROMPT: [u32; 5] = [1, 2, 3, 4, 5];
const RESPONSES: [[u32; 4]; 4] = [
    [10, 11, 12, 13],
    [14, 15, 16, 17],
    [18, 19, 20, 21],
    [22, 23, 24, 25],
];

fn turn(response: &[u32], log_probs: Vec<f32>, reward: f64, won: bool) -> TurnRecord {
    TurnRecord {
        turn: 0,
        prompt_ids: PROMPT.to_vec(),
        prompt_truncated: 0,
        generation: Generation {
            response_ids: response.to_vec(),
            forced: vec![false; response.len()],
            signal: vec![Some(0.5); response.len()],
            log_probs,
            ..Generation::default()
        },
        response_mask: vec![1; response.len()],
        response: String::new(),
        gamma: 0.0,
        tds_tries: 1,
        discarded: vec![],
        action: String::new(),
        format_valid: true,
        void: false,
        reward,
        done: true,
        won,
        score: if won { 1.0 } else { 0.0 },
        anchor: "the only observation".into(),
    }
}

/// Sum of the response's log-probs under `model`.
fn response_log_prob(model: &Qwen3, response: &[u32]) -> f64 {
    let seq: Vec<u32> = PROMPT.iter().chain(response).copied().collect();
    let lp = model
        .token_log_probs(&[seq], &[PROMPT.len()])
        .unwrap()
        .log_probs;
    lp.to_dtype(DType::F64)
        .unwrap()
        .sum_all()
        .unwrap()
        .to_scalar::<f64>()
        .unwrap()
}

fn group(model: &Qwen3, winner: usize) -> Vec<EpisodeRecord> {
    RESPONSES
        .iter()
        .enumerate()
        .map(|(e, r)| {
            let seq: Vec<u32> = PROMPT.iter().chain(r).copied().collect();
            let lp: Vec<f32> = model
                .token_log_probs(&[seq], &[PROMPT.len()])
                .unwrap()
                .log_probs
                .to_vec1()
                .unwrap();
            let won = e == winner;
            EpisodeRecord {
                episode: e,
                env: "search".into(),
                task: 0,
                group: 0,
                task_text: String::new(),
                source: String::new(),
                turns: vec![turn(r, lp, if won { 1.0 } else { 0.0 }, won)],
                success: won,
                score: if won { 1.0 } else { 0.0 },
                total_reward: if won { 1.0 } else { 0.0 },
                resamples: 0,
                void: false,
                reward_parts: Default::default(),
            }
        })
        .collect()
}

/// One update on the group; returns each response's log-prob change.
fn train_on(estimator: Estimator, mini_batches: usize, flip: bool) -> Vec<f64> {
    let cfg = Qwen3Config::small(32, 32, 64, 2, 4, 2, 8, 64);
    let policy = Qwen3::random(cfg, 11, DType::F32, &Device::Cpu).unwrap();
    let episodes = group(&policy, 1);
    let adv = compute_advantages(
        &episodes,
        &AdvantageConfig {
            estimator,
            mode: NormMode::MeanStdNorm,
            grouping: StepGrouping::Exact,
            ..AdvantageConfig::default()
        },
    )
    .unwrap();
    let mut rows: Vec<TrainingRow> = flatten_rows(&episodes, &adv, false).unwrap();
    // One winner of four: its advantage is positive, the others' negative.
    assert!(rows[1].advantages.iter().all(|&a| a > 0.0));
    for r in [0, 2, 3] {
        assert!(rows[r].advantages.iter().all(|&a| a < 0.0));
    }
    if flip {
        for r in &mut rows {
            r.advantages.iter_mut().for_each(|a| *a = -*a);
        }
    }
    let before: Vec<f64> = RESPONSES
        .iter()
        .map(|r| response_log_prob(&policy, r))
        .collect();
    let old = policy.frozen_copy().unwrap();
    let mut opt = AdamW::new(AdamWConfig {
        lr: 1e-3,
        ..AdamWConfig::default()
    })
    .unwrap();
    let report = ppo_step(&policy, &old, &mut opt, &rows, mini_batches, 3);
    assert_eq!(report.steps, mini_batches);
    RESPONSES
        .iter()
        .zip(&before)
        .map(|(r, b)| response_log_prob(&policy, r) - b)
        .collect()
}

/// One PPO update of `policy` on `rows` (sampled by `old`), no entropy bonus, no KL.
fn ppo_step(
    policy: &Qwen3,
    old: &Qwen3,
    opt: &mut AdamW,
    rows: &[TrainingRow],
    mini_batches: usize,
    seed: u64,
) -> reference_trainer::train::UpdateReport {
    update(
        policy,
        old,
        None,
        opt,
        rows,
        &LossConfig {
            entropy_coef: 0.0,
            ..LossConfig::default()
        },
        &UpdateConfig {
            mini_batches,
            micro_batch_tokens: 4096,
            temperature: 1.0,
            seed,
        },
        |_, _| {},
    )
    .unwrap()
}

#[test]
fn a_successful_episode_gains_and_failed_ones_lose() {
    for estimator in [Estimator::Grpo, Estimator::Gigpo] {
        for mini_batches in [1, 2, 4] {
            let d = train_on(estimator, mini_batches, false);
            assert!(d[1] > 0.0, "{estimator:?}/{mini_batches}: winner {d:?}");
            for r in [0, 2, 3] {
                assert!(d[r] < 0.0, "{estimator:?}/{mini_batches}: loser {r}: {d:?}");
            }
            let f = train_on(estimator, mini_batches, true);
            assert!(f[1] < 0.0, "{estimator:?}/{mini_batches} flipped: {f:?}");
            for r in [0, 2, 3] {
                assert!(
                    f[r] > 0.0,
                    "{estimator:?}/{mini_batches} flipped {r}: {f:?}"
                );
            }
        }
    }
}

// ---- End to end: rollout → advantages → rows → update, on a task a tiny model can learn ----

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha12Rng;
use reference_trainer::rollout::{
    rollout, ControlSwitches, EpisodeSpec, ProfileName, RolloutConfig, SamplingParams,
};
use reference_trainer::tokenizer::{build_default, Tokenizer};
use reference_trainer::train::{sft_step, Demo};
use t2po_envs::{format_response, Env, HistoryEntry, Info, Observation, Projected, Transition};

const WORDS: [&str; 4] = ["red", "green", "blue", "black"];
/// The rewarded word.
const LUCKY: &str = "blue";
const PROMPTS: [&str; 4] = [
    "Name a colour.",
    "Say a colour.",
    "Pick a colour.",
    "Tell me a colour.",
];

/// "The lucky colour": four prompts ask for a colour; the response whose action is the lucky
/// one (blue) is rewarded (one turn). A policy that picks a colour uniformly succeeds 1 time in
/// 4; one that learned the reward, always. (A contextual version — "Say blue." rewarding the
/// named colour — needs the tiny model to learn attention to the prompt, which takes it
/// hundreds of steps even under SFT: too slow for a CI test of the update.)
#[derive(Clone)]
struct LuckyColour {
    prompt: usize,
    done: bool,
}

impl Env for LuckyColour {
    fn num_tasks(&self) -> usize {
        PROMPTS.len()
    }
    fn reset(&mut self, index: usize) -> Observation {
        self.prompt = index % PROMPTS.len();
        self.done = false;
        Observation {
            text: self.task().to_string(),
            admissible: Vec::new(),
        }
    }
    fn task(&self) -> &str {
        PROMPTS[self.prompt]
    }
    fn anchor(&self) -> &str {
        self.task()
    }
    fn project(&self, response: &str) -> Projected {
        let action = response
            .split_once("<action>")
            .and_then(|(_, r)| r.split_once("</action>"))
            .map_or("", |(a, _)| a.trim());
        Projected {
            action: action.to_string(),
            valid: t2po_envs::is_strict_format(response, &["action"]),
        }
    }
    fn step(&mut self, action: &Projected) -> Transition {
        if self.done {
            return Transition::after_end(String::new());
        }
        self.done = true;
        let won = action.action == LUCKY;
        Transition {
            observation: Observation {
                text: String::new(),
                admissible: Vec::new(),
            },
            reward: if won { 1.0 } else { 0.0 },
            done: true,
            info: Info {
                won,
                score: if won { 1.0 } else { 0.0 },
                source: String::new(),
                parts: Vec::new(),
            },
        }
    }
    fn prompt(&self, _: &[HistoryEntry], _: usize) -> String {
        self.task().to_string()
    }
    fn max_turns(&self) -> usize {
        1
    }
    fn name(&self) -> &'static str {
        "lucky_colour"
    }
}

/// A demonstration that ignores the prompt: the format, and a uniformly drawn word.
fn blind_demo(tok: &Tokenizer, task: usize, word: usize) -> Demo {
    let env = LuckyColour {
        prompt: task,
        done: false,
    };
    let mut response = tok
        .encode(&format_response("I say a word", "action", WORDS[word]))
        .unwrap();
    response.push(tok.control_tokens().unwrap().im_end);
    Demo {
        prompt: tok.encode(&tok.chat_prompt(env.task())).unwrap(),
        response,
    }
}

const GROUPS: usize = 8;

/// Rollout success of `iterations` RL iterations from `policy`; `shuffle` permutes the
/// advantages within each group before the update (the control arm: same rollouts, same
/// update, the credit assignment destroyed).
fn rl_curve(policy: &Qwen3, tok: &Tokenizer, iterations: usize, shuffle: bool) -> Vec<f64> {
    let tokens = tok.control_tokens().unwrap();
    let switches = ControlSwitches {
        tti: false,
        tds: false,
        profile: ProfileName::Paper,
        hard_budget: false,
    };
    let mut opt = AdamW::new(AdamWConfig {
        lr: 1e-3,
        ..AdamWConfig::default()
    })
    .unwrap();
    let adv_cfg = AdvantageConfig {
        estimator: Estimator::Grpo,
        mode: NormMode::MeanStdNorm,
        ..AdvantageConfig::default()
    };
    let mut curve = Vec::new();
    for it in 0..iterations {
        let cfg = RolloutConfig {
            control: switches.control_config(&tokens).unwrap(),
            mark_void: false,
            sampling: SamplingParams {
                temperature: 1.0,
                top_p: 1.0,
            },
            max_response_tokens: 16,
            max_prompt_tokens: 64,
            history_length: 0,
            max_turns: 1,
            seed: 1000 + it as u64,
        };
        // 4 tasks × a group of 8.
        // 8 groups of 8 (each prompt twice).
        let specs: Vec<EpisodeSpec> = (0..GROUPS * 8)
            .map(|i| EpisodeSpec {
                task: (i / 8) % PROMPTS.len(),
                group: i / 8,
            })
            .collect();
        let mut envs: Vec<Box<dyn Env + Send>> = specs
            .iter()
            .map(|_| {
                Box::new(LuckyColour {
                    prompt: 0,
                    done: false,
                }) as Box<dyn Env + Send>
            })
            .collect();
        let old = policy.frozen_copy().unwrap();
        let (records, _) = rollout(&old, tok, &mut envs, &specs, &cfg, |_, _| {}).unwrap();
        let success = records.iter().filter(|r| r.success).count() as f64 / records.len() as f64;
        curve.push(success);
        let mut adv = compute_advantages(&records, &adv_cfg).unwrap();
        if shuffle {
            let mut rng = ChaCha12Rng::seed_from_u64(it as u64);
            for g in 0..GROUPS {
                let members: Vec<usize> = (0..records.len())
                    .filter(|&e| records[e].group == g)
                    .collect();
                let mut values: Vec<_> = members.iter().map(|&e| adv.turns[e].clone()).collect();
                values.shuffle(&mut rng);
                for (&e, v) in members.iter().zip(values) {
                    adv.turns[e] = v;
                }
            }
        }
        let rows = flatten_rows(&records, &adv, false).unwrap();
        let report = ppo_step(policy, &old, &mut opt, &rows, 2, it as u64);
        // rollout_probs_diff (verl): the sampler's token probabilities against the training
        // forward's on the same weights, f32 on the CPU.
        assert!(
            report.rollout_probs_diff_max <= 1e-4,
            "iteration {it}: rollout_probs_diff_max {} (mean {})",
            report.rollout_probs_diff_max,
            report.rollout_probs_diff_mean
        );
    }
    curve
}

/// The RL arm's rollout success must rise well above the blind policy's 1 in 4 (measured here:
/// 0.20 → 0.72 over 15 iterations; the control 0.20 → 0.20); the arm whose
/// advantages are shuffled within groups (same seeds, same budget) must not. If this fails, the
/// RL update is broken, whatever a training run shows.
#[test]
fn rl_raises_success_and_shuffled_advantages_do_not() {
    let corpus: Vec<String> = PROMPTS
        .iter()
        .flat_map(|p| {
            WORDS.iter().map(move |w| {
                format!(
                    "<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n{}<|im_end|>",
                    format_response("I say a word", "action", w)
                )
            })
        })
        .collect();
    let tok = build_default(corpus, 400).unwrap();
    let cfg = Qwen3Config::small(tok.id_bound(), 32, 64, 2, 4, 2, 8, 128);
    let policy = Qwen3::random(cfg, 7, DType::F32, &Device::Cpu).unwrap();
    // The cold start: the format, with the word drawn blind (every word equally often for
    // every prompt), so the start is ~1/4 success and only RL can find the copy.
    let mut demos: Vec<Demo> = (0..4)
        .flat_map(|t| (0..4).map(move |w| (t, w)))
        .map(|(t, w)| blind_demo(&tok, t, w))
        .collect();
    let mut opt = AdamW::new(AdamWConfig {
        lr: 1e-2,
        ..AdamWConfig::default()
    })
    .unwrap();
    let mut rng = ChaCha12Rng::seed_from_u64(5);
    for _ in 0..60 {
        demos.shuffle(&mut rng);
        sft_step(&policy, &mut opt, &demos, 16, 0.0).unwrap();
    }
    let start = policy.frozen_copy().unwrap();
    let rl = rl_curve(&policy, &tok, 15, false);
    let control = rl_curve(&start, &tok, 15, true);
    let mean = |c: &[f64]| c.iter().sum::<f64>() / c.len() as f64;
    let (rl_first, rl_last) = (mean(&rl[..3]), mean(&rl[12..]));
    let (c_first, c_last) = (mean(&control[..3]), mean(&control[12..]));
    eprintln!("RL {rl:?}\ncontrol {control:?}");
    // The blind start: near 1/4 in both arms.
    assert!((0.1..0.45).contains(&rl_first), "RL start {rl_first}");
    assert!((0.1..0.45).contains(&c_first), "control start {c_first}");
    // Stated margins: RL gains ≥ 0.3 over its first three iterations; the control stays
    // within 0.15 of its start.
    assert!(rl_last >= rl_first + 0.3, "RL {rl_first} → {rl_last}");
    assert!(c_last <= c_first + 0.15, "control {c_first} → {c_last}");
}
