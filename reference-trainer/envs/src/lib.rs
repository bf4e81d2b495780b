//! # t2po-envs
//!
//! The agent environments T²PO trains on, re-implemented so that a reward or a success an agent
//! earns here means what it means in the original benchmark (`shared/spec/ENVIRONMENTS.md`).
//! Each environment is one folder holding its data generator, its loader for the real files, its
//! text rendering, its reward, its action projection and its expert.
//!
//! Implemented: [`webshop`] (WebShop, verl-agent wrapper), [`alfworld`] (ALFWorld in text
//! mode) and [`search_qa`] (Search-R1 / verl-agent search), all behind the one [`Env`] trait.
//!
//! The contract every environment keeps: deterministic given its task; [`Env::project`] turns a
//! raw model response into an action with validity flags (never panics, never rejects input);
//! [`Env::step`] takes any projected action — invalid ones get the original's feedback and use a
//! step; [`Env::prompt`] renders the verl-agent prompt with a memory window of the last `P` steps.
//!
//! For batched rollouts: every environment is `Send + Clone` and keeps its read-only data (the
//! WebShop catalog and search index, the ALFWorld games, the Search QA questions and retriever)
//! behind an `Arc`, so N instances of one task set cost one copy of the data; cloning an
//! environment is how more instances are made. Each environment type has a `generated_splits`
//! constructor returning a [`Splits`] (train and held-out task sets from generated data).
//!
//! Every environment also has a built-in privileged [`Expert`] ([`WithExpert::expert`]) whose
//! responses are full policy responses (`<think>…</think>\n<action>…</action>`, or Search QA's
//! `<search>`/`<answer>`), usable as cold-start demonstrations; [`run_episode`] is the one
//! respond → project → step loop for experts, tests, benchmarks and simple evaluation.

pub mod alfworld;
pub mod error;
pub mod rng;
pub mod search_qa;
pub mod webshop;

pub use error::{EnvError, LoadError, ParseError};

/// What the environment shows after `reset` or a step.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// The observation text.
    pub text: String,
    /// Admissible actions (empty where the environment has none, like Search QA).
    pub admissible: Vec<String>,
}

/// A model response projected to an environment action (spec: T2PO-RULES §5 and each env's
/// projection rules).
#[derive(Clone, Debug, PartialEq)]
pub struct Projected {
    /// The action text sent to the environment.
    pub action: String,
    /// Whether the response had the required format (invalid ones get the format penalty).
    pub valid: bool,
}

/// The outcome of one step.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    /// The next observation.
    pub observation: Observation,
    /// The step's reward, as the original environment defines it.
    pub reward: f64,
    /// Whether the episode ended.
    pub done: bool,
    /// Success flags and metrics.
    pub info: Info,
}

impl Transition {
    /// What a step after the episode ended returns: nothing happens, no reward, still done.
    pub fn after_end(source: String) -> Self {
        Self {
            observation: Observation {
                text: String::new(),
                admissible: Vec::new(),
            },
            reward: 0.0,
            done: true,
            info: Info {
                source,
                ..Info::default()
            },
        }
    }
}

/// Per-step information.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Info {
    /// Whether the task is solved (success rate numerator).
    pub won: bool,
    /// The task score of the original benchmark (EM for Search QA).
    pub score: f64,
    /// Where the task came from (e.g. the dataset a question belongs to), for per-source metrics.
    pub source: String,
    /// The parts of the task score, by name, on the step that scored (WebShop's purchase: its
    /// original verbose reward info, the paper's Table 8 decomposition); empty elsewhere.
    pub parts: Vec<(&'static str, f64)>,
}

/// One past step, for the memory window of the prompt.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryEntry {
    /// The observation the environment's memory pairs with the action (see
    /// [`Env::history_entry`]): the one before it for WebShop and ALFWorld, the search results
    /// it returned for Search QA.
    pub observation: String,
    /// The projected action taken.
    pub action: String,
}

