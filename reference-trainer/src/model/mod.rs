//! The policy model: Qwen3 in candle with Hugging Face weight names ([`qwen3`]), its
//! differentiable ops ([`ops`], composed: the reference) and their fused kernels ([`fused`]), the batched decode cache ([`kv_cache`]) and checkpoints in the
//! Hugging Face layout ([`checkpoint`]).

pub mod checkpoint;
pub mod fused;
pub mod kv_cache;
pub mod ops;
pub mod qwen3;

pub use kv_cache::KvCache;
pub use qwen3::{Qwen3, Qwen3Config, TokenLogProbs};
