//! `t2po-envs play`: one episode of an environment in a terminal, on generated data or on the
//! user's files, typed by hand or played by the built-in expert.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use t2po_envs::alfworld::game::{self, Split};
use t2po_envs::alfworld::AlfworldEnv;
use t2po_envs::search_qa::corpus::{read_questions, World};
use t2po_envs::search_qa::corpus_file::CorpusFile;
use t2po_envs::search_qa::retriever::{Bm25Index, RetrievalError};
use t2po_envs::search_qa::{Flavor, SearchQaEnv};
use t2po_envs::webshop::data::DataFiles;
use t2po_envs::webshop::{GoalMode, Shop, WebshopEnv, WebshopSplit};
use t2po_envs::{run_episode, Env, EnvError, Expert, Observation, WithExpert};

#[derive(Subcommand)]
pub enum PlayCommand {
    /// WebShop: a generated catalog, or the original's items files.
    Webshop(WebshopArgs),
    /// ALFWorld: a generated game, or a folder of game folders (ALFWorld's json_2.1.1 layout).
    Alfworld(AlfworldArgs),
    /// Search QA: a generated wiki-shaped world, or your questions with your index or corpus.
    Search(SearchArgs),
}

#[derive(Args)]
pub struct Common {
    /// The task to play (0-based; an error past the last one).
    #[arg(long, default_value_t = 0)]
    task: usize,
    /// Seed of the generated data, the goal order and the expert's wording.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Let the built-in expert play (its full responses are printed).
    #[arg(long)]
    expert: bool,
    /// Print the full verl-agent prompt before each step.
    #[arg(long)]
    prompt: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum Goals {
    Synthetic,
    Human,
}

#[derive(Clone, Copy, ValueEnum)]
enum ShopSplit {
    Test,
    Train,
    All,
}

#[derive(Args)]
pub struct WebshopArgs {
    #[command(flatten)]
    common: Common,
    /// `items_shuffle*.json` (with --ins); generated data when absent.
    #[arg(long, requires = "ins")]
    items: Option<PathBuf>,
    /// `items_ins_v2*.json`.
    #[arg(long, requires = "items")]
    ins: Option<PathBuf>,
    /// `items_human_ins.json` (needed for --goals human).
    #[arg(long, requires = "items")]
    human: Option<PathBuf>,
    /// A title-noun sidecar (`{asin: [nouns…]}`).
    #[arg(long, requires = "items")]
    nouns: Option<PathBuf>,
    /// Synthetic goals (verl-agent's default) or human instructions.
    #[arg(long, value_enum, default_value_t = Goals::Synthetic)]
    goals: Goals,
    /// verl-agent's split: test = the first 500 shuffled goals, train = the rest.
    #[arg(long, value_enum, default_value_t = ShopSplit::Test)]
    split: ShopSplit,
    /// Products of the generated catalog.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=200_000))]
    products: u32,
}

#[derive(Clone, Copy, ValueEnum)]
enum GameSplit {
    Train,
    ValidSeen,
    ValidUnseen,
}

#[derive(Args)]
pub struct AlfworldArgs {
    #[command(flatten)]
    common: Common,
    /// A folder searched recursively for game folders (`game.tw-pddl` + `traj_data.json`);
    /// generated games when absent.
    #[arg(long)]
    games: Option<PathBuf>,
    /// The generated split (its floor plans).
    #[arg(long, value_enum, default_value_t = GameSplit::ValidSeen)]
    split: GameSplit,
    /// Games in the generated split [default: ALFWorld's size: 3553 train, 140 valid_seen,
    /// 134 valid_unseen].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    count: Option<u32>,
}

#[derive(Clone, Copy, ValueEnum)]
enum FlavorArg {
    /// verl-agent's observations.
    Verl,
    /// Search-R1's.
    SearchR1,
}

#[derive(Args)]
pub struct SearchArgs {
    #[command(flatten)]
    common: Common,
    /// FlashRAG jsonl questions (`{"id", "question", "golden_answers"}` per line); generated
    /// questions about the generated world when absent (then --index/--corpus must be too).
    #[arg(long)]
    questions: Option<PathBuf>,
    /// An index folder built by `t2po-envs index`.
    #[arg(long, requires = "questions", conflicts_with = "corpus")]
    index: Option<PathBuf>,
    /// A wiki-18 jsonl or jsonl.gz corpus, indexed into a cache folder on first use.
    #[arg(long, requires = "questions")]
    corpus: Option<PathBuf>,
    /// `data_source` for question lines without one.
    #[arg(long, default_value = "nq")]
    source: String,
    /// Passages of the generated world.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u32).range(10..=10_000_000))]
    passages: u32,
    /// Observation format.
    #[arg(long, value_enum, default_value_t = FlavorArg::Verl)]
    flavor: FlavorArg,
    /// Hits per search.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    topk: u32,
}

pub fn play(cmd: PlayCommand) -> Result<()> {
    match cmd {
        PlayCommand::Webshop(a) => webshop(a),
        PlayCommand::Alfworld(a) => alfworld(a),
        PlayCommand::Search(a) => search(a),
    }
}

fn check_task(env: &'static str, index: usize, len: usize) -> Result<(), EnvError> {
    if index < len {
        Ok(())
    } else {
        Err(EnvError::TaskOutOfRange { env, index, len })
    }
}

fn webshop(a: WebshopArgs) -> Result<()> {
    let mode = match a.goals {
        Goals::Synthetic => GoalMode::Synthetic,
        Goals::Human => GoalMode::Human,
    };
    let shop = match (&a.items, &a.ins) {
        (Some(items), Some(ins)) => {
            if matches!(a.goals, Goals::Human) && a.human.is_none() {
                bail!("--goals human needs --human items_human_ins.json");
            }
            let files = DataFiles {
                products: items,
                ins,
                human: a.human.as_deref(),
                nouns: a.nouns.as_deref(),
            };
            eprintln!("loading {} …", items.display());
            Shop::load(&files, mode, a.common.seed)?
        }
        _ => Shop::generated(a.common.seed, a.products as usize, mode, a.common.seed),
    };
    let split = match a.split {
        ShopSplit::Test => WebshopSplit::Test,
        ShopSplit::Train => WebshopSplit::Train,
        ShopSplit::All => WebshopSplit::All,
    };
    let mut env = WebshopEnv::new(shop, split, a.common.seed)?;
    check_task("WebShop", a.common.task, env.num_tasks())?;
    let first = env.reset(a.common.task);
    let mut out = std::io::stdout().lock();
    writeln!(out, "task: {}\nobservation: {}", env.task(), first.text)?;
    drop(out);
    let mut expert = env.expert(a.common.seed);
    drive(&mut env, first, &a.common, 2, |env, obs| {
        expert.respond(env, obs)
    })
}

fn alfworld(a: AlfworldArgs) -> Result<()> {
    let mut env = match &a.games {
        Some(root) => {
            let games = game::load_split(root)
                .with_context(|| format!("load the games under {}", root.display()))?;
            if games.is_empty() {
                bail!(
                    "{}: no game folder (game.tw-pddl with traj_data.json) found",
                    root.display()
                );
            }
            check_task("ALFWorld", a.common.task, games.len())?;
            AlfworldEnv::new(games)?
        }
        None => {
            let split = match a.split {
                GameSplit::Train => Split::Train,
                GameSplit::ValidSeen => Split::ValidSeen,
                GameSplit::ValidUnseen => Split::ValidUnseen,
            };
            let count = a.count.map_or(
                match split {
                    Split::Train => 3553,
                    Split::ValidSeen => 140,
                    Split::ValidUnseen => 134,
                },
                |c| c as usize,
            );
            check_task("ALFWorld", a.common.task, count)?;
            // Games are independent: generate only the one asked for (game i of the split).
            let games = game::generate_split(split, a.common.task + 1, a.common.seed);
            let one = games.into_iter().last().context("a generated game")?;
            AlfworldEnv::new(vec![one])?
        }
    };
    let index = if a.games.is_some() { a.common.task } else { 0 };
    let first = env.reset(index);
    let mut out = std::io::stdout().lock();
    writeln!(out, "[{}] {}\n", env.game().name, first.text)?;
    drop(out);
    let mut expert = env.expert(a.common.seed);
    drive(&mut env, first, &a.common, 2, |env, obs| {
        expert.respond(env, obs)
    })
}

/// The cache folder of play's indexes: `$T2PO_CACHE`, else `$HOME/.cache/t2po`, else the
/// system temp folder.
fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("T2PO_CACHE") {
        return PathBuf::from(d);
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".cache").join("t2po"),
        None => std::env::temp_dir().join("t2po"),
    }
}

