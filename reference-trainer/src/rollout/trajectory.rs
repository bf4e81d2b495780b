//! The records a rollout produces: one [`TurnRecord`] per kept turn (what training needs and
//! what a person inspects), one [`EpisodeRecord`] per episode. Serialisable as JSON lines.

use serde::{Deserialize, Serialize};

/// Why TTI cut a think block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TtiReason {
    /// `M_t` converged (window mean of `|ΔM|` below ε, or the released patience rule).
    Converged,
    /// The think budget `L_max` was reached.
    Budget,
}

/// Where and why TTI fired in a generation.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TtiFire {
    /// Observed position `t` at which it fired (the queue starts at the next step).
    pub position: u32,
    /// The rule that fired.
    pub reason: TtiReason,
}

/// One generated response (a try of a turn).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Generation {
    /// Response token ids (the end-of-turn token included when the model emitted one).
    pub response_ids: Vec<u32>,
    /// `log p(token)` under the sampling policy, per response token.
    pub log_probs: Vec<f32>,
    /// Which response tokens TTI forced.
    pub forced: Vec<bool>,
    /// `M_t` per response token (`None` where forced).
    pub signal: Vec<Option<f32>>,
    /// Φ of the generation (`None` when no position was observed).
    pub phi: Option<f32>,
    /// Think-content tokens (what `L_max` bounds).
    pub think_tokens: u32,
    /// Whether and why TTI fired.
    pub tti: Option<TtiFire>,
    /// The response hit the token cap without an end-of-turn token.
    pub truncated: bool,
    /// The smallest window mean of `|ΔM|` TTI's convergence rule compared with ε in this
    /// generation (`None` where it never checked: fewer than `L_min` observed think tokens, or
    /// TTI off). With ε = 0 (never fires) it says at which ε the rule would have fired:
    /// exactly where ε exceeds it (`control.calibrate` reads it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_window_mean: Option<f32>,
}

/// A TDS try that was discarded: never sent to the environment, never trained on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiscardedTry {
    /// Φ of the try.
    pub phi: Option<f32>,
    /// Γ of the try against the previous kept turn.
    pub gamma: f32,
    /// Tokens it took to generate.
    pub tokens: usize,
}

/// One kept turn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    /// Turn index from 0.
    pub turn: usize,
    /// Prompt token ids (chat-formatted).
    pub prompt_ids: Vec<u32>,
    /// Prompt tokens dropped from the left to fit the prompt cap.
    pub prompt_truncated: usize,
    /// The kept generation.
    pub generation: Generation,
    /// 1 for every response token that enters the loss (all kept response tokens).
    pub response_mask: Vec<u8>,
    /// The decoded response text.
    pub response: String,
    /// Γ of the kept try (0 on the first turn).
    pub gamma: f32,
    /// Generations this turn took (1 + discarded).
    pub tds_tries: u32,
    /// The discarded tries.
    pub discarded: Vec<DiscardedTry>,
    /// The projected action sent to the environment.
    pub action: String,
    /// Whether the response had the required format.
    pub format_valid: bool,
    /// SimpleTIR void turn: no valid action, or cut off mid-output.
    pub void: bool,
    /// The environment's reward for the step.
    pub reward: f64,
    /// Whether the episode ended with this step.
    pub done: bool,
    /// Whether the task was solved at this step.
    pub won: bool,
    /// The benchmark's task score after this step.
    pub score: f64,
    /// GiGPO's anchor: the observation this turn acted on.
    pub anchor: String,
}

/// One episode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpisodeRecord {
    /// Episode index within the rollout.
    pub episode: usize,
    /// The environment ("webshop", "alfworld", "search").
    pub env: String,
    /// Task index in the environment's task set.
    pub task: usize,
    /// Group id: the episodes of one task in one rollout share it (GRPO/GiGPO groups).
    pub group: usize,
    /// The task text.
    pub task_text: String,
    /// Where the task came from, as the environment reports it (Search QA: the question's
    /// dataset, `nq`, `hotpotqa`, …; WebShop: the product category; ALFWorld: the task type;
    /// empty where none), for success by source as verl validates per `data_source`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// The kept turns.
    pub turns: Vec<TurnRecord>,
    /// Whether the task was solved.
    pub success: bool,
    /// The benchmark's task score at the end.
    pub score: f64,
    /// Sum of step rewards.
    pub total_reward: f64,
    /// Generations discarded by TDS in this episode.
    pub resamples: u32,
    /// Whether any turn is void (SimpleTIR filters such trajectories when switched on).
    pub void: bool,
    /// The parts of the task score, by name, from the step that scored (WebShop's purchase:
    /// `r_type`, `r_att`, `r_option`, `r_price`, `title_score`, …); empty elsewhere.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub reward_parts: std::collections::BTreeMap<String, f64>,
}

impl EpisodeRecord {
    /// Kept turns.
    pub fn num_turns(&self) -> usize {
        self.turns.len()
    }
}
