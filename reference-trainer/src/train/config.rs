//! The training config: one TOML file per environment (`reference-trainer/configs/*.toml`,
//! embedded in the binary as the defaults), parsed strictly — an unknown key or a wrong type is
//! a parse error that shows the key, a value out of range is an error naming `section.key` and
//! the allowed range — and turned into the rollout, advantage, loss and optimizer settings.
//!
//! The shipped values are the tiny default model's (a ~1 M-parameter Qwen3 from random init on
//! two CPU cores); each line's comment gives the paper's setting (spec §5) where it differs.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::algo::{
    AdvantageConfig, EpisodeStats, Estimator, LossConfig, NormMode, ReturnConfig, StepGrouping,
};
use crate::error::{Error, Result};
use crate::model::Qwen3Config;
use crate::rollout::{
    ControlSwitches, EnvKind, PoolSize, ProfileName, RolloutConfig, SamplingParams, TriggerName,
};
use crate::tokenizer::ControlTokens;
use crate::train::AdamWConfig;

/// The embedded default config of `env` (the file `configs/<env>.toml`).
pub fn embedded(env: EnvKind) -> &'static str {
    match env {
        EnvKind::Webshop => include_str!("../../configs/webshop.toml"),
        EnvKind::Alfworld => include_str!("../../configs/alfworld.toml"),
        EnvKind::Search => include_str!("../../configs/search.toml"),
    }
}

/// A whole training run's settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// `webshop`, `alfworld` or `search`.
    pub env: EnvKind,
    /// Seed of data, weights, task order and sampling.
    pub seed: u64,
    /// The random-initialised model (ignored when a checkpoint is given).
    pub model: ModelSection,
    /// How much generated data the environment builds.
    pub data: PoolSize,
    /// Rollout shape.
    pub rollout: RolloutSection,
    /// TTI / TDS.
    pub control: ControlSection,
    /// Returns, advantages and the PPO loss.
    pub algo: AlgoSection,
    /// AdamW and batching of the RL updates.
    pub optim: OptimSection,
    /// Language modelling on a generated encyclopedia before the cold start.
    pub pretrain: PretrainSection,
    /// The cold start.
    pub rft: RftSection,
    /// Iterations, evaluation and checkpoints.
    pub train: LoopSection,
}

/// Shape of the random-initialised Qwen3.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// Residual width.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (divides the query heads).
    pub num_key_value_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
}

/// Rollout shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutSection {
    /// Episodes per task (the GRPO/GiGPO group).
    pub group_size: usize,
    /// Training tasks per iteration.
    pub tasks_per_iteration: usize,
    /// Turn limit.
    pub max_turns: usize,
    /// Memory window P.
    pub history_length: usize,
    /// Response cap in tokens.
    pub max_response_tokens: usize,
    /// Prompt cap in tokens.
    pub max_prompt_tokens: usize,
    /// Sampling temperature.
    pub temperature: f32,
    /// Nucleus mass.
    pub top_p: f32,
}

/// TTI / TDS switches and parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlSection {
    /// Token-level thinking intervention.
    pub tti: bool,
    /// Turn-level dynamical sampling.
    pub tds: bool,
    /// `paper` or `released` rules.
    pub profile: ProfileName,
    /// Baseline: only the think budget cuts thinking.
    pub hard_budget: bool,
    /// SimpleTIR: drop trajectories with a void turn from the loss.
    pub filter_void: bool,
    /// L_min: think tokens before the convergence rule may fire.
    pub min_len: u32,
    /// L_max: think budget.
    pub max_think: u32,
    /// N: window of |ΔM|.
    pub window: u32,
    /// ε of the convergence rule.
    pub epsilon: f32,
    /// η of TDS.
    pub eta: f32,
    /// B_max: resamples per turn.
    pub max_resamples: u32,
    /// α of `M_t = α·H̃ + (1 − α)·(1 − C̃)` (spec §2); unset: the profile's (0.4 in both).
    /// 1: entropy only, 0: confidence only (the paper's ablation of the fusion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<f32>,
    /// TTI's convergence rule, `window_mean`, `patience` or `peak_cut`; unset: the profile's
    /// (paper: window mean, released: patience). `peak_cut` cuts at the first local minimum of
    /// `M_t`, the ablation of the trigger rule the paper argues against (§4.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<TriggerName>,
    /// Beyond the paper: set ε and η from the policy itself before RL instead of taking the
    /// values above. Two warm-up rollouts on training tasks (TTI and TDS observing, never
    /// acting) measure, per turn, the smallest window mean of `|ΔM|` the convergence rule
    /// compared and, per later turn, Γ; ε and η become the values at which TTI would have
    /// fired in `target_fire_rate` of the turns and TDS resampled `target_resample_rate` of
    /// the later turns (`train::calibrate`). The result goes to `calibrated` in the run's saved
    /// config, so a resume and an `eval` of its checkpoints use the same values.
    #[serde(default)]
    pub calibrate: bool,
    /// Training tasks per warm-up rollout (each `rollout.group_size` times).
    #[serde(default = "default_calibrate_tasks")]
    pub calibrate_tasks: usize,
    /// The share of turns in which TTI's convergence rule should fire.
    #[serde(default = "default_target_fire_rate")]
    pub target_fire_rate: f64,
    /// The share of later turns (those with a previous kept turn) TDS should resample at the
    /// first try.
    #[serde(default = "default_target_resample_rate")]
    pub target_resample_rate: f64,
    /// What the calibration chose (written by the run; a user config leaves it out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibrated: Option<Calibrated>,
}

fn default_calibrate_tasks() -> usize {
    16
}

fn default_target_fire_rate() -> f64 {
    0.3
}

fn default_target_resample_rate() -> f64 {
    0.2
}

/// The thresholds `control.calibrate` chose, and what the warm-up measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibrated {
    /// ε of the convergence rule (the config's ε when TTI is off).
    pub epsilon: f32,
    /// η of TDS (the config's η when TDS is off).
    pub eta: f32,
    /// The share of the first warm-up's turns in which the rule would have fired at `epsilon`
    /// (`None`: TTI off, not calibrated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fire_rate: Option<f64>,
    /// The share of the second warm-up's later turns TDS would have resampled at `eta`
    /// (`None`: TDS off, not calibrated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resample_rate: Option<f64>,
    /// Turns of the first warm-up, and how many of them reached a check of the rule.
    pub turns: usize,
    /// Of those, the turns in which the rule was checked at least once.
    pub checked_turns: usize,
    /// Later turns of the second warm-up (the population of the resample rate).
    pub later_turns: usize,
}

