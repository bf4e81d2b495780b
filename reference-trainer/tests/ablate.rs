//! `reference-trainer ablate` as a user runs it, on tiny settings: the arms one after another
//! and `--jobs 2` at a time (one thread each) give the same table and the same metrics, arm
//! by arm; `--jobs 0` is refused before any work.

mod common;

use std::path::Path;

use common::{fails, ok, timeless, tiny, write_config};
use reference_trainer::rollout::EnvKind;
use reference_trainer::train::MetricsLog;

const ARMS: [&str; 3] = ["T2PO", "GiGPO", "GRPO"];

/// `ablate` of the tiny Search QA config into `out` with `threads` rayon threads and `jobs`;
/// its stdout.
fn ablate(cache: &Path, config: &Path, out: &Path, threads: &str, jobs: &str) -> String {
    ok(common::cli(cache)
        .env("RAYON_NUM_THREADS", threads)
        .args([
            "ablate", "--quiet", "--seeds", "1", "--jobs", jobs, "--arms",
        ])
        .arg(ARMS.join(","))
        .arg("--config")
        .arg(config)
        .arg("--out")
        .arg(out)
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
    // Two threads, two arms at a time: one thread each, as the serial run's.
    let parallel_out = ablate(cache.path(), &config, &parallel, "2", "2");
    assert!(
        parallel_out.contains("3 arms, 2 at a time on 1 thread(s) each"),
        "{parallel_out}"
    );
    // The arms' own lines come through, with the arm's name in front.
    for arm in ARMS {
        assert!(
            parallel_out.contains(&format!("[{arm}] iter ")),
            "{arm}: {parallel_out}"
        );
        assert!(parallel_out.contains(&format!("seed 2026: {arm} done")));
    }
    assert!(!serial_out.contains("at a time"), "{serial_out}");
    let rows = rows_without_wall_time(&serial);
    assert_eq!(rows.len(), ARMS.len(), "{rows:?}");
    assert_eq!(rows, rows_without_wall_time(&parallel));
    for arm in ARMS {
        let metrics = |root: &Path| {
            MetricsLog::new(root.join("seed-2026").join(arm).join("metrics.jsonl"))
                .read()
                .unwrap()
                .iter()
                .map(timeless)
                .collect::<Vec<_>>()
        };
        let m = metrics(&serial);
        assert!(m.len() >= 3, "{arm}: {} lines", m.len());
        assert_eq!(m, metrics(&parallel), "{arm}");
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
