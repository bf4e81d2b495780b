//! ALFWorld in text mode (TextWorld `AlfredTWEnv`), spec §2: the typed world, exact feedback and
//! admissible commands, a solvable game generator, the real-game loader, the expert, and the
//! verl-agent wrapper (prompt templates, projection, 50 steps, reward 10·won).

pub mod expert;
pub mod game;
pub mod vocab;
pub mod world;

use crate::error::EnvError;
use crate::{Env, HistoryEntry, Info, Observation, Projected, Splits, Transition, WithExpert};
use expert::AlfworldExpert;
use game::{generate_split, Game, Split};
use std::sync::Arc;
use world::World;

const HEAD: &str = "\nYou are an expert agent operating in the ALFRED Embodied Environment.";
const TAIL: &str = "\n\nNow it's your turn to take an action.\nYou should first reason step-by-step about the current situation. This reasoning process MUST be enclosed within <think> </think> tags. \nOnce you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.\n";

/// The admissible block of the prompt: each command in single quotes, joined by `"\n "`, `help`
/// removed (verl-agent).
pub fn admissible_block(admissible: &[String]) -> String {
    admissible
        .iter()
        .filter(|a| a.as_str() != "help")
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join("\n ")
}

/// The verl-agent ALFWorld prompt (no-history template at the first step).
pub fn prompt(
    task: &str,
    observation: &str,
    admissible: &[String],
    history: &[HistoryEntry],
    history_length: usize,
) -> String {
    let block = admissible_block(admissible);
    if history.is_empty() || history_length == 0 {
        return format!(
            "{HEAD}\nYour current observation is: {observation}\nYour admissible actions of the current situation are: [{block}].{TAIL}"
        );
    }
    let start = history.len().saturating_sub(history_length);
    let lines: Vec<String> = history[start..]
        .iter()
        .enumerate()
        .map(|(k, h)| {
            let n = start + k + 1;
            format!(
                "[Observation {n}: '{}', Action {n}: '{}']",
                h.observation, h.action
            )
        })
        .collect();
    format!(
        "{HEAD} Your task is to: {task}\nPrior to this step, you have already taken {} step(s). Below are the most recent {} observations and the corresponding actions you took: {}\nYou are now at step {} and your current observation is: {observation}\nYour admissible actions of the current situation are: [{block}].{TAIL}",
        history.len(),
        lines.len(),
        lines.join("\n"),
        history.len() + 1
    )
}

fn has_cjk(s: &str) -> bool {
    s.chars().any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c))
}

/// verl-agent's ALFWorld projection: lowercase the response, take the text between `<action>`
/// and `</action>`; without the tags send the last 30 characters, invalid. Also invalid without
/// `<think>…</think>` or with CJK characters.
pub fn project(response: &str) -> Projected {
    let lower = response.to_lowercase();
    let (start, end) = (lower.find("<action>"), lower.find("</action>"));
    let (action, mut valid) = match (start, end) {
        (Some(s), Some(e)) if s + "<action>".len() <= e => {
            (lower[s + "<action>".len()..e].trim().to_string(), true)
        }
        _ => {
            let chars: Vec<char> = lower.chars().collect();
            (
                chars[chars.len().saturating_sub(30)..].iter().collect(),
                false,
            )
        }
    };
    if !(lower.contains("<think>") && lower.contains("</think>")) || has_cjk(&lower) {
        valid = false;
    }
    Projected { action, valid }
}

/// The ALFWorld environment over a list of games. Cloning one is cheap (the games are shared)
/// and gives an independent world.
#[derive(Clone)]
pub struct AlfworldEnv {
    games: Arc<[Game]>,
    world: World,
    current: usize,
    steps: usize,
    /// Steps per episode (50).
    pub max_steps: usize,
    done: bool,
    observation: String,
}