/// Returns, advantages and the loss.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlgoSection {
    /// `gigpo` or `grpo`.
    pub estimator: Estimator,
    /// γ.
    pub gamma: f64,
    /// λ: subtracted from an invalid turn's score and return.
    pub format_penalty: f64,
    /// ω: weight of GiGPO's step term.
    pub step_weight: f64,
    /// `mean` or `mean_std` normalisation.
    pub norm: Norm,
    /// Step groups by anchor similarity ≥ this (Search QA 0.9); 1.0 = identical anchors.
    pub anchor_similarity: f64,
    /// ε_low of the PPO clip.
    pub clip_low: f64,
    /// ε_high of the PPO clip.
    pub clip_high: f64,
    /// Dual-clip constant c (> 1).
    pub clip_ratio_c: f64,
    /// Entropy bonus.
    pub entropy_coef: f64,
    /// k3 KL to the reference policy (0: none).
    pub kl_coef: f64,
    /// DAPO's dynamic sampling (verl's `algorithm.filter_groups` on the episode reward): a
    /// group whose episodes all got the same total reward (no advantage, no gradient) is
    /// dropped and more tasks are rolled out until `rollout.tasks_per_iteration` groups are
    /// left, or `max_gen_batches` batches were drawn.
    #[serde(default)]
    pub dynamic_sampling: bool,
    /// The most rollout batches one iteration draws with `dynamic_sampling` (verl's
    /// `max_num_gen_batches`, whose limit is an error there; here the iteration trains on the
    /// groups it has, none at worst).
    #[serde(default = "default_max_gen_batches")]
    pub max_gen_batches: usize,
    /// Weight of the length reward added to each episode's last turn (Kimi k1.5's, per
    /// episode group on the thinking tokens: `algo::length`); 0: off. The length-penalty
    /// baseline.
    #[serde(default)]
    pub length_reward: f64,
    /// Beyond the paper: weight of an SFT term on the cold start's demonstrations in every RL
    /// optimizer step (InstructGPT's PPO-ptx with the demonstrations as its data;
    /// `ppo::SftAnchor`); 0: off. Needs `rft.demo_epochs` > 0 (the demonstrations are rebuilt
    /// from the config, as the cold start drew them).
    #[serde(default)]
    pub sft_coef: f64,
    /// Demonstrations per RL optimizer step for that term.
    #[serde(default = "default_sft_per_step")]
    pub sft_per_step: usize,
}

fn default_max_gen_batches() -> usize {
    4
}

fn default_sft_per_step() -> usize {
    8
}

/// Group normalisation, as the config spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Norm {
    /// `v − mean`.
    Mean,
    /// `(v − mean) / (std + ε)`.
    MeanStd,
}

/// AdamW and update batching.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimSection {
    /// Peak learning rate.
    pub lr: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
    /// Global-norm gradient clip (0: off).
    pub grad_clip: f64,
    /// Linear warm-up steps.
    pub warmup_steps: u64,
    /// Optimizer steps per iteration (PPO mini-batches over the iteration's rows).
    pub mini_batches: usize,
    /// Token budget of one micro-batch (padded rows × length); gradients accumulate across.
    pub micro_batch_tokens: usize,
}

/// Pretraining of the random-initialised default: next-token prediction on the passages of a
/// generated encyclopedia about a world no task asks about (skipped for a checkpoint given with
/// `--init`, which is already pretrained).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PretrainSection {
    /// Passages in the encyclopedia (0: no pretraining).
    pub passages: usize,
    /// Tokens per training sequence (passages packed end to end, `<|endoftext|>` between).
    pub seq_len: usize,
    /// Sequences per optimizer step.
    pub batch_size: usize,
    /// Epochs over the sequences.
    pub epochs: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Linear warm-up steps.
    pub warmup_steps: u64,
    /// The rate the cosine decay ends at.
    pub final_lr: f64,
}

/// The cold start: SFT on the experts' demonstrations, then rejection sampling.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RftSection {
    /// Training tasks whose expert episodes are the demonstrations (0: no demonstration SFT).
    pub demo_tasks: usize,
    /// Epochs over the demonstrations.
    pub demo_epochs: usize,
    /// Demonstrations per optimizer step.
    pub batch_size: usize,
    /// Weight of the prompt tokens' loss relative to the response's (0: responses only; see
    /// [`crate::train::sft_step`]).
    pub prompt_loss_weight: f64,
    /// Beyond the paper: the share of demonstrations whose thinking is cut where TTI could cut
    /// it — the think span stopped after a drawn number of tokens (at least `control.min_len`
    /// − 1, fewer than the expert wrote), then the rollout's forced queue and the expert's
    /// action ([`crate::train::cut_thinking`]). The paper's policy is a pretrained model that
    /// goes on to its action after a forced `</think>`; a policy trained from random weights on
    /// whole demonstrations has never seen one mid-thought and opens a second think block (an
    /// invalid format). 0: off (and when absent, as in configs written before it existed).
    #[serde(default)]
    pub cut_think: f64,
    /// Who writes the demonstrations: `privileged` (the environment's expert, which knows the
    /// goal) or, on WebShop, `shopper` (acts only on what the pages show: the first result below
    /// the price limit, the instruction's options, buy; beyond the paper, whose cold start is
    /// the base model's own RFT). Absent in configs written before it existed: privileged.
    #[serde(default)]
    pub expert: ExpertKind,
    /// Peak learning rate of the cold start.
    pub lr: f64,
    /// Linear warm-up steps of the demonstration SFT.
    pub warmup_steps: u64,
    /// The learning rate the demonstration SFT decays to (cosine, over its steps after the
    /// warm-up); equal to `lr` for a constant rate. The rejection rounds run at this rate.
    pub final_lr: f64,
    /// Rejection-sampling rounds (0: none).
    pub rounds: usize,
    /// Beyond the paper: the rounds label instead of reject (DAgger, Ross et al. 2011). Each
    /// round still rolls the policy out on `tasks` × `group_size` training episodes, then asks
    /// the environment's expert what it would have answered at every state those episodes
    /// reached ([`crate::rollout::EnvPool::expert_labels`], replaying the episode), and
    /// fine-tunes on the policy's own prompts with the expert's answers, every turn of every
    /// episode, success or not (`score_threshold` is then unused). A cold start trained on
    /// the expert's episodes alone never sees a state after its own mistake (ALFWorld: a
    /// policy that went to the sink basin goes there again); these rounds show it the way on.
    /// `rft.cut_think` applies to the labels as to the demonstrations. Off when absent, as in
    /// configs written before it existed. Measured on ALFWorld (README, "Relabelled rounds"):
    /// it hurt — the expert's answers off its path depend on more than the policy's memory
    /// window shows.
    #[serde(default)]
    pub relabel: bool,
    /// Training tasks rolled out per round.
    pub tasks: usize,
    /// Episodes per task per round.
    pub group_size: usize,
    /// An episode is kept when its task score is at least this.
    pub score_threshold: f64,
    /// Epochs over the kept turns per round (≤ 5).
    pub epochs: usize,
    /// A checkpoint inside the demonstration SFT every this many of its steps, and at a stop
    /// (SIGINT, SIGTERM): a killed or stopped run resumes there, bit for bit as if it had run
    /// through, instead of at the SFT's start (the 5 M WebShop SFT runs 72 min). 0 (and when
    /// absent, as in configs written before it existed): only after the SFT.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub checkpoint_every: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Who writes the cold start's demonstrations, as the config spells it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpertKind {
    /// The environment's built-in expert (it knows the goal; it always succeeds).
    #[default]
    Privileged,
    /// WebShop only: [`t2po_envs::webshop::expert::Demonstrator::Shopper`], every decision a
    /// function of what the prompt shows.
    Shopper,
}

