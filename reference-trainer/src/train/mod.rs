//! Training: the config ([`config`]), the optimizer ([`optimizer`]), supervised fine-tuning
//! ([`sft`]) and the cold start ([`rft`]), the PPO update ([`ppo`]), checkpoints with resume
//! ([`state`]), metrics ([`metrics`]), curves ([`plots`]) and the run that ties them together
//! ([`run`]); `control.calibrate`'s warm-ups ([`calibrate`]); `train.save_rollouts`'s files
//! ([`rollout_log`]); plain progress lines where no bar is drawn ([`progress`]); the evaluation
//! before RL kept for the runs that would repeat it ([`eval_cache`]).

pub mod ablate;
pub mod calibrate;
pub mod config;
pub mod dynamic;
pub mod eval_cache;
pub mod metrics;
pub mod optimizer;
pub mod plots;
pub mod ppo;
pub mod progress;
pub mod rft;
pub mod rollout_log;
pub mod run;
pub mod sft;
pub mod state;

pub use config::{ExpertKind, TrainConfig};
pub use metrics::{MetricsLine, MetricsLog, RolloutSummary, UpdateReport};
pub use optimizer::{Accumulated, AdamW, AdamWConfig, StepReport};
pub use rft::Reporter;
pub use run::{train, RunOptions, RunResult};
pub use sft::{cut_thinking, expert_demos, expert_demos_counted, sft_step, Demo, SftReport};
