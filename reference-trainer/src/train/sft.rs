//! Supervised fine-tuning on (prompt, response) pairs with the loss on response tokens only —
//! the cold start's first stage (the experts' demonstrations) and the fine-tuning stage of
//! rejection sampling (RFT, spec §5).

use std::borrow::Borrow;
use std::ops::Range;

use crate::error::{Error, Result};
use crate::model::Qwen3;
use crate::rollout::{EnvPool, Split};
use crate::tokenizer::Tokenizer;

use super::optimizer::{Accumulated, AdamW, StepReport};

/// One demonstration: a chat-formatted prompt and the response that should follow it (ending
/// with the end-of-turn token).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Demo {
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// Response token ids (the loss is on these).
    pub response: Vec<u32>,
}

impl Demo {
    /// Its prompt and response tokens: the row it is in a forward pass.
    pub fn tokens(&self) -> usize {
        self.prompt.len() + self.response.len()
    }
}

/// What one SFT step did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SftReport {
    /// Token-mean negative log-likelihood of the responses, before the update.
    pub loss: f64,
    /// Response tokens in the batch.
    pub tokens: usize,
    /// The optimizer step.
    pub step: StepReport,
}

/// The experts' demonstrations on the training tasks `tasks` of `pool` (draw them over the
/// whole split — [`super::rft::sample_tasks`] — so every kind of task is in them): every step's
/// prompt (chat-formatted, cut to `max_prompt_tokens` from the left, as the rollout does) and
/// the expert's full response followed by `<|im_end|>`.
pub fn expert_demos(
    pool: &EnvPool,
    tokenizer: &Tokenizer,
    tasks: &[usize],
    seed: u64,
    max_prompt_tokens: usize,
) -> Result<Vec<Demo>> {
    Ok(expert_demos_counted(pool, tokenizer, tasks, seed, max_prompt_tokens)?.0)
}

/// [`expert_demos`], and how many of the demonstrations had their prompt cut to
/// `max_prompt_tokens` (a cut prompt loses its beginning: the instruction and the template's
/// head; the cold start says so, so a cap too small for the environment's prompts is seen).
pub fn expert_demos_counted(
    pool: &EnvPool,
    tokenizer: &Tokenizer,
    tasks: &[usize],
    seed: u64,
    max_prompt_tokens: usize,
) -> Result<(Vec<Demo>, usize)> {
    let end = tokenizer.control_tokens()?.im_end;
    let mut out = Vec::new();
    let mut prompts_cut = 0;
    let n = pool.num_tasks(Split::Train);
    for &task in tasks {
        if task >= n {
            return Err(Error::invalid(
                "demonstrations",
                format!("training task {task} does not exist (the split has {n})"),
            ));
        }
        let episode = pool.expert_episode(Split::Train, task, seed ^ task as u64);
        for step in episode.steps {
            let Some(prompt) = step.prompt else { continue };
            let mut p = tokenizer.encode(&tokenizer.chat_prompt(&prompt))?;
            let cut = p.len().saturating_sub(max_prompt_tokens);
            p.drain(..cut);
            prompts_cut += usize::from(cut > 0);
            let mut r = tokenizer.encode(&step.response)?;
            r.push(end);
            out.push(Demo {
                prompt: p,
                response: r,
            });
        }
    }
    Ok((out, prompts_cut))
}

