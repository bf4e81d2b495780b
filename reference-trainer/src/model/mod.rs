//! The policy model: Qwen3 (and the Llama and Qwen2 families, as flags of the same model) in
//! candle with Hugging Face weight names ([`qwen3`]), its
//! differentiable ops ([`ops`], composed: the reference) and their fused kernels ([`fused`]), the batched decode cache ([`kv_cache`]) and checkpoints in the
//! Hugging Face layout ([`checkpoint`]); the rollout's allocation-free f32 CPU decode step
//! ([`decode`]).

pub mod checkpoint;
pub mod decode;
pub mod fused;
pub mod kv_cache;
pub mod ops;
pub mod qwen3;

pub use decode::{DecodeState, Decoder};
pub use kv_cache::KvCache;
pub use qwen3::{Arch, PrefilledPrompt, Qwen3, Qwen3Config, TokenLogProbs};
