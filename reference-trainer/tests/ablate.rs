//! `reference-trainer ablate` as a user runs it, on tiny settings (two seeds, two arms): the
//! runs one after another and `--jobs 2` at a time (one thread each, the second seed's cold
//! start beside the first seed's arms) give the same table and the same metrics, arm by arm,
//! and a SIGTERM to such a run stops every running run (exit 143) and the same command then
//! ends on that table; arms that evaluate their cold start alike evaluate it once (T²PO as
//! the seed's cold-start run, GRPO as GiGPO) and get the figures they measure themselves once
//! the stored ones are gone; `--jobs 0` is refused before any work.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{fails, ok, timeless, tiny, write_config};
use reference_trainer::rollout::EnvKind;
use reference_trainer::train::MetricsLog;

const ARMS: [&str; 2] = ["T2PO", "GRPO"];
const SEEDS: [&str; 2] = ["2026", "2027"];

/// The `ablate` command of the tiny Search QA config into `out` with `threads` rayon threads
/// and `jobs`.
fn ablate_command(cache: &Path, config: &Path, out: &Path, threads: &str, jobs: &str) -> Command {
    let mut c = common::cli(cache);
    c.env("RAYON_NUM_THREADS", threads)
        .args([
            "ablate", "--quiet", "--seed", SEEDS[0], "--seeds", "2", "--jobs", jobs, "--arms",
        ])
        .arg(ARMS.join(","))
        .arg("--config")
        .arg(config)
        .arg("--out")
        .arg(out);
    c
}

/// Its stdout, from a run that must succeed.
fn ablate(cache: &Path, config: &Path, out: &Path, threads: &str, jobs: &str) -> String {
    ok(ablate_command(cache, config, out, threads, jobs)
        .output()
        .unwrap())
}

/// The table's rows without their last cell (the RL wall time).
fn rows_without_wall_time(out: &Path) -> Vec<String> {
    let table = std::fs::read_to_string(out.join("ablation.md")).unwrap();
    table
        .lines()
        .filter(|l| ARMS.iter().any(|a| l.starts_with(&format!("| {a} |"))))
        .map(|l| {
            let cells: Vec<&str> = l.trim_end_matches('|').split('|').collect();
            cells[..cells.len() - 1].join("|")
        })
        .collect()
}

#[test]
fn arms_at_a_time_give_the_table_of_arms_in_turn() {
    let cache = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let config = write_config(work.path(), &tiny(EnvKind::Search, 2));
    let serial = work.path().join("serial");
    let parallel = work.path().join("parallel");
    let serial_out = ablate(cache.path(), &config, &serial, "1", "1");
    // Two threads, two runs at a time: one thread each, as the serial run's.
    let parallel_out = ablate(cache.path(), &config, &parallel, "2", "2");
    assert!(
        parallel_out
            .contains("5 runs (1 cold start(s), 4 arm(s)), 2 at a time on 1 thread(s) each"),
        "{parallel_out}"
    );
    // The runs' own lines come through, with the seed and the run's name in front.
    for seed in SEEDS {
        for arm in ARMS {
            assert!(
                parallel_out.contains(&format!("[{seed} {arm}] iter ")),
                "{seed} {arm}: {parallel_out}"
            );
            assert!(parallel_out.contains(&format!("ablation: {seed} {arm} done")));
        }
    }
    // The second seed's cold start runs beside the first seed's arms.
    let at = |s: &str| {
        parallel_out
            .find(s)
            .unwrap_or_else(|| panic!("{s}: {parallel_out}"))
    };
    assert!(at("ablation: 2027 cold start begins") < at("ablation: 2026 T2PO done"));
    assert!(at("[2027 cold start] ") < at("ablation: 2027 cold start done"));
    assert!(!serial_out.contains("at a time"), "{serial_out}");
    // The first seed's cold start ran on both threads, its T2PO arm on one; the arm takes the
    // cold start's evaluation all the same (a rollout does not depend on the thread count), and
    // the metrics below hold it equal to the serial arm's own.
    assert!(
        parallel_out
            .lines()
            .any(|l| l.starts_with("[2026 T2PO] held-out before RL")
                && l.contains("evaluated the same policy the same way")),
        "{parallel_out}"
    );
    let rows = rows_without_wall_time(&serial);
    assert_eq!(rows.len(), ARMS.len(), "{rows:?}");
    assert_eq!(rows, rows_without_wall_time(&parallel));
    for seed in SEEDS {
        for arm in ARMS {
            let metrics = |root: &Path| {
                MetricsLog::new(
                    root.join(format!("seed-{seed}"))
                        .join(arm)
                        .join("metrics.jsonl"),
                )
                .read()
                .unwrap()
                .iter()
                .map(timeless)
                .collect::<Vec<_>>()
            };
            let m = metrics(&serial);
            assert!(m.len() >= 3, "{seed} {arm}: {} lines", m.len());
            assert_eq!(m, metrics(&parallel), "{seed} {arm}");
        }
    }
    // The same command again: every run is done, and the first line says so.
    assert!(!parallel_out.contains("finished before"), "{parallel_out}");
    let again = ablate(cache.path(), &config, &parallel, "2", "2");
    assert!(
        again.contains(
            "5 runs (1 cold start(s), 4 arm(s)), 5 of them finished before (resumed as done), 2 at \
             a time"
        ),
        "{again}"
    );
    assert_eq!(rows, rows_without_wall_time(&parallel));

    // SIGTERM once the first arms have checkpointed their first iteration: the running arms
    // stop at a safe point, the run exits 143, and the same command resumes them all.
    let stopped = work.path().join("stopped");
    let mut child = ablate_command(cache.path(), &config, &stopped, "2", "2")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let latest = stopped
        .join("seed-2026")
        .join(ARMS[0])
        .join("checkpoints")
        .join("latest");
    let t0 = Instant::now();
    while std::fs::read_to_string(&latest).ok().as_deref() != Some("iter-000001") {
        assert!(t0.elapsed() < Duration::from_secs(600), "RL never began");
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let run = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(143), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.contains("stopped by SIGTERM at a safe point")
            && stderr.contains("run the same `ablate` command"),
        "{stderr}"
    );
    assert!(
        !stopped.join("ablation.md").exists(),
        "a stopped run wrote its table"
    );
    ablate(cache.path(), &config, &stopped, "2", "2");
    assert_eq!(rows, rows_without_wall_time(&stopped));
}

