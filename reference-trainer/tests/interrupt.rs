//! Stopping `reference-trainer train` and going on (tiny settings): SIGTERM or SIGINT — during
//! an RL rollout, an update, an evaluation, a checkpoint write, or from outside at any moment —
//! stops the run at
//! a safe point with exit code 143 or 130, a whole last metrics line, a complete `latest`
//! checkpoint and the command that continues it; a run killed (SIGKILL) or stopped inside the
//! cold start continues after its last finished stage; either way `--resume` ends on the same
//! metrics and bit-identical weights as an uninterrupted run. A damaged checkpoint file is an
//! error naming it at `--resume`, `eval`, `--init` and `generate`.
//!
//! Signals aimed at one phase use the binary's `T2PO_TEST_SIGNAL=SIG:PHASE:N[:K]` hook (the
//! process signals itself in the N-th phase of that name, after its K-th unit of work): the phases of
//! a tiny run last milliseconds, too short to aim a signal from outside. The uninterrupted runs
//! are made once per test binary and shared, as is the cache of the default tokenizer.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{cli, fails, ok, timeless, tiny, write_config};
use reference_trainer::rollout::EnvKind;
use reference_trainer::train::{MetricsLine, MetricsLog, TrainConfig};

/// The cache every run of this binary shares (the default tokenizer is built once).
fn cache() -> &'static Path {
    static CACHE: OnceLock<tempfile::TempDir> = OnceLock::new();
    CACHE.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

/// [`tiny`], smaller still: a run takes a few seconds in a debug build.
fn fast(env: EnvKind, iterations: usize) -> TrainConfig {
    let mut c = tiny(env, iterations);
    c.rollout.tasks_per_iteration = 1;
    c.rollout.max_turns = 2;
    c.rollout.max_response_tokens = 12;
    c.control.max_think = 8;
    c.control.min_len = 2;
    c.rft.tasks = 1;
    c.train.eval_tasks = 1;
    c.train.eval_sampled = false;
    c
}

/// RL: WebShop, 4 iterations, checkpoints every 3 (so a stop between two writes its own).
fn rl() -> &'static Fixture {
    static RL: OnceLock<Fixture> = OnceLock::new();
    RL.get_or_init(|| {
        let mut cfg = fast(EnvKind::Webshop, 4);
        cfg.train.checkpoint_every = 3;
        Fixture::new(&cfg)
    })
}

/// The cold start: Search QA, 2 iterations, an SFT of two demonstrations a step (several
/// steps, for the checkpoints inside it).
fn cold_config() -> TrainConfig {
    let mut cfg = fast(EnvKind::Search, 2);
    cfg.rft.batch_size = 2;
    cfg
}

fn cold() -> &'static Fixture {
    static COLD: OnceLock<Fixture> = OnceLock::new();
    COLD.get_or_init(|| Fixture::new(&cold_config()))
}

/// The cold start of [`cold`] with a checkpoint inside the SFT every 2 of its steps.
fn inside_sft() -> &'static Fixture {
    static SFT: OnceLock<Fixture> = OnceLock::new();
    SFT.get_or_init(|| {
        let mut cfg = cold_config();
        cfg.rft.checkpoint_every = 2;
        Fixture::new(&cfg)
    })
}

/// A tiny config and an uninterrupted run of it to compare with.
struct Fixture {
    work: tempfile::TempDir,
    config: PathBuf,
    whole: PathBuf,
    reference: Vec<MetricsLine>,
    final_checkpoint: String,
}

impl Fixture {
    fn new(cfg: &TrainConfig) -> Self {
        let work = tempfile::tempdir().unwrap();
        let config = write_config(work.path(), cfg);
        let whole = work.path().join("whole");
        let mut f = Self {
            work,
            config,
            whole: whole.clone(),
            reference: Vec::new(),
            final_checkpoint: format!("iter-{:06}", cfg.train.iterations),
        };
        ok(f.train(&whole).output().unwrap());
        f.reference = MetricsLog::new(whole.join("metrics.jsonl")).read().unwrap();
        f
    }

