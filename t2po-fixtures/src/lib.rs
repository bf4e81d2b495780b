//! # t2po-fixtures
//!
//! The inputs and the reference every test, benchmark and fuzz target of the workspace shares,
//! written once:
//! - [`rng::Rng`]: a seeded xorshift64 stream (uniforms, Irwin–Hall normals), pinned by a test so
//!   a seed names the same rows forever;
//! - [`rows`]: the logits-row families (random, one-hot, uniform, huge magnitudes, partly `−inf`,
//!   fewer than `j` finite, peaked) and language-model-shaped rows for the benchmarks;
//! - [`mod@reference`]: the f64 two-pass token statistics and the tolerance contract of
//!   `t2po_control::token_stats` (`|got − ref| ≤ 1e-5·|ref| + 1e-7`; `+ 1e-6` for the lse).

pub mod reference;
pub mod rng;
pub mod rows;

pub use reference::{
    chunk_masses, close, close_lse, close_mass, reference, Reference, ABS, ABS_LSE, ABS_MASS, REL,
};
pub use rng::Rng;
