//! The batched rollout, driven by a scripted policy (known logits) and a scripted environment,
//! so every control decision is predictable: TTI fires where the kernel says and its queue comes
//! out in order, TDS resamples from the same prompt and discarded tries never reach the
//! environment, rows of different lengths finish independently, void turns are marked, and the
//! same seed gives the same records bit for bit. The last test runs the real default model on
//! the real environments.

use std::sync::{Arc, Mutex};

use reference_trainer::rollout::{
    rollout, ControlSwitches, EpisodeSpec, Policy, ProfileName, RolloutConfig, SamplingParams,
    TtiReason,
};
use reference_trainer::tokenizer::{build_default, ControlTokens, Tokenizer};
use reference_trainer::Result;
use t2po_envs::{Env, HistoryEntry, Info, Observation, Projected, Transition};

fn tokenizer() -> Tokenizer {
    let corpus: Vec<String> = (0..200)
        .map(|i| {
            format!(
                "<|im_start|>user\nobservation {i}: you are in a room. go to the door <|im_end|>\n\
                 <|im_start|>assistant\n<think>I think I should go {i}</think>\n<action>go</action><|im_end|>"
            )
        })
        .collect();
    build_default(corpus, 400).unwrap()
}

/// Emits `<think>`, then `think_len` copies of a filler token under constant logits (so `M_t`
/// is constant and TTI converges), then — once the forced queue ended with `<action>`, or after
/// `think_len` if nothing was forced — `go</action><|im_end|>`. Row `r` can be made to ramble
/// on (never closing) to exercise the response cap.
struct Script {
    vocab: usize,
    c: ControlTokens,
    filler: u32,
    tail: Vec<u32>,
    think_len: usize,
    /// Rows (by prompt's last token parity) that never stop thinking.
    ramble_on_odd_prompt: bool,
    /// Adds row-dependent noise so Φ differs between tries (drives TDS).
    noise: bool,
    /// Logit rows wider than the tokenizer, whose extra ids carry the highest logits.
    bait_from: Option<usize>,
}

struct ScriptCache {
    rows: Vec<Vec<u32>>,
    generated: Vec<usize>,
}

impl Script {
    fn next_logits(&self, row: &[u32], generated: usize, out: &mut Vec<f32>) {
        let start = out.len();
        out.resize(start + self.vocab, 0.0);
        let l = &mut out[start..];
        let last = *row.last().unwrap();
        let ramble = self.ramble_on_odd_prompt && row[0] % 2 == 1;
        let target = if generated == 0 {
            self.c.think_open
        } else if let Some(k) = self.tail_position(row) {
            self.tail[k]
        } else if !ramble && generated > self.think_len {
            // Close the think block ourselves, then the action.
            if last == self.c.think_close {
                self.c.action_open[0]
            } else {
                self.c.think_close
            }
        } else {
            self.filler
        };
        if self.noise {
            // A distribution whose entropy wanders with the position: M_t moves, Φ differs.
            for (i, x) in l.iter_mut().enumerate() {
                *x = ((i * 7 + generated * 13 + row.len()) % 11) as f32 * 0.3;
            }
        }
        l[target as usize] += 40.0;
        if let Some(from) = self.bait_from {
            l[from..].fill(80.0);
        }
    }

    /// Where in the tail the next token is, once `<action>` (its last id) was emitted.
    fn tail_position(&self, row: &[u32]) -> Option<usize> {
        let open = *self.c.action_open.last().unwrap();
        let pos = row.iter().rposition(|&t| t == open)?;
        let k = row.len() - 1 - pos;
        (k < self.tail.len()).then_some(k)
    }
}

