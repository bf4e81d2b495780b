//! The training step the `train_step` and `real_model` benches time: forward, per-token
//! log-probs of every next token, the mean negative log-likelihood's backward, one AdamW step.

use reference_trainer::model::Qwen3;
use reference_trainer::train::optimizer::{Accumulated, AdamW};

/// One step on `seqs` (every token after the first scored); returns the loss.
pub fn train_step(model: &Qwen3, opt: &mut AdamW, seqs: &[Vec<u32>]) -> f64 {
    let start = vec![1usize; seqs.len()];
    let out = model.token_log_probs(seqs, &start).unwrap();
    let n = out.log_probs.dim(0).unwrap();
    let loss = (out.log_probs.sum_all().unwrap().neg().unwrap() / n as f64).unwrap();
    let mut acc = Accumulated::default();
    acc.add(model.params(), &loss.backward().unwrap()).unwrap();
    opt.step(model.params(), &acc).unwrap();
    loss.to_scalar::<f32>().unwrap() as f64
}
