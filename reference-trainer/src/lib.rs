//! # reference-trainer
//!
//! The T²PO reference trainer: a Qwen3 policy in candle with Hugging Face weights
//! ([`model`]), a tokenizer built with the `tokenizers` crate ([`tokenizer`]), and the batched
//! multi-turn rollout with TTI and TDS in the decode loop ([`rollout`]) over the environments of
//! `t2po-envs`. [`defaults`] builds the embedded default (a small random Qwen3 and its
//! tokenizer) from a seed; [`gguf`] reads a llama.cpp GGUF file as a model and tokenizer.
//!
//! Imports run one way: the binary → [`rollout`] → {[`model`] through [`rollout::Policy`],
//! `t2po-control`, `t2po-envs`}.

pub mod algo;
mod alloc;
pub mod defaults;
pub mod error;
pub mod gguf;
pub mod model;
pub mod rollout;
pub mod tokenizer;
pub mod train;

pub use alloc::{peak_rss_bytes, release_free_memory, tune_allocator, PURGE_DELAY_MS};
pub use error::{Error, Result};