/// An agent environment.
///
/// `max_turns`, `name` and `history_entry` (with a default) were added for the batched
/// rollout; the other methods keep their original meaning.
pub trait Env {
    /// Number of tasks this environment can reset to.
    fn num_tasks(&self) -> usize;
    /// Starts task `index % num_tasks()`; returns the first observation.
    fn reset(&mut self, index: usize) -> Observation;
    /// The task text (the question, the instruction, the goal).
    fn task(&self) -> &str;
    /// The observation GiGPO groups step advantages by (the current state's text).
    fn anchor(&self) -> &str;
    /// Projects a raw model response to an action.
    fn project(&self, response: &str) -> Projected;
    /// Applies a projected action.
    fn step(&mut self, action: &Projected) -> Transition;
    /// The verl-agent prompt for the current step, given all previous steps of the episode
    /// (the memory window keeps the last `history_length` of them).
    fn prompt(&self, history: &[HistoryEntry], history_length: usize) -> String;
    /// Steps an episode may take: the episode is done after this many at the latest
    /// (T2PO-RULES §5: WebShop 15, ALFWorld 50, Search QA 4).
    fn max_turns(&self) -> usize;
    /// The environment's short name (`"webshop"`, `"alfworld"`, `"search_qa"`), for logs and
    /// per-environment metrics.
    fn name(&self) -> &'static str;
    /// The memory entry [`Env::prompt`] expects for a step that went from `before` through
    /// `action` to `after`. The default pairs the action with the observation before it
    /// (verl-agent's `SimpleMemory`, WebShop and ALFWorld); Search QA pairs it with the
    /// results it returned (verl-agent's `SearchMemory` stores `{search, information}`).
    fn history_entry(
        &self,
        before: &Observation,
        action: &Projected,
        after: &Observation,
    ) -> HistoryEntry {
        let _ = after;
        HistoryEntry {
            observation: before.text.clone(),
            action: action.action.clone(),
        }
    }
}

/// The train and held-out task sets of one environment, as two environments over the same
/// shared data (clone either for more instances).
#[derive(Clone, Debug)]
pub struct Splits<E> {
    /// The training tasks.
    pub train: E,
    /// The held-out tasks (evaluation only); each environment's `generated_splits` says which
    /// split of the original this is.
    pub held_out: E,
}

/// A scripted policy for the task an environment was last reset to.
pub trait Expert<E: ?Sized> {
    /// The full model response for the current step, given the environment and the observation
    /// it last returned (from `reset` or `step`).
    fn respond(&mut self, env: &E, observation: &Observation) -> String;
}

/// An environment with a built-in expert.
pub trait WithExpert: Env + Sized {
    /// The expert's type.
    type Expert: Expert<Self>;
    /// An expert for the current task: call it right after [`Env::reset`]. `seed` chooses among
    /// the expert's rationale templates (the actions do not depend on it).
    fn expert(&self, seed: u64) -> Self::Expert;
}

/// One step of an episode.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The observation the response answered.
    pub observation: Observation,
    /// The prompt the policy saw, when [`run_episode`] was asked to record prompts.
    pub prompt: Option<String>,
    /// The raw response.
    pub response: String,
    /// The response after [`Env::project`].
    pub action: Projected,
    /// The step's reward.
    pub reward: f64,
    /// Success flags and metrics of the step.
    pub info: Info,
}

/// One finished (or turn-limited) episode.
#[derive(Clone, Debug, PartialEq)]
pub struct Episode {
    /// Every step, in order.
    pub steps: Vec<Step>,
    /// The sum of the step rewards.
    pub total_reward: f64,
    /// Whether the last step solved the task.
    pub won: bool,
    /// The task score of the last step (the original benchmark's metric).
    pub score: f64,
    /// Whether the environment ended the episode (`false` only when the driver stopped it at
    /// [`Env::max_turns`] without the environment saying done, which a correct one never needs).
    pub done: bool,
    /// The task source of the last step (for per-source metrics).
    pub source: String,
    /// The observation after the last step (the first one when no step was taken).
    pub last_observation: Observation,
}