impl AlfworldEnv {
    /// An environment over `games` (non-empty; a `Vec<Game>` or an `Arc<[Game]>` shared with
    /// other environments).
    pub fn new(games: impl Into<Arc<[Game]>>) -> Result<Self, EnvError> {
        let games = games.into();
        if games.is_empty() {
            return Err(EnvError::NoTasks {
                env: "ALFWorld",
                what: "the game list".into(),
            });
        }
        let world = games[0].world.clone();
        Ok(Self {
            games,
            world,
            current: 0,
            steps: 0,
            max_steps: 50,
            done: false,
            observation: String::new(),
        })
    }

    /// Train and held-out environments over generated games: `train` games of the train split
    /// and `held_out` games of `held_out_split` (verl-agent evaluates on
    /// [`Split::ValidSeen`], the in-distribution floor plans; [`Split::ValidUnseen`] uses the
    /// held-out floor plans), all from `seed`. The held-out games use the seed `!seed`: train
    /// and valid_seen share floor plans, so one seed would make game `i` of both the same game.
    pub fn generated_splits(
        train: usize,
        held_out: usize,
        held_out_split: Split,
        seed: u64,
    ) -> Result<Splits<Self>, EnvError> {
        if held_out_split == Split::Train {
            return Err(EnvError::Invalid {
                env: "ALFWorld",
                reason: "the held-out split must be valid_seen or valid_unseen".into(),
            });
        }
        Ok(Splits {
            train: Self::new(generate_split(Split::Train, train, seed))?,
            held_out: Self::new(generate_split(held_out_split, held_out, !seed))?,
        })
    }

    /// The shared games, to build more environments over them.
    pub fn games(&self) -> &Arc<[Game]> {
        &self.games
    }

    /// The current world state.
    pub fn world(&self) -> &World {
        &self.world
    }

    /// The current game.
    pub fn game(&self) -> &Game {
        &self.games[self.current]
    }

    /// Steps taken in this episode.
    pub fn steps(&self) -> usize {
        self.steps
    }
}

impl Env for AlfworldEnv {
    fn num_tasks(&self) -> usize {
        self.games.len()
    }

    fn reset(&mut self, index: usize) -> Observation {
        self.current = index % self.games.len();
        self.world = self.games[self.current].world.clone();
        self.steps = 0;
        self.done = false;
        self.observation = self.world.intro();
        Observation {
            text: self.observation.clone(),
            admissible: self.world.admissible(),
        }
    }

    fn task(&self) -> &str {
        &self.world.task.goal
    }

    fn anchor(&self) -> &str {
        &self.observation
    }

    fn project(&self, response: &str) -> Projected {
        project(response)
    }

    fn step(&mut self, action: &Projected) -> Transition {
        let source = self.world.task.kind.as_str().to_string();
        if self.done {
            return Transition::after_end(source);
        }
        self.steps += 1;
        self.observation = self.world.execute(&action.action);
        let won = self.world.won();
        self.done = won || self.steps >= self.max_steps;
        Transition {
            observation: Observation {
                text: self.observation.clone(),
                admissible: self.world.admissible(),
            },
            reward: if won { 10.0 } else { 0.0 },
            done: self.done,
            info: Info {
                won,
                score: if won { 1.0 } else { 0.0 },
                source,
                parts: Vec::new(),
            },
        }
    }

    fn prompt(&self, history: &[HistoryEntry], history_length: usize) -> String {
        prompt(
            self.task(),
            &self.observation,
            &self.world.admissible(),
            history,
            history_length,
        )
    }

    fn max_turns(&self) -> usize {
        self.max_steps
    }

    fn name(&self) -> &'static str {
        "alfworld"
    }
}

impl WithExpert for AlfworldEnv {
    type Expert = AlfworldExpert;

    /// Reads the receptacles from the current observation, so call it right after `reset`.
    fn expert(&self, seed: u64) -> AlfworldExpert {
        AlfworldExpert::new(&self.world.task, &self.observation, seed)
    }
}