impl Policy for Script {
    type Cache = ScriptCache;
    fn vocab_size(&self) -> usize {
        self.vocab
    }
    fn prefill(
        &self,
        prompts: &[Vec<u32>],
        _max_new: usize,
        logits: &mut Vec<f32>,
    ) -> Result<ScriptCache> {
        logits.clear();
        for p in prompts {
            self.next_logits(p, 0, logits);
        }
        Ok(ScriptCache {
            rows: prompts.to_vec(),
            generated: vec![0; prompts.len()],
        })
    }
    fn decode(&self, cache: &mut ScriptCache, tokens: &[u32], logits: &mut Vec<f32>) -> Result<()> {
        logits.clear();
        for ((row, g), &t) in cache.rows.iter_mut().zip(&mut cache.generated).zip(tokens) {
            row.push(t);
            *g += 1;
            self.next_logits(row, *g, logits);
        }
        Ok(())
    }
    fn retain(&self, cache: &mut ScriptCache, rows: &[usize]) -> Result<()> {
        cache.rows = rows.iter().map(|&r| cache.rows[r].clone()).collect();
        cache.generated = rows.iter().map(|&r| cache.generated[r]).collect();
        Ok(())
    }
}

/// Three steps to the goal; counts every step it is asked to take (discarded tries must not
/// arrive here).
struct Corridor {
    steps: usize,
    task: usize,
    log: Arc<Mutex<Vec<(usize, String)>>>,
    obs: String,
}

impl Env for Corridor {
    fn name(&self) -> &'static str {
        "corridor"
    }
    fn max_turns(&self) -> usize {
        5
    }
    fn num_tasks(&self) -> usize {
        4
    }
    fn reset(&mut self, index: usize) -> Observation {
        self.steps = 0;
        self.task = index % 4;
        self.obs = format!("room {}", self.task);
        Observation {
            text: self.obs.clone(),
            admissible: vec!["go".into()],
        }
    }
    fn task(&self) -> &str {
        "reach the end"
    }
    fn anchor(&self) -> &str {
        &self.obs
    }
    fn project(&self, response: &str) -> Projected {
        match (response.find("<action>"), response.find("</action>")) {
            (Some(a), Some(b)) if a < b => Projected {
                action: response[a + 8..b].trim().to_string(),
                valid: response.trim_start().starts_with("<think>"),
            },
            _ => Projected {
                action: response
                    .chars()
                    .rev()
                    .take(30)
                    .collect::<String>()
                    .chars()
                    .rev()
                    .collect(),
                valid: false,
            },
        }
    }
    fn step(&mut self, action: &Projected) -> Transition {
        self.log
            .lock()
            .unwrap()
            .push((self.task, action.action.clone()));
        if action.action == "go" {
            self.steps += 1;
        }
        self.obs = format!("room {} step {}", self.task, self.steps);
        let won = self.steps >= 3;
        Transition {
            observation: Observation {
                text: self.obs.clone(),
                admissible: vec!["go".into()],
            },
            reward: if won { 10.0 } else { 0.0 },
            done: won,
            info: Info {
                won,
                score: if won { 1.0 } else { 0.0 },
                source: String::new(),
                // The scoring step reports its score's parts (as WebShop's purchase does).
                parts: if won {
                    vec![("r_type", 1.0), ("steps", self.steps as f64)]
                } else {
                    Vec::new()
                },
            },
        }
    }
    fn prompt(&self, history: &[HistoryEntry], history_length: usize) -> String {
        let start = history.len().saturating_sub(history_length);
        let mut s = format!("task {}: ", self.task);
        for h in &history[start..] {
            s.push_str(&format!("[{} -> {}] ", h.observation, h.action));
        }
        s.push_str(&self.obs);
        s
    }
}

fn corridors(n: usize, log: &Arc<Mutex<Vec<(usize, String)>>>) -> Vec<Box<dyn Env + Send>> {
    (0..n)
        .map(|_| {
            Box::new(Corridor {
                steps: 0,
                task: 0,
                log: log.clone(),
                obs: String::new(),
            }) as Box<dyn Env + Send>
        })
        .collect()
}

