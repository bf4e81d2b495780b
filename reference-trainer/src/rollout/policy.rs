//! What the rollout needs from a model: batched prefill, one-token decode steps with a cache,
//! and dropping finished rows. Raw logits come back on the host, row-major `[B, V]`, because
//! the control kernel and the sampler read them there.
//!
//! [`Qwen3`] prefills with candle (batched, gemm-bound) and, for f32 on the CPU with the fused
//! kernels on, decodes with [`DecodeState`] (no tensors, no allocation per step); otherwise,
//! and always through [`CandleDecode`], with candle tensors (`Qwen3::decode`, the reference).

use std::any::Any;
use std::sync::Arc;

use candle_core::{DType, Tensor};

use crate::error::{Error, Result};
use crate::model::{DecodeState, Decoder, KvCache, PrefilledPrompt, Qwen3};

/// A prompt a policy prefilled and kept ([`Policy::prefill_reusing`]), to start another
/// generation of the same prompt — a TDS resample — without running the model over it again.
/// Opaque: only the kind of policy that made it reads it.
#[derive(Clone)]
pub struct Prefilled(Arc<dyn Any + Send + Sync>);

impl Prefilled {
    /// Wraps a policy's own prefilled state.
    pub fn new<T: Any + Send + Sync>(state: T) -> Self {
        Self(Arc::new(state))
    }

    /// The state, if it is a `T`.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
}

impl std::fmt::Debug for Prefilled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Prefilled(..)")
    }
}

/// A model the rollout can decode with. The rollout's decode loop runs on the rayon pool
/// (see `episode::generate`), so the model is shared with it and the cache moves there.
pub trait Policy: Sync {
    /// The per-batch decode state (a KV cache).
    type Cache: Send;
    /// Entries per logits row.
    fn vocab_size(&self) -> usize;
    /// Prefills the prompts with room for `max_new` tokens each; writes the last position's
    /// logits of every prompt into `logits` (`[B, V]`, resized).
    fn prefill(
        &self,
        prompts: &[Vec<u32>],
        max_new: usize,
        logits: &mut Vec<f32>,
    ) -> Result<Self::Cache>;
    /// [`prefill`](Self::prefill) where `reuse[i]`, when given, is row `i`'s prompt as an
    /// earlier call kept it (same policy, same tokens), so only the other rows need the model;
    /// returns, for each row prefilled here with `keep[i]`, its state for a later call. The
    /// default prefills every row and keeps nothing.
    fn prefill_reusing(
        &self,
        prompts: &[Vec<u32>],
        max_new: usize,
        reuse: &[Option<Prefilled>],
        keep: &[bool],
        logits: &mut Vec<f32>,
    ) -> Result<(Self::Cache, Vec<Option<Prefilled>>)> {
        let _ = (reuse, keep);
        Ok((
            self.prefill(prompts, max_new, logits)?,
            vec![None; prompts.len()],
        ))
    }
    /// Appends one token per row; writes the next logits (`[B, V]`) into `logits`.
    fn decode(&self, cache: &mut Self::Cache, tokens: &[u32], logits: &mut Vec<f32>) -> Result<()>;
    /// Keeps only `rows` (in that order) of the cache.
    fn retain(&self, cache: &mut Self::Cache, rows: &[usize]) -> Result<()>;
}

/// [`Qwen3::prefill_reusing`] with the rollout's opaque states.
fn qwen_prefill_reusing(
    model: &Qwen3,
    prompts: &[Vec<u32>],
    max_new: usize,
    reuse: &[Option<Prefilled>],
    keep: &[bool],
    logits: &mut Vec<f32>,
) -> Result<(KvCache, Vec<Option<Prefilled>>)> {
    let reuse = reuse
        .iter()
        .map(|r| match r {
            None => Ok(None),
            Some(p) => p.get::<PrefilledPrompt>().map(Some).ok_or_else(|| {
                Error::invalid(
                    "prefill",
                    "a prefilled prompt made by another kind of policy",
                )
            }),
        })
        .collect::<Result<Vec<_>>>()?;
    let (cache, last, kept) = model.prefill_reusing(prompts, max_new, &reuse, keep)?;
    to_host(&last, logits)?;
    Ok((
        cache,
        kept.into_iter().map(|k| k.map(Prefilled::new)).collect(),
    ))
}

