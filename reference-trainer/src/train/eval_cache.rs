//! The evaluation before RL, kept for the runs that would repeat it (`RunOptions::eval_cache`).
//!
//! The arms of an ablation start from one cold-start policy per seed, and several of them
//! evaluate it the same way: GiGPO and GRPO differ only in the update, T²PO's arm evaluates
//! what the seed's cold-start run already evaluated with the same settings. On WebShop that
//! evaluation (200 goals greedy and 200 sampled) is ~15 minutes of an arm's ~90 on a thread.
//! Here an evaluation is stored under a [`key`] that covers everything it reads — the program,
//! the weights, the tokenizer, the environment's data and every rollout setting it decodes
//! with (not the thread count: a rollout is the same bit for bit on one thread and on two) —
//! so a run finds one only where its own evaluation would have given the same figures
//! (`tests/ablate.rs` compares a cached arm's metrics with the same arm evaluating itself).

use std::path::{Path, PathBuf};

use candle_core::DType;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::config::TrainConfig;
use super::metrics::RolloutSummary;
use super::rft::purpose;
use super::run::Evaluation;
use super::state::derive_seed;
use crate::error::{Error, Result};
use crate::model::{checkpoint::write_atomic, Qwen3};
use crate::tokenizer::Tokenizer;

/// What a cache file holds.
#[derive(Serialize, Deserialize)]
struct Stored {
    /// The [`key`] again (the file name is its first 32 characters' worth).
    key: String,
    /// The run that evaluated.
    evaluated_by: PathBuf,
    headline: RolloutSummary,
    sampled: Option<RolloutSummary>,
}

/// The settings part of the key: what [`super::run::evaluate`] reads from `cfg` — the
/// environment and its generated data (the pool: env, seed, data sizes, WebShop's
/// demonstrator), the tasks and episodes, and the whole rollout config of each of its two
/// passes (control switches, thresholds as calibrated, α, trigger, caps, memory window,
/// sampling, seed), as their `Debug` text, which prints every field.
pub fn settings(cfg: &TrainConfig, tokenizer: &Tokenizer) -> Result<String> {
    let tokens = tokenizer.control_tokens()?;
    let seed = derive_seed(cfg.seed, 0, purpose::EVAL);
    let headline = cfg.rollout_config(&tokens, cfg.train.eval_temperature, seed)?;
    let sampled = if cfg.train.eval_sampled {
        Some(cfg.rollout_config(&tokens, cfg.rollout.temperature, seed)?)
    } else {
        None
    };
    Ok(format!(
        "env {:?}\nseed {}\ndata {:?}\nexpert {:?}\ntasks {}\nepisodes {}\nheadline {:?}\nsampled {:?}\n",
        cfg.env,
        cfg.seed,
        cfg.data,
        cfg.rft.expert,
        cfg.train.eval_tasks,
        cfg.train.eval_episodes,
        headline,
        sampled
    ))
}

/// SHA-256 (hex) of the running program (a build that decodes differently must not find
/// another's figures), the policy's config and weights (in name order, as f32), the
/// tokenizer and [`settings`]; not the thread count (below).
pub fn key(policy: &Qwen3, tokenizer: &Tokenizer, cfg: &TrainConfig) -> Result<String> {
    let mut h = Sha256::new();
    let exe = std::env::current_exe().map_err(|e| Error::io(Path::new("current_exe"), e))?;
    let program = super::state::file_sum(&exe).map_err(|e| Error::io(&exe, e))?;
    h.update(program.sha256.as_bytes());
    h.update(b"\0config\0");
    h.update(
        serde_json::to_string(policy.config())
            .expect("a config serialises")
            .as_bytes(),
    );
    h.update(format!("{:?}", policy.dtype()).as_bytes());
    for (name, var) in policy.params() {
        h.update(b"\0param\0");
        h.update(name.as_bytes());
        for d in var.dims() {
            h.update((*d as u64).to_le_bytes());
        }
        let values = var.as_tensor().to_dtype(DType::F32)?.flatten_all()?;
        for x in values.to_vec1::<f32>()? {
            h.update(x.to_bits().to_le_bytes());
        }
    }
    h.update(b"\0tokenizer\0");
    h.update(tokenizer.to_json()?.as_bytes());
    h.update(tokenizer.config_json()?.as_bytes());
    // No thread count: an evaluation's figures do not depend on it. The decode splits a step's
    // rows at multiples of its register tile (so every row is summed by the same kernel on any
    // split) and a weight's columns into halves whose sums are the unsplit ones bit for bit
    // (`matmul_cols_equals_matmul_bit_for_bit`); the sampler's steps are tested equal on any
    // split; and a whole WebShop rollout is the same bit for bit on one thread and on two
    // (`tests/decode.rs`). So an arm run on a share of the threads takes what its cold-start
    // run measured on all of them.
    h.update(b"\0settings\0");
    h.update(settings(cfg, tokenizer)?.as_bytes());
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

fn file(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("{key}.json"))
}

/// The evaluation stored under `key` in `dir`, with the run that made it; `None` when there is
/// none. A file that cannot be read or parsed, or holds another key, is an error naming it.
pub fn load(dir: &Path, key: &str) -> Result<Option<(Evaluation, PathBuf)>> {
    let path = file(dir, key);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, e)),
    };
    let stored: Stored = serde_json::from_str(&text).map_err(|e| Error::Json {
        path: path.clone(),
        message: e.to_string(),
    })?;
    if stored.key != key {
        return Err(Error::Json {
            path,
            message: format!("holds the evaluation of key {}, not {key}", stored.key),
        });
    }
    Ok(Some((
        Evaluation {
            headline: stored.headline,
            sampled: stored.sampled,
        },
        stored.evaluated_by,
    )))
}

