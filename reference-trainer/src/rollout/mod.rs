//! The batched multi-turn rollout: [`policy`] (what it needs from a model), [`sampler`] (the
//! one per-token caller of the control kernel), [`episode`] (the turn and TDS loops),
//! [`pool`] (the environments), [`trajectory`] (the records).

pub mod episode;
pub mod policy;
pub mod pool;
pub mod sampler;
pub mod trajectory;

pub use episode::{
    rollout, rollout_part_until, rollout_until, ControlSwitches, EpisodeSpec, ProfileName,
    RolloutConfig, RolloutStats, TriggerName,
};
pub use policy::{CandleDecode, PackedQwen3, Policy, Prefilled, QwenCache};
pub use pool::{encyclopedia, EnvKind, EnvPool, PoolSize, Split};
pub use sampler::{Draw, Sampler, SamplingParams};
pub use trajectory::{DiscardedTry, EpisodeRecord, Generation, TtiFire, TtiReason, TurnRecord};
