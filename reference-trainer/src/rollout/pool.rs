//! The environments a rollout runs on: one prototype per split over shared data (a shop, a set
//! of games, a corpus index behind `Arc`), cloned into as many instances as a batch needs.
//! Train tasks and held-out tasks come from different splits (see each environment's
//! `generated_splits`); the held-out ones are for evaluation only.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use t2po_envs::alfworld::game::Split as AlfSplit;
use t2po_envs::alfworld::AlfworldEnv;
use t2po_envs::search_qa::corpus::World;
use t2po_envs::search_qa::retriever::{Bm25Index, RetrievalError};
use t2po_envs::search_qa::SearchQaEnv;
use t2po_envs::webshop::expert::Demonstrator;
use t2po_envs::webshop::WebshopEnv;
use t2po_envs::{run_expert_episode, Env, Episode, Label, Splits};

use crate::error::{Error, Result};

/// The three environments.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum EnvKind {
    /// WebShop (15 turns).
    Webshop,
    /// ALFWorld in text (50 turns).
    Alfworld,
    /// Search QA (4 turns).
    Search,
}

impl EnvKind {
    /// Every environment.
    pub const ALL: [EnvKind; 3] = [EnvKind::Webshop, EnvKind::Alfworld, EnvKind::Search];

    /// The name used on the command line and in records.
    pub fn as_str(self) -> &'static str {
        match self {
            EnvKind::Webshop => "webshop",
            EnvKind::Alfworld => "alfworld",
            EnvKind::Search => "search",
        }
    }

    /// The response tags of the strict format (spec §5).
    pub fn response_tags(self) -> &'static [&'static str] {
        match self {
            EnvKind::Search => &["search", "answer"],
            _ => &["action"],
        }
    }

    /// The memory window `P` (spec §5: 2, 2, 4).
    pub fn history_length(self) -> usize {
        match self {
            EnvKind::Search => 4,
            _ => 2,
        }
    }
}

impl std::str::FromStr for EnvKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "webshop" => Ok(EnvKind::Webshop),
            "alfworld" => Ok(EnvKind::Alfworld),
            "search" | "search_qa" => Ok(EnvKind::Search),
            other => Err(Error::invalid(
                "env",
                format!("{other:?} is not an environment (webshop, alfworld, search)"),
            )),
        }
    }
}

/// How much generated data a pool builds: the `[data]` section of a training config (each
/// environment reads its own keys; the others are checked and ignored, so one shape serves the
/// three).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSize {
    /// WebShop: products in the catalog (held out = the verl-agent test goals).
    pub products: usize,
    /// ALFWorld: training games.
    pub train_games: usize,
    /// ALFWorld: held-out (valid_unseen) games.
    pub held_out_games: usize,
    /// Search QA: passages in the corpus.
    pub passages: usize,
    /// Search QA: training questions per training source (nq, hotpotqa).
    pub train_questions: usize,
    /// Search QA: held-out questions per source (all seven).
    pub held_out_questions: usize,
}

/// Which tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    /// Training tasks.
    Train,
    /// Held-out tasks (never trained on).
    Test,
}

enum Proto {
    Webshop(Splits<WebshopEnv>),
    Alfworld(Splits<AlfworldEnv>),
    Search(Splits<SearchQaEnv>),
}

/// Prototype environments of one kind over shared data.
pub struct EnvPool {
    kind: EnvKind,
    proto: Proto,
    history_length: usize,
}

impl std::fmt::Debug for EnvPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvPool")
            .field("kind", &self.kind)
            .field("train_tasks", &self.num_tasks(Split::Train))
            .field("test_tasks", &self.num_tasks(Split::Test))
            .finish()
    }
}

fn env_err(kind: EnvKind, e: impl std::fmt::Display) -> Error {
    Error::invalid(format!("{} environment", kind.as_str()), e.to_string())
}

