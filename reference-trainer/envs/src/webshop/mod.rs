//! WebShop (spec §1): the exact reward, the text pages and clickables, BM25 search with the
//! original's analyzer and parameters (and its lowercasing: Python's, then Lucene's), a generated
//! catalog whose title nouns are spaCy's ([`title_nouns`]) and the real-data loaders, the expert,
//! and verl-agent's wrapper (observation formatting, available actions, projection, prompts,
//! 15 steps, RL reward 10 when the purchase scores exactly 1.0).

pub mod data;
pub mod expert;
pub mod generate;
pub mod goal;
pub mod porter;
pub mod python_text;
mod python_unicode_table;
pub mod reward;
pub mod search;
pub mod site;
pub mod title_nouns;

use crate::error::{EnvError, LoadError};
use crate::rng::Rng;
use crate::{Env, HistoryEntry, Info, Observation, Projected, Splits, Transition, WithExpert};
use data::{reward_price, transform, DataFiles, Product};
use expert::{Demonstrator, WebshopExpert};
use goal::Goal;
use search::Bm25;
use site::{Catalog, Page, Session};
use std::sync::Arc;

/// Which goals an environment uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GoalMode {
    /// Synthetic goals from items_ins_v2 (verl-agent's default).
    Synthetic,
    /// Human instructions.
    Human,
}

/// Which verl-agent split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WebshopSplit {
    /// Goals 0..500 of the shuffled list.
    Test,
    /// Goals 500.. of the shuffled list.
    Train,
    /// Every goal.
    All,
}

/// A catalog and its goals, built from generated data or real files. Read-only once built:
/// environments share one behind an `Arc`.
pub struct Shop {
    /// Products, prices, index.
    pub catalog: Catalog,
    /// Goals in their shuffled order.
    pub goals: Vec<Goal>,
}

impl Shop {
    fn from_products(products: Vec<Product>, mode: GoalMode, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let prices: Vec<f64> = products.iter().map(|p| reward_price(p, &mut rng)).collect();
        let mut goals = match mode {
            GoalMode::Synthetic => goal::synthetic_goals(&products, &prices, &mut rng),
            GoalMode::Human => goal::human_goals(&products, &prices, &mut rng),
        };
        goal::shuffle(&mut goals, &mut rng);
        let index = Bm25::build(&products);
        Self {
            catalog: Catalog {
                products,
                prices,
                index,
            },
            goals,
        }
    }

    /// A generated shop of `n` products (data seed `data_seed`, goal/price seed `seed`).
    pub fn generated(data_seed: u64, n: usize, mode: GoalMode, seed: u64) -> Self {
        let products = generate::generate_catalog(data_seed, n)
            .into_iter()
            .filter_map(|g| transform(&g.raw, Some(&g.ins), g.human, Some(g.nouns)))
            .collect();
        Self::from_products(products, mode, seed)
    }

    /// A shop from the real files.
    pub fn load(files: &DataFiles, mode: GoalMode, seed: u64) -> Result<Self, LoadError> {
        Ok(Self::from_products(data::load_products(files)?, mode, seed))
    }

    /// The goal indices of a split.
    pub fn split(&self, split: WebshopSplit) -> Vec<usize> {
        let n = self.goals.len();
        match split {
            WebshopSplit::Test => (0..n.min(500)).collect(),
            WebshopSplit::Train => (n.min(500)..n).collect(),
            WebshopSplit::All => (0..n).collect(),
        }
    }
}

/// verl-agent's observation: the `[SEP]` parts after the instruction text, each in single quotes;
/// the raw text when the instruction is not there (the done page).
pub fn format_observation(obs: &str, task: &str) -> String {
    let parts: Vec<&str> = obs.split(" [SEP] ").collect();
    match parts.iter().position(|p| *p == task) {
        Some(i) => parts[i + 1..]
            .iter()
            .map(|p| format!("'{p}'"))
            .collect::<Vec<_>>()
            .join(" [SEP] "),
        None => obs.to_string(),
    }
}

/// verl-agent's available actions: `search[<your query>]` with a search bar, then
/// `click[<c>]` for every clickable.
pub fn available_actions(has_search_bar: bool, clickables: &[String]) -> Vec<String> {
    let mut v = Vec::new();
    if has_search_bar {
        v.push("search[<your query>]".to_string());
    }
    v.extend(clickables.iter().map(|c| format!("click[{c}]")));
    v
}

