//! `reference-trainer train` as a user runs it, on tiny settings: every environment trains end to
//! end (cold start → held-out eval → RL → checkpoints, metrics, plots, results table); a run
//! killed with SIGKILL during an iteration resumes and produces exactly the metrics of an
//! uninterrupted run; bad configs and misuse of an output folder are clear errors.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{cli, fails, ok, timeless, tiny, write_config};
use reference_trainer::rollout::EnvKind;
use reference_trainer::train::MetricsLog;

/// `train --quiet` with `cfg` into `work/name`; the run folder, its metrics lines and stdout.
fn train_quiet(
    cache: &Path,
    work: &Path,
    cfg: &reference_trainer::train::TrainConfig,
    name: &str,
) -> (
    std::path::PathBuf,
    Vec<reference_trainer::train::MetricsLine>,
    String,
) {
    let cfg_path = write_config(work, cfg);
    let out = work.join(name);
    let stdout = ok(cli(cache)
        .args(["train", "--quiet", "--config"])
        .arg(&cfg_path)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap());
    let lines = MetricsLog::new(out.join("metrics.jsonl")).read().unwrap();
    (out, lines, stdout)
}

#[test]
fn every_environment_trains_end_to_end() {
    let cache = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    for env in EnvKind::ALL {
        // Every demonstration's thinking cut where TTI could cut it: the experts of all three
        // environments write the forced queue's text after `</think>`.
        let mut cfg = tiny(env, 2);
        cfg.rft.cut_think = 1.0;
        // The paper's KL to the reference policy (ALFWorld's 0.01; the shipped configs run
        // without it), so the reference path is exercised end to end.
        if env == EnvKind::Alfworld {
            cfg.algo.kl_coef = 0.01;
        }
        cfg.train.save_rollouts = true;
        let name = format!("run-{}", env.as_str());
        let (out, _, stdout) = train_quiet(cache.path(), work.path(), &cfg, &name);
        assert!(stdout.contains("before RL (after cold start)"), "{stdout}");
        let cut = stdout
            .split("thinking cut where TTI could cut it in ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse::<usize>().ok());
        assert!(cut.is_some_and(|n| n > 0), "{env:?}: {stdout}");
        assert!(stdout.contains("| after RL |"), "{stdout}");
        let lines = MetricsLog::new(out.join("metrics.jsonl")).read().unwrap();
        let stages: Vec<(&str, usize)> = lines
            .iter()
            .map(|l| (l.stage.as_str(), l.iteration))
            .collect();
        assert_eq!(
            stages,
            [
                ("pretrain", 0),
                ("rft", 0),
                ("rft", 0),
                ("eval", 0),
                ("rl", 1),
                ("rl", 2)
            ],
            "{env:?}"
        );
        let pre = lines[0].update.as_ref().unwrap();
        assert!(pre.steps > 0 && pre.loss.is_finite(), "{env:?}: {pre:?}");
        let rl = &lines[5];
        let r = rl.rollout.as_ref().unwrap();
        assert_eq!(r.episodes, 4, "{env:?}");
        assert!(r.turns_per_episode >= 1.0);
        let u = rl.update.as_ref().unwrap();
        assert!(u.rows > 0 && u.steps == 2 && u.tokens > 0, "{env:?}: {u:?}");
        assert!(u.grad_norm.is_finite());
        assert_eq!(
            u.kl.is_some(),
            cfg.algo.kl_coef > 0.0,
            "KL where the config asks for it"
        );
        assert!(rl.eval.is_some(), "held-out evaluation at iteration 2");
        // `train.save_rollouts`: each iteration's episodes, each turn with the advantage it was
        // trained with; the last iteration's turns are the update's rows.
        for (it, line) in [(1, &lines[4]), (2, &lines[5])] {
            let path = reference_trainer::train::rollout_log::rollout_path(&out, it);
            let logs = reference_trainer::train::rollout_log::read_rollouts(&path).unwrap();
            let summary = line.rollout.as_ref().unwrap();
            assert_eq!(logs.len(), summary.episodes, "{env:?} iteration {it}");
            let turns: usize = logs.iter().map(|l| l.turns.len()).sum();
            let want = summary.turns_per_episode * summary.episodes as f64;
            assert!((turns as f64 - want).abs() < 1e-9, "{env:?}: {turns} turns");
            assert!(logs.iter().all(|l| l.iteration == it
                && l.turns
                    .iter()
                    .all(|t| t.advantage.is_some_and(|a| a.advantage.is_finite()))));
            let solved = logs.iter().filter(|l| l.success).count() as f64;
            assert!((solved / logs.len() as f64 - summary.success_rate).abs() < 1e-9);
            if it == 2 {
                assert_eq!(turns, u.rows, "{env:?}");
            }
        }
        // Every environment names each episode's source (Search QA: the dataset, WebShop: the
        // category, ALFWorld: the task type): the by-source counts cover every episode.
        for summary in [r, rl.eval.as_ref().unwrap()] {
            let n: usize = summary.by_source.values().map(|v| v.episodes).sum();
            assert_eq!(n, summary.episodes, "{env:?}: {:?}", summary.by_source);
        }
        for p in [
            "success.png",
            "format_valid.png",
            "think_tokens.png",
            "resample_rate.png",
        ] {
            let bytes = std::fs::read(out.join("plots").join(p)).unwrap();
            assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{p}");
        }
        // Search QA scores 0/1 like success: no second, identical chart.
        if env == EnvKind::Search {
            assert!(!out.join("plots").join("score.png").exists());
        }
        // results.md ends with the kernels' path, on which its figures reproduce.
        let results = std::fs::read_to_string(out.join("results.md")).unwrap();
        let kernels = reference_trainer::model::kernel_path(&candle_core::Device::Cpu);
        assert_eq!(
            results.lines().last(),
            Some(reference_trainer::train::run::kernels_line(kernels).as_str()),
            "{results}"
        );
        assert!(out.join("cold-start").join("model.safetensors").is_file());
        // Both checkpoint kinds name the turn end in config.json, as Qwen3's does.
        for folder in ["cold-start", "checkpoints/iter-000002"] {
            let text = std::fs::read_to_string(out.join(folder).join("config.json")).unwrap();
            let cfg: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert!(cfg["eos_token_id"].is_u64(), "{folder}: {text}");
            assert!(cfg["bos_token_id"].is_u64(), "{folder}: {text}");
        }
        let latest = std::fs::read_to_string(out.join("checkpoints").join("latest")).unwrap();
        assert_eq!(latest, "iter-000002");
        // The checkpoint is a Hugging Face folder `eval` loads; with the run's config (which
        // the checkpoint carries) it reproduces the run's own held-out numbers.
        let ck = out.join("checkpoints").join("iter-000002");
        let stdout = ok(cli(cache.path())
            .args(["eval", "--json", "--env", env.as_str(), "--checkpoint"])
            .arg(&ck)
            .output()
            .unwrap());
        let json = &stdout[..stdout.find("\n}\n").expect("a JSON summary") + 2];
        let again: reference_trainer::train::RolloutSummary = serde_json::from_str(json).unwrap();
        let own = rl.eval.as_ref().unwrap();
        assert_eq!(
            (again.episodes, again.decoded_tokens, again.prefill_tokens),
            (own.episodes, own.decoded_tokens, own.prefill_tokens),
            "{env:?}"
        );
        assert_eq!(
            (
                again.success_rate,
                again.format_valid_rate,
                again.think_tokens_per_turn
            ),
            (
                own.success_rate,
                own.format_valid_rate,
                own.think_tokens_per_turn
            )
        );
        assert_eq!(again.by_source, own.by_source, "{env:?}");
        // The exported cold start carries the run's config too: `eval` of it reproduces the
        // run's evaluation before RL.
        let stdout = ok(cli(cache.path())
            .args(["eval", "--json", "--checkpoint"])
            .arg(out.join("cold-start"))
            .output()
            .unwrap());
        let json = &stdout[..stdout.find("\n}\n").expect("a JSON summary") + 2];
        let again: reference_trainer::train::RolloutSummary = serde_json::from_str(json).unwrap();
        let own = lines[3].eval.as_ref().unwrap();
        assert_eq!(
            (again.episodes, again.decoded_tokens, again.success_rate),
            (own.episodes, own.decoded_tokens, own.success_rate),
            "{env:?}"
        );
        // `generate` on either runs the run's own settings (the tiny caps: responses of at
        // most 40 tokens, at most 3 turns, thinking cut by L_max = 24), not the paper's.
        let c = tiny(env, 2);
        for (k, dir) in [ck.clone(), out.join("cold-start")].iter().enumerate() {
            let records = work.path().join(format!("gen-{}-{k}.jsonl", env.as_str()));
            ok(cli(cache.path())
                .args(["generate", "--episodes", "3", "--temperature", "1"])
                .arg("--checkpoint")
                .arg(dir)
                .arg("--jsonl")
                .arg(&records)
                .output()
                .unwrap());
            for line in std::fs::read_to_string(&records).unwrap().lines() {
                let r: serde_json::Value = serde_json::from_str(line).unwrap();
                let turns = r["turns"].as_array().unwrap();
                assert!(
                    !turns.is_empty() && turns.len() <= c.rollout.max_turns,
                    "{env:?}"
                );
                for t in turns {
                    let g = &t["generation"];
                    let n = g["response_ids"].as_array().unwrap().len();
                    assert!(n <= c.rollout.max_response_tokens, "{env:?}: {n} tokens");
                    let think = g["think_tokens"].as_u64().unwrap();
                    assert!(think <= u64::from(c.control.max_think), "{env:?}: {think}");
                }
            }
        }
    }
}

#[test]
fn a_run_killed_mid_iteration_resumes_exactly() {
    let cache = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let cfg_path = write_config(work.path(), &tiny(EnvKind::Webshop, 4));
    let train = |out: &Path| {
        let mut c = cli(cache.path());
        c.args(["train", "--quiet", "--config"])
            .arg(&cfg_path)
            .arg("--out")
            .arg(out);
        c
    };
    let whole = work.path().join("whole");
    ok(train(&whole).output().unwrap());
    let reference = MetricsLog::new(whole.join("metrics.jsonl")).read().unwrap();

    // Kill while iteration 3 runs: after the checkpoint of iteration 2 is the latest and before
    // iteration 3's metrics line exists. A kill that came too late is retried.
    let mut killed_mid_step = false;
    for attempt in 0..4 {
        let out = work.path().join(format!("killed-{attempt}"));
        let mut child = train(&out)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let latest = out.join("checkpoints").join("latest");
        let t0 = Instant::now();
        while std::fs::read_to_string(&latest).ok().as_deref() != Some("iter-000002") {
            assert!(t0.elapsed() < Duration::from_secs(300), "no checkpoint 2");
            assert!(child.try_wait().unwrap().is_none(), "the run ended early");
            std::thread::sleep(Duration::from_millis(2));
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let seen = MetricsLog::new(out.join("metrics.jsonl")).read().unwrap();
        if seen.iter().any(|l| l.iteration >= 3) {
            continue;
        }
        killed_mid_step = true;
        let stdout = ok(train(&out).arg("--resume").output().unwrap());
        assert!(stdout.contains("resuming"), "{stdout}");
        let resumed = MetricsLog::new(out.join("metrics.jsonl")).read().unwrap();
        assert_eq!(resumed.len(), reference.len());
        for (a, b) in reference.iter().zip(&resumed) {
            assert_eq!(timeless(a), timeless(b), "iteration {}", a.iteration);
        }
        // Same weights at the end, bit for bit.
        let w = |dir: &Path| {
            std::fs::read(dir.join("checkpoints/iter-000004/model.safetensors")).unwrap()
        };
        assert!(w(&whole) == w(&out), "final weights differ");
        break;
    }
    assert!(
        killed_mid_step,
        "never managed to kill the run during iteration 3"
    );
}

#[test]
fn bad_configs_and_misused_output_folders_are_clear_errors() {
    let cache = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let base = tiny(EnvKind::Search, 1).to_toml().unwrap();
    let bad = |name: &str, text: String| -> String {
        let p = work.path().join(name);
        std::fs::write(&p, text).unwrap();
        fails(
            cli(cache.path())
                .args(["train", "--quiet", "--config"])
                .arg(&p)
                .arg("--out")
                .arg(work.path().join("never"))
                .output()
                .unwrap(),
        )
    };
    let e = bad(
        "unknown.toml",
        base.replace("[optim]\n", "[optim]\nmomentum = 0.9\n"),
    );
    assert!(e.contains("unknown.toml") && e.contains("momentum"), "{e}");
    let e = bad(
        "type.toml",
        base.replace("gamma = 0.95", "gamma = \"high\""),
    );
    assert!(e.contains("type.toml") && e.contains("gamma"), "{e}");
    let e = bad("range.toml", base.replace("eta = 0.15", "eta = -1.0"));
    assert!(e.contains("control.eta") && e.contains("[0, 10]"), "{e}");
    let e = fails(
        cli(cache.path())
            .args(["train", "--config", "/nonexistent/run.toml"])
            .output()
            .unwrap(),
    );
    assert!(e.contains("/nonexistent/run.toml"), "{e}");
    assert!(
        !work.path().join("never").exists(),
        "nothing written for a bad config"
    );
    // A missing model to start from.
    let good = work.path().join("good.toml");
    std::fs::write(&good, &base).unwrap();
    let e = fails(
        cli(cache.path())
            .args([
                "train",
                "--quiet",
                "--init",
                "/nonexistent/model",
                "--config",
            ])
            .arg(&good)
            .arg("--out")
            .arg(work.path().join("init-run"))
            .output()
            .unwrap(),
    );
    assert!(e.contains("/nonexistent/model"), "{e}");

    // A finished run is not overwritten; --resume with another config is refused.
    let cfg_path = work.path().join("ok.toml");
    std::fs::write(&cfg_path, &base).unwrap();
    let out = work.path().join("run");
    let train = || {
        let mut c = cli(cache.path());
        c.args(["train", "--quiet", "--config"])
            .arg(&cfg_path)
            .arg("--out")
            .arg(&out);
        c
    };
    ok(train().output().unwrap());
    let e = fails(train().output().unwrap());
    assert!(
        e.contains("already holds a run") && e.contains("--resume"),
        "{e}"
    );
    std::fs::write(&cfg_path, base.replace("eta = 0.15", "eta = 0.2")).unwrap();
    let e = fails(train().arg("--resume").output().unwrap());
    assert!(e.contains("control.eta"), "{e}");
    // An output folder that is a file.
    let file = work.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let e = fails(
        cli(cache.path())
            .args(["train", "--quiet", "--config"])
            .arg(&cfg_path)
            .arg("--out")
            .arg(&file)
            .output()
            .unwrap(),
    );
    assert!(e.contains("a-file"), "{e}");
}

/// `train.rl_tasks`: "all" draws what the trainer always drew; "undemonstrated" leaves out
/// exactly the cold start's demonstration tasks, and refuses a split it leaves too small.
#[test]
fn rl_tasks_undemonstrated_leaves_out_exactly_the_demonstrated_tasks() {
    use reference_trainer::rollout::Split;
    use reference_trainer::train::config::RlTasks;
    use reference_trainer::train::rft::{demo_tasks, rl_task_pool, sample_from, sample_tasks};
    use reference_trainer::train::run::pool_for;

    let mut c = tiny(EnvKind::Webshop, 1);
    c.rft.demo_tasks = 50;
    let pool = pool_for(&c).unwrap();
    let n = pool.num_tasks(Split::Train);
    assert!(n > 100, "{n}");
    let all = rl_task_pool(&pool, &c).unwrap();
    assert_eq!(all, (0..n).collect::<Vec<_>>());
    for seed in [1, 77, 2026] {
        assert_eq!(
            sample_from(all.clone(), 8, seed),
            sample_tasks(&pool, 8, seed)
        );
    }
    c.train.rl_tasks = RlTasks::Undemonstrated;
    let demo = demo_tasks(&pool, &c);
    let rest = rl_task_pool(&pool, &c).unwrap();
    assert_eq!(demo.len(), 50);
    assert_eq!(rest.len(), n - 50);
    assert!(demo.iter().all(|t| !rest.contains(t)));
    assert!(rest.windows(2).all(|w| w[0] < w[1]));
    // Draws from it never hit a demonstrated task.
    for seed in 0..20 {
        assert!(sample_from(rest.clone(), 8, seed)
            .iter()
            .all(|t| !demo.contains(t)));
    }
    c.rft.demo_tasks = n - 1;
    c.rollout.tasks_per_iteration = 2;
    let e = rl_task_pool(&pool, &c).unwrap_err().to_string();
    assert!(
        e.contains("train.rl_tasks") && e.contains("leaves 1 of"),
        "{e}"
    );
}

/// `train.rl_sources`: RL draws only the named Search QA sources' training tasks (with
/// `rl_tasks` applied first), every source when empty; a source the split lacks, or an
/// environment without sources, is an error naming the key.
#[test]
fn rl_sources_keep_exactly_the_named_sources_tasks() {
    use reference_trainer::rollout::Split;
    use reference_trainer::train::config::RlTasks;
    use reference_trainer::train::rft::{demo_tasks, rl_task_pool};
    use reference_trainer::train::run::pool_for;

    let mut c = tiny(EnvKind::Search, 1);
    c.rft.demo_tasks = 40;
    let pool = pool_for(&c).unwrap();
    let sources = pool.task_sources(Split::Train).unwrap();
    let n = pool.num_tasks(Split::Train);
    assert_eq!(sources.len(), n);
    let all = rl_task_pool(&pool, &c).unwrap();
    assert_eq!(all, (0..n).collect::<Vec<_>>());
    let of = |name: &str| -> Vec<usize> { (0..n).filter(|&t| sources[t] == name).collect() };
    let (nq, hotpot) = (of("nq"), of("hotpotqa"));
    assert!(!nq.is_empty() && !hotpot.is_empty() && nq.len() + hotpot.len() == n);
    c.train.rl_sources = vec!["hotpotqa".into()];
    assert_eq!(rl_task_pool(&pool, &c).unwrap(), hotpot);
    c.train.rl_sources = vec!["hotpotqa".into(), "nq".into()];
    assert_eq!(rl_task_pool(&pool, &c).unwrap(), all);
    // After rl_tasks: the undemonstrated multi-hop tasks.
    c.train.rl_sources = vec!["hotpotqa".into()];
    c.train.rl_tasks = RlTasks::Undemonstrated;
    let demo = demo_tasks(&pool, &c);
    let rest = rl_task_pool(&pool, &c).unwrap();
    let want: Vec<usize> = hotpot
        .iter()
        .copied()
        .filter(|t| !demo.contains(t))
        .collect();
    assert!(
        want.len() < hotpot.len(),
        "some demonstrations are multi-hop"
    );
    assert_eq!(rest, want);
    c.train.rl_sources = vec!["musique".into()];
    let e = rl_task_pool(&pool, &c).unwrap_err().to_string();
    assert!(
        e.contains("train.rl_sources") && e.contains("musique") && e.contains("hotpotqa, nq"),
        "{e}"
    );
    c.train.rl_sources = vec!["nq".into()];
    c.rollout.tasks_per_iteration = nq.len() + 1;
    let e = rl_task_pool(&pool, &c).unwrap_err().to_string();
    assert!(
        e.contains("train.rl_tasks") && e.contains("rl_sources"),
        "{e}"
    );
    // The other environments' tasks have no source.
    let mut w = tiny(EnvKind::Webshop, 1);
    let wpool = pool_for(&w).unwrap();
    assert!(wpool.task_sources(Split::Train).is_none());
    w.train.rl_sources = vec!["nq".into()];
    let e = rl_task_pool(&wpool, &w).unwrap_err().to_string();
    assert!(
        e.contains("train.rl_sources") && e.contains("webshop"),
        "{e}"
    );
}

/// `train.balance_sources`: every RL batch holds as many tasks of each training source (and the
/// iteration's rollout says so by source), where the uniform draw need not; the saved rollouts
/// name each episode's source.
#[test]
fn balance_sources_draws_every_batch_evenly_over_the_sources() {
    let cache = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut c = tiny(EnvKind::Search, 3);
    c.rollout.tasks_per_iteration = 4;
    c.train.eval_every = 3;
    c.train.balance_sources = true;
    c.train.save_rollouts = true;
    let (out, lines, _) = train_quiet(cache.path(), work.path(), &c, "run");
    let rl: Vec<_> = lines.iter().filter(|l| l.stage == "rl").collect();
    assert_eq!(rl.len(), 3);
    let half = c.rollout.tasks_per_iteration / 2 * c.rollout.group_size;
    for l in &rl {
        let by = &l.rollout.as_ref().unwrap().by_source;
        let counts: Vec<(&str, usize)> = by.iter().map(|(k, v)| (k.as_str(), v.episodes)).collect();
        assert_eq!(counts, [("hotpotqa", half), ("nq", half)], "{by:?}");
        let path = reference_trainer::train::rollout_log::rollout_path(&out, l.iteration);
        let logs = reference_trainer::train::rollout_log::read_rollouts(&path).unwrap();
        let nq = logs.iter().filter(|e| e.source == "nq").count();
        assert_eq!(nq, half);
    }
}

/// DAPO's dynamic sampling end to end: the iteration draws 1..=max_gen_batches batches, keeps
/// at most tasks_per_iteration informative groups, reports it in metrics.jsonl, and trains on
/// the kept groups' turns only (none kept: an empty update).
#[test]
fn dynamic_sampling_draws_batches_and_trains_on_the_informative_groups() {
    let cache = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut c = tiny(EnvKind::Webshop, 2);
    c.algo.dynamic_sampling = true;
    c.algo.max_gen_batches = 3;
    c.train.eval_every = 2;
    let (_, lines, _) = train_quiet(cache.path(), work.path(), &c, "run");
    let rl: Vec<_> = lines.iter().filter(|l| l.stage == "rl").collect();
    assert_eq!(rl.len(), 2);
    let per_batch = c.rollout.tasks_per_iteration * c.rollout.group_size;
    for l in rl {
        let d = l
            .dynamic
            .as_ref()
            .expect("a dynamic report on every RL line");
        assert!((1..=3).contains(&d.batches), "{d:?}");
        assert_eq!(
            d.groups_generated,
            d.batches * c.rollout.tasks_per_iteration
        );
        assert!(d.groups_kept <= d.groups_informative.min(c.rollout.tasks_per_iteration));
        // More batches only while the groups were not full.
        if d.batches > 1 {
            assert!(d.groups_informative - d.groups_kept <= c.rollout.tasks_per_iteration);
        }
        if d.groups_kept == c.rollout.tasks_per_iteration {
            assert!(d.groups_informative >= d.groups_kept);
        } else {
            assert_eq!(
                d.batches, 3,
                "stopped early with the groups not full: {d:?}"
            );
        }
        let rollout = l.rollout.as_ref().unwrap();
        assert_eq!(rollout.episodes, d.batches * per_batch);
        let update = l.update.as_ref().unwrap();
        if d.groups_kept == 0 {
            assert_eq!(update.rows, 0);
        } else {
            assert!(update.rows > 0);
        }
    }
    // Off (the shipped default), the line carries no report.
    let plain = work.path().join("plain");
    let cfg_path = write_config(work.path(), &tiny(EnvKind::Webshop, 1));
    ok(cli(cache.path())
        .args(["train", "--quiet", "--config"])
        .arg(&cfg_path)
        .arg("--out")
        .arg(&plain)
        .output()
        .unwrap());
    let lines = MetricsLog::new(plain.join("metrics.jsonl")).read().unwrap();
    assert!(lines.iter().all(|l| l.dynamic.is_none()));
}

/// `control.calibrate`: the warm-ups run after the cold start and before the evaluation, the
/// chosen ε and η are what the run then uses (its metrics line, the checkpoint's saved config),
/// and a resume with the user's own config (no `calibrated` in it), or with `--iterations`
/// alone, continues without calibrating again.
#[test]
fn calibrate_sets_the_thresholds_once_and_the_run_keeps_them() {
    use reference_trainer::train::TrainConfig;

    let cache = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut c = tiny(EnvKind::Search, 1);
    c.control.calibrate = true;
    c.control.calibrate_tasks = 4;
    c.control.target_fire_rate = 0.5;
    c.control.target_resample_rate = 0.25;
    let cfg_path = write_config(work.path(), &c);
    let out = work.path().join("run");
    let stdout = ok(cli(cache.path())
        .args(["train", "--quiet", "--config"])
        .arg(&cfg_path)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap());
    assert!(stdout.contains("calibrated: ε = "), "{stdout}");
    let lines = MetricsLog::new(out.join("metrics.jsonl")).read().unwrap();
    let stages: Vec<&str> = lines.iter().map(|l| l.stage.as_str()).collect();
    let at = stages.iter().position(|&s| s == "calibrate").unwrap();
    assert_eq!(stages.iter().filter(|&&s| s == "calibrate").count(), 1);
    assert_eq!(stages[at + 1], "eval", "{stages:?}");
    let cal = lines[at].calibrated.clone().unwrap();
    // Each warm-up rolled out 4 tasks × group 2; the shares are of their populations and as
    // near the targets as the measured values allow.
    assert!(cal.turns >= 8 && cal.checked_turns <= cal.turns, "{cal:?}");
    let reachable = cal.checked_turns as f64 / cal.turns as f64;
    let fire_rate = cal.fire_rate.unwrap();
    assert!(fire_rate <= reachable + 1e-12, "{cal:?}");
    if reachable >= 0.5 {
        assert!((fire_rate - 0.5).abs() <= 1.0 / cal.turns as f64, "{cal:?}");
    }
    assert!((0.0..=1.0).contains(&cal.resample_rate.unwrap()), "{cal:?}");
    assert!(cal.epsilon >= 0.0 && cal.eta >= 0.0, "{cal:?}");
    // The checkpoint's config carries them (an `eval` of it and a resume use them).
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("checkpoints/iter-000001/trainer_state.json")).unwrap(),
    )
    .unwrap();
    let saved = TrainConfig::parse(
        state["config"].as_str().unwrap(),
        Path::new("trainer_state.json"),
    )
    .unwrap();
    assert_eq!(saved.control.calibrated.as_ref(), Some(&cal));
    // Extended by one iteration with the user's config: accepted, and no second calibration.
    ok(cli(cache.path())
        .args([
            "train",
            "--quiet",
            "--resume",
            "--iterations",
            "2",
            "--config",
        ])
        .arg(&cfg_path)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap());
    // (calibration lines, RL lines) in the run's metrics.jsonl.
    let stages = || {
        let lines = MetricsLog::new(out.join("metrics.jsonl")).read().unwrap();
        let count = |stage: &str| lines.iter().filter(|l| l.stage == stage).count();
        (count("calibrate"), count("rl"))
    };
    assert_eq!(stages(), (1, 2));
    // Extended once more with --iterations alone: the run keeps its own config (this one is not
    // the shipped default, which --iterations used to be compared against and refused).
    ok(cli(cache.path())
        .args(["train", "--quiet", "--resume", "--iterations", "3", "--out"])
        .arg(&out)
        .output()
        .unwrap());
    assert_eq!(stages(), (1, 3));
}