fn to_host(t: &Tensor, out: &mut Vec<f32>) -> Result<()> {
    let t = if t.dtype() == DType::F32 {
        t.clone()
    } else {
        t.to_dtype(DType::F32)?
    };
    *out = t.flatten_all()?.to_vec1::<f32>()?;
    Ok(())
}

/// The decode state of a [`Qwen3`] batch: candle's cache (the reference path, and the only
/// one off f32 CPU) or the allocation-free [`DecodeState`].
#[derive(Debug)]
pub enum QwenCache {
    /// Decoding through `Qwen3::decode` on candle tensors.
    Candle(KvCache),
    /// Decoding through [`DecodeState::step`].
    Direct(Box<DecodeState>),
}

/// A bare [`Qwen3`] decodes as a [`PackedQwen3`] that holds no packed weights: it packs them
/// for every generation (the trainer changes them between rollouts).
impl Policy for Qwen3 {
    type Cache = QwenCache;

    fn vocab_size(&self) -> usize {
        PackedQwen3::per_generation(self).vocab_size()
    }

    fn prefill(
        &self,
        prompts: &[Vec<u32>],
        max_new: usize,
        logits: &mut Vec<f32>,
    ) -> Result<QwenCache> {
        PackedQwen3::per_generation(self).prefill(prompts, max_new, logits)
    }

    fn prefill_reusing(
        &self,
        prompts: &[Vec<u32>],
        max_new: usize,
        reuse: &[Option<Prefilled>],
        keep: &[bool],
        logits: &mut Vec<f32>,
    ) -> Result<(QwenCache, Vec<Option<Prefilled>>)> {
        PackedQwen3::per_generation(self).prefill_reusing(prompts, max_new, reuse, keep, logits)
    }

    fn decode(&self, cache: &mut QwenCache, tokens: &[u32], logits: &mut Vec<f32>) -> Result<()> {
        PackedQwen3::per_generation(self).decode(cache, tokens, logits)
    }

    fn retain(&self, cache: &mut QwenCache, rows: &[usize]) -> Result<()> {
        PackedQwen3::per_generation(self).retain(cache, rows)
    }
}

/// A [`Qwen3`] whose decode weights are packed once ([`Decoder`]) for every generation it
/// runs: the policy of one rollout. A rollout of the tiny default runs a generation per turn
/// round and per TDS resample round, and packing is one strided pass over the weights (for
/// SmolLM2-135M more than a decode step: packing once cut an evaluation's rollout time by
/// 22 %, README "Architecture"); a bare [`Qwen3`] packs per generation
/// because the trainer changes its weights between rollouts. Build one per policy version:
/// the packed copy does not follow an optimizer step made while it lives (the trainer builds
/// it at the start of each rollout and drops it before the update).
#[derive(Debug)]
pub struct PackedQwen3<'a> {
    model: &'a Qwen3,
    /// `None`: decode through candle (not f32 on the CPU with the fused kernels), or, for a
    /// bare model ([`Self::per_generation`]), pack per generation.
    packed: Option<Arc<Decoder>>,
}

impl<'a> PackedQwen3<'a> {
    /// Packs `model`'s weights now when it decodes directly (f32 on the CPU, fused kernels on);
    /// otherwise it decodes through candle as the bare model does.
    pub fn new(model: &'a Qwen3) -> Result<Self> {
        let packed = if model.fused() {
            Some(Arc::new(Decoder::new(model)?))
        } else {
            None
        };
        Ok(Self { model, packed })
    }

    /// What a bare model does: nothing packed ahead, the weights packed per generation.
    fn per_generation(model: &'a Qwen3) -> Self {
        Self {
            model,
            packed: None,
        }
    }