/// Iterations, evaluation and checkpoints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoopSection {
    /// RL iterations.
    pub iterations: usize,
    /// Evaluate on held-out tasks every this many iterations (and before and after RL).
    pub eval_every: usize,
    /// Held-out tasks per evaluation (capped by the split's size).
    pub eval_tasks: usize,
    /// Episodes per held-out task.
    pub eval_episodes: usize,
    /// Sampling temperature of evaluation: 0 is greedy (as verl validates), the headline figure.
    pub eval_temperature: f32,
    /// Also evaluate at the rollout temperature (the sampled figure, logged beside it).
    pub eval_sampled: bool,
    /// Write a checkpoint every this many iterations (and after the cold start and at the end).
    pub checkpoint_every: usize,
    /// Checkpoints kept on disk (the newest ones).
    pub keep_checkpoints: usize,
    /// Which training tasks RL draws its tasks from.
    pub rl_tasks: RlTasks,
    /// Search QA only: the training sources (`data_source`: `nq`, `hotpotqa`) RL draws its tasks
    /// from, on top of [`rl_tasks`](Self::rl_tasks); empty (the default): every source, as the
    /// paper trains. The cold start's demonstrations and the held-out evaluation are unchanged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rl_sources: Vec<String>,
    /// Search QA only, beyond the paper: each RL batch draws its tasks evenly over the training
    /// sources (stratified, [`crate::train::rft::sample_balanced`]) instead of uniformly over
    /// the tasks; off by default (the paper's uniform draw).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub balance_sources: bool,
    /// Write every RL iteration's episodes as trained on (text, actions, rewards, TTI and TDS
    /// decisions, each turn's advantage and its GiGPO parts) to `rollouts/iter-NNNNNN.jsonl` in
    /// the run folder, as verl's `trainer.rollout_data_dir` does; off by default.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub save_rollouts: bool,
}

/// The training tasks an RL iteration draws from, as the config spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RlTasks {
    /// The whole training split (the paper's setting).
    All,
    /// The training tasks whose expert episodes were not the cold start's demonstrations
    /// (`rft.demo_tasks` of them, drawn as the cold start draws them): a reward on a task the
    /// SFT did not see comes from the skill, not from a demonstration the policy remembers.
    Undemonstrated,
}

impl TrainConfig {
    /// The embedded default of `env`.
    pub fn default_for(env: EnvKind) -> Result<Self> {
        Self::parse(
            embedded(env),
            Path::new(&format!("<embedded {}.toml>", env.as_str())),
        )
    }