/// The eval-line of `arm`'s metrics under `root`, without timings.
fn evaluation_before_rl(root: &Path, arm: &str) -> serde_json::Value {
    let lines = MetricsLog::new(root.join("seed-2026").join(arm).join("metrics.jsonl"))
        .read()
        .unwrap();
    let eval = lines.iter().find(|l| l.stage == "eval").unwrap();
    timeless(eval)
}

#[test]
fn arms_that_evaluate_alike_evaluate_once_and_get_what_they_would_have_measured() {
    let cache = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let config = write_config(work.path(), &tiny(EnvKind::Search, 2));
    let out = work.path().join("abl");
    let run = |arms: &str| {
        let mut c = common::cli(cache.path());
        c.env("RAYON_NUM_THREADS", "1")
            .args(["ablate", "--quiet", "--seed", "2026", "--seeds", "1"])
            .args(["--arms", arms, "--config"])
            .arg(&config)
            .arg("--out")
            .arg(&out);
        ok(c.output().unwrap())
    };
    let shared = "evaluated the same policy the same way";
    let first = run("T2PO,GiGPO,GRPO");
    // T2PO evaluates the cold start as the seed's cold-start run did, GRPO as GiGPO did; GiGPO
    // (no TTI, no TDS) has to evaluate it itself.
    assert_eq!(first.matches(shared).count(), 2, "{first}");
    let seed = out.join("seed-2026");
    for (arm, by) in [("T2PO", "cold"), ("GRPO", "GiGPO")] {
        let line = first
            .lines()
            .skip_while(|l| *l != format!("ablation seed 2026: {arm}"))
            .find(|l| l.starts_with("held-out before RL"))
            .unwrap_or_else(|| panic!("{arm}: {first}"));
        assert!(
            line.contains(&format!("as {} {shared}", seed.join(by).display())),
            "{arm}: {line}"
        );
    }
    let cached: Vec<_> = ["T2PO", "GRPO"]
        .iter()
        .map(|a| evaluation_before_rl(&out, a))
        .collect();
    assert_eq!(cached[1], evaluation_before_rl(&out, "GiGPO"));
    // The same arms again without the stored evaluations: each evaluates itself and measures
    // what it had been given, and its whole run is the same.
    let metrics = |arm: &str| {
        MetricsLog::new(seed.join(arm).join("metrics.jsonl"))
            .read()
            .unwrap()
            .iter()
            .map(timeless)
            .collect::<Vec<_>>()
    };
    let runs: Vec<_> = ["T2PO", "GRPO"].iter().map(|a| metrics(a)).collect();
    std::fs::remove_dir_all(out.join("eval-cache")).unwrap();
    for arm in ["T2PO", "GRPO"] {
        std::fs::remove_dir_all(seed.join(arm)).unwrap();
    }
    let again = run("T2PO,GiGPO,GRPO");
    assert!(!again.contains(shared), "{again}");
    // The seed's cold-start run, done, says so (not "iteration 0 of" an RL it never runs).
    assert!(
        again.contains("(its cold start is done; no RL asked)"),
        "{again}"
    );
    for (i, arm) in ["T2PO", "GRPO"].iter().enumerate() {
        assert_eq!(evaluation_before_rl(&out, arm), cached[i], "{arm}");
        assert_eq!(metrics(arm), runs[i], "{arm}");
    }
}

#[test]
fn jobs_zero_is_refused_before_any_work() {
    let cache = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let err = fails(
        common::cli(cache.path())
            .args(["ablate", "--seeds", "1", "--jobs", "0", "--out"])
            .arg(out.path())
            .output()
            .unwrap(),
    );
    assert!(err.contains("--jobs"), "{err}");
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
}