/// `rft.relabel` (DAgger) end to end on every environment: the round rolls the policy out,
/// replays each episode with the expert watching (the replay reaches the recorded states, or the
/// run fails), and fine-tunes on every turn it labelled; metrics.jsonl says how many and how
/// often the policy's action was the expert's.
#[test]
fn relabelled_rounds_fine_tune_on_every_turn_with_the_experts_answers() {
    let cache = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    for env in EnvKind::ALL {
        let mut cfg = tiny(env, 1);
        cfg.rft.relabel = true;
        cfg.rft.tasks = 3;
        cfg.rft.group_size = 2;
        cfg.rft.epochs = 2;
        let cfg_path = write_config(work.path(), &cfg);
        let out = work.path().join(format!("run-{}", env.as_str()));
        let stdout = ok(cli(cache.path())
            .args(["train", "--quiet", "--no-rl", "--config"])
            .arg(&cfg_path)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap());
        assert!(
            stdout.contains("relabelled round 1: 6 episodes"),
            "{env:?}: {stdout}"
        );
        let lines = MetricsLog::new(out.join("metrics.jsonl")).read().unwrap();
        let round = lines
            .iter()
            .filter(|l| l.stage == "rft")
            .nth(1)
            .expect("the SFT line, then the round's");
        let r = round.rollout.as_ref().unwrap();
        let rej = round.rejection.as_ref().unwrap();
        let turns = (r.turns_per_episode * r.episodes as f64).round() as usize;
        assert_eq!((rej.episodes, rej.kept), (6, 6), "{env:?}");
        assert_eq!(rej.turns, turns, "{env:?}: every turn labelled");
        let a = rej
            .expert_agreement
            .expect("the agreement of a relabelled round");
        assert!((0.0..=1.0).contains(&a), "{env:?}: {a}");
        let u = round.update.as_ref().unwrap();
        assert_eq!(u.rows, 2 * turns, "{env:?}: two epochs over the labels");
        assert!(u.loss.is_finite() && u.steps > 0, "{env:?}: {u:?}");
        // Records whose states are not the training tasks' (held-out episodes from `generate`)
        // cannot be relabelled: the replay notices, and says so instead of labelling.
        if env == EnvKind::Alfworld {
            let jsonl = work.path().join("held-out.jsonl");
            ok(cli(cache.path())
                .args([
                    "generate",
                    "--episodes",
                    "2",
                    "--temperature",
                    "1",
                    "--checkpoint",
                ])
                .arg(out.join("cold-start"))
                .arg("--jsonl")
                .arg(&jsonl)
                .output()
                .unwrap());
            let records: Vec<reference_trainer::rollout::EpisodeRecord> =
                std::fs::read_to_string(&jsonl)
                    .unwrap()
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap())
                    .collect();
            let pool = reference_trainer::train::run::pool_for(&cfg).unwrap();
            let tok =
                reference_trainer::tokenizer::Tokenizer::load(out.join("cold-start")).unwrap();
            let e = reference_trainer::train::rft::relabelled_demos(&pool, &tok, &cfg, &records, 1)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("rft.relabel") && e.contains("another task set"),
                "{e}"
            );
        }
    }
}