/// A cache folder name for a corpus file: its canonical path, size and modification time.
fn corpus_cache_key(corpus: &Path) -> Result<String> {
    use std::hash::{Hash, Hasher};
    let canonical = corpus
        .canonicalize()
        .with_context(|| format!("{}: cannot open", corpus.display()))?;
    let meta = std::fs::metadata(&canonical)
        .with_context(|| format!("{}: cannot read", corpus.display()))?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    canonical.hash(&mut h);
    meta.len().hash(&mut h);
    meta.modified().ok().hash(&mut h);
    Ok(format!("play-corpus-v1-{:016x}", h.finish()))
}

fn search(a: SearchArgs) -> Result<()> {
    let (questions, index) = match (&a.questions, &a.index, &a.corpus) {
        (Some(q), index, corpus) => {
            let questions = read_questions(q, &a.source)?;
            let index = match (index, corpus) {
                (Some(folder), _) => Bm25Index::open(folder)?,
                (None, Some(corpus)) => {
                    let folder = cache_dir().join(corpus_cache_key(corpus)?);
                    Bm25Index::open_or_build_cache(
                        &folder,
                        |b| {
                            eprintln!("indexing {} into {} …", corpus.display(), folder.display());
                            for p in CorpusFile::open(corpus)? {
                                b.add(p?)?;
                            }
                            Ok::<(), anyhow::Error>(())
                        },
                        1,
                        256,
                    )?
                }
                (None, None) => bail!("--questions needs --index FOLDER or --corpus FILE"),
            };
            (questions, index)
        }
        (None, _, _) => {
            let world = World::generate(a.common.seed, a.passages as usize);
            let folder = cache_dir().join(format!(
                "play-search-v1-seed{}-passages{}",
                a.common.seed, a.passages
            ));
            let index = Bm25Index::open_or_build_cache(
                &folder,
                |b| {
                    eprintln!(
                        "indexing {} passages into {} …",
                        world.passages.len(),
                        folder.display()
                    );
                    for p in world.passages.iter().cloned() {
                        b.add(p)?;
                    }
                    Ok::<(), RetrievalError>(())
                },
                1,
                128,
            )?;
            (world.questions(a.common.seed, 10), index)
        }
    };
    check_task("Search QA", a.common.task, questions.len())?;
    let mut env = SearchQaEnv::new(questions, Arc::new(index))?;
    env.flavor = match a.flavor {
        FlavorArg::Verl => Flavor::VerlAgent,
        FlavorArg::SearchR1 => Flavor::SearchR1,
    };
    env.topk = a.topk as usize;
    let first = env.reset(a.common.task);
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "[{}] question: {}",
        env.question().data_source,
        first.text
    )?;
    drop(out);
    let mut expert = env.expert(a.common.seed);
    drive(&mut env, first, &a.common, 4, |env, obs| {
        expert.respond(env, obs)
    })
}