    /// Reads and checks a config file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::parse(&text, path)
    }

    /// Parses and checks TOML text; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let cfg: TrainConfig = toml::from_str(text).map_err(|e| Error::Toml {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        cfg.validate(path)?;
        Ok(cfg)
    }

    /// The config as TOML (saved with every checkpoint).
    pub fn to_toml(&self) -> Result<String> {
        toml::to_string(self).map_err(|e| Error::Toml {
            path: PathBuf::from("<config>"),
            message: e.to_string(),
        })
    }

    /// Checks every range; the error names `section.key` and what is allowed.
    pub fn validate(&self, path: &Path) -> Result<()> {
        let mut c = Checker { path };
        let m = &self.model;
        c.int("model.hidden_size", m.hidden_size, 1, 65536)?;
        c.int("model.intermediate_size", m.intermediate_size, 1, 1 << 20)?;
        c.int("model.num_hidden_layers", m.num_hidden_layers, 1, 256)?;
        c.int("model.num_attention_heads", m.num_attention_heads, 1, 1024)?;
        c.int("model.num_key_value_heads", m.num_key_value_heads, 1, 1024)?;
        c.int("model.head_dim", m.head_dim, 2, 1024)?;
        if !m.head_dim.is_multiple_of(2) {
            return c.fail(
                "model.head_dim",
                format!("{} is odd (RoPE needs an even head width)", m.head_dim),
            );
        }
        if !m.num_attention_heads.is_multiple_of(m.num_key_value_heads) {
            return c.fail(
                "model.num_key_value_heads",
                format!(
                    "{} does not divide num_attention_heads = {}",
                    m.num_key_value_heads, m.num_attention_heads
                ),
            );
        }
        let r = &self.rollout;
        c.int("rollout.group_size", r.group_size, 1, 1024)?;
        c.int(
            "rollout.tasks_per_iteration",
            r.tasks_per_iteration,
            1,
            1 << 16,
        )?;
        c.int("rollout.max_turns", r.max_turns, 1, 1000)?;
        c.int("rollout.history_length", r.history_length, 0, 1000)?;
        c.int(
            "rollout.max_response_tokens",
            r.max_response_tokens,
            1,
            1 << 20,
        )?;
        c.int("rollout.max_prompt_tokens", r.max_prompt_tokens, 1, 1 << 20)?;
        c.real(
            "rollout.temperature",
            r.temperature as f64,
            Open(0.0),
            Closed(100.0),
        )?;
        c.real("rollout.top_p", r.top_p as f64, Open(0.0), Closed(1.0))?;
        let k = &self.control;
        c.int("control.min_len", k.min_len as usize, 0, 1 << 20)?;
        c.int("control.max_think", k.max_think as usize, 1, 1 << 20)?;
        c.int(
            "control.window",
            k.window as usize,
            1,
            t2po_control::WINDOW_CAPACITY - 1,
        )?;
        c.real(
            "control.epsilon",
            k.epsilon as f64,
            Closed(0.0),
            Closed(10.0),
        )?;
        c.real("control.eta", k.eta as f64, Closed(0.0), Closed(10.0))?;
        c.int("control.max_resamples", k.max_resamples as usize, 0, 64)?;
        if let Some(alpha) = k.alpha {
            c.real("control.alpha", alpha as f64, Closed(0.0), Closed(1.0))?;
        }
        c.int("control.calibrate_tasks", k.calibrate_tasks, 1, 1 << 20)?;
        c.real(
            "control.target_fire_rate",
            k.target_fire_rate,
            Closed(0.0),
            Closed(1.0),
        )?;
        c.real(
            "control.target_resample_rate",
            k.target_resample_rate,
            Closed(0.0),
            Closed(1.0),
        )?;
        if k.calibrate
            && k.tti
            && (k.hard_budget || k.trigger.is_some_and(|t| t != TriggerName::WindowMean))
        {
            return c.fail(
                "control.calibrate",
                "calibrates ε of the window-mean rule, which this config does not use \
                 (hard_budget = true, or another control.trigger); unset one of them"
                    .to_string(),
            );
        }
        if k.calibrate && k.tti && k.trigger.is_none() && k.profile == ProfileName::Released {
            return c.fail(
                "control.calibrate",
                "the released profile's rule is patience, not the window mean ε bounds: set \
                 control.trigger = \"window_mean\" to calibrate it"
                    .to_string(),
            );
        }
        if let Some(cal) = &k.calibrated {
            c.real(
                "control.calibrated.epsilon",
                cal.epsilon as f64,
                Closed(0.0),
                Closed(10.0),
            )?;
            c.real(
                "control.calibrated.eta",
                cal.eta as f64,
                Closed(0.0),
                Closed(10.0),
            )?;
        }
        if k.trigger.is_some() && k.hard_budget {
            return c.fail(
                "control.trigger",
                "set with hard_budget = true: the hard budget has no convergence rule (only \
                 L_max cuts thinking); unset one of them"
                    .to_string(),
            );
        }
        if k.min_len > k.max_think {
            return c.fail(
                "control.min_len",
                format!("{} exceeds max_think = {}", k.min_len, k.max_think),
            );
        }
        if k.max_think as usize >= r.max_response_tokens {
            return c.fail(
                "control.max_think",
                format!(
                    "{} must be below rollout.max_response_tokens = {} (room for the forced \
                     tokens and the action)",
                    k.max_think, r.max_response_tokens
                ),
            );
        }
        let a = &self.algo;
        c.real("algo.gamma", a.gamma, Closed(0.0), Closed(1.0))?;
        c.real(
            "algo.format_penalty",
            a.format_penalty,
            Closed(0.0),
            Closed(100.0),
        )?;
        c.real(
            "algo.step_weight",
            a.step_weight,
            Closed(0.0),
            Closed(100.0),
        )?;
        c.real(
            "algo.anchor_similarity",
            a.anchor_similarity,
            Open(0.0),
            Closed(1.0),
        )?;
        c.real("algo.clip_low", a.clip_low, Closed(0.0), Open(1.0))?;
        c.real("algo.clip_high", a.clip_high, Closed(0.0), Closed(10.0))?;
        c.real(
            "algo.clip_ratio_c",
            a.clip_ratio_c,
            Open(1.0),
            Closed(100.0),
        )?;
        c.real(
            "algo.entropy_coef",
            a.entropy_coef,
            Closed(0.0),
            Closed(1.0),
        )?;
        c.real("algo.kl_coef", a.kl_coef, Closed(0.0), Closed(10.0))?;
        c.int("algo.max_gen_batches", a.max_gen_batches, 1, 1024)?;
        c.real(
            "algo.length_reward",
            a.length_reward,
            Closed(0.0),
            Closed(100.0),
        )?;
        c.real("algo.sft_coef", a.sft_coef, Closed(0.0), Closed(100.0))?;
        c.int("algo.sft_per_step", a.sft_per_step, 1, 4096)?;
        if a.sft_coef > 0.0 && self.rft.demo_epochs == 0 {
            return Err(Error::invalid(
                "algo.sft_coef",
                format!(
                    "{}: the SFT anchor trains on the cold start's demonstrations, and \
                     rft.demo_epochs = 0 has none",
                    a.sft_coef
                ),
            ));
        }
        let o = &self.optim;
        c.real("optim.lr", o.lr, Open(0.0), Closed(1.0))?;
        c.real(
            "optim.weight_decay",
            o.weight_decay,
            Closed(0.0),
            Closed(1.0),
        )?;
        c.real("optim.grad_clip", o.grad_clip, Closed(0.0), Closed(1e6))?;
        c.int("optim.warmup_steps", o.warmup_steps as usize, 0, 1 << 30)?;
        c.int("optim.mini_batches", o.mini_batches, 1, 1024)?;
        c.int(
            "optim.micro_batch_tokens",
            o.micro_batch_tokens,
            64,
            1 << 26,
        )?;
        let p = &self.pretrain;
        c.int("pretrain.passages", p.passages, 0, 1 << 24)?;
        c.int("pretrain.seq_len", p.seq_len, 2, 1 << 16)?;
        c.int("pretrain.batch_size", p.batch_size, 1, 1 << 16)?;
        c.int("pretrain.epochs", p.epochs, 1, 100)?;
        c.real("pretrain.lr", p.lr, Open(0.0), Closed(1.0))?;
        c.int("pretrain.warmup_steps", p.warmup_steps as usize, 0, 1 << 30)?;
        c.real("pretrain.final_lr", p.final_lr, Closed(0.0), Closed(1.0))?;
        c.decays("pretrain", p.lr, p.final_lr)?;
        let f = &self.rft;
        c.int("rft.demo_tasks", f.demo_tasks, 0, 1 << 20)?;
        c.int("rft.demo_epochs", f.demo_epochs, 0, 100)?;
        c.int("rft.batch_size", f.batch_size, 1, 1 << 16)?;
        c.real(
            "rft.prompt_loss_weight",
            f.prompt_loss_weight,
            Closed(0.0),
            Closed(100.0),
        )?;
        c.real("rft.cut_think", f.cut_think, Closed(0.0), Closed(1.0))?;
        if f.expert == ExpertKind::Shopper && self.env != EnvKind::Webshop {
            return Err(Error::invalid(
                "rft.expert",
                format!(
                    "\"shopper\" is WebShop's demonstrator; env = \"{}\" has only \"privileged\"",
                    self.env.as_str()
                ),
            ));
        }
        c.real("rft.lr", f.lr, Open(0.0), Closed(1.0))?;
        c.int("rft.warmup_steps", f.warmup_steps as usize, 0, 1 << 30)?;
        c.real("rft.final_lr", f.final_lr, Closed(0.0), Closed(1.0))?;
        c.decays("rft", f.lr, f.final_lr)?;
        let d = &self.data;
        c.int("data.products", d.products, 10, 1 << 24)?;
        c.int("data.train_games", d.train_games, 1, 1 << 20)?;
        c.int("data.held_out_games", d.held_out_games, 1, 1 << 20)?;
        c.int("data.passages", d.passages, 10, 1 << 26)?;
        c.int("data.train_questions", d.train_questions, 1, 1 << 22)?;
        c.int("data.held_out_questions", d.held_out_questions, 1, 1 << 20)?;
        c.int("rft.rounds", f.rounds, 0, 100)?;
        c.int("rft.tasks", f.tasks, 1, 1 << 20)?;
        c.int("rft.group_size", f.group_size, 1, 1024)?;
        c.real(
            "rft.score_threshold",
            f.score_threshold,
            Closed(0.0),
            Closed(1.0),
        )?;
        c.int("rft.epochs", f.epochs, 1, 5)?;
        c.int("rft.checkpoint_every", f.checkpoint_every, 0, 1 << 30)?;
        let l = &self.train;
        c.int("train.iterations", l.iterations, 0, 1 << 20)?;
        c.int("train.eval_every", l.eval_every, 1, 1 << 20)?;
        c.int("train.eval_tasks", l.eval_tasks, 1, 1 << 20)?;
        c.int("train.eval_episodes", l.eval_episodes, 1, 1024)?;
        c.real(
            "train.eval_temperature",
            l.eval_temperature as f64,
            Closed(0.0),
            Closed(100.0),
        )?;
        c.int("train.checkpoint_every", l.checkpoint_every, 1, 1 << 20)?;
        c.int("train.keep_checkpoints", l.keep_checkpoints, 1, 1000)?;
        if !l.rl_sources.is_empty() && self.env != EnvKind::Search {
            return Err(Error::invalid(
                "train.rl_sources",
                format!(
                    "{:?}: only Search QA's tasks have a source; the {} environment takes [] \
                     (every task)",
                    l.rl_sources,
                    self.env.as_str()
                ),
            ));
        }
        if l.balance_sources && self.env != EnvKind::Search {
            return Err(Error::invalid(
                "train.balance_sources",
                format!(
                    "only Search QA's tasks have a source to balance; the {} environment takes \
                     false",
                    self.env.as_str()
                ),
            ));
        }
        for (i, s) in l.rl_sources.iter().enumerate() {
            if s.trim().is_empty() || l.rl_sources[..i].contains(s) {
                return Err(Error::invalid(
                    "train.rl_sources",
                    format!("{:?}: an empty or repeated source {s:?}", l.rl_sources),
                ));
            }
        }
        Ok(())
    }

    /// The random-initialised model's config for a vocabulary of `vocab` ids and
    /// `max_positions` positions.
    pub fn model_config(&self, vocab: usize, max_positions: usize) -> Qwen3Config {
        let m = &self.model;
        Qwen3Config::small(
            vocab,
            m.hidden_size,
            m.intermediate_size,
            m.num_hidden_layers,
            m.num_attention_heads,
            m.num_key_value_heads,
            m.head_dim,
            max_positions,
        )
    }

    /// The control switches of the run.
    pub fn switches(&self) -> ControlSwitches {
        ControlSwitches {
            tti: self.control.tti,
            tds: self.control.tds,
            profile: self.control.profile,
            hard_budget: self.control.hard_budget,
        }
    }

    /// The rollout settings for `tokens` at `temperature` and `seed`.
    pub fn rollout_config(
        &self,
        tokens: &ControlTokens,
        temperature: f32,
        seed: u64,
    ) -> Result<RolloutConfig> {
        let mut control = self
            .switches()
            .control_config_for(tokens, self.env.response_tags())?;
        let k = &self.control;
        control.min_len = k.min_len;
        control.max_think = k.max_think;
        control.window = k.window;
        if !k.hard_budget {
            control.epsilon = k.epsilon;
        }
        control.eta = k.eta;
        control.max_resamples = k.max_resamples;
        if let Some(alpha) = k.alpha {
            control.alpha = alpha;
        }
        if let Some(trigger) = k.trigger {
            control.trigger = t2po_control::Trigger::from(trigger) as u32;
        }
        if let Some(cal) = &k.calibrated {
            if !k.hard_budget {
                control.epsilon = cal.epsilon;
            }
            control.eta = cal.eta;
        }
        control.validate().map_err(t2po_control::Error::from)?;
        let r = &self.rollout;
        Ok(RolloutConfig {
            control,
            mark_void: k.filter_void,
            sampling: SamplingParams {
                temperature,
                top_p: r.top_p,
            },
            max_response_tokens: r.max_response_tokens,
            max_prompt_tokens: r.max_prompt_tokens,
            history_length: r.history_length,
            max_turns: r.max_turns,
            seed,
        })
    }

    /// GRPO/GiGPO settings.
    pub fn advantage_config(&self) -> AdvantageConfig {
        let a = &self.algo;
        AdvantageConfig {
            estimator: a.estimator,
            mode: match a.norm {
                Norm::Mean => NormMode::MeanNorm,
                Norm::MeanStd => NormMode::MeanStdNorm,
            },
            step_weight: a.step_weight,
            grouping: if a.anchor_similarity >= 1.0 {
                StepGrouping::Exact
            } else {
                StepGrouping::Similarity {
                    threshold: a.anchor_similarity,
                }
            },
            episode_stats: EpisodeStats::AcrossTurns,
            epsilon: 1e-6,
            returns: ReturnConfig {
                gamma: a.gamma,
                format_penalty: a.format_penalty,
            },
        }
    }

    /// The PPO loss coefficients.
    pub fn loss_config(&self) -> LossConfig {
        let a = &self.algo;
        LossConfig {
            clip_low: a.clip_low,
            clip_high: a.clip_high,
            clip_ratio_c: a.clip_ratio_c,
            entropy_coef: a.entropy_coef,
            kl_coef: a.kl_coef,
        }
    }

    /// AdamW of the RL stage.
    pub fn optimizer_config(&self) -> AdamWConfig {
        AdamWConfig {
            lr: self.optim.lr,
            weight_decay: self.optim.weight_decay,
            grad_clip: self.optim.grad_clip,
            warmup_steps: self.optim.warmup_steps,
            ..AdamWConfig::default()
        }
    }

    /// AdamW of the pretraining, which takes `steps` optimizer steps (warm-up, then cosine decay
    /// to `pretrain.final_lr`).
    pub fn pretrain_optimizer_config(&self, steps: u64) -> AdamWConfig {
        let warmup = self.pretrain.warmup_steps.min(steps);
        AdamWConfig {
            lr: self.pretrain.lr,
            weight_decay: self.optim.weight_decay,
            grad_clip: self.optim.grad_clip,
            warmup_steps: warmup,
            decay_steps: (steps - warmup).max(1),
            final_lr: self.pretrain.final_lr,
            ..AdamWConfig::default()
        }
    }

    /// AdamW of the cold start, whose demonstration SFT takes `sft_steps` optimizer steps:
    /// warm-up, cosine decay to `rft.final_lr` over the rest of them, then `final_lr` for the
    /// rejection rounds.
    pub fn rft_optimizer_config(&self, sft_steps: u64) -> AdamWConfig {
        let warmup = self.rft.warmup_steps.min(sft_steps);
        AdamWConfig {
            lr: self.rft.lr,
            weight_decay: self.optim.weight_decay,
            grad_clip: self.optim.grad_clip,
            warmup_steps: warmup,
            decay_steps: (sft_steps - warmup).max(1),
            final_lr: self.rft.final_lr,
            ..AdamWConfig::default()
        }
    }
}

