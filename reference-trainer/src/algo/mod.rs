//! The trainer's RL algorithms as pure functions over trajectory records (the counterpart of
//! verl's `core_algos.py` and verl-agent's `gigpo/core_gigpo.py`), specified in
//! `T2PO-RULES.md` §5: returns, GRPO/GiGPO advantages, anchor similarity, the PPO loss, and
//! the flattening of episodes into training rows.
//!
//! Pipeline: [`advantage::compute_advantages`] (which calls [`returns`]) →
//! [`rows::flatten_rows`] → the model's `token_log_probs(seqs, start)` → [`loss::ppo_loss`].

pub mod advantage;
pub mod length;
pub mod loss;
pub mod returns;
pub mod rows;
pub mod similarity;

pub use advantage::{
    build_step_groups, compute_advantages, normalize_in_group, AdvantageConfig, Advantages,
    EpisodeStats, Estimator, NormMode, Singleton, StepGrouping, TurnAdvantage,
};
pub use length::{add_length_reward, length_rewards};
pub use loss::{
    low_var_kl, masked_mean, ppo_loss, LossConfig, LossInputs, LossMetrics, LossOutput,
};
pub use returns::{discounted_returns, turn_values, ReturnConfig, TurnValues};
pub use rows::{flatten_rows, pack_rows, trainable_episodes, PackedRows, TrainingRow};
pub use similarity::{are_similar, sequence_ratio};

use thiserror::Error;

/// Everything that can go wrong in `algo`; every variant names the offending field.
#[derive(Debug, Error)]
pub enum AlgoError {
    /// A configuration value is out of range.
    #[error("config `{field}`: {reason}")]
    Config {
        /// The config field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A field of an episode record is inconsistent.
    #[error("episode {episode}: `{field}`: {reason}")]
    Episode {
        /// Index of the episode in the batch slice.
        episode: usize,
        /// The record field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A field of a turn record is inconsistent.
    #[error("episode {episode} turn {turn}: `{field}`: {reason}")]
    Turn {
        /// Index of the episode in the batch slice.
        episode: usize,
        /// Index of the turn in `EpisodeRecord::turns`.
        turn: usize,
        /// The record field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A loss input tensor has the wrong shape, dtype or values.
    #[error("tensor `{name}`: {reason}")]
    Tensor {
        /// The input's name.
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A computed quantity is NaN or infinite.
    #[error("non-finite `{what}`: {value}")]
    NonFinite {
        /// The quantity.
        what: &'static str,
        /// Its value.
        value: f64,
    },
    /// An error inside candle.
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
}

/// `Result` with [`AlgoError`].
pub type Result<T> = std::result::Result<T, AlgoError>;

pub(crate) fn config_err(field: &'static str, reason: impl Into<String>) -> AlgoError {
    AlgoError::Config {
        field,
        reason: reason.into(),
    }
}