/// Stores `e` under `key` in `dir` (created if needed; the file written whole or not at all).
pub fn store(dir: &Path, key: &str, e: &Evaluation, evaluated_by: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|err| Error::io(dir, err))?;
    let path = file(dir, key);
    let stored = Stored {
        key: key.to_string(),
        evaluated_by: evaluated_by.to_path_buf(),
        headline: e.headline.clone(),
        sampled: e.sampled.clone(),
    };
    let text = serde_json::to_string_pretty(&stored).map_err(|err| Error::Json {
        path: path.clone(),
        message: err.to_string(),
    })?;
    write_atomic(&path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::ablate::Variant;

    use crate::rollout::EnvKind;
    use crate::train::config::Calibrated;

    fn base() -> TrainConfig {
        TrainConfig::default_for(EnvKind::Webshop).unwrap()
    }

    fn tokenizer() -> Tokenizer {
        crate::defaults::tokenizer(base().seed).unwrap()
    }

    #[test]
    fn arms_that_decode_alike_share_a_key_and_the_others_do_not() {
        let base = base();
        let tok = tokenizer();
        let s = |v: Variant| settings(&v.apply(&base), &tok).unwrap();
        // GRPO, DAPO and the length reward change the update or the reward, not the decode:
        // GiGPO's evaluation. −RFT's and the calibrated arm's settings are T²PO's (they differ
        // in the weights, and in thresholds set after calibration, below). Every other arm
        // switches the control, so evaluates otherwise.
        let class = |v: Variant| match v {
            Variant::Grpo | Variant::Dapo | Variant::LengthReward => Variant::Gigpo,
            Variant::NoRft | Variant::Calibrated => Variant::T2po,
            v => v,
        };
        for (i, &a) in Variant::ALL.iter().enumerate() {
            for &b in &Variant::ALL[i..] {
                assert_eq!(
                    s(a) == s(b),
                    class(a) == class(b),
                    "{} vs {}",
                    a.name(),
                    b.name()
                );
            }
        }
        // So do the seed, the evaluation's size and temperature, the rollout caps, the data,
        // and calibrated thresholds; the optimizer and the RL budget do not.
        let changed = |f: &dyn Fn(&mut TrainConfig)| {
            let mut c = base.clone();
            f(&mut c);
            settings(&c, &tok).unwrap()
        };
        let same = settings(&base, &tok).unwrap();
        assert_ne!(same, changed(&|c| c.seed += 1));
        assert_ne!(same, changed(&|c| c.train.eval_tasks += 1));
        assert_ne!(same, changed(&|c| c.train.eval_episodes += 1));
        assert_ne!(same, changed(&|c| c.train.eval_temperature = 0.5));
        assert_ne!(
            same,
            changed(&|c| c.train.eval_sampled = !c.train.eval_sampled)
        );
        assert_ne!(same, changed(&|c| c.rollout.temperature = 0.7));
        assert_ne!(same, changed(&|c| c.rollout.max_turns += 1));
        assert_ne!(same, changed(&|c| c.rollout.history_length += 1));
        assert_ne!(same, changed(&|c| c.data.products += 1));
        assert_ne!(same, changed(&|c| c.control.epsilon = 0.05));
        assert_ne!(
            same,
            changed(&|c| {
                c.control.calibrated = Some(Calibrated {
                    epsilon: 0.05,
                    eta: base.control.eta,
                    fire_rate: None,
                    resample_rate: None,
                    turns: 0,
                    checked_turns: 0,
                    later_turns: 0,
                })
            })
        );
        assert_eq!(same, changed(&|c| c.optim.lr *= 2.0));
        assert_eq!(same, changed(&|c| c.train.iterations += 1));
        assert_eq!(same, changed(&|c| c.rollout.group_size += 1));
    }

    #[test]
    fn the_key_follows_the_weights_and_a_stored_evaluation_comes_back_whole() {
        let cfg = base();
        let (a, tok) =
            crate::train::run::initial_policy(&cfg, None, &candle_core::Device::Cpu).unwrap();
        let b = Qwen3::random(
            a.config().clone(),
            cfg.seed + 1,
            DType::F32,
            &candle_core::Device::Cpu,
        )
        .unwrap();
        let ka = key(&a, &tok, &cfg).unwrap();
        assert_eq!(ka, key(&a, &tok, &cfg).unwrap());
        assert_ne!(ka, key(&b, &tok, &cfg).unwrap());

        let dir = tempfile::tempdir().unwrap();
        assert!(load(dir.path(), &ka).unwrap().is_none());
        let e = Evaluation {
            headline: RolloutSummary {
                episodes: 7,
                success_rate: 3.0 / 7.0,
                score: 0.1 + 0.2,
                think_tokens_per_turn: 1.0 / 3.0,
                ..Default::default()
            },
            sampled: Some(RolloutSummary {
                episodes: 7,
                success_rate: 2.0 / 7.0,
                ..Default::default()
            }),
        };
        store(dir.path(), &ka, &e, Path::new("runs/a")).unwrap();
        let (back, by) = load(dir.path(), &ka).unwrap().unwrap();
        assert_eq!(back, e, "every f64 exactly");
        assert_eq!(by, Path::new("runs/a"));
        // A file under the wrong name is refused, naming the file.
        let kb = key(&b, &tok, &cfg).unwrap();
        std::fs::copy(file(dir.path(), &ka), file(dir.path(), &kb)).unwrap();
        let err = load(dir.path(), &kb).unwrap_err().to_string();
        assert!(err.contains(&kb) && err.contains(".json"), "{err}");
    }
}