    /// The model.
    pub fn model(&self) -> &'a Qwen3 {
        self.model
    }

    /// The decode state of a prefilled cache: the direct one for f32 on the CPU with the
    /// fused kernels on (with the weights packed ahead, or packed now), else candle's.
    fn decode_state(&self, cache: KvCache) -> Result<QwenCache> {
        if !self.model.fused() {
            return Ok(QwenCache::Candle(cache));
        }
        let state = match &self.packed {
            Some(dec) => DecodeState::from_cache(Arc::clone(dec), &cache)?,
            None => DecodeState::from_cache(Decoder::new(self.model)?, &cache)?,
        };
        Ok(QwenCache::Direct(Box::new(state)))
    }
}

impl Policy for PackedQwen3<'_> {
    type Cache = QwenCache;

    fn vocab_size(&self) -> usize {
        self.model.config().vocab_size
    }

    fn prefill(
        &self,
        prompts: &[Vec<u32>],
        max_new: usize,
        logits: &mut Vec<f32>,
    ) -> Result<QwenCache> {
        let (cache, l) = Qwen3::prefill(self.model, prompts, max_new)?;
        to_host(&l, logits)?;
        self.decode_state(cache)
    }

    fn prefill_reusing(
        &self,
        prompts: &[Vec<u32>],
        max_new: usize,
        reuse: &[Option<Prefilled>],
        keep: &[bool],
        logits: &mut Vec<f32>,
    ) -> Result<(QwenCache, Vec<Option<Prefilled>>)> {
        let (cache, kept) =
            qwen_prefill_reusing(self.model, prompts, max_new, reuse, keep, logits)?;
        Ok((self.decode_state(cache)?, kept))
    }

    fn decode(&self, cache: &mut QwenCache, tokens: &[u32], logits: &mut Vec<f32>) -> Result<()> {
        match cache {
            QwenCache::Candle(c) => {
                let l = Qwen3::decode(self.model, c, tokens)?;
                to_host(&l, logits)
            }
            QwenCache::Direct(s) => s.step(tokens, logits),
        }
    }

    fn retain(&self, cache: &mut QwenCache, rows: &[usize]) -> Result<()> {
        match cache {
            QwenCache::Candle(c) => Ok(c.retain(rows)?),
            QwenCache::Direct(s) => s.retain(rows),
        }
    }
}

/// A [`Qwen3`] that always decodes through candle tensors (`Qwen3::decode`): the reference the
/// direct path is tested and benchmarked against.
#[derive(Clone, Copy, Debug)]
pub struct CandleDecode<'a>(pub &'a Qwen3);

impl Policy for CandleDecode<'_> {
    type Cache = KvCache;

    fn vocab_size(&self) -> usize {
        self.0.config().vocab_size
    }

    fn prefill(
        &self,
        prompts: &[Vec<u32>],
        max_new: usize,
        logits: &mut Vec<f32>,
    ) -> Result<KvCache> {
        let (cache, l) = Qwen3::prefill(self.0, prompts, max_new)?;
        to_host(&l, logits)?;
        Ok(cache)
    }

    fn prefill_reusing(
        &self,
        prompts: &[Vec<u32>],
        max_new: usize,
        reuse: &[Option<Prefilled>],
        keep: &[bool],
        logits: &mut Vec<f32>,
    ) -> Result<(KvCache, Vec<Option<Prefilled>>)> {
        qwen_prefill_reusing(self.0, prompts, max_new, reuse, keep, logits)
    }

    fn decode(&self, cache: &mut KvCache, tokens: &[u32], logits: &mut Vec<f32>) -> Result<()> {
        let l = Qwen3::decode(self.0, cache, tokens)?;
        to_host(&l, logits)
    }

    fn retain(&self, cache: &mut KvCache, rows: &[usize]) -> Result<()> {
        Ok(cache.retain(rows)?)
    }
}