/// Cuts the thinking of a share `share` of `demos` where TTI could cut it, so the cold start
/// shows the policy what follows a forced `</think>` (`rft.cut_think`). A chosen demonstration
/// `<think>` + `n` thought tokens + `</think>…` keeps its first `k` thought tokens, `k` drawn
/// uniformly from `max(min_len − 1, 1)..n` (TTI fires at t ≥ `min_len`, after `t − 1` tokens,
/// and a cut is shorter than the expert's thought), then `queue` — the rollout's forced tokens
/// — and the expert's response after the queue's text, re-encoded, then its end token: the
/// tokens a rollout holds after TTI fires at step `k + 1` and the policy writes the expert's
/// action. Demonstrations without a think span, with one of at most `max(min_len − 1, 1)`
/// tokens, or whose text after the span does not begin with the queue's text are left whole.
/// Returns how many were cut; the draws depend on `seed` and the demonstrations only.
pub fn cut_thinking(
    demos: &mut [Demo],
    tokenizer: &Tokenizer,
    queue: &[u32],
    min_len: u32,
    share: f64,
    seed: u64,
) -> Result<usize> {
    use rand::{Rng, SeedableRng};
    if !(0.0..=1.0).contains(&share) {
        return Err(Error::invalid(
            "rft.cut_think",
            format!("{share}: must be in [0, 1]"),
        ));
    }
    let ct = tokenizer.control_tokens()?;
    if queue.first() != Some(&ct.think_close) {
        return Err(Error::invalid(
            "forced queue",
            "must begin with `</think>` to cut a demonstration's thinking",
        ));
    }
    let queue_text = tokenizer.decode(queue)?;
    let lo = (min_len.saturating_sub(1) as usize).max(1);
    let mut rng = rand_chacha::ChaCha12Rng::seed_from_u64(seed);
    let mut cut = 0;
    for d in demos.iter_mut() {
        // One draw per demonstration whatever happens, so the choice of one does not shift
        // the others'.
        let pick = rng.random::<f64>() < share;
        let at = rng.random::<u64>();
        if !pick || d.response.first() != Some(&ct.think_open) {
            continue;
        }
        let Some(close) = d.response.iter().position(|&t| t == ct.think_close) else {
            continue;
        };
        let n = close - 1;
        if n <= lo {
            continue;
        }
        let Some((&end, body)) = d.response[close..].split_last() else {
            continue;
        };
        let text = tokenizer.decode(body)?;
        let Some(rest) = text.strip_prefix(&queue_text) else {
            continue;
        };
        let k = lo + (at % (n - lo) as u64) as usize;
        let mut r = d.response[..1 + k].to_vec();
        r.extend_from_slice(queue);
        r.extend(tokenizer.encode(rest)?);
        r.push(end);
        d.response = r;
        cut += 1;
    }
    Ok(cut)
}

/// One optimizer step on `batch`, in micro-batches of `micro_batch` sequences whose gradients
/// are summed (each scaled by its share of the batch's response tokens, so the result is the
/// token mean over the whole batch).
///
/// `prompt_weight` > 0 adds the prompt tokens' negative log-likelihood (from the second prompt
/// token on) at that weight relative to a response token — `transformers`' "train on inputs",
/// or OpenAI's former `prompt_loss_weight` — normalised by the response tokens all the same, so
/// the response term is unchanged. For a policy trained from random weights this is language
/// modelling on the environments' own text (the prompts, observations and retrieved passages
/// repeat names, which teaches copying); for a pretrained one it stays 0. The reported `loss`
/// is the response tokens' alone.
pub fn sft_step(
    model: &Qwen3,
    opt: &mut AdamW,
    batch: &[Demo],
    micro_batch: usize,
    prompt_weight: f64,
) -> Result<SftReport> {
    if batch.is_empty() || micro_batch == 0 {
        return Err(Error::invalid(
            "sft",
            "need at least one demonstration and micro_batch ≥ 1",
        ));
    }
    let groups: Vec<Range<usize>> = (0..batch.len())
        .step_by(micro_batch)
        .map(|a| a..(a + micro_batch).min(batch.len()))
        .collect();
    sft_step_in(model, opt, batch, &groups, prompt_weight)
}

/// Padded tokens a micro-batch is worth on top of its own, in [`padded_micro_batches`]'s cost:
/// what a forward and backward of fewer rows loses to their fixed costs. Measured on the 5 M
/// WebShop model (`cargo bench -p reference-trainer --bench train_step`, stop 57, AMD EPYC): one
/// 768-token row trains at 73 % of eight rows' rate, two at 88 %, four 384-token rows at 93 %
/// — 130 to 280 tokens a micro-batch.
pub const MICRO_BATCH_OVERHEAD_TOKENS: usize = 200;