    fn train(&self, out: &Path) -> Command {
        let mut c = cli(cache());
        c.args(["train", "--quiet", "--config"])
            .arg(&self.config)
            .arg("--out")
            .arg(out);
        c
    }

    /// Runs with the hook `fault`, checks how the run ended and what it left (`latest` names
    /// `latest`), then resumes it and checks that it ends as the uninterrupted run did.
    fn interrupt_and_resume(&self, fault: &str, exit: Ended, latest: &str) {
        let out = self.work.path().join(fault.replace(':', "-"));
        let run = self
            .train(&out)
            .env("T2PO_TEST_SIGNAL", fault)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        match exit {
            Ended::Code(code) => {
                assert_eq!(run.status.code(), Some(code), "{fault}: {stderr}");
                assert!(
                    stderr.contains("--resume") && stderr.contains(latest),
                    "{fault}: the message names the checkpoint and how to go on: {stderr}"
                );
            }
            Ended::Killed => assert_eq!(run.status.signal(), Some(9), "{fault}: {stderr}"),
        }
        self.check_left(&out, latest, fault);
        self.resume_matches(&out, fault);
    }

    /// `latest` names a complete checkpoint, no temporary folder is left beside it (but after a
    /// SIGKILL, which may land anywhere), and `metrics.jsonl` ends on a whole line.
    fn check_left(&self, out: &Path, latest: &str, what: &str) {
        let root = out.join("checkpoints");
        let named = std::fs::read_to_string(root.join("latest")).unwrap();
        assert_eq!(named, latest, "{what}");
        let (_, verified) = reference_trainer::train::state::verify(&root.join(&named)).unwrap();
        assert!(verified, "{what}");
        let text = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
        assert!(text.is_empty() || text.ends_with('\n'), "{what}: {text:?}");
    }

    fn resume_matches(&self, out: &Path, what: &str) {
        self.resume_says(out, what, "resuming");
    }

    /// The run in `out` logged what the uninterrupted run did (times aside) and ended on the
    /// same weights, bit for bit.
    fn ends_as_whole(&self, out: &Path, what: &str) {
        let resumed = MetricsLog::new(out.join("metrics.jsonl")).read().unwrap();
        assert_eq!(resumed.len(), self.reference.len(), "{what}");
        for (a, b) in self.reference.iter().zip(&resumed) {
            assert_eq!(
                timeless(a),
                timeless(b),
                "{what}: stage {} iteration {}",
                a.stage,
                a.iteration
            );
        }
        let weights = |run: &Path| {
            std::fs::read(
                run.join("checkpoints")
                    .join(&self.final_checkpoint)
                    .join("model.safetensors"),
            )
            .unwrap()
        };
        assert!(
            weights(&self.whole) == weights(out),
            "{what}: final weights differ"
        );
    }