fn setup(switches: ControlSwitches) -> (Tokenizer, Script, RolloutConfig) {
    let tok = tokenizer();
    let c = tok.control_tokens().unwrap();
    let mut tail = tok.encode("go").unwrap();
    tail.extend(tok.encode("</action>").unwrap());
    tail.push(c.im_end);
    let filler = tok.encode(" door").unwrap()[0];
    let script = Script {
        vocab: tok.id_bound(),
        c: c.clone(),
        filler,
        tail,
        think_len: 40,
        ramble_on_odd_prompt: false,
        noise: false,
        bait_from: None,
    };
    let mut control = switches.control_config(&c).unwrap();
    control.min_len = 6;
    control.max_think = 30;
    let cfg = RolloutConfig {
        control,
        mark_void: false,
        sampling: SamplingParams::default(),
        max_response_tokens: 64,
        max_prompt_tokens: 512,
        history_length: 2,
        max_turns: 5,
        seed: 7,
    };
    (tok, script, cfg)
}

fn specs(n: usize) -> Vec<EpisodeSpec> {
    (0..n)
        .map(|i| EpisodeSpec {
            task: i % 2,
            group: i % 2,
        })
        .collect()
}

#[test]
fn tti_fires_on_convergence_and_the_queue_comes_out_in_order() {
    let (tok, script, cfg) = setup(ControlSwitches {
        tds: false,
        ..ControlSwitches::default()
    });
    let c = tok.control_tokens().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut envs = corridors(4, &log);
    let (records, stats) = rollout(&script, &tok, &mut envs, &specs(4), &cfg, |_, _| {}).unwrap();
    assert_eq!(records.len(), 4);
    for r in &records {
        assert!(r.success, "{r:?}");
        assert_eq!(r.num_turns(), 3);
        // The scoring step's parts reach the record (and from there metrics.jsonl).
        let parts: Vec<(&str, f64)> = r
            .reward_parts
            .iter()
            .map(|(k, &v)| (k.as_str(), v))
            .collect();
        assert_eq!(parts, [("r_type", 1.0), ("steps", 3.0)]);
        for t in &r.turns {
            let g = &t.generation;
            let fire = g.tti.expect("TTI fires on a constant M_t");
            assert_eq!(fire.reason, TtiReason::Converged);
            // Constant M_t: deltas are 0 from t = 2; the window of N + 1 = 5 deltas is full at
            // t = 6 = L_min, so it fires there.
            assert_eq!(fire.position, 6);
            let forced: Vec<u32> = g
                .response_ids
                .iter()
                .zip(&g.forced)
                .filter(|(_, &f)| f)
                .map(|(&id, _)| id)
                .collect();
            assert_eq!(forced, c.forced_queue);
            // <think> + 5 fillers + the queue at positions 7.. .
            let first = g.forced.iter().position(|&f| f).unwrap();
            assert_eq!(first, 6);
            assert_eq!(
                &g.response_ids[first..first + c.forced_queue.len()],
                &c.forced_queue[..]
            );
            assert!(g.signal[first].is_none() && g.signal[0].is_some());
            assert!(t.format_valid && t.action == "go");
            assert_eq!(g.log_probs.len(), g.response_ids.len());
            assert_eq!(t.response_mask.len(), g.response_ids.len());
        }
    }
    assert_eq!(log.lock().unwrap().len(), 12);
    assert_eq!(stats.generations, 12);
}

#[test]
fn the_budget_fires_when_only_l_max_may_cut() {
    let (tok, script, cfg) = setup(ControlSwitches {
        tds: false,
        hard_budget: true,
        ..ControlSwitches::default()
    });
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut envs = corridors(2, &log);
    let (records, _) = rollout(&script, &tok, &mut envs, &specs(2), &cfg, |_, _| {}).unwrap();
    for r in &records {
        for t in &r.turns {
            let fire = t.generation.tti.expect("the budget always fires");
            assert_eq!(fire.reason, TtiReason::Budget);
            assert_eq!(t.generation.think_tokens, 30);
        }
    }
}

#[test]
fn without_tti_the_model_thinks_as_long_as_it_likes() {
    let (tok, script, cfg) = setup(ControlSwitches {
        tti: false,
        tds: false,
        ..ControlSwitches::default()
    });
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut envs = corridors(2, &log);
    let (records, _) = rollout(&script, &tok, &mut envs, &specs(2), &cfg, |_, _| {}).unwrap();
    for t in records.iter().flat_map(|r| &r.turns) {
        assert!(t.generation.tti.is_none());
        assert!(t.generation.forced.iter().all(|&f| !f));
        assert!(
            t.generation.think_tokens > 30,
            "{}",
            t.generation.think_tokens
        );
    }
}

