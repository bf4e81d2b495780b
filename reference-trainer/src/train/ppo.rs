//! One RL update on an iteration's training rows: the rows are split into `mini_batches`
//! optimizer steps (a seeded shuffle), each mini-batch into micro-batches of at most
//! `micro_batch_tokens` padded tokens (rows sorted by length, so padding stays small); every
//! micro-batch's dual-clip PPO loss (token-mean, [`ppo_loss`]) is scaled by its share of the
//! mini-batch's rows (verl's dynamic-batch scaling) and its gradients accumulate into one step.
//!
//! Old log-probs are those of the policy that sampled the rows. Before the first optimizer
//! step the current weights *are* that policy, so the first mini-batch takes them from its own
//! forward pass, detached — the same numbers a separate pass would recompute, at no cost.
//! Later mini-batches take them from `old` (the frozen copy the rollout ran on).
//!
//! An optional [`SftAnchor`] adds, to every optimizer step, the token-mean negative
//! log-likelihood of a few of the cold start's demonstrations at a weight — InstructGPT's
//! PPO-ptx term (Ouyang et al. 2022, eq. 2), with the demonstrations in place of pretraining
//! text: what RL does not reward (a solved kind of task, whose groups all succeed and so carry
//! no advantage) is held where the cold start put it.

use std::ops::ControlFlow;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha12Rng;

use candle_core::{DType, Tensor};

use super::metrics::UpdateReport;
use super::optimizer::{Accumulated, AdamW};
use super::sft::{plan_micro_batches, Demo};
use crate::algo::{pack_rows, ppo_loss, LossConfig, LossInputs, TrainingRow};
use crate::error::{Error, Result};
use crate::model::Qwen3;

/// How an update batches its rows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UpdateConfig {
    /// Optimizer steps over the rows.
    pub mini_batches: usize,
    /// Padded-token budget of one forward/backward.
    pub micro_batch_tokens: usize,
    /// Sampling temperature of the rollout (log-probs are of logits / T).
    pub temperature: f64,
    /// Seed of the mini-batch shuffle.
    pub seed: u64,
}

/// The SFT term of an RL update (see the module doc): every optimizer step adds
/// `coef × NLL` over the response tokens of `per_step` demonstrations drawn from `demos`
/// (without replacement within a step, seeded by the update's seed and the step).
#[derive(Clone, Copy, Debug)]
pub struct SftAnchor<'a> {
    /// The demonstrations (the cold start's).
    pub demos: &'a [Demo],
    /// Weight of the term against the PPO loss (> 0).
    pub coef: f64,
    /// Demonstrations per optimizer step (≥ 1).
    pub per_step: usize,
}

/// Splits `rows` (indices) into micro-batches of at most `budget` padded tokens, longest first.
pub fn micro_batches(rows: &[&TrainingRow], budget: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(rows[i].input_ids.len()));
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut longest = 0;
    for i in order {
        let len = rows[i].input_ids.len();
        match out.last_mut() {
            // Sorted longest first: the batch's first row sets its padded length.
            Some(b) if (b.len() + 1) * longest <= budget => b.push(i),
            _ => {
                out.push(vec![i]);
                longest = len;
            }
        }
    }
    out
}

/// One update of `policy` on `rows` (see the module doc). `reference` gives the KL term's
/// log-probs when `loss.kl_coef > 0`. `progress(done, total)` is told after each micro-batch.
#[allow(clippy::too_many_arguments)]
pub fn update(
    policy: &Qwen3,
    old: &Qwen3,
    reference: Option<&Qwen3>,
    opt: &mut AdamW,
    rows: &[TrainingRow],
    loss: &LossConfig,
    cfg: &UpdateConfig,
    mut progress: impl FnMut(usize, usize),
) -> Result<UpdateReport> {
    let done = update_until(
        policy,
        old,
        reference,
        None,
        opt,
        rows,
        loss,
        cfg,
        |d, t| {
            progress(d, t);
            ControlFlow::Continue(())
        },
    )?;
    Ok(done.expect("an update that is never told to stop finishes"))
}