#[derive(Clone, Copy)]
enum Bound {
    Open(f64),
    Closed(f64),
}
use Bound::{Closed, Open};

struct Checker<'a> {
    path: &'a Path,
}

impl Checker<'_> {
    fn fail<T>(&mut self, key: &str, message: String) -> Result<T> {
        Err(Error::Config {
            path: self.path.to_path_buf(),
            key: key.to_string(),
            message,
        })
    }

    /// `SECTION.final_lr` may not exceed `SECTION.lr`: the schedule decays.
    fn decays(&mut self, section: &str, lr: f64, final_lr: f64) -> Result<()> {
        if final_lr > lr {
            return self.fail(
                &format!("{section}.final_lr"),
                format!("{final_lr} exceeds {section}.lr = {lr} (the schedule decays)"),
            );
        }
        Ok(())
    }

    fn int(&mut self, key: &str, v: usize, lo: usize, hi: usize) -> Result<()> {
        if (lo..=hi).contains(&v) {
            Ok(())
        } else {
            self.fail(key, format!("{v} is out of range: allowed {lo}..={hi}"))
        }
    }

    fn real(&mut self, key: &str, v: f64, lo: Bound, hi: Bound) -> Result<()> {
        let ok_lo = match lo {
            Open(b) => v > b,
            Closed(b) => v >= b,
        };
        let ok_hi = match hi {
            Open(b) => v < b,
            Closed(b) => v <= b,
        };
        if v.is_finite() && ok_lo && ok_hi {
            return Ok(());
        }
        let range = format!(
            "{}{}, {}{}",
            match lo {
                Open(_) => "(",
                Closed(_) => "[",
            },
            match lo {
                Open(b) | Closed(b) => b,
            },
            match hi {
                Open(b) | Closed(b) => b,
            },
            match hi {
                Open(_) => ")",
                Closed(_) => "]",
            },
        );
        self.fail(key, format!("{v} is out of range: allowed {range}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_config_parses_and_names_its_env() {
        for env in EnvKind::ALL {
            let cfg = TrainConfig::default_for(env).unwrap();
            assert_eq!(cfg.env, env);
            // Round trip through the checkpoint's copy.
            let again = TrainConfig::parse(&cfg.to_toml().unwrap(), Path::new("x")).unwrap();
            assert_eq!(again, cfg);
        }
        // The real-model config (README's SmolLM2 run): search.toml with its stated changes.
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/search-smollm2.toml");
        let smol = TrainConfig::load(&path).unwrap();
        let mut expect = TrainConfig::default_for(EnvKind::Search).unwrap();
        expect.data.held_out_questions = 5;
        expect.rollout.group_size = 4;
        expect.rollout.tasks_per_iteration = 4;
        expect.optim.lr = 3e-5;
        expect.optim.micro_batch_tokens = 2048;
        expect.pretrain.passages = 0;
        expect.rft.demo_tasks = 48;
        expect.rft.prompt_loss_weight = 0.0;
        expect.rft.cut_think = 0.0;
        expect.rft.lr = 1e-3;
        expect.rft.warmup_steps = 2;
        expect.rft.final_lr = 1e-4;
        expect.rft.rounds = 0;
        expect.train.iterations = 3;
        expect.train.eval_every = 3;
        expect.train.eval_tasks = 35;
        expect.train.eval_sampled = false;
        expect.train.checkpoint_every = 3;
        expect.train.keep_checkpoints = 1;
        assert_eq!(smol, expect);
    }

    #[test]
    fn the_paper_settings_that_the_tiny_default_keeps() {
        let w = TrainConfig::default_for(EnvKind::Webshop).unwrap();
        let a = TrainConfig::default_for(EnvKind::Alfworld).unwrap();
        let s = TrainConfig::default_for(EnvKind::Search).unwrap();
        assert_eq!(s.rollout.group_size, 5);
        assert_eq!([w.rollout.max_turns, s.rollout.max_turns], [15, 4]);
        assert_eq!([a.rollout.history_length, s.rollout.history_length], [2, 4]);
        // WebShop departs from the paper's group of 8 and P = 2 (its config says why): 8 tasks
        // × 5 episodes as Search QA, and P = 1, all the shopper's demonstrations need.
        assert_eq!((w.rollout.group_size, w.rollout.history_length), (5, 1));
        assert_eq!(w.rft.expert, ExpertKind::Shopper);
        assert_eq!(w.algo.norm, Norm::Mean);
        assert_eq!(s.algo.anchor_similarity, 0.9);
        // ALFWorld departs from the paper's group of 8, 50 turns, mean-std norm and KL 0.01 (its
        // config says why): the RL shape measured on WebShop and Search QA, 20 turns.
        assert_eq!(
            (a.rollout.group_size, a.rollout.max_turns, a.algo.norm),
            (5, 20, Norm::Mean)
        );
        assert_eq!((a.algo.kl_coef, a.algo.entropy_coef), (0.0, 0.0));
        for c in [&w, &a, &s] {
            assert_eq!(c.algo.gamma, 0.95);
            assert_eq!(c.algo.format_penalty, 0.1);
            assert_eq!(
                (c.algo.clip_low, c.algo.clip_high, c.algo.clip_ratio_c),
                (0.2, 0.2, 3.0)
            );
            assert_eq!(c.optim.grad_clip, 1.0);
            assert_eq!(c.optim.weight_decay, 0.01);
        }
    }

    fn with(env: EnvKind, from: &str, to: &str) -> String {
        let text = embedded(env);
        assert!(text.contains(from), "{from:?} not in the {env:?} config");
        text.replacen(from, to, 1)
    }

    fn err(text: &str) -> String {
        TrainConfig::parse(text, Path::new("run.toml"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn an_unknown_key_is_an_error_naming_it() {
        let e = err(&with(
            EnvKind::Alfworld,
            "[optim]\n",
            "[optim]\nlearning_rate = 0.1\n",
        ));
        assert!(e.contains("run.toml") && e.contains("learning_rate"), "{e}");
        let e = err(&with(
            EnvKind::Alfworld,
            "[optim]\n",
            "[optimiser]\nx = 1\n[optim]\n",
        ));
        assert!(e.contains("optimiser"), "{e}");
    }

    #[test]
    fn a_wrong_type_is_an_error_naming_the_key() {
        let e = err(&with(
            EnvKind::Webshop,
            "group_size = 5",
            "group_size = \"five\"",
        ));
        assert!(e.contains("group_size") && e.contains("run.toml"), "{e}");
        let e = err(&with(EnvKind::Webshop, "tti = true", "tti = 1"));
        assert!(e.contains("tti"), "{e}");
    }

    #[test]
    fn a_missing_key_is_an_error_naming_it() {
        let e = err(&with(EnvKind::Search, "\ngamma = 0.95", "\n"));
        assert!(e.contains("gamma"), "{e}");
    }

    #[test]
    fn calibrate_is_refused_where_there_is_no_window_mean_rule_to_calibrate() {
        let on = |from: &str, to: &str| {
            with(EnvKind::Search, "calibrate = false", "calibrate = true").replacen(from, to, 1)
        };
        // The shipped config with calibrate = true is fine.
        TrainConfig::parse(&on("calibrate", "calibrate"), Path::new("x.toml")).unwrap();
        for (from, to, says) in [
            ("hard_budget = false", "hard_budget = true", "hard_budget"),
            (
                "# alpha = 0.4",
                "trigger = \"peak_cut\"\n# alpha",
                "control.trigger",
            ),
            ("profile = \"paper\"", "profile = \"released\"", "patience"),
        ] {
            let e = err(&on(from, to));
            assert!(
                e.contains("control.calibrate") && e.contains(says),
                "{to}: {e}"
            );
        }
        // The released profile with the window-mean rule named is fine; a rate out of [0, 1] is not.
        TrainConfig::parse(
            &on(
                "profile = \"paper\"",
                "profile = \"released\"\ntrigger = \"window_mean\"",
            ),
            Path::new("x.toml"),
        )
        .unwrap();
        let e = err(&on("target_fire_rate = 0.3", "target_fire_rate = 1.5"));
        assert!(
            e.contains("control.target_fire_rate") && e.contains("[0, 1]"),
            "{e}"
        );
    }

    #[test]
    fn out_of_range_values_name_the_key_and_the_range() {
        for (from, to, key, range) in [
            ("gamma = 0.95", "gamma = 1.5", "algo.gamma", "[0, 1]"),
            (
                "clip_ratio_c = 3.0",
                "clip_ratio_c = 1.0",
                "algo.clip_ratio_c",
                "(1, 100]",
            ),
            ("\nepochs = 2", "\nepochs = 6", "rft.epochs", "1..=5"),
            (
                "group_size = 5",
                "group_size = 0",
                "rollout.group_size",
                "1..=1024",
            ),
            ("\nlr = 1e-4", "\nlr = -1.0", "optim.lr", "(0, 1]"),
            (
                "\ntemperature = 1.0",
                "\ntemperature = nan",
                "rollout.temperature",
                "(0, 100]",
            ),
        ] {
            let e = err(&with(EnvKind::Alfworld, from, to));
            assert!(e.contains(key) && e.contains(range), "{from} → {to}: {e}");
        }
        // A schedule that would rise instead of decaying.
        let e = err(&with(
            EnvKind::Alfworld,
            "final_lr = 3e-4",
            "final_lr = 0.5",
        ));
        assert!(
            e.contains("pretrain.final_lr") && e.contains("exceeds pretrain.lr"),
            "{e}"
        );
        let e = err(&with(
            EnvKind::Alfworld,
            "max_think = 96",
            "max_think = 400",
        ));
        assert!(
            e.contains("control.max_think") && e.contains("max_response_tokens"),
            "{e}"
        );
        let e = err(&with(
            EnvKind::Alfworld,
            "profile = \"paper\"",
            "profile = \"mine\"",
        ));
        assert!(e.contains("profile") || e.contains("mine"), "{e}");
        let e = err(&with(
            EnvKind::Alfworld,
            "env = \"alfworld\"",
            "env = \"minecraft\"",
        ));
        assert!(e.contains("minecraft"), "{e}");
        // The SFT anchor: a weight in range, and demonstrations to anchor on.
        let anchored = |to: &str| with(EnvKind::Search, "sft_coef = 0.0", to);
        let e = err(&anchored("sft_coef = -1.0"));
        assert!(e.contains("algo.sft_coef"), "{e}");
        let e = err(&with(
            EnvKind::Search,
            "sft_per_step = 8",
            "sft_per_step = 0",
        ));
        assert!(e.contains("algo.sft_per_step"), "{e}");
        let e = err(&anchored("sft_coef = 1.0").replacen("demo_epochs = 3", "demo_epochs = 0", 1));
        assert!(
            e.contains("algo.sft_coef") && e.contains("demo_epochs"),
            "{e}"
        );
        let ok = TrainConfig::parse(&anchored("sft_coef = 1.0"), Path::new("run.toml")).unwrap();
        assert_eq!((ok.algo.sft_coef, ok.algo.sft_per_step), (1.0, 8));
        // RL's training sources: Search QA's only, each named once; a config without the key
        // (written before it existed) draws from every source.
        let sourced = |env, to: &str| match env {
            EnvKind::Search => with(env, "rl_sources = []", &format!("rl_sources = {to}")),
            _ => with(
                env,
                "rl_tasks = \"all\"",
                &format!("rl_tasks = \"all\"\nrl_sources = {to}"),
            ),
        };
        let e = err(&sourced(EnvKind::Webshop, "[\"nq\"]"));
        assert!(
            e.contains("train.rl_sources") && e.contains("webshop"),
            "{e}"
        );
        let e = err(&sourced(EnvKind::Search, "[\"nq\", \"nq\"]"));
        assert!(
            e.contains("train.rl_sources") && e.contains("repeated"),
            "{e}"
        );
        let e = err(&sourced(EnvKind::Search, "[\"\"]"));
        assert!(e.contains("train.rl_sources"), "{e}");
        let ok = TrainConfig::parse(&sourced(EnvKind::Search, "[\"hotpotqa\"]"), Path::new("r"));
        assert_eq!(ok.unwrap().train.rl_sources, ["hotpotqa"]);
        let ok = TrainConfig::parse(&sourced(EnvKind::Webshop, "[]"), Path::new("r")).unwrap();
        assert!(ok.train.rl_sources.is_empty());
        assert!(TrainConfig::default_for(EnvKind::Search)
            .unwrap()
            .train
            .rl_sources
            .is_empty());
        // Balanced sources: Search QA's only; off in a config written before the key.
        let balanced = |env, to: &str| match env {
            EnvKind::Search => with(
                env,
                "balance_sources = false",
                &format!("balance_sources = {to}"),
            ),
            _ => with(
                env,
                "rl_tasks = \"all\"",
                &format!("rl_tasks = \"all\"\nbalance_sources = {to}"),
            ),
        };
        let e = err(&balanced(EnvKind::Alfworld, "true"));
        assert!(
            e.contains("train.balance_sources") && e.contains("alfworld"),
            "{e}"
        );
        let ok = TrainConfig::parse(&balanced(EnvKind::Search, "true"), Path::new("r")).unwrap();
        assert!(ok.train.balance_sources);
        assert!(
            !TrainConfig::default_for(EnvKind::Search)
                .unwrap()
                .train
                .balance_sources
        );
        // Saved rollouts: off unless asked for, and off in a config written before the key.
        assert!(
            !TrainConfig::default_for(EnvKind::Search)
                .unwrap()
                .train
                .save_rollouts
        );
        let saved = with(
            EnvKind::Search,
            "save_rollouts = false",
            "save_rollouts = true",
        );
        assert!(
            TrainConfig::parse(&saved, Path::new("r"))
                .unwrap()
                .train
                .save_rollouts
        );
        let unsaid = with(EnvKind::Search, "save_rollouts = false", "");
        assert!(
            !TrainConfig::parse(&unsaid, Path::new("r"))
                .unwrap()
                .train
                .save_rollouts
        );
        // The demonstrator: the shopper is WebShop's; a config without the key (written before
        // it existed) gets the privileged expert.
        let shopper = "expert = \"shopper\"";
        let e = err(&with(EnvKind::Search, "expert = \"privileged\"", shopper));
        assert!(e.contains("rft.expert") && e.contains("search"), "{e}");
        let ws = with(EnvKind::Webshop, shopper, "expert = \"privileged\"");
        let ok = TrainConfig::parse(&ws, Path::new("run.toml")).unwrap();
        assert_eq!(ok.rft.expert, ExpertKind::Privileged);
        let e = err(&with(EnvKind::Webshop, shopper, "expert = \"oracle\""));
        assert!(e.contains("oracle"), "{e}");
        let old = with(EnvKind::Alfworld, "expert = \"privileged\"", "");
        let ok = TrainConfig::parse(&old, Path::new("run.toml")).unwrap();
        assert_eq!(ok.rft.expert, ExpertKind::Privileged);
    }

    #[test]
    fn the_settings_reach_the_kernel_and_the_algorithms() {
        let cfg = TrainConfig::default_for(EnvKind::Search).unwrap();
        let tokens = ControlTokens {
            think_open: 5,
            think_close: 6,
            im_start: 1,
            im_end: 2,
            endoftext: 0,
            newline: vec![7],
            action_open: vec![8, 9],
            forced_queue: vec![6, 7, 8, 9],
            eos: vec![2, 0],
            pad: 0,
        };
        let r = cfg.rollout_config(&tokens, 0.7, 9).unwrap();
        assert_eq!(r.control.max_think, cfg.control.max_think);
        assert_eq!(r.control.eta, cfg.control.eta);
        assert_eq!(
            r.control.queue_len, 2,
            "Search QA forces </think> and the newline only"
        );
        assert_eq!(r.sampling.temperature, 0.7);
        assert_eq!(r.seed, 9);
        assert_eq!(
            cfg.advantage_config().grouping,
            StepGrouping::Similarity { threshold: 0.9 }
        );
        cfg.advantage_config().validate().unwrap();
        cfg.loss_config().validate().unwrap();
        cfg.optimizer_config().validate().unwrap();
    }
}
