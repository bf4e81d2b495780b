//! Play an environment by hand in a terminal.
//!
//! `cargo run --release -p t2po-envs --bin play -- search [--seed N] [--passages N] [--task I]
//! [--expert] [--prompt] [--flavor verl|search-r1]`
//!
//! Type a model response per line (e.g. `<think>…</think><search>query</search>` or
//! `<answer>…</answer>`); `--expert` lets the built-in expert play instead; `--prompt` prints
//! the full verl-agent prompt before each step.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, Write};
use std::sync::Arc;
use t2po_envs::search_qa::corpus::World;
use t2po_envs::search_qa::expert::ExpertSession;
use t2po_envs::search_qa::retriever::Bm25Index;
use t2po_envs::search_qa::{Flavor, SearchQaEnv};
use t2po_envs::{Env, HistoryEntry};

struct Args {
    env: String,
    seed: u64,
    passages: usize,
    task: usize,
    expert: bool,
    prompt: bool,
    flavor: Flavor,
}

fn parse() -> Result<Args> {
    let mut it = std::env::args().skip(1);
    let env = it.next().context("usage: play search [--seed N] [--passages N] [--task I] [--expert] [--prompt] [--flavor verl|search-r1]")?;
    let mut a = Args {
        env,
        seed: 1,
        passages: 5000,
        task: 0,
        expert: false,
        prompt: false,
        flavor: Flavor::VerlAgent,
    };
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        match flag.as_str() {
            "--seed" => a.seed = value("--seed")?.parse().context("--seed")?,
            "--passages" => a.passages = value("--passages")?.parse().context("--passages")?,
            "--task" => a.task = value("--task")?.parse().context("--task")?,
            "--expert" => a.expert = true,
            "--prompt" => a.prompt = true,
            "--flavor" => {
                a.flavor = match value("--flavor")?.as_str() {
                    "verl" => Flavor::VerlAgent,
                    "search-r1" => Flavor::SearchR1,
                    other => bail!("--flavor verl|search-r1, got {other}"),
                }
            }
            other => bail!("unknown argument {other}"),
        }
    }
    Ok(a)
}

fn main() -> Result<()> {
    let args = parse()?;
    if args.env != "search" {
        bail!(
            "environment {:?}: only `search` is implemented so far",
            args.env
        );
    }
    let world = World::generate(args.seed, args.passages);
    let folder =
        std::env::temp_dir().join(format!("t2po-play-search-{}-{}", args.seed, args.passages));
    let index = match Bm25Index::open(&folder) {
        Ok(i) => i,
        Err(_) => {
            let _ = std::fs::remove_dir_all(&folder);
            eprintln!(
                "indexing {} passages into {} …",
                world.passages.len(),
                folder.display()
            );
            Bm25Index::build(&folder, world.passages.clone(), 1, 128)?
        }
    };
    let mut env = SearchQaEnv::new(world.questions(args.seed, 10), Arc::new(index))?;
    env.flavor = args.flavor;
    let first = env.reset(args.task);
    println!("[{}] question: {}", env.question().data_source, first.text);
    let mut expert = ExpertSession::new(&first.text);
    let mut history: Vec<HistoryEntry> = Vec::new();
    let mut last_obs: Option<String> = None;
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        if args.prompt {
            println!(
                "----- prompt -----{}------------------",
                env.prompt(&history, 4)
            );
        }
        let response = if args.expert {
            let r = expert.respond(last_obs.as_deref());
            println!("> {r}");
            r
        } else {
            print!("> ");
            std::io::stdout().flush()?;
            match lines.next() {
                Some(line) => line?,
                None => return Ok(()),
            }
        };
        let action = env.project(&response);
        let t = env.step(&action);
        println!(
            "action {:?} ({}); observation: {}",
            action.action,
            if action.valid { "valid" } else { "invalid" },
            t.observation.text
        );
        history.push(HistoryEntry {
            observation: last_obs.clone().unwrap_or_else(|| first.text.clone()),
            action: action.action,
        });
        last_obs = Some(t.observation.text);
        if t.done {
            println!(
                "done after {} turn(s): reward {} (won: {}); golden answers {:?}",
                env.turns(),
                t.reward,
                t.info.won,
                env.question().golden_answers
            );
            return Ok(());
        }
    }
}