    /// Resumes the run in `out` (its output says `says`) and checks that it ends as the
    /// uninterrupted run did.
    fn resume_says(&self, out: &Path, what: &str, says: &str) {
        let stdout = ok(self.train(out).arg("--resume").output().unwrap());
        assert!(stdout.contains(says), "{what}: {stdout}");
        self.ends_as_whole(out, what);
        let left: Vec<String> = std::fs::read_dir(out.join("checkpoints"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("cold-") || n.starts_with(".tmp-"))
            .collect();
        assert!(
            left.is_empty(),
            "{what}: the cold start's checkpoints are pruned once RL checkpoints: {left:?}"
        );
    }
}

#[derive(Clone, Copy)]
enum Ended {
    /// Exited with this code.
    Code(i32),
    /// Killed by SIGKILL.
    Killed,
}

#[test]
fn sigterm_during_an_rl_rollout_checkpoints_the_last_finished_iteration() {
    // Iteration 3's rollout is dropped; iteration 2 (finished, not yet checkpointed) is
    // checkpointed on the way out.
    rl().interrupt_and_resume("TERM:rollout:3", Ended::Code(143), "iter-000002");
}

#[test]
fn sigint_exits_130() {
    rl().interrupt_and_resume("INT:rollout:2", Ended::Code(130), "iter-000001");
}

#[test]
fn sigterm_during_an_update_puts_the_policy_and_optimizer_back() {
    // After the second micro-batch of iteration 2's update, that is after its first optimizer
    // step (two mini-batches of one micro-batch each): the step is undone and iteration 1 is
    // checkpointed.
    rl().interrupt_and_resume("TERM:update:2:2", Ended::Code(143), "iter-000001");
}

#[test]
fn sigterm_during_an_evaluation_drops_the_iteration() {
    // The second evaluation is iteration 2's (the first is the one before RL).
    rl().interrupt_and_resume("TERM:eval:2", Ended::Code(143), "iter-000001");
}

#[test]
fn sigterm_during_a_checkpoint_write_keeps_that_checkpoint() {
    // The fifth checkpoint write: the cold start's three, iteration 0's, then iteration 3's.
    rl().interrupt_and_resume("TERM:checkpoint:5", Ended::Code(143), "iter-000003");
}

#[test]
fn sigterm_from_outside_at_any_moment_of_rl() {
    // Sent once RL has begun, wherever the run then is; a run that finished first is tried
    // again.
    let f = rl();
    for attempt in 0..4 {
        let out = f.work.path().join(format!("outside-{attempt}"));
        let mut child = f
            .train(&out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let latest = out.join("checkpoints").join("latest");
        let t0 = Instant::now();
        while std::fs::read_to_string(&latest).ok().as_deref() != Some("iter-000000") {
            assert!(t0.elapsed() < Duration::from_secs(300), "RL never began");
            assert!(child.try_wait().unwrap().is_none(), "the run ended early");
            std::thread::sleep(Duration::from_millis(2));
        }
        let pid = child.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        let run = child.wait_with_output().unwrap();
        if run.status.success() {
            continue;
        }
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(143), "{stderr}");
        let named = std::fs::read_to_string(&latest).unwrap();
        assert!(stderr.contains(&named), "{stderr}");
        f.check_left(&out, &named, "outside SIGTERM");
        f.resume_matches(&out, "outside SIGTERM");
        return;
    }
    panic!("the run always finished before SIGTERM reached it");
}

#[test]
fn the_cold_start_as_an_uninterrupted_run_logs_it() {
    let stages: Vec<&str> = cold().reference.iter().map(|l| l.stage.as_str()).collect();
    assert_eq!(stages, ["pretrain", "rft", "rft", "eval", "rl", "rl"]);
}

#[test]
fn killed_in_the_sft_the_cold_start_resumes_after_pretraining() {
    cold().interrupt_and_resume("KILL:sft:1", Ended::Killed, "cold-000-pretrain");
}

#[test]
fn checkpoints_inside_the_sft_change_nothing_of_the_run() {
    let (every, none) = (inside_sft(), cold());
    let sft_steps = every
        .reference
        .iter()
        .find(|l| l.stage == "rft")
        .and_then(|l| l.update.as_ref())
        .map(|u| u.steps)
        .unwrap();
    // Enough steps for the tests below to land between two checkpoints inside it.
    assert!(sft_steps >= 4, "the SFT has {sft_steps} steps");
    none.ends_as_whole(&every.whole, "checkpoints inside the SFT");
}

#[test]
fn killed_inside_the_sft_the_cold_start_resumes_at_its_last_checkpoint_there() {
    // After the SFT's third step: its checkpoint after the second is the latest.
    inside_sft().interrupt_and_resume(
        "KILL:sft:2:1",
        Ended::Killed,
        "cold-001-000000002-sft-steps",
    );
}

#[test]
fn sigterm_inside_the_sft_keeps_every_step_done() {
    // After the third step, between two checkpoints: the steps done are checkpointed on the
    // way out, and the run goes on from there.
    inside_sft().interrupt_and_resume(
        "TERM:sft:2:1",
        Ended::Code(143),
        "cold-001-000000003-sft-steps",
    );
}

#[test]
fn killed_in_a_rejection_round_the_cold_start_resumes_after_the_sft() {
    cold().interrupt_and_resume("KILL:rft:1", Ended::Killed, "cold-001-sft");
}

#[test]
fn sigterm_in_a_rejection_rollout_drops_the_round() {
    cold().interrupt_and_resume("TERM:rejection:1", Ended::Code(143), "cold-001-sft");
}

#[test]
fn killed_in_the_evaluation_after_the_cold_start_every_stage_is_kept() {
    cold().interrupt_and_resume("KILL:eval:1", Ended::Killed, "cold-002-rejection-1");
}

#[test]
fn sigterm_before_the_first_checkpoint_leaves_nothing_and_resume_starts_over() {
    let f = cold();
    let out = f.work.path().join("pretrain-term");
    let run = f
        .train(&out)
        .env("T2PO_TEST_SIGNAL", "TERM:pretrain:1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("nothing to continue from"), "{stderr}");
    assert!(!out.join("checkpoints").join("latest").exists());
    f.resume_says(&out, "stopped in pretraining", "nothing to resume");
}

#[test]
fn a_damaged_checkpoint_is_an_error_naming_the_file_at_resume_eval_init_and_generate() {
    // A copy of the shared run, whose files this test damages.
    let f = cold();
    let run = f.work.path().join("damaged");
    let from = f.whole.join("checkpoints").join("iter-000002");
    let ck = run.join("checkpoints").join("iter-000002");
    std::fs::create_dir_all(&ck).unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), ck.join(entry.file_name())).unwrap();
    }
    std::fs::write(run.join("checkpoints").join("latest"), "iter-000002").unwrap();
    std::fs::copy(f.whole.join("metrics.jsonl"), run.join("metrics.jsonl")).unwrap();
    let eval = || {
        cli(cache())
            .args(["eval", "--json", "--checkpoint"])
            .arg(&ck)
            .output()
            .unwrap()
    };
    ok(eval());
    let resume = || {
        f.train(&run)
            .args(["--resume", "--iterations", "3"])
            .output()
            .unwrap()
    };
    for (file, damage) in [
        ("model.safetensors", "truncate"),
        ("model.safetensors", "flip"),
        ("optimizer.safetensors", "flip"),
        ("tokenizer.json", "delete"),
    ] {
        let path = ck.join(file);
        let original = std::fs::read(&path).unwrap();
        match damage {
            "truncate" => std::fs::write(&path, &original[..original.len() / 2]).unwrap(),
            "flip" => {
                let mut bytes = original.clone();
                let i = bytes.len() - 3;
                bytes[i] ^= 1;
                std::fs::write(&path, bytes).unwrap();
            }
            _ => std::fs::remove_file(&path).unwrap(),
        }
        let init = || {
            cli(cache())
                .args(["train", "--quiet", "--no-cold-start", "--no-rl", "--init"])
                .arg(&ck)
                .arg("--out")
                .arg(f.work.path().join("from-damaged"))
                .output()
                .unwrap()
        };
        let generate = || {
            cli(cache())
                .args(["generate", "--episodes", "1", "--checkpoint"])
                .arg(&ck)
                .output()
                .unwrap()
        };
        for (what, e) in [
            ("eval", fails(eval())),
            ("--resume", fails(resume())),
            ("--init", fails(init())),
            ("generate", fails(generate())),
        ] {
            assert!(
                e.contains(path.to_str().unwrap()) && e.contains("damaged"),
                "{what} with {file} ({damage}): {e}"
            );
        }
        std::fs::write(&path, original).unwrap();
    }
    ok(eval());
}