/// Plays one episode through [`run_episode`]: a person types responses (or bare commands), or
/// `expert` answers; prints each observation and, with `--prompt`, the full prompt before it.
/// A write error (a closed stdout) or the end of input ends the episode early; the write error
/// is returned.
fn drive<E: Env>(
    env: &mut E,
    first: Observation,
    args: &Common,
    history_length: usize,
    mut expert: impl FnMut(&E, &Observation) -> String,
) -> Result<()> {
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut out = std::io::stdout();
    let mut turn = 0;
    let mut failure: Option<std::io::Error> = None;
    let episode = run_episode(env, first, None, |env, obs, history| {
        if failure.is_some() {
            // Nothing more can be shown or read: an empty response plays out the episode.
            return String::new();
        }
        let mut step = || -> std::io::Result<String> {
            if turn > 0 {
                writeln!(out, "observation: {}\n", obs.text)?;
            }
            turn += 1;
            if args.prompt {
                writeln!(
                    out,
                    "----- prompt -----{}------------------",
                    env.prompt(history, history_length)
                )?;
            } else if !obs.admissible.is_empty() {
                writeln!(out, "admissible: {}", obs.admissible.join(" | "))?;
            }
            let response = if args.expert {
                let r = expert(env, obs);
                writeln!(out, "> {r}")?;
                r
            } else {
                write!(out, "> ")?;
                out.flush()?;
                let line = lines
                    .next()
                    .unwrap_or_else(|| Err(std::io::ErrorKind::UnexpectedEof.into()))?;
                // A full response goes through the projection as typed; a bare command is
                // wrapped so that it projects as that command.
                if line.contains("</") {
                    line
                } else {
                    format!(
                        "<think>typed by hand</think><action>{}</action>",
                        line.trim()
                    )
                }
            };
            let action = env.project(&response);
            writeln!(
                out,
                "action {:?} ({})",
                action.action,
                if action.valid { "valid" } else { "invalid" }
            )?;
            Ok(response)
        };
        match step() {
            Ok(r) => r,
            Err(e) => {
                failure = Some(e);
                String::new()
            }
        }
    });
    if let Some(e) = failure {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            return Ok(());
        }
        return Err(e.into());
    }
    writeln!(out, "observation: {}\n", episode.last_observation.text)?;
    writeln!(
        out,
        "done after {} step(s): task score {} (won: {}, reward {}); source {}",
        episode.turns(),
        episode.score,
        episode.won,
        episode.total_reward,
        episode.source
    )?;
    out.flush()?;
    Ok(())
}