/// The micro-batches of a fine-tuning step whose rows are sorted longest first (`lens`, each
/// row's prompt and response tokens; another order gets the best split of that order):
/// contiguous runs, each padded to its longest row, that cost the fewest padded tokens plus
/// [`MICRO_BATCH_OVERHEAD_TOKENS`] each, no run over `budget` padded tokens unless it is a
/// single row. A batch of turns from 200 to 800 tokens
/// in one micro-batch is a quarter padding (the 5 M WebShop SFT: 27.8 % of 17.3 M padded
/// tokens); split where the lengths drop, it costs 18.6 % less, overhead counted. Rows of one
/// length (pretraining) stay in the fewest runs the budget allows. The gradient is the same
/// sum whatever the split (up to float summation order).
pub fn padded_micro_batches(lens: &[usize], budget: usize) -> Vec<Range<usize>> {
    let n = lens.len();
    // best[j]: the least cost of rows 0..j; from[j]: where its last run begins.
    let mut best = vec![usize::MAX; n + 1];
    let mut from = vec![0; n + 1];
    best[0] = 0;
    for j in 1..=n {
        // Runs ending at j, shortest first: each start further back pads more rows to a row
        // at least as long, so past the budget no earlier start fits (the loop stays within
        // budget / shortest row steps). Ties go to the earliest start.
        let mut longest = 1;
        for i in (0..j).rev() {
            longest = longest.max(lens[i]);
            let padded = longest * (j - i);
            if j - i > 1 && padded > budget {
                break;
            }
            let cost = best[i] + padded + MICRO_BATCH_OVERHEAD_TOKENS;
            if cost <= best[j] {
                best[j] = cost;
                from[j] = i;
            }
        }
    }
    let mut runs = Vec::new();
    let mut j = n;
    while j > 0 {
        runs.push(from[j]..j);
        j = from[j];
    }
    runs.reverse();
    runs
}

/// Sorts `batch` longest first (stably) and gives its [`padded_micro_batches`] within `budget`
/// padded tokens: the plan every fine-tuning step runs (the SFT, the rejection rounds,
/// pretraining, RL's SFT anchor).
pub fn plan_micro_batches<D: Borrow<Demo>>(batch: &mut [D], budget: usize) -> Vec<Range<usize>> {
    batch.sort_by_key(|d| std::cmp::Reverse(d.borrow().tokens()));
    let lens: Vec<usize> = batch.iter().map(|d| d.borrow().tokens()).collect();
    padded_micro_batches(&lens, budget)
}