const OPEN: &str =
    "\nYou are an expert autonomous agent operating in the WebShop e\u{2011}commerce environment.";
const CLOSE: &str = "\n\nNow it's your turn to take one action for the current step.\nYou should first reason step-by-step about the current situation, then think carefully which admissible action best advances the shopping goal. This reasoning process MUST be enclosed within <think> </think> tags. \nOnce you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.\n";

/// verl-agent's WebShop prompt; with history over 13,000 characters the no-history template is
/// used for that step.
pub fn prompt(
    task: &str,
    observation: &str,
    actions: &[String],
    history: &[HistoryEntry],
    history_length: usize,
) -> String {
    let block = format!(
        "[\n{}\n]",
        actions
            .iter()
            .map(|a| format!("'{a}',"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let plain = format!(
        "{OPEN} \nYour task is to: {task}.\nYour current observation is: {observation}.\nYour admissible actions of the current situation are: \n{block}.{CLOSE}"
    );
    if history.is_empty() || history_length == 0 {
        return plain;
    }
    let start = history.len().saturating_sub(history_length);
    let lines: Vec<String> = history[start..]
        .iter()
        .enumerate()
        .map(|(k, h)| {
            format!(
                "[Observation {n}: '{}', Action {n}: '{}']",
                h.observation,
                h.action,
                n = start + k + 1
            )
        })
        .collect();
    let with = format!(
        "{OPEN}\nYour task is to: {task}.\nPrior to this step, you have already taken {} step(s). Below are the most recent {} observations and the corresponding actions you took: {}\nYou are now at step {} and your current observation is: {observation}.\nYour admissible actions of the current situation are: \n{block}.{CLOSE}",
        history.len(),
        lines.len(),
        lines.join("\n"),
        history.len() + 1
    );
    if with.chars().count() > 13_000 {
        plain
    } else {
        with
    }
}

/// verl-agent's WebShop projection: lowercase, the first `<action>…</action>`; without tags the
/// last 20 characters, invalid; invalid too without `<think>…</think>` or with CJK.
pub fn project(response: &str) -> Projected {
    let lower = response.to_lowercase();
    let (action, mut valid) = match (lower.find("<action>"), lower.find("</action>")) {
        (Some(s), Some(e)) if s + 8 <= e => (lower[s + 8..e].trim().to_string(), true),
        _ => {
            let chars: Vec<char> = lower.chars().collect();
            (
                chars[chars.len().saturating_sub(20)..].iter().collect(),
                false,
            )
        }
    };
    if !(lower.contains("<think>") && lower.contains("</think>"))
        || lower
            .chars()
            .any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c))
    {
        valid = false;
    }
    Projected { action, valid }
}

/// The WebShop environment (verl-agent wrapper semantics). Cloning one is cheap (the shop and
/// the task list are shared) and gives an independent session.
#[derive(Clone)]
pub struct WebshopEnv {
    shop: Arc<Shop>,
    tasks: Arc<[usize]>,
    current: usize,
    session: Session,
    steps: usize,
    /// Steps per episode (15).
    pub max_steps: usize,
    done: bool,
    raw_observation: String,
    seed: u64,
    demonstrator: Demonstrator,
}

impl WebshopEnv {
    /// An environment over the goals of `split` (non-empty) of a shared shop (`Shop` or
    /// `Arc<Shop>`; many environments can share one).
    pub fn new(
        shop: impl Into<Arc<Shop>>,
        split: WebshopSplit,
        seed: u64,
    ) -> Result<Self, EnvError> {
        let shop = shop.into();
        let tasks: Arc<[usize]> = shop.split(split).into();
        if tasks.is_empty() {
            return Err(EnvError::NoTasks {
                env: "WebShop",
                what: format!(
                    "the {split:?} split ({} goals in the shop)",
                    shop.goals.len()
                ),
            });
        }
        Ok(Self {
            shop,
            tasks,
            current: 0,
            session: Session::new(seed),
            steps: 0,
            max_steps: 15,
            done: false,
            raw_observation: String::new(),
            seed,
            demonstrator: Demonstrator::Privileged,
        })
    }

    /// Which demonstrator [`WithExpert::expert`] builds (privileged unless set).
    pub fn set_demonstrator(&mut self, kind: Demonstrator) {
        self.demonstrator = kind;
    }

    /// The demonstrator [`WithExpert::expert`] builds.
    pub fn demonstrator(&self) -> Demonstrator {
        self.demonstrator
    }

    /// Train and held-out environments over one generated shop of `products` products
    /// (synthetic goals, verl-agent's default; catalog, prices and goal order from `seed`).
    /// Held out is verl-agent's test split, goals 0..500 of the shuffled list; train is the
    /// rest, so the shop needs more than 500 goals (about 100 products give that).
    pub fn generated_splits(products: usize, seed: u64) -> Result<Splits<Self>, EnvError> {
        let shop = Arc::new(Shop::generated(seed, products, GoalMode::Synthetic, seed));
        Ok(Splits {
            train: Self::new(shop.clone(), WebshopSplit::Train, seed)?,
            // Sessions of the held-out environment draw their `<r>` keywords from another seed.
            held_out: Self::new(shop, WebshopSplit::Test, seed.wrapping_add(1000))?,
        })
    }

    /// The current goal.
    pub fn goal(&self) -> &Goal {
        &self.shop.goals[self.tasks[self.current]]
    }

    /// The shop.
    pub fn shop(&self) -> &Shop {
        &self.shop
    }

    /// The shared shop, to build more environments over it.
    pub fn shared_shop(&self) -> &Arc<Shop> {
        &self.shop
    }

    /// The session state.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The raw `text` observation (before verl-agent's formatting).
    pub fn raw_observation(&self) -> &str {
        &self.raw_observation
    }

    /// The available actions now.
    pub fn actions(&self) -> Vec<String> {
        available_actions(
            self.session.page == Page::Search,
            &self.session.clickables(&self.shop.catalog),
        )
    }

    fn observation(&self) -> Observation {
        Observation {
            text: format_observation(&self.raw_observation, &self.goal().instruction_text),
            admissible: self.actions(),
        }
    }
}

impl Env for WebshopEnv {
    fn num_tasks(&self) -> usize {
        self.tasks.len()
    }

    fn reset(&mut self, index: usize) -> Observation {
        self.current = index % self.tasks.len();
        self.session = Session::new(self.seed ^ index as u64);
        self.steps = 0;
        self.done = false;
        self.raw_observation = self.session.observation(
            &self.shop.catalog,
            &self.shop.goals[self.tasks[self.current]],
        );
        self.observation()
    }

    fn task(&self) -> &str {
        &self.goal().instruction_text
    }

    fn anchor(&self) -> &str {
        &self.raw_observation
    }

    fn project(&self, response: &str) -> Projected {
        project(response)
    }

    fn step(&mut self, action: &Projected) -> Transition {
        if self.done {
            return Transition::after_end(self.goal().reward.query.clone());
        }
        self.steps += 1;
        let goal = &self.shop.goals[self.tasks[self.current]];
        self.session.act(&self.shop.catalog, goal, &action.action);
        self.raw_observation = self.session.observation(&self.shop.catalog, goal);
        let score = self.session.bought.as_ref().map(|b| b.reward);
        let parts = self
            .session
            .bought
            .as_ref()
            .map_or_else(Vec::new, |b| reward::parts(b, &goal.reward));
        self.done = score.is_some() || self.steps >= self.max_steps;
        let won = score == Some(1.0);
        Transition {
            observation: self.observation(),
            reward: if won { 10.0 } else { 0.0 },
            done: self.done,
            info: Info {
                won,
                score: score.unwrap_or(0.0),
                source: self.shop.catalog.products[goal.product].category.clone(),
                parts,
            },
        }
    }

    fn prompt(&self, history: &[HistoryEntry], history_length: usize) -> String {
        prompt(
            self.task(),
            &format_observation(&self.raw_observation, self.task()),
            &self.actions(),
            history,
            history_length,
        )
    }

    fn max_turns(&self) -> usize {
        self.max_steps
    }

    fn name(&self) -> &'static str {
        "webshop"
    }
}

impl WithExpert for WebshopEnv {
    type Expert = WebshopExpert;

    fn expert(&self, seed: u64) -> WebshopExpert {
        WebshopExpert::of_kind(self.demonstrator, seed)
    }
}