impl Episode {
    /// Steps taken.
    pub fn turns(&self) -> usize {
        self.steps.len()
    }

    /// Whether every response projected as valid.
    pub fn all_valid(&self) -> bool {
        self.steps.iter().all(|s| s.action.valid)
    }
}

/// Plays one episode from `first` (the observation [`Env::reset`] just returned): asks
/// `respond(env, observation, history)` for a response, projects it, steps, appends
/// [`Env::history_entry`] to the history, until the environment
/// says done or [`Env::max_turns`] steps were taken. With `record_prompts = Some(P)` each step
/// also stores the prompt with a memory window of `P` steps (as the policy would have seen it).
pub fn run_episode<E, R>(
    env: &mut E,
    first: Observation,
    record_prompts: Option<usize>,
    mut respond: R,
) -> Episode
where
    E: Env + ?Sized,
    R: FnMut(&E, &Observation, &[HistoryEntry]) -> String,
{
    let mut steps: Vec<Step> = Vec::new();
    let mut history: Vec<HistoryEntry> = Vec::new();
    let mut observation = first;
    let mut done = false;
    while !done && steps.len() < env.max_turns() {
        let prompt = record_prompts.map(|p| env.prompt(&history, p));
        let response = respond(env, &observation, &history);
        let action = env.project(&response);
        let t = env.step(&action);
        done = t.done;
        let before = std::mem::replace(&mut observation, t.observation);
        history.push(env.history_entry(&before, &action, &observation));
        steps.push(Step {
            observation: before,
            prompt,
            response,
            action,
            reward: t.reward,
            info: t.info,
        });
    }
    let last = steps.last().map(|s| &s.info);
    Episode {
        total_reward: steps.iter().map(|s| s.reward).sum(),
        won: last.is_some_and(|i| i.won),
        score: last.map_or(0.0, |i| i.score),
        source: last.map_or_else(String::new, |i| i.source.clone()),
        done,
        steps,
        last_observation: observation,
    }
}

/// Resets `env` to task `index` and plays it with its expert (template seed `seed`).
pub fn run_expert_episode<E: WithExpert>(
    env: &mut E,
    index: usize,
    seed: u64,
    record_prompts: Option<usize>,
) -> Episode {
    let first = env.reset(index);
    let mut expert = env.expert(seed);
    run_episode(env, first, record_prompts, |env, obs, _| {
        expert.respond(env, obs)
    })
}

/// What the expert would have answered at one state a learner visited ([`expert_labels`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Label {
    /// The expert's full response at this state.
    pub response: String,
    /// That response projected at this state ([`Env::project`]): the expert's action.
    pub action: String,
    /// [`Env::anchor`] at this state, so a caller can check the replay reached the state its
    /// own episode recorded.
    pub anchor: String,
}

/// DAgger's labels (Ross, Gordon & Bagnell, 2011, "A reduction of imitation learning and
/// structured prediction to no-regret online learning"): resets `env` to task `index`, creates
/// its expert (template seed `seed`), and replays a learner's `responses` (one per turn, the raw
/// text, projected as a rollout projects it), asking the expert at every state the learner
/// reached what it would answer there. The expert sees each observation the learner's actions
/// produced, so its memory is what it would hold had it been watching: the label is the
/// expert's recovery from the learner's mistakes. One label per response, fewer when the
/// environment ends the episode first.
pub fn expert_labels<E: WithExpert>(
    env: &mut E,
    index: usize,
    seed: u64,
    responses: &[String],
) -> Vec<Label> {
    let mut observation = env.reset(index);
    let mut expert = env.expert(seed);
    let mut labels = Vec::with_capacity(responses.len());
    for response in responses {
        let label = expert.respond(env, &observation);
        labels.push(Label {
            action: env.project(&label).action,
            response: label,
            anchor: env.anchor().to_string(),
        });
        let action = env.project(response);
        let t = env.step(&action);
        observation = t.observation;
        if t.done {
            break;
        }
    }
    labels
}