/// [`sft_step`] in the micro-batches `groups` (ranges of `batch`, in order, covering it once),
/// whose gradients are summed.
pub fn sft_step_in(
    model: &Qwen3,
    opt: &mut AdamW,
    batch: &[Demo],
    groups: &[Range<usize>],
    prompt_weight: f64,
) -> Result<SftReport> {
    let mut next = 0;
    for g in groups {
        if g.start != next || g.is_empty() {
            return Err(Error::invalid(
                "sft",
                format!("micro-batches {groups:?} do not cover the batch's rows in order"),
            ));
        }
        next = g.end;
    }
    if batch.is_empty() || next != batch.len() {
        return Err(Error::invalid(
            "sft",
            format!(
                "need at least one demonstration, in micro-batches covering all {} ({groups:?})",
                batch.len()
            ),
        ));
    }
    if !(prompt_weight.is_finite() && prompt_weight >= 0.0) {
        return Err(Error::invalid(
            "sft",
            format!("prompt_weight {prompt_weight}: must be ≥ 0"),
        ));
    }
    if let Some(d) = batch
        .iter()
        .find(|d| d.prompt.is_empty() || d.response.is_empty())
    {
        return Err(Error::invalid(
            "sft",
            format!(
                "a demonstration with {} prompt and {} response tokens (both must be non-empty)",
                d.prompt.len(),
                d.response.len()
            ),
        ));
    }
    let total: usize = batch.iter().map(|d| d.response.len()).sum();
    let mut acc = Accumulated::default();
    let mut nll = 0.0;
    for chunk in groups.iter().map(|g| &batch[g.clone()]) {
        let seqs: Vec<Vec<u32>> = chunk
            .iter()
            .map(|d| d.prompt.iter().chain(&d.response).copied().collect())
            .collect();
        let loss = if prompt_weight > 0.0 {
            // Every position from 1; weights: prompt_weight on prompt targets, 1 on responses.
            let start = vec![1; chunk.len()];
            let out = model.token_log_probs(&seqs, &start)?;
            let mut w = Vec::with_capacity(out.log_probs.dim(0)?);
            let mut resp = Vec::with_capacity(w.capacity());
            for d in chunk {
                let n = d.tokens();
                for t in 1..n {
                    let is_resp = t >= d.prompt.len();
                    w.push(if is_resp {
                        1.0f32
                    } else {
                        prompt_weight as f32
                    });
                    resp.push(if is_resp { 1.0f32 } else { 0.0 });
                }
            }
            let n = w.len();
            let dev = out.log_probs.device();
            let w = candle_core::Tensor::from_vec(w, n, dev)?.to_dtype(out.log_probs.dtype())?;
            let resp =
                candle_core::Tensor::from_vec(resp, n, dev)?.to_dtype(out.log_probs.dtype())?;
            let resp_nll = ((&out.log_probs * &resp)?.sum_all()?.neg()? / total as f64)?;
            nll += resp_nll
                .to_dtype(candle_core::DType::F64)?
                .to_scalar::<f64>()?;
            ((&out.log_probs * &w)?.sum_all()?.neg()? / total as f64)?
        } else {
            let start: Vec<usize> = chunk.iter().map(|d| d.prompt.len()).collect();
            let out = model.token_log_probs(&seqs, &start)?;
            let loss = (out.log_probs.sum_all()?.neg()? / total as f64)?;
            nll += loss.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
            loss
        };
        acc.add(model.params(), &loss.backward()?)?;
    }
    let step = opt.step(model.params(), &acc)?;
    Ok(SftReport {
        loss: nll,
        tokens: total,
        step,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Qwen3Config;
    use crate::train::optimizer::AdamWConfig;
    use candle_core::{DType, Device};

    #[test]
    fn the_loss_falls_on_memorised_demonstrations() {
        let cfg = Qwen3Config::small(64, 32, 64, 2, 4, 2, 8, 64);
        let model = Qwen3::random(cfg, 5, DType::F32, &Device::Cpu).unwrap();
        let mut opt = AdamW::new(AdamWConfig {
            lr: 1e-2,
            ..AdamWConfig::default()
        })
        .unwrap();
        let batch = vec![
            Demo {
                prompt: vec![1, 2, 3],
                response: vec![10, 11, 12, 13],
            },
            Demo {
                prompt: vec![4, 5],
                response: vec![20, 21, 22],
            },
        ];
        let first = sft_step(&model, &mut opt, &batch, 1, 0.0).unwrap();
        assert_eq!(first.tokens, 7);
        // A random model starts near ln V = ln 64 ≈ 4.16.
        assert!((first.loss - (64f64).ln()).abs() < 0.3, "{}", first.loss);
        let mut last = first.loss;
        for _ in 0..40 {
            last = sft_step(&model, &mut opt, &batch, 2, 0.0).unwrap().loss;
        }
        assert!(last < 0.5 * first.loss, "{} → {last}", first.loss);
        assert!(sft_step(&model, &mut opt, &[], 1, 0.0).is_err());
    }

    fn think_tokenizer() -> Tokenizer {
        let corpus: Vec<String> = (0..30)
            .map(|i| {
                format!(
                    "<think>the results show {i} so the answer is here</think>\n\
                     <search>alpha beta {i}</search><action>search[red tea]</action>"
                )
            })
            .collect();
        crate::tokenizer::build_default(corpus, 500).unwrap()
    }

    /// The demonstrations count the prompts cut to the cap, and a cut prompt is the whole
    /// prompt's last `cap` tokens (the rollout's cut), the response untouched.
    #[test]
    fn expert_demos_count_the_prompts_cut_to_the_cap() {
        let tok = think_tokenizer();
        let size = crate::rollout::PoolSize {
            products: 200,
            train_games: 2,
            held_out_games: 2,
            passages: 10,
            train_questions: 1,
            held_out_questions: 1,
        };
        let pool = EnvPool::generated(crate::rollout::EnvKind::Webshop, 3, size).unwrap();
        let tasks = [0, 1, 2, 3];
        let (whole, none) = expert_demos_counted(&pool, &tok, &tasks, 5, 1 << 20).unwrap();
        assert_eq!(none, 0);
        let lens: Vec<usize> = whole.iter().map(|d| d.prompt.len()).collect();
        let cap = (lens.iter().max().unwrap() + lens.iter().min().unwrap()) / 2;
        let (cut, n) = expert_demos_counted(&pool, &tok, &tasks, 5, cap).unwrap();
        assert_eq!(n, lens.iter().filter(|&&l| l > cap).count());
        assert!(n > 0 && n < whole.len(), "{n} of {}", whole.len());
        assert_eq!(cut.len(), whole.len());
        for (c, w) in cut.iter().zip(&whole) {
            assert_eq!(c.prompt, w.prompt[w.prompt.len().saturating_sub(cap)..]);
            assert_eq!(c.response, w.response);
        }
        assert_eq!(
            expert_demos(&pool, &tok, &tasks, 5, cap).unwrap().len(),
            cut.len()
        );
        // The pool's memory window (a config's rollout.history_length) shapes the prompts:
        // without history every prompt is at most as long, the later turns' strictly shorter.
        let mut short = pool;
        assert_eq!(short.history_length(), 2, "WebShop's P");
        short.set_history_length(0);
        let none = expert_demos(&short, &tok, &tasks, 5, 1 << 20).unwrap();
        assert_eq!(none.len(), whole.len());
        assert!(none
            .iter()
            .zip(&whole)
            .all(|(a, b)| a.prompt.len() <= b.prompt.len()));
        assert!(none
            .iter()
            .zip(&whole)
            .any(|(a, b)| a.prompt.len() < b.prompt.len()));
    }

    #[test]
    fn cut_thinking_stops_the_thought_where_tti_could_and_keeps_the_action() {
        let tok = think_tokenizer();
        let ct = tok.control_tokens().unwrap();
        let close_of = |r: &[u32]| r.iter().position(|&t| t == ct.think_close);
        let demo = |text: &str| {
            let mut response = tok.encode(text).unwrap();
            response.push(ct.im_end);
            Demo {
                prompt: vec![1, 2],
                response,
            }
        };
        let thought = "the results show 7 so the answer is here ".repeat(4);
        let long = format!("<think>{thought}</think>\n<search>alpha beta 3</search>");
        let whole = demo(&long);
        let close = close_of(&whole.response).unwrap();
        let n = close - 1;
        let min_len = 8u32;
        assert!(n > 20, "{n} thought tokens");
        let search_queue: Vec<u32> = ct.forced_queue[..1 + ct.newline.len()].to_vec();
        let mut demos = vec![whole.clone(); 400];
        // Left whole: no think span; a thought of min_len − 1 tokens (TTI cannot cut it shorter).
        demos.push(demo("<search>alpha beta 3</search>"));
        let short_thought = tok.decode(&whole.response[1..min_len as usize]).unwrap();
        let short = demo(&format!(
            "<think>{short_thought}</think>\n<search>x</search>"
        ));
        assert_eq!(close_of(&short.response), Some(min_len as usize));
        demos.push(short.clone());
        let cut = cut_thinking(&mut demos, &tok, &search_queue, min_len, 1.0, 3).unwrap();
        assert_eq!(cut, 400);
        assert_eq!(
            demos[400].response,
            tok.encode("<search>alpha beta 3</search>")
                .map(|mut r| {
                    r.push(ct.im_end);
                    r
                })
                .unwrap()
        );
        assert_eq!(demos[401], short);
        let mut kept = Vec::new();
        for d in &demos[..400] {
            assert_eq!(d.prompt, whole.prompt);
            let c = close_of(&d.response).unwrap();
            let k = c - 1;
            // TTI fires at t ≥ L_min after t − 1 thought tokens; the cut is shorter than the
            // expert's thought.
            assert!((min_len as usize - 1..n).contains(&k), "k = {k}");
            assert_eq!(d.response[..c], whole.response[..c]);
            assert_eq!(d.response[c..c + search_queue.len()], search_queue[..]);
            assert_eq!(*d.response.last().unwrap(), ct.im_end);
            let after = &d.response[c + search_queue.len()..d.response.len() - 1];
            assert_eq!(tok.decode(after).unwrap(), "<search>alpha beta 3</search>");
            kept.push(k);
        }
        // Every cut length is drawn: 400 uniform draws over 15–20 values reach both ends.
        assert_eq!(*kept.iter().min().unwrap(), min_len as usize - 1);
        assert_eq!(*kept.iter().max().unwrap(), n - 1);

        // The paper's queue for `<action>` environments: `</think>`, `\n`, `<action>`.
        let act = demo(&format!(
            "<think>{thought}</think>\n<action>search[red tea]</action>"
        ));
        let mut one = vec![act.clone()];
        assert_eq!(
            cut_thinking(&mut one, &tok, &ct.forced_queue, min_len, 1.0, 9).unwrap(),
            1
        );
        let c = close_of(&one[0].response).unwrap();
        assert_eq!(
            one[0].response[c..c + ct.forced_queue.len()],
            ct.forced_queue[..]
        );
        let text = tok.decode(&one[0].response).unwrap();
        assert!(
            text.ends_with("</think>\n<action>search[red tea]</action><|im_end|>"),
            "{text}"
        );

        // A share draws about that share, the same ones for the same seed; 0 cuts nothing.
        let mut half = vec![whole.clone(); 400];
        let n_half = cut_thinking(&mut half, &tok, &search_queue, min_len, 0.5, 4).unwrap();
        assert!((160..=240).contains(&n_half), "{n_half}");
        let mut again = vec![whole.clone(); 400];
        cut_thinking(&mut again, &tok, &search_queue, min_len, 0.5, 4).unwrap();
        assert_eq!(half, again);
        let mut none = vec![whole.clone(); 10];
        assert_eq!(
            cut_thinking(&mut none, &tok, &search_queue, min_len, 0.0, 4).unwrap(),
            0
        );
        assert!(none.iter().all(|d| *d == whole));

        // A text after the span that does not begin with the queue's: left whole.
        let mut other = vec![demo(&format!("<think>{thought}</think><search>q</search>"))];
        let before = other.clone();
        assert_eq!(
            cut_thinking(&mut other, &tok, &search_queue, min_len, 1.0, 5).unwrap(),
            0
        );
        assert_eq!(other, before);
        // Bad arguments.
        assert!(cut_thinking(&mut none, &tok, &search_queue, min_len, 1.5, 4).is_err());
        assert!(cut_thinking(&mut none, &tok, &ct.newline, min_len, 0.5, 4).is_err());
    }

    /// The padded tokens of the run `r` of `lens`.
    fn padded(lens: &[usize], r: &Range<usize>) -> usize {
        lens[r.clone()].iter().max().unwrap() * r.len()
    }

    /// The cost [`padded_micro_batches`] minimises, of any split.
    fn cost(lens: &[usize], runs: &[Range<usize>]) -> usize {
        runs.iter()
            .map(|r| padded(lens, r) + MICRO_BATCH_OVERHEAD_TOKENS)
            .sum()
    }

    #[test]
    fn a_batch_splits_where_its_lengths_drop_and_one_length_stays_whole() {
        let lens = [800, 790, 780, 300, 290, 280, 220, 210];
        assert_eq!(padded_micro_batches(&lens, 16384), [0..3, 3..8]);
        // Pretraining's rows, all of one length: the fewest runs the budget allows.
        assert_eq!(padded_micro_batches(&[128; 16], 16384), vec![(0..16)]);
        assert_eq!(padded_micro_batches(&[128; 16], 1024), [0..8, 8..16]);
        // A row over the budget is a run of its own; an empty batch has none.
        assert_eq!(padded_micro_batches(&[5000, 10], 1000), [0..1, 1..2]);
        assert!(padded_micro_batches(&[], 1000).is_empty());
    }

    proptest::proptest! {
        #[test]
        fn the_split_is_the_cheapest_within_the_budget(
            mut lens in proptest::collection::vec(1usize..1000, 1..11),
            budget in 1usize..6000,
            sorted in proptest::bool::weighted(0.8),
        ) {
            // Longest first as the fine-tuning sorts them, or as they come.
            if sorted {
                lens.sort_by(|a, b| b.cmp(a));
            }
            let runs = padded_micro_batches(&lens, budget);
            // Contiguous runs covering every row once, in order, each within the budget.
            let mut next = 0;
            for r in &runs {
                proptest::prop_assert_eq!(r.start, next);
                proptest::prop_assert!(!r.is_empty());
                proptest::prop_assert!(r.len() == 1 || padded(&lens, r) <= budget);
                next = r.end;
            }
            proptest::prop_assert_eq!(next, lens.len());
            // No split costs less: every one of the 2^(n-1) splits, tried.
            let n = lens.len();
            let mut least = usize::MAX;
            for mask in 0u32..1 << (n - 1) {
                let mut split = Vec::new();
                let mut a = 0;
                for b in 1..=n {
                    if b == n || mask & (1 << (b - 1)) != 0 {
                        split.push(a..b);
                        a = b;
                    }
                }
                if split.iter().all(|r| r.len() == 1 || padded(&lens, r) <= budget) {
                    least = least.min(cost(&lens, &split));
                }
            }
            proptest::prop_assert_eq!(cost(&lens, &runs), least);
            // Never worse than the plan before it (runs of budget / longest rows).
            if sorted {
                let per = (budget / lens[0]).max(1);
                let before: Vec<Range<usize>> =
                    (0..n).step_by(per).map(|a| a..(a + per).min(n)).collect();
                proptest::prop_assert!(cost(&lens, &runs) <= cost(&lens, &before));
            }
        }
    }

    #[test]
    fn micro_batches_that_do_not_cover_the_batch_are_an_error() {
        let cfg = Qwen3Config::small(50, 16, 32, 1, 2, 1, 8, 32);
        let model = Qwen3::random(cfg, 2, DType::F32, &Device::Cpu).unwrap();
        let mut opt = AdamW::new(AdamWConfig::default()).unwrap();
        let demo = Demo {
            prompt: vec![1, 2],
            response: vec![3],
        };
        let batch = vec![demo.clone(), demo.clone(), demo];
        for groups in [
            vec![0..1, 2..3],
            std::iter::once(0..2).collect(),
            vec![0..2, 2..2, 2..3],
            std::iter::once(1..3).collect(),
        ] {
            let e = sft_step_in(&model, &mut opt, &batch, &groups, 0.0).unwrap_err();
            assert!(e.to_string().contains("micro-batches"), "{groups:?}: {e}");
        }
        sft_step_in(&model, &mut opt, &batch, &[0..1, 1..3], 0.0).unwrap();
    }

    #[test]
    fn micro_batches_sum_to_the_full_batch_gradient() {
        // The same step in micro-batches of 1 and in one batch gives the same update: the
        // accumulation is exact up to float summation order (1e-6).
        let cfg = Qwen3Config::small(50, 16, 32, 1, 2, 1, 8, 32);
        let batch = vec![
            Demo {
                prompt: vec![1, 2],
                response: vec![3, 4, 5],
            },
            Demo {
                prompt: vec![6],
                response: vec![7],
            },
            Demo {
                prompt: vec![8, 9, 10],
                response: vec![11, 12],
            },
        ];
        let run = |mb: usize| {
            let model = Qwen3::random(cfg.clone(), 2, DType::F32, &Device::Cpu).unwrap();
            let mut opt = AdamW::new(AdamWConfig {
                lr: 1e-2,
                grad_clip: 0.0,
                ..AdamWConfig::default()
            })
            .unwrap();
            let r = sft_step(&model, &mut opt, &batch, mb, 0.0).unwrap();
            let w: Vec<f32> = model.params()["model.embed_tokens.weight"]
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            (r.loss, r.step.grad_norm, w)
        };
        let (l1, g1, w1) = run(1);
        let (l3, g3, w3) = run(3);
        assert!((l1 - l3).abs() < 1e-5 && (g1 - g3).abs() < 1e-5 * g3.max(1.0));
        for (a, b) in w1.iter().zip(&w3) {
            assert!((a - b).abs() < 1e-6);
        }
    }
}