/// The folder generated Search QA indexes are cached in: `$T2PO_CACHE`, else
/// `$HOME/.cache/t2po`, else the system temp folder.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("T2PO_CACHE") {
        return PathBuf::from(d);
    }
    match std::env::var_os("HOME") {
        Some(h) => Path::new(&h).join(".cache").join("t2po"),
        None => std::env::temp_dir().join("t2po"),
    }
}

/// The passages of a generated encyclopedia (the Search QA corpus generator's world for
/// `seed`: countries, cities, companies and people, one passage each, `"Title"\ntext`), as
/// plain text. With the environment's own seed it is that environment's retrieval corpus; with
/// another seed, a world none of the environments' tasks is about.
pub fn encyclopedia(seed: u64, passages: usize) -> Vec<String> {
    World::generate(seed, passages)
        .passages
        .into_iter()
        .map(|p| p.contents)
        .collect()
}

impl EnvPool {
    /// A pool over generated data (deterministic in `seed`).
    pub fn generated(kind: EnvKind, seed: u64, size: PoolSize) -> Result<Self> {
        let proto = match kind {
            EnvKind::Webshop => Proto::Webshop(
                WebshopEnv::generated_splits(size.products, seed).map_err(|e| env_err(kind, e))?,
            ),
            EnvKind::Alfworld => Proto::Alfworld(
                AlfworldEnv::generated_splits(
                    size.train_games,
                    size.held_out_games,
                    AlfSplit::ValidUnseen,
                    seed,
                )
                .map_err(|e| env_err(kind, format!("{e:#}")))?,
            ),
            EnvKind::Search => {
                let world = World::generate(seed, size.passages);
                let folder = cache_dir().join(format!(
                    "search-index-v2-seed{seed}-passages{}",
                    size.passages
                ));
                // A cache this crate owns: validated on open (checksums, passage count), rebuilt
                // when missing, incomplete or damaged; concurrent builders (two runs at once)
                // each build into a temporary folder and share the first finished index.
                let index = Bm25Index::open_or_build_cache(
                    &folder,
                    |b| {
                        for p in world.passages.iter().cloned() {
                            b.add(p)?;
                        }
                        Ok::<(), RetrievalError>(())
                    },
                    1,
                    64,
                )
                .map_err(|e| env_err(kind, format!("{}: {e}", folder.display())))?;
                Proto::Search(
                    SearchQaEnv::generated_splits(
                        &world,
                        Arc::new(index),
                        size.train_questions,
                        size.held_out_questions,
                        seed,
                    )
                    .map_err(|e| env_err(kind, format!("{e:#}")))?,
                )
            }
        };
        Ok(Self {
            kind,
            proto,
            history_length: kind.history_length(),
        })
    }

    /// Sets who writes [`Self::expert_episode`]'s demonstrations on WebShop (privileged unless
    /// set). The other environments have one expert: asking them for the shopper is an error.
    pub fn set_webshop_demonstrator(&mut self, kind: Demonstrator) -> Result<()> {
        match &mut self.proto {
            Proto::Webshop(s) => {
                s.train.set_demonstrator(kind);
                s.held_out.set_demonstrator(kind);
                Ok(())
            }
            _ if kind == Demonstrator::Privileged => Ok(()),
            _ => Err(Error::invalid(
                "rft.expert",
                format!(
                    "{kind:?} is WebShop's demonstrator; the {} environment has only its own",
                    self.kind.as_str()
                ),
            )),
        }
    }

    /// The environment kind.
    pub fn kind(&self) -> EnvKind {
        self.kind
    }

    /// Tasks in a split.
    pub fn num_tasks(&self, split: Split) -> usize {
        fn n<E: Env>(s: &Splits<E>, split: Split) -> usize {
            match split {
                Split::Train => s.train.num_tasks(),
                Split::Test => s.held_out.num_tasks(),
            }
        }
        match &self.proto {
            Proto::Webshop(s) => n(s, split),
            Proto::Alfworld(s) => n(s, split),
            Proto::Search(s) => n(s, split),
        }
    }