/// Whether `response` has the strict format of T2PO-RULES §5: the whole response is
/// `<think>…</think>` followed by one `<TAG>…</TAG>` for one of `tags` (`["action"]`, or Search
/// QA's `["search", "answer"]`), each tag exactly once, whitespace allowed around the blocks.
/// Tags are matched case-sensitively, as a tokenizer sees them.
pub fn is_strict_format(response: &str, tags: &[&str]) -> bool {
    let Some(rest) = response.trim().strip_prefix("<think>") else {
        return false;
    };
    let Some((think, rest)) = rest.split_once("</think>") else {
        return false;
    };
    let rest = rest.trim();
    tags.iter().any(|tag| {
        let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
        let Some(body) = rest
            .strip_prefix(&open)
            .and_then(|r| r.strip_suffix(&close))
        else {
            return false;
        };
        // One of each tag in the whole response: nothing tag-like inside the blocks.
        let all = ["think", "action", "search", "answer"];
        all.iter().all(|t| {
            let (o, c) = (format!("<{t}>"), format!("</{t}>"));
            !think.contains(&o) && !think.contains(&c) && !body.contains(&o) && !body.contains(&c)
        })
    })
}

/// `<think>{think}</think>\n<{tag}>{body}</{tag}>`, with the rationale cleaned so the response
/// stays in the strict format and valid under every projection: no `<`/`>` (a product title
/// or a passage could hold a tag-like string) and no CJK characters (which the WebShop and
/// ALFWorld projections reject).
///
/// The newline between the blocks is the one T²PO's thinking intervention forces (its queue is
/// `</think>`, `\n`, then the action tag: T2PO-RULES §2), so a response the intervention ends
/// reads like the demonstrations the policy was fine-tuned on.
pub fn format_response(think: &str, tag: &str, body: &str) -> String {
    let clean: String = think
        .chars()
        .filter(|c| !matches!(c, '<' | '>') && !('\u{4e00}'..='\u{9fff}').contains(c))
        .collect();
    format!("<think>{}</think>\n<{tag}>{body}</{tag}>", clean.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>() {}
    fn assert_clone<T: Clone>() {}

    /// A rollout pool may hold mixed environments as `Box<dyn Env + Send>`.
    #[test]
    fn env_is_object_safe_and_drivable() {
        let games = alfworld::game::generate_split(alfworld::game::Split::ValidSeen, 2, 1);
        let mut pool: Vec<Box<dyn Env + Send>> = vec![Box::new(
            alfworld::AlfworldEnv::new(games).expect("two generated games"),
        )];
        let env = pool[0].as_mut();
        let first = env.reset(0);
        let episode = run_episode(env, first, Some(2), |_, obs, _| {
            format_response("look around", "action", &obs.admissible[0])
        });
        assert!(episode.turns() >= 1 && episode.turns() <= 50);
        assert!(episode.all_valid());
        // The first recorded prompt is the one the reset state renders (taken before the step).
        pool[0].reset(0);
        assert_eq!(
            episode.steps[0].prompt.as_deref(),
            Some(pool[0].prompt(&[], 2).as_str())
        );
    }

    /// Relabelling the expert's own episode gives back its responses (same states, same memory,
    /// same wording draws), on ALFWorld and WebShop.
    #[test]
    fn expert_labels_of_the_experts_own_episode_are_its_responses() {
        fn check<E: WithExpert>(env: &mut E, tasks: usize) {
            for task in 0..tasks {
                let seed = 17 ^ task as u64;
                let own = run_expert_episode(env, task, seed, None);
                let responses: Vec<String> = own.steps.iter().map(|s| s.response.clone()).collect();
                let labels = expert_labels(env, task, seed, &responses);
                assert_eq!(labels.len(), responses.len(), "task {task}");
                for (l, s) in labels.iter().zip(&own.steps) {
                    assert_eq!(l.response, s.response, "task {task}");
                    assert_eq!(l.action, s.action.action, "task {task}");
                }
                // The anchors are the states the episode acted on, in order.
                env.reset(task);
                assert_eq!(labels[0].anchor, env.anchor());
            }
        }
        let alf =
            alfworld::AlfworldEnv::generated_splits(12, 2, alfworld::game::Split::ValidSeen, 3)
                .expect("generated ALFWorld");
        check(&mut alf.train.clone(), 12);
        let shop = webshop::WebshopEnv::generated_splits(200, 3).expect("generated WebShop");
        check(&mut shop.train.clone(), 8);
    }

    /// A learner that repeats its first action: the labels at the states it reached are the
    /// expert's way on from there — the same as the expert's own while the learner followed it,
    /// then admissible commands other than the repeated one wherever the repeat changed nothing.
    #[test]
    fn expert_labels_recover_from_a_learners_repeats() {
        let alf =
            alfworld::AlfworldEnv::generated_splits(20, 2, alfworld::game::Split::ValidSeen, 5)
                .expect("generated ALFWorld");
        let mut env = alf.train.clone();
        let mut differed = 0;
        for task in 0..20 {
            let own = run_expert_episode(&mut env, task, 1, None);
            if own.steps.len() < 3 {
                continue;
            }
            let first = own.steps[0].response.clone();
            let learner = vec![first.clone(); 4];
            let labels = expert_labels(&mut env, task, 1, &learner);
            assert_eq!(labels[0].response, own.steps[0].response, "task {task}");
            assert_eq!(labels[1].response, own.steps[1].response, "task {task}");
            env.reset(task);
            for (k, l) in labels.iter().enumerate() {
                let projected = env.project(&l.response);
                assert!(projected.valid, "task {task} step {k}: {}", l.response);
                assert!(is_strict_format(&l.response, &["action"]));
                differed += usize::from(l.response != first);
                env.step(&env.project(&learner[k]));
            }
        }
        // Repeating `go to X` where the agent already is changes nothing: the expert moves on.
        assert!(
            differed >= 20,
            "only {differed} labels differ from the repeat"
        );
    }

    #[test]
    fn environments_are_send_and_clone() {
        assert_send::<webshop::WebshopEnv>();
        assert_send::<alfworld::AlfworldEnv>();
        assert_send::<search_qa::SearchQaEnv>();
        assert_send::<webshop::expert::WebshopExpert>();
        assert_send::<alfworld::expert::AlfworldExpert>();
        assert_send::<search_qa::expert::ExpertSession>();
        assert_clone::<webshop::WebshopEnv>();
        assert_clone::<alfworld::AlfworldEnv>();
        assert_clone::<search_qa::SearchQaEnv>();
    }

    #[test]
    fn strict_format() {
        let a = ["action"];
        assert!(is_strict_format(
            "<think>x</think><action>look</action>",
            &a
        ));
        assert!(is_strict_format(
            " <think>x\ny</think>\n <action>look</action>\n",
            &a
        ));
        assert!(!is_strict_format("<think>x</think>", &a));
        assert!(!is_strict_format("<action>look</action>", &a));
        assert!(!is_strict_format(
            "hm <think>x</think><action>look</action>",
            &a
        ));
        assert!(!is_strict_format(
            "<think>x</think><action>look</action> more",
            &a
        ));
        assert!(!is_strict_format(
            "<think>x</think><action>a</action><action>b</action>",
            &a
        ));
        assert!(!is_strict_format(
            "<think>x <action>a</action></think><action>b</action>",
            &a
        ));
        let qa = ["search", "answer"];
        assert!(is_strict_format("<think>x</think><search>q</search>", &qa));
        assert!(is_strict_format("<think>x</think><answer>q</answer>", &qa));
        assert!(!is_strict_format("<think>x</think><action>q</action>", &qa));
        assert!(!is_strict_format(
            "<think>x</think><search>q</search><answer>a</answer>",
            &qa
        ));
    }

    #[test]
    fn response_rationale_is_cleaned() {
        let r = format_response(" a <b> 先 c ", "action", "look");
        assert_eq!(r, "<think>a b  c</think>\n<action>look</action>");
        assert!(is_strict_format(&r, &["action"]));
    }
}
