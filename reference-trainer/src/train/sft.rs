//! Supervised fine-tuning on (prompt, response) pairs with the loss on response tokens only —
//! the cold start's first stage (the experts' demonstrations) and the fine-tuning stage of
//! rejection sampling (RFT, spec §5).

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
    let end = tokenizer.control_tokens()?.im_end;
    let mut out = Vec::new();
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
            let mut r = tokenizer.encode(&step.response)?;
            r.push(end);
            out.push(Demo {
                prompt: p,
                response: r,
            });
        }
    }
    Ok(out)
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
    for chunk in batch.chunks(micro_batch) {
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
                let n = d.prompt.len() + d.response.len();
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