    /// The source of each task of `split` (Search QA's `data_source`: `nq`, `hotpotqa`, …), in
    /// task order; `None` for the environments whose tasks have none.
    pub fn task_sources(&self, split: Split) -> Option<Vec<String>> {
        match &self.proto {
            Proto::Search(s) => {
                let env = match split {
                    Split::Train => &s.train,
                    Split::Test => &s.held_out,
                };
                Some(
                    env.questions()
                        .iter()
                        .map(|q| q.data_source.clone())
                        .collect(),
                )
            }
            Proto::Webshop(_) | Proto::Alfworld(_) => None,
        }
    }

    /// A fresh environment instance over the split's tasks (sharing the pool's data).
    pub fn make(&self, split: Split) -> Box<dyn Env + Send> {
        fn pick<E: Env + Clone + Send + 'static>(
            s: &Splits<E>,
            split: Split,
        ) -> Box<dyn Env + Send> {
            Box::new(match split {
                Split::Train => s.train.clone(),
                Split::Test => s.held_out.clone(),
            })
        }
        match &self.proto {
            Proto::Webshop(s) => pick(s, split),
            Proto::Alfworld(s) => pick(s, split),
            Proto::Search(s) => pick(s, split),
        }
    }

    /// The environment's turn limit (15 / 50 / 4).
    pub fn max_turns(&self) -> usize {
        self.make(Split::Test).max_turns()
    }

    /// The memory window `P` of [`Self::expert_episode`]'s prompts: the environment's (spec §5:
    /// 2, 2, 4) unless set.
    pub fn history_length(&self) -> usize {
        self.history_length
    }

    /// Sets the memory window of the demonstrations' prompts — a training config's
    /// `rollout.history_length`, so the cold start imitates prompts as its rollouts write them.
    pub fn set_history_length(&mut self, history_length: usize) {
        self.history_length = history_length;
    }

    /// The built-in expert's episode on task `task` of `split`, with every prompt recorded
    /// (memory window `P`): the demonstrations of the cold start.
    pub fn expert_episode(&self, split: Split, task: usize, seed: u64) -> Episode {
        fn go<E: t2po_envs::WithExpert + Clone>(
            s: &Splits<E>,
            split: Split,
            task: usize,
            seed: u64,
            p: usize,
        ) -> Episode {
            let mut env = match split {
                Split::Train => s.train.clone(),
                Split::Test => s.held_out.clone(),
            };
            run_expert_episode(&mut env, task, seed, Some(p))
        }
        let p = self.history_length();
        match &self.proto {
            Proto::Webshop(s) => go(s, split, task, seed, p),
            Proto::Alfworld(s) => go(s, split, task, seed, p),
            Proto::Search(s) => go(s, split, task, seed, p),
        }
    }

    /// The built-in expert's answers at the states a learner's `responses` reached on task
    /// `task` of `split` ([`t2po_envs::expert_labels`], DAgger's labels): one per response,
    /// fewer when the episode ended first.
    pub fn expert_labels(
        &self,
        split: Split,
        task: usize,
        seed: u64,
        responses: &[String],
    ) -> Vec<Label> {
        fn go<E: t2po_envs::WithExpert + Clone>(
            s: &Splits<E>,
            split: Split,
            task: usize,
            seed: u64,
            responses: &[String],
        ) -> Vec<Label> {
            let mut env = match split {
                Split::Train => s.train.clone(),
                Split::Test => s.held_out.clone(),
            };
            t2po_envs::expert_labels(&mut env, task, seed, responses)
        }
        match &self.proto {
            Proto::Webshop(s) => go(s, split, task, seed, responses),
            Proto::Alfworld(s) => go(s, split, task, seed, responses),
            Proto::Search(s) => go(s, split, task, seed, responses),
        }
    }
}
