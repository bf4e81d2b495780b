//! # t2po-control
//!
//! The T²PO control kernel (uncertainty-guided exploration control for multi-turn agentic RL,
//! ICML 2026): per-token statistics from a logits row, the self-calibrated signal `M_t`, the
//! token-level thinking intervention (TTI) state machine with its forced-token queue, and
//! turn-level dynamical sampling (TDS). `no_std`, allocation-free, fixed-size state; a C ABI in
//! [`ffi`] (header `include/t2po.h`).
//!
//! The data flows one way: `logits → stats → signal → tti → (engine samples) → tds`.
//!
//! ```
//! use t2po_control::{Config, Sequence, ThinkStart, Tds};
//!
//! let cfg = Config::paper();
//! let mut seq = Sequence::new(&cfg)?;
//! let mut tds = Tds::new(&cfg)?;
//! seq.begin_generation(ThinkStart::Inside); // the prompt ended with <think>
//! let mut logits = vec![0.0f32; 151_936]; // Qwen3's vocabulary
//! for t in 0..40u32 {
//!     logits.fill(0.0);
//!     logits[(t as usize * 7) % 1000] = 5.0; // a stand-in for the model
//!     let step = seq.observe_row(&logits)?;
//!     step.apply(&mut logits)?; // or hand step.forced() to your sampler
//!     let token = step.forced().unwrap_or((t * 7) % 1000);
//!     seq.accept(token)?;
//! }
//! let verdict = tds.decide(seq.turn_signal()?)?;
//! assert_eq!(verdict.resample, 0); // the first turn is never resampled
//! tds.commit()?;
//! # Ok::<(), t2po_control::Error>(())
//! ```
#![no_std]
#![deny(missing_docs)]
#![deny(unsafe_code)]

#[cfg(any(feature = "std", test))]
extern crate std;

pub mod config;
pub mod error;
pub mod ffi;
pub mod signal;
pub mod stats;
pub mod tds;
pub mod tti;

pub use config::{
    Config, Keep, Norm, Profile, TdsRule, Term, Trigger, TurnMean, QUEUE_CAPACITY, TOP_J_CAPACITY,
    WINDOW_CAPACITY,
};
pub use error::{ConfigError, Error, RowError, Status};
pub use signal::SignalState;
pub use stats::{mass_chunks, token_stats, token_stats_mass, Logit, TokenStats, MASS_CHUNK};
pub use tds::{Tds, TdsCounters, TurnAccumulator, Verdict};
pub use tti::{
    observe_batch, observe_batch_mass, observe_batch_stats, Event, Sequence, Step, ThinkStart,
};