#[test]
fn tds_resamples_from_the_same_prompt_and_discards_never_reach_the_env() {
    let (tok, mut script, mut cfg) = setup(ControlSwitches::default());
    script.noise = true;
    cfg.control.eta = 10.0; // every |ΔΦ| is below η: every turn after the first resamples
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut envs = corridors(3, &log);
    let (records, stats) = rollout(&script, &tok, &mut envs, &specs(3), &cfg, |_, _| {}).unwrap();
    let mut kept_turns = 0;
    for r in &records {
        for t in &r.turns {
            kept_turns += 1;
            if t.turn == 0 {
                assert_eq!(t.tds_tries, 1, "turn 1 is never resampled");
            } else {
                assert_eq!(t.tds_tries, 1 + cfg.control.max_resamples);
                assert_eq!(t.discarded.len() as u32, cfg.control.max_resamples);
            }
        }
        assert_eq!(r.resamples as usize, (r.num_turns() - 1) * 2);
    }
    // The environment saw exactly the kept turns.
    assert_eq!(log.lock().unwrap().len(), kept_turns);
    let discarded: usize = records.iter().map(|r| r.resamples as usize).sum();
    assert_eq!(stats.generations, kept_turns + discarded);
}

#[test]
fn greedy_tds_resamples_are_not_decoded_again_and_keep_what_decoding_them_keeps() {
    // At T = 0 a resample is its first try again; the rollout copies it instead of decoding
    // it. Against it: T = 1e-4, which takes the decoding path and, with the script's margins
    // (≥ 37 logits), draws the argmax every time. Φ and M_t come from the raw logits, so they
    // do not depend on the temperature; only the log-probs do (untempered at T = 0).
    let run = |temperature: f32| {
        let (tok, mut script, mut cfg) = setup(ControlSwitches::default());
        script.noise = true;
        cfg.control.eta = 10.0; // every later turn resamples B_max times
        cfg.sampling.temperature = temperature;
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut envs = corridors(3, &log);
        let (records, stats) =
            rollout(&script, &tok, &mut envs, &specs(3), &cfg, |_, _| {}).unwrap();
        let env_steps = log.lock().unwrap().len();
        (records, stats, env_steps, cfg.control.max_resamples)
    };
    let (greedy, g_stats, g_steps, b_max) = run(0.0);
    let (decoded, d_stats, d_steps, _) = run(1e-4);
    let kept_turns: usize = greedy.iter().map(|r| r.num_turns()).sum();
    let resamples: usize = greedy.iter().map(|r| r.resamples as usize).sum();
    assert!(resamples > 0 && kept_turns > greedy.len());
    assert_eq!(resamples, (kept_turns - greedy.len()) * b_max as usize);
    // Decoded once per kept turn at T = 0; once per try on the decoding path.
    assert_eq!(g_stats.generations, kept_turns);
    assert_eq!(d_stats.generations, kept_turns + resamples);
    assert!(g_stats.decoded_tokens < d_stats.decoded_tokens);
    assert_eq!((g_steps, d_steps), (kept_turns, kept_turns));
    assert_eq!(greedy.len(), decoded.len());
    for (g, d) in greedy.iter().zip(&decoded) {
        assert_eq!(
            (g.success, g.score, g.total_reward, g.resamples),
            (d.success, d.score, d.total_reward, d.resamples)
        );
        assert_eq!(g.turns.len(), d.turns.len());
        for (a, b) in g.turns.iter().zip(&d.turns) {
            assert_eq!(a.generation.response_ids, b.generation.response_ids);
            assert_eq!(a.generation.forced, b.generation.forced);
            assert_eq!(a.generation.signal, b.generation.signal);
            assert_eq!(a.generation.phi, b.generation.phi);
            assert_eq!(a.generation.tti, b.generation.tti);
            assert_eq!(
                (a.tds_tries, a.gamma, &a.discarded, &a.action),
                (b.tds_tries, b.gamma, &b.discarded, &b.action)
            );
            for t in &a.discarded {
                assert_eq!(t.phi, a.generation.phi, "a greedy try equals the kept one");
            }
        }
    }
}

