//! The `reference-trainer` command line as a user meets it: `generate` runs and writes its
//! records; bad input (an unknown environment, a task out of range, a missing checkpoint) is a
//! clear error, never a panic.

use std::process::Command;

fn cli(cache: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_reference-trainer"));
    c.env("T2PO_CACHE", cache);
    c
}

#[test]
fn generate_runs_and_bad_input_is_named() {
    let cache = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let jsonl = out.path().join("episodes.jsonl");
    let run = cli(cache.path())
        .args([
            "generate",
            "--env",
            "alfworld",
            "--episodes",
            "2",
            "--max-turns",
            "1",
        ])
        .args(["--max-response", "8", "--text", "--jsonl"])
        .arg(&jsonl)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        stdout.contains("=== episode 0 (alfworld") && stdout.contains("TDS tries"),
        "{stdout}"
    );
    // --text: one line per turn with its whole response, quoted.
    let texts: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("text \""))
        .collect();
    assert_eq!(texts.len(), 2, "{stdout}");
    assert!(
        texts.iter().all(|t| t.len() > 1 && t.ends_with('"')),
        "{stdout}"
    );
    let text = std::fs::read_to_string(&jsonl).unwrap();
    assert_eq!(text.lines().count(), 2);
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["env"], "alfworld");
        assert_eq!(v["turns"].as_array().unwrap().len(), 1);
    }

    let bad_env = cli(cache.path())
        .args(["generate", "--env", "minecraft"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&bad_env.stderr);
    assert_eq!(bad_env.status.code(), Some(2));
    assert!(
        err.contains("minecraft") && err.contains("webshop"),
        "{err}"
    );

    let bad_task = cli(cache.path())
        .args(["generate", "--env", "alfworld", "--task", "1000000"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&bad_task.stderr);
    assert_eq!(bad_task.status.code(), Some(1));
    assert!(
        err.contains("--task 1000000") && err.contains("held-out split"),
        "{err}"
    );

    let missing = out.path().join("no-such-checkpoint");
    let bad_ckpt = cli(cache.path())
        .args(["generate", "--checkpoint"])
        .arg(&missing)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&bad_ckpt.stderr);
    assert_eq!(bad_ckpt.status.code(), Some(1));
    assert!(
        err.contains("no-such-checkpoint") && err.contains("config.json"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// `eval --checkpoint` names what is wrong with the path before any work: missing, or a folder
/// that is not a checkpoint (and says where a run keeps its checkpoints).
#[test]
fn eval_names_a_bad_checkpoint_path() {
    let cache = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let missing = out.path().join("no-such-checkpoint");
    let res = cli(cache.path())
        .args(["eval", "--checkpoint"])
        .arg(&missing)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&res.stderr);
    assert_eq!(res.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no-such-checkpoint") && err.contains("no such file or folder"),
        "{err}"
    );

    let res = cli(cache.path())
        .args(["eval", "--checkpoint"])
        .arg(out.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&res.stderr);
    assert_eq!(res.status.code(), Some(1), "{err}");
    assert!(
        err.contains("neither a checkpoint folder") && err.contains("RUN/checkpoints"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// `ablate --arms` names an arm it does not know, and lists the ones it does, before any work.
#[test]
fn ablate_refuses_an_unknown_arm_by_name() {
    let cache = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let run = cli(cache.path())
        .args(["ablate", "--seeds", "1", "--arms", "T2PO,PPO-max", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(
        err.contains("\"PPO-max\" is not an arm") && err.contains("T2PO-entropy-only"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(out.path()).unwrap().count(),
        0,
        "work began"
    );
}
