//! The embedded default: a small random-initialised Qwen3 and a BPE tokenizer trained on the
//! environments' own text, both built from a seed on first use — no download, nothing large
//! committed. The tokenizer is cached (`$T2PO_CACHE` or `~/.cache/t2po`) because training it
//! takes a few seconds; the weights are regenerated (milliseconds).
//!
//! Size: vocab 4096, d 128, 2 layers, 4 heads / 2 KV heads of 32, MLP 512, tied embeddings —
//! about 1.0 M parameters, so a training iteration of ~25 K tokens fits a 2-core budget.

use candle_core::{DType, Device};

use crate::error::{Error, Result};
use crate::model::{Qwen3, Qwen3Config};
use crate::rollout::pool::{cache_dir, encyclopedia, EnvKind, EnvPool, PoolSize, Split};
use crate::tokenizer::{build_default, Tokenizer};

/// The default seed of data, weights and sampling.
pub const SEED: u64 = 2026;
/// Tokens in the default vocabulary (13 special tokens, 256 bytes, merges).
pub const VOCAB: usize = 4096;
/// Prompt cap of the default model, in tokens.
pub const MAX_PROMPT_TOKENS: usize = 1024;
/// Longest sequence the default model handles (prompt + response).
pub const MAX_POSITIONS: usize = 2048;

/// Response caps of the default model (the paper's 4B model uses 300 / 500 / 500): the experts'
/// demonstrations fit in well under this.
pub fn max_response_tokens(env: EnvKind) -> usize {
    match env {
        EnvKind::Webshop => 128,
        EnvKind::Alfworld => 128,
        EnvKind::Search => 128,
    }
}

/// The paper's response caps (spec §5: 300 / 500 / 500), for a user's checkpoint.
pub fn paper_max_response_tokens(env: EnvKind) -> usize {
    match env {
        EnvKind::Webshop => 300,
        EnvKind::Alfworld | EnvKind::Search => 500,
    }
}

/// Prompt cap for a user's checkpoint (verl-agent's multi-turn runs use 2048–4096).
pub const PAPER_MAX_PROMPT_TOKENS: usize = 4096;

/// Generated data sizes of the default pools: the `[data]` section of the environment's
/// shipped config (`configs/<env>.toml`).
pub fn pool_size(env: EnvKind) -> Result<PoolSize> {
    Ok(crate::train::TrainConfig::default_for(env)?.data)
}

/// The default model's config for a vocabulary of `vocab` ids.
pub fn model_config(vocab: usize) -> Qwen3Config {
    Qwen3Config::small(vocab, 128, 512, 2, 4, 2, 32, MAX_POSITIONS)
}

/// The default model: random weights from `seed`, sized to the tokenizer.
pub fn model(tokenizer: &Tokenizer, seed: u64, device: &Device) -> Result<Qwen3> {
    let mut cfg = model_config(tokenizer.id_bound());
    name_special_tokens(&mut cfg, tokenizer)?;
    Qwen3::random(cfg, seed, DType::F32, device)
}

/// Writes the tokenizer's `bos_token_id` (`<|endoftext|>`) and `eos_token_id` (`<|im_end|>`)
/// into a random-initialised model's config, as Qwen3's own `config.json` carries them, so a
/// saved checkpoint names its turn end to transformers even without `generation_config.json`.
pub fn name_special_tokens(cfg: &mut Qwen3Config, tokenizer: &Tokenizer) -> Result<()> {
    let ct = tokenizer.control_tokens()?;
    cfg.extra
        .insert("bos_token_id".into(), serde_json::json!(ct.endoftext));
    cfg.extra
        .insert("eos_token_id".into(), serde_json::json!(ct.im_end));
    Ok(())
}

/// Expert episodes per environment in the default tokenizer's text.
pub const TOKENIZER_EPISODES: usize = 400;

/// Search QA passages behind the default tokenizer's text (its encyclopedia, and the world its
/// Search QA expert episodes are played in): fixed, so the tokenizer, and the cache entry that
/// holds it, do not change with the shipped config's world size.
pub const TOKENIZER_PASSAGES: usize = 3000;

/// The generated data sizes the default tokenizer's text comes from: the shipped config's,
/// with [`TOKENIZER_PASSAGES`].
fn tokenizer_pool_size(env: EnvKind) -> Result<PoolSize> {
    Ok(PoolSize {
        passages: TOKENIZER_PASSAGES,
        ..pool_size(env)?
    })
}

/// The text the default tokenizer is trained on: for each environment, the chat-formatted
/// prompts and the experts' full responses of `episodes` training episodes, and a Search QA
/// retrieval corpus of [`TOKENIZER_PASSAGES`] passages (as a real tokenizer's training text holds
/// the names of an encyclopedia).
pub fn corpus(seed: u64, episodes: usize) -> Result<Vec<String>> {
    let mut out = encyclopedia(seed, TOKENIZER_PASSAGES);
    for env in EnvKind::ALL {
        let pool = EnvPool::generated(env, seed, tokenizer_pool_size(env)?)?;
        let n = pool.num_tasks(Split::Train).min(episodes);
        for task in 0..n {
            let ep = pool.expert_episode(Split::Train, task, seed ^ task as u64);
            for step in ep.steps {
                if let Some(p) = step.prompt {
                    out.push(format!(
                        "<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n{}<|im_end|>",
                        step.response
                    ));
                }
            }
        }
    }
    Ok(out)
}

/// The default tokenizer for `seed`: loaded from the cache, or trained on [`corpus`] and cached.
pub fn tokenizer(seed: u64) -> Result<Tokenizer> {
    let dir = cache_dir().join(format!("default-tokenizer-v3-seed{seed}-vocab{VOCAB}"));
    if let Ok(t) = Tokenizer::load(dir.join("tokenizer.json")) {
        return Ok(t);
    }
    let tok = build_default(corpus(seed, TOKENIZER_EPISODES)?, VOCAB)?
        .with_model_max_length(MAX_POSITIONS);
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    tok.save(&dir)?;
    Ok(tok)
}