#[test]
fn capped_rows_finish_alone_and_void_turns_are_marked() {
    let (tok, mut script, mut cfg) = setup(ControlSwitches {
        tti: false,
        tds: false,
        ..ControlSwitches::default()
    });
    cfg.mark_void = true;
    script.ramble_on_odd_prompt = true;
    cfg.max_turns = 2;
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut envs = corridors(4, &log);
    let (records, _) = rollout(&script, &tok, &mut envs, &specs(4), &cfg, |_, _| {}).unwrap();
    let mut void = 0;
    for r in &records {
        for t in &r.turns {
            if t.generation.truncated {
                assert_eq!(t.generation.response_ids.len(), cfg.max_response_tokens);
                assert!(t.void);
                void += 1;
            } else {
                assert!(!t.void && t.format_valid);
            }
        }
        assert_eq!(r.void, r.turns.iter().any(|t| t.void));
    }
    assert!(void > 0, "some prompt started with an odd token");
}

#[test]
fn the_same_seed_gives_the_same_rollout() {
    let run = |seed: u64| {
        let (tok, mut script, mut cfg) = setup(ControlSwitches::default());
        script.noise = true;
        cfg.seed = seed;
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut envs = corridors(4, &log);
        let (records, _) = rollout(&script, &tok, &mut envs, &specs(4), &cfg, |_, _| {}).unwrap();
        serde_json::to_string(&records).unwrap()
    };
    assert_eq!(run(3), run(3));
}

#[test]
fn released_profile_forces_only_think_close() {
    let (tok, script, mut cfg) = setup(ControlSwitches {
        profile: ProfileName::Released,
        tds: false,
        ..ControlSwitches::default()
    });
    let c = tok.control_tokens().unwrap();
    cfg.control.max_think = 25;
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut envs = corridors(1, &log);
    let (records, _) = rollout(&script, &tok, &mut envs, &specs(1), &cfg, |_, _| {}).unwrap();
    let g = &records[0].turns[0].generation;
    let forced: Vec<u32> = g
        .response_ids
        .iter()
        .zip(&g.forced)
        .filter(|(_, &f)| f)
        .map(|(&i, _)| i)
        .collect();
    assert_eq!(forced, vec![c.think_close]);
}

#[test]
fn ids_beyond_the_tokenizer_are_never_drawn() {
    let (tok, mut script, cfg) = setup(ControlSwitches {
        tds: false,
        ..ControlSwitches::default()
    });
    // A model with 50 more logit rows than the tokenizer has ids, all of them the most likely.
    script.bait_from = Some(script.vocab);
    script.vocab += 50;
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut envs = corridors(2, &log);
    let (records, _) = rollout(&script, &tok, &mut envs, &specs(2), &cfg, |_, _| {}).unwrap();
    for t in records.iter().flat_map(|r| &r.turns) {
        assert!(t
            .generation
            .response_ids
            .iter()
            .all(|&id| (id as usize) < tok.id_bound()));
    }
    assert!(records.iter().all(|r| r.success));
}

#[test]
fn search_style_environments_are_forced_to_close_thinking_only() {
    let tok = tokenizer();
    let c = tok.control_tokens().unwrap();
    let paper = ControlSwitches::default();
    let action = paper.control_config(&c).unwrap();
    assert_eq!(action.queue(), &c.forced_queue[..]);
    let search = paper.control_config_for(&c, &["search", "answer"]).unwrap();
    let mut want = vec![c.think_close];
    want.extend(&c.newline);
    assert_eq!(search.queue(), &want[..]);
    let released = ControlSwitches {
        profile: ProfileName::Released,
        ..paper
    };
    assert_eq!(
        released
            .control_config_for(&c, &["search", "answer"])
            .unwrap()
            .queue(),
        &[c.think_close]
    );
}
