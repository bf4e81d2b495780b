//! Where a policy's successes come from: greedy success on training tasks its cold start
//! demonstrated, on training tasks it never saw, and on the held-out split, broken down by
//! question kind, with the actions of a few failed held-out episodes.
//!
//! ```text
//! cargo run --release -p reference-trainer --example split_gap -- CONFIG CHECKPOINT_DIR [N] [--temperature T]
//! ```
//!
//! CONFIG is the run's config (its seed picks the demonstrated tasks as the cold start did);
//! N tasks per set (default 70).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use candle_core::{DType, Device};
use reference_trainer::model::checkpoint;
use reference_trainer::rollout::{EpisodeRecord, Split};
use reference_trainer::tokenizer::Tokenizer;
use reference_trainer::train::rft::{demo_tasks, purpose, run_episodes, sample_tasks, Reporter};
use reference_trainer::train::run::pool_for;
use reference_trainer::train::state::derive_seed;
use reference_trainer::train::TrainConfig;

struct Quiet;
impl Reporter for Quiet {
    fn line(&mut self, _: &str) {}
    fn begin(&mut self, _: &str, _: usize) {}
    fn advance(&mut self, _: usize) {}
    fn end(&mut self) {}
}

/// The question's kind, from its wording.
fn kind(task: &str) -> &'static str {
    let q = task
        .split("Your question: ")
        .nth(1)
        .unwrap_or(task)
        .lines()
        .next()
        .unwrap_or("");
    if q.starts_with("Who was born first") {
        "comparison"
    } else if q.starts_with("Who founded the company that") {
        "bridge: founder of employer"
    } else if q.starts_with("In which country was") {
        "bridge: country of birth"
    } else if q.starts_with("Who founded") {
        "founder"
    } else if q.starts_with("In which year") {
        "birth year"
    } else if q.starts_with("Where was") {
        "birthplace"
    } else if q.starts_with("What is the capital") {
        "capital"
    } else if q.starts_with("In which country is") {
        "country of city"
    } else {
        "other"
    }
}

fn report(name: &str, records: &[EpisodeRecord], show: usize) {
    let mut by: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut turns = 0usize;
    let mut answered = 0usize;
    for r in records {
        let e = by.entry(kind(&r.task_text)).or_default();
        e.0 += usize::from(r.success);
        e.1 += 1;
        turns += r.turns.len();
        answered += usize::from(r.turns.iter().any(|t| t.action.starts_with("<answer>")));
    }
    let n = records.len().max(1);
    let s = records.iter().filter(|r| r.success).count();
    println!(
        "{name}: success {s}/{} = {:.3}, answered {:.3}, turns/episode {:.2}",
        records.len(),
        s as f64 / n as f64,
        answered as f64 / n as f64,
        turns as f64 / n as f64
    );
    for (k, (s, n)) in &by {
        println!("    {k:<28} {s:>3}/{n:<3}");
    }
    for r in records.iter().filter(|r| !r.success).take(show) {
        let q = r
            .task_text
            .split("Your question: ")
            .nth(1)
            .unwrap_or(&r.task_text)
            .lines()
            .next()
            .unwrap_or("");
        let acts: Vec<String> = r
            .turns
            .iter()
            .map(|t| {
                if t.format_valid {
                    t.action.clone()
                } else {
                    format!("INVALID[{}]", t.response.replace('\n', "\\n"))
                }
            })
            .collect();
        println!("    ✗ {q}  →  {}", acts.join("  |  "));
        if std::env::var_os("SPLIT_GAP_VERBOSE").is_some() {
            for t in &r.turns {
                let obs: String = t
                    .anchor
                    .chars()
                    .rev()
                    .take(700)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                println!(
                    "      [turn {}] …{}\n      → {}",
                    t.turn,
                    obs.replace('\n', "\\n"),
                    t.response.replace('\n', "\\n")
                );
            }
        }
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        anyhow::bail!("usage: split_gap CONFIG CHECKPOINT_DIR [N] [--temperature T]");
    }
    let cfg = TrainConfig::load(&PathBuf::from(&args[0]))?;
    let dir = PathBuf::from(&args[1]);
    let mut n = 70usize;
    let mut temperature = 0.0f32;
    let mut i = 2;
    while i < args.len() {
        match args[i].as_str() {
            "--temperature" => {
                temperature = args.get(i + 1).context("a value")?.parse()?;
                i += 2;
            }
            x => {
                n = x.parse()?;
                i += 1;
            }
        }
    }
    let policy = checkpoint::load(&dir, DType::F32, &Device::Cpu)?;
    let tok = Tokenizer::load(dir.join("tokenizer.json"))?;
    let pool = pool_for(&cfg)?;
    let demo = demo_tasks(&pool, &cfg);
    let seen: std::collections::HashSet<usize> = demo.iter().copied().collect();
    let unseen: Vec<usize> = sample_tasks(&pool, pool.num_tasks(Split::Train), 12345)
        .into_iter()
        .filter(|t| !seen.contains(t))
        .take(n)
        .collect();
    let demo: Vec<usize> = demo.into_iter().take(n).collect();
    let held: Vec<usize> = (0..n.min(pool.num_tasks(Split::Test))).collect();
    let seed = derive_seed(cfg.seed, 0, purpose::EVAL);
    for (name, split, tasks, show) in [
        ("train, demonstrated", Split::Train, &demo, 0),
        ("train, not demonstrated", Split::Train, &unseen, 0),
        ("held-out", Split::Test, &held, 12),
    ] {
        let (records, _, secs) = run_episodes(
            "eval",
            &policy,
            &tok,
            &pool,
            &cfg,
            split,
            tasks,
            1,
            temperature,
            seed,
            &mut Quiet,
        )?;
        report(name, &records, show);
        println!("    ({secs:.1} s)");
    }
    Ok(())
}
