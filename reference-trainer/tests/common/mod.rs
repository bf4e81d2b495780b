//! What the command-line tests of `reference-trainer train` share: the binary with a private
//! cache, tiny configs, and checks on its output.

#![allow(dead_code)] // each test binary uses its own part

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use candle_core::backprop::GradStore;
use reference_trainer::model::Qwen3;
use reference_trainer::rollout::EnvKind;
use reference_trainer::train::{MetricsLine, TrainConfig};

/// The binary with its own cache, one rayon thread (the runs must be bit-reproducible).
pub fn cli(cache: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_reference-trainer"));
    c.env("T2PO_CACHE", cache).env("RAYON_NUM_THREADS", "1");
    c
}

/// The shipped config of `env`, shrunk so a run takes seconds.
pub fn tiny(env: EnvKind, iterations: usize) -> TrainConfig {
    let mut c = TrainConfig::default_for(env).unwrap();
    c.model.hidden_size = 32;
    c.model.intermediate_size = 64;
    c.model.num_hidden_layers = 1;
    c.model.head_dim = 8;
    c.rollout.tasks_per_iteration = 2;
    c.rollout.group_size = 2;
    c.rollout.max_turns = c.rollout.max_turns.min(3);
    c.rollout.max_response_tokens = 40;
    c.rollout.max_prompt_tokens = 200;
    c.control.max_think = 24;
    c.control.min_len = 4;
    c.optim.micro_batch_tokens = 1024;
    c.optim.mini_batches = 2;
    c.pretrain.passages = 6;
    c.pretrain.seq_len = 32;
    c.pretrain.batch_size = 4;
    c.pretrain.warmup_steps = 1;
    c.data.train_questions = c.data.train_questions.min(200);
    c.data.passages = c.data.passages.min(3000);
    c.rft.demo_tasks = 3;
    c.rft.rounds = 1;
    c.rft.tasks = 2;
    c.rft.group_size = 1;
    c.rft.score_threshold = 0.0;
    c.rft.epochs = 1;
    c.train.iterations = iterations;
    c.train.eval_every = 2;
    c.train.eval_tasks = 2;
    c.train.checkpoint_every = 1;
    c
}

/// Writes `cfg` as `<env>.toml` in `dir`.
pub fn write_config(dir: &Path, cfg: &TrainConfig) -> PathBuf {
    let path = dir.join(format!("{}.toml", cfg.env.as_str()));
    std::fs::write(&path, cfg.to_toml().unwrap()).unwrap();
    path
}

/// The stdout of a run that must have succeeded.
pub fn ok(out: Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The stderr of a run that must have failed (without a panic).
pub fn fails(out: Output) -> String {
    assert!(
        !out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

/// A metrics line without the wall-clock fields.
pub fn timeless(l: &MetricsLine) -> serde_json::Value {
    fn strip(v: &mut serde_json::Value) {
        if let serde_json::Value::Object(m) = v {
            m.remove("seconds");
            m.remove("tokens_per_second");
            for x in m.values_mut() {
                strip(x);
            }
        }
    }
    let mut v = serde_json::to_value(l).unwrap();
    strip(&mut v);
    v
}

/// Asserts that every parameter of `model` has a finite, non-zero gradient in `grads` (`what`
/// names the model in the message).
pub fn assert_every_parameter_has_a_gradient(model: &Qwen3, grads: &GradStore, what: &str) {
    for (name, var) in model.params() {
        let g = grads
            .get(var.as_tensor())
            .unwrap_or_else(|| panic!("{name} ({what}) has no gradient"));
        let norm = g
            .sqr()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(
            norm > 0.0 && norm.is_finite(),
            "{name} ({what}): gradient norm² {norm}"
        );
    }
}