/// [`update`] with an optional [`SftAnchor`], that `progress` can end early: after a
/// micro-batch it answers [`ControlFlow::Break`] to give up (`Ok(None)`). The policy and the
/// optimizer then hold the optimizer steps of the mini-batches already done: the caller
/// restores them.
#[allow(clippy::too_many_arguments)]
pub fn update_until(
    policy: &Qwen3,
    old: &Qwen3,
    reference: Option<&Qwen3>,
    anchor: Option<&SftAnchor<'_>>,
    opt: &mut AdamW,
    rows: &[TrainingRow],
    loss: &LossConfig,
    cfg: &UpdateConfig,
    mut progress: impl FnMut(usize, usize) -> ControlFlow<()>,
) -> Result<Option<UpdateReport>> {
    let t0 = std::time::Instant::now();
    let mut report = UpdateReport {
        rows: rows.len(),
        ..UpdateReport::default()
    };
    if rows.is_empty() {
        return Ok(Some(report));
    }
    if loss.kl_coef > 0.0 && reference.is_none() {
        return Err(Error::invalid(
            "algo.kl_coef",
            "a KL coefficient above 0 needs a reference policy",
        ));
    }
    if let Some(a) = anchor {
        if a.demos.is_empty() || a.per_step == 0 || !(a.coef.is_finite() && a.coef > 0.0) {
            return Err(Error::invalid(
                "algo.sft_coef",
                format!(
                    "the SFT anchor needs demonstrations ({}), a weight > 0 ({}) and ≥ 1 per step ({})",
                    a.demos.len(),
                    a.coef,
                    a.per_step
                ),
            ));
        }
    }
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.shuffle(&mut ChaCha12Rng::seed_from_u64(cfg.seed));
    let n_mini = cfg.mini_batches.clamp(1, rows.len());
    let per = rows.len().div_ceil(n_mini);
    let minis: Vec<Vec<&TrainingRow>> = order
        .chunks(per)
        .map(|c| c.iter().map(|&i| &rows[i]).collect())
        .collect();
    let plans: Vec<Vec<Vec<usize>>> = minis
        .iter()
        .map(|m| micro_batches(m, cfg.micro_batch_tokens))
        .collect();
    let total_micro: usize = plans.iter().map(Vec::len).sum();
    let mut done = 0;
    let (mut diff_max, mut diff_sum, mut diff_n) = (0f64, 0f64, 0usize);
    let mut anchor_nll = 0.0;
    // Token-weighted sums of the loss metrics.
    let (mut w, mut loss_s, mut pg_s, mut clip_s, mut dual_s, mut akl_s, mut ent_s, mut kl_s) =
        (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for (step, (mini, plan)) in minis.iter().zip(&plans).enumerate() {
        let mut acc = Accumulated::default();
        for micro in plan {
            let batch: Vec<&TrainingRow> = micro.iter().map(|&i| mini[i]).collect();
            let seqs: Vec<Vec<u32>> = batch.iter().map(|r| r.input_ids.clone()).collect();
            let start: Vec<usize> = batch.iter().map(|r| r.start).collect();
            let longest = seqs.iter().map(Vec::len).max().unwrap_or(0);
            report.forward_tokens += longest * seqs.len();
            let cur = policy.token_log_probs_at(&seqs, &start, cfg.temperature)?;
            let old_lp = if step == 0 {
                cur.log_probs.detach()
            } else {
                old.token_log_probs_at(&seqs, &start, cfg.temperature)?
                    .log_probs
                    .detach()
            };
            let ref_lp = match reference {
                Some(r) if loss.kl_coef > 0.0 => Some(
                    r.token_log_probs_at(&seqs, &start, cfg.temperature)?
                        .log_probs
                        .detach(),
                ),
                _ => None,
            };
            // verl's rollout_probs_diff: the sampler's probabilities against the training
            // forward's on the same weights (`old_lp` is that forward), response tokens only.
            let train_lp: Vec<f32> = old_lp.to_dtype(DType::F32)?.to_vec1()?;
            let mut at = 0;
            for r in &batch {
                for (k, &roll) in r.rollout_log_probs.iter().enumerate() {
                    if r.response_mask[k] > 0.0 {
                        let d = (f64::from(roll).exp() - f64::from(train_lp[at + k]).exp()).abs();
                        diff_max = diff_max.max(d);
                        diff_sum += d;
                        diff_n += 1;
                    }
                }
                at += r.rollout_log_probs.len();
            }
            let packed = pack_rows(batch.iter().copied());
            let (adv, mask) = packed
                .tensors(DType::F32, policy.device())
                .map_err(|e| Error::invalid("training rows", e.to_string()))?;
            let out = ppo_loss(
                &LossInputs {
                    log_probs: &cur.log_probs,
                    old_log_probs: &old_lp,
                    advantages: &adv,
                    response_mask: &mask,
                    ref_log_probs: ref_lp.as_ref(),
                    entropies: &cur.entropy,
                },
                loss,
            )
            .map_err(|e| Error::invalid("ppo loss", e.to_string()))?;
            let share = batch.len() as f64 / mini.len() as f64;
            let scaled: Tensor = (out.loss * share)?;
            acc.add(policy.params(), &scaled.backward()?)?;
            let m = out.metrics;
            w += m.tokens;
            loss_s += m.loss * m.tokens;
            pg_s += m.pg_loss * m.tokens;
            clip_s += m.clip_frac * m.tokens;
            dual_s += m.dual_clip_frac * m.tokens;
            akl_s += m.approx_kl * m.tokens;
            ent_s += m.entropy_mean * m.tokens;
            kl_s += m.kl_mean.unwrap_or(0.0) * m.tokens;
            report.tokens += m.tokens as usize;
            done += 1;
            if progress(done, total_micro).is_break() {
                return Ok(None);
            }
        }
        if let Some(a) = anchor {
            let nll = anchor_term(policy, a, cfg, step, &mut acc)?;
            anchor_nll += nll / minis.len() as f64;
        }
        let s = opt.step(policy.params(), &acc)?;
        report.grad_norm = s.grad_norm;
        report.lr = s.lr;
        report.steps += 1;
    }
    let w = w.max(1e-8);
    report.loss = loss_s / w;
    report.pg_loss = pg_s / w;
    report.clip_frac = clip_s / w;
    report.dual_clip_frac = dual_s / w;
    report.approx_kl = akl_s / w;
    report.entropy = ent_s / w;
    report.kl = (loss.kl_coef > 0.0).then_some(kl_s / w);
    report.sft_loss = anchor.map(|_| anchor_nll);
    report.rollout_probs_diff_max = diff_max;
    report.rollout_probs_diff_mean = diff_sum / diff_n.max(1) as f64;
    report.seconds = t0.elapsed().as_secs_f64();
    report.tokens_per_second = report.forward_tokens as f64 / report.seconds.max(1e-9);
    Ok(Some(report))
}

/// Adds the gradient of `coef × NLL` (token mean over the response tokens) of the anchor's
/// demonstrations for optimizer step `step` to `acc`, in the fine-tuning's micro-batches
/// ([`plan_micro_batches`], at most `cfg.micro_batch_tokens` padded tokens each); returns the NLL (before the step).
fn anchor_term(
    policy: &Qwen3,
    a: &SftAnchor<'_>,
    cfg: &UpdateConfig,
    step: usize,
    acc: &mut Accumulated,
) -> Result<f64> {
    let mut rng = ChaCha12Rng::seed_from_u64(cfg.seed ^ 0xA4C4_0000 ^ step as u64);
    let mut picked: Vec<&Demo> =
        rand::seq::index::sample(&mut rng, a.demos.len(), a.per_step.min(a.demos.len()))
            .into_iter()
            .map(|i| &a.demos[i])
            .collect();
    let groups = plan_micro_batches(&mut picked, cfg.micro_batch_tokens);
    let total: usize = picked.iter().map(|d| d.response.len()).sum();
    let mut nll = 0.0;
    for g in groups {
        let chunk = &picked[g];
        let seqs: Vec<Vec<u32>> = chunk
            .iter()
            .map(|d| d.prompt.iter().chain(&d.response).copied().collect())
            .collect();
        let start: Vec<usize> = chunk.iter().map(|d| d.prompt.len()).collect();
        // The demonstrations are scored as the cold start was trained on them: at T = 1.
        let out = policy.token_log_probs(&seqs, &start)?;
        let part = (out.log_probs.sum_all()?.neg()? / total as f64)?;
        nll += part.to_dtype(DType::F64)?.to_scalar::<f64>()?;
        acc.add(policy.params(), &(part * a.coef)?.backward()?)?;
    }
    Ok(nll)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Qwen3Config;
    use crate::train::optimizer::AdamWConfig;
    use candle_core::Device;

    fn row(prompt: &[u32], response: &[u32], adv: f32) -> TrainingRow {
        TrainingRow {
            episode: 0,
            turn: 0,
            input_ids: prompt.iter().chain(response).copied().collect(),
            start: prompt.len(),
            advantages: vec![adv; response.len()],
            response_mask: vec![1.0; response.len()],
            rollout_log_probs: vec![0.0; response.len()],
            forced: vec![false; response.len()],
        }
    }

    #[test]
    fn micro_batches_respect_the_token_budget_and_cover_every_row() {
        let rows: Vec<TrainingRow> = [3usize, 9, 5, 2, 8, 4]
            .iter()
            .map(|&n| row(&vec![1; n], &[2], 1.0))
            .collect();
        let refs: Vec<&TrainingRow> = rows.iter().collect();
        let plan = micro_batches(&refs, 20);
        let mut seen: Vec<usize> = plan.iter().flatten().copied().collect();
        seen.sort();
        assert_eq!(seen, (0..6).collect::<Vec<_>>());
        for b in &plan {
            let longest = b.iter().map(|&i| rows[i].input_ids.len()).max().unwrap();
            assert!(b.len() == 1 || b.len() * longest <= 20, "{plan:?}");
        }
        // A row longer than the budget still gets a batch of its own.
        assert_eq!(micro_batches(&refs, 1).len(), 6);
    }

    #[test]
    fn a_positive_advantage_raises_the_rows_likelihood_and_a_negative_one_lowers_it() {
        let cfg = Qwen3Config::small(40, 16, 32, 1, 2, 1, 8, 64);
        let policy = Qwen3::random(cfg, 3, DType::F32, &Device::Cpu).unwrap();
        let mut opt = AdamW::new(AdamWConfig {
            lr: 1e-2,
            ..AdamWConfig::default()
        })
        .unwrap();
        let good = row(&[1, 2, 3], &[7, 8], 1.0);
        let bad = row(&[1, 2, 3], &[9, 10], -1.0);
        let lp = |m: &Qwen3, r: &TrainingRow| -> f32 {
            m.token_log_probs(std::slice::from_ref(&r.input_ids), &[r.start])
                .unwrap()
                .log_probs
                .sum_all()
                .unwrap()
                .to_scalar()
                .unwrap()
        };
        let (g0, b0) = (lp(&policy, &good), lp(&policy, &bad));
        for seed in 0..5 {
            let old = policy.frozen_copy().unwrap();
            let r = update(
                &policy,
                &old,
                None,
                &mut opt,
                &[good.clone(), bad.clone()],
                &LossConfig::default(),
                &UpdateConfig {
                    mini_batches: 2,
                    micro_batch_tokens: 8,
                    temperature: 1.0,
                    seed,
                },
                |_, _| {},
            )
            .unwrap();
            assert_eq!((r.rows, r.steps, r.tokens), (2, 2, 4));
            assert!(r.kl.is_none());
        }
        assert!(
            lp(&policy, &good) > g0 + 0.1,
            "{g0} → {}",
            lp(&policy, &good)
        );
        assert!(lp(&policy, &bad) < b0 - 0.1, "{b0} → {}", lp(&policy, &bad));
    }

    #[test]
    fn the_first_mini_batch_ratio_is_one_and_kl_needs_a_reference() {
        let cfg = Qwen3Config::small(40, 16, 32, 1, 2, 1, 8, 64);
        let policy = Qwen3::random(cfg, 4, DType::F32, &Device::Cpu).unwrap();
        let old = policy.frozen_copy().unwrap();
        let mut opt = AdamW::new(AdamWConfig::default()).unwrap();
        let rows = vec![row(&[1, 2], &[3, 4, 5], 0.5)];
        let ucfg = UpdateConfig {
            mini_batches: 1,
            micro_batch_tokens: 1024,
            temperature: 0.7,
            seed: 0,
        };
        let r = update(
            &policy,
            &old,
            None,
            &mut opt,
            &rows,
            &LossConfig::default(),
            &ucfg,
            |_, _| {},
        )
        .unwrap();
        assert_eq!(r.clip_frac, 0.0);
        assert!(r.approx_kl.abs() < 1e-7);
        let kl = LossConfig {
            kl_coef: 0.01,
            ..LossConfig::default()
        };
        assert!(update(&policy, &old, None, &mut opt, &rows, &kl, &ucfg, |_, _| {}).is_err());
        let r = update(
            &policy,
            &old,
            Some(&old),
            &mut opt,
            &rows,
            &kl,
            &ucfg,
            |_, _| {},
        )
        .unwrap();
        assert!(r.kl.unwrap() >= 0.0);
        // Nothing to train on: no step.
        let r = update(
            &policy,
            &old,
            None,
            &mut opt,
            &[],
            &LossConfig::default(),
            &ucfg,
            |_, _| {},
        )
        .unwrap();
        assert_eq!(r.steps, 0);
    }

    #[test]
    fn the_sft_anchor_raises_the_demonstrations_likelihood_and_is_checked() {
        let cfg = Qwen3Config::small(40, 16, 32, 1, 2, 1, 8, 64);
        let policy = Qwen3::random(cfg, 5, DType::F32, &Device::Cpu).unwrap();
        let mut opt = AdamW::new(AdamWConfig {
            lr: 1e-2,
            ..AdamWConfig::default()
        })
        .unwrap();
        let demos = vec![
            Demo {
                prompt: vec![1, 2, 3],
                response: vec![11, 12, 13],
            },
            Demo {
                prompt: vec![4, 5],
                response: vec![14, 15],
            },
        ];
        let nll = |m: &Qwen3| -> f32 {
            demos
                .iter()
                .map(|d| {
                    let ids: Vec<u32> = d.prompt.iter().chain(&d.response).copied().collect();
                    -m.token_log_probs(&[ids], &[d.prompt.len()])
                        .unwrap()
                        .log_probs
                        .sum_all()
                        .unwrap()
                        .to_scalar::<f32>()
                        .unwrap()
                })
                .sum()
        };
        // Rows whose advantage is 0: the PPO term moves nothing, the anchor alone trains.
        let rows = vec![row(&[1, 2], &[3, 4], 0.0), row(&[6], &[7, 8, 9], 0.0)];
        let ucfg = UpdateConfig {
            mini_batches: 2,
            micro_batch_tokens: 8,
            temperature: 1.0,
            seed: 9,
        };
        let anchor = SftAnchor {
            demos: &demos,
            coef: 1.0,
            per_step: 2,
        };
        let before = nll(&policy);
        let mut reported = Vec::new();
        for i in 0..5 {
            let old = policy.frozen_copy().unwrap();
            // One step first, so its report is the NLL before any step.
            let steps = if i == 0 { 1 } else { 2 };
            let r = update_until(
                &policy,
                &old,
                None,
                Some(&anchor),
                &mut opt,
                &rows,
                &LossConfig {
                    entropy_coef: 0.0,
                    ..LossConfig::default()
                },
                &UpdateConfig {
                    mini_batches: steps,
                    ..ucfg
                },
                |_, _| ControlFlow::Continue(()),
            )
            .unwrap()
            .unwrap();
            assert_eq!(r.steps, steps);
            reported.push(r.sft_loss.unwrap());
        }
        // The first report is the token mean of the demonstrations' NLL before any step.
        let tokens: usize = demos.iter().map(|d| d.response.len()).sum();
        assert!(
            (reported[0] - f64::from(before) / tokens as f64).abs() < 1e-4,
            "{reported:?} vs {before}/{tokens}"
        );
        let after = nll(&policy);
        assert!(after < before - 1.0, "{before} → {after}");
        assert!(reported[4] < reported[0], "{reported:?}");
        // Without the anchor no SFT loss is reported.
        let old = policy.frozen_copy().unwrap();
        let r = update(
            &policy,
            &old,
            None,
            &mut opt,
            &rows,
            &LossConfig::default(),
            &ucfg,
            |_, _| {},
        )
        .unwrap();
        assert!(r.sft_loss.is_none());
        // A malformed anchor is an error naming the key.
        for bad in [
            SftAnchor {
                demos: &[],
                ..anchor
            },
            SftAnchor {
                coef: 0.0,
                ..anchor
            },
            SftAnchor {
                per_step: 0,
                ..anchor
            },
        ] {
            let e = update_until(
                &policy,
                &old,
                None,
                Some(&bad),
                &mut opt,
                &rows,
                &LossConfig::default(),
                &ucfg,
                |_, _| ControlFlow::Continue(()),
            )
            .unwrap_err();
            assert!(e.to_string().contains("algo.sft_coef"), "{e}");
        }
    }
}
