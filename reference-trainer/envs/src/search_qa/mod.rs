//! Search QA (Search-R1, and verl-agent's `search` environment), spec §3.
//!
//! The environment holds (question, golden answers, data source, turn ≤ 4). A step takes a
//! projected `<search>` or `<answer>` action: a search returns the top-3 passages in an
//! `<information>` block (verl-agent's JSON-escaped flavour by default, or Search-R1's); an
//! answer ends the episode with reward EM ∈ {0, 1}; a search on the last turn is not executed.

pub mod corpus;
pub mod corpus_file;
pub mod em;
pub mod expert;
pub mod retriever;
pub mod server;

use crate::error::EnvError;
use crate::{Env, HistoryEntry, Info, Observation, Projected, Splits, Transition, WithExpert};
use corpus::{Question, World};
use em::AnswerScope;
use expert::ExpertSession;
use regex::Regex;
use retriever::{Hit, Retriever};
use std::sync::{Arc, OnceLock};

const VERL_HEAD: &str =
    "\nYou are an expert agent tasked with answering the given question step-by-step.\nYour question: ";
const VERL_TAIL: &str = "\nNow it's your turn to respond for the current step.\nYou should first conduct reasoning process. This process MUST be enclosed within <think> </think> tags. \nAfter completing your reasoning, choose only one of the following actions (do not perform both):\n(1) If you find you lack some knowledge, you can call a search engine to get more external information using format: <search> your query </search>.\n(2) If you have enough knowledge to answer the question confidently, provide your final answer within <answer> </answer> tags, without detailed illustrations. For example, <answer>Beijing</answer>.\n";

/// Search-R1's invalid-action observation.
pub const SEARCH_R1_INVALID: &str = "\nMy previous action is invalid. If I want to search, I should put the query between <search> and </search>. If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again.\n";

/// Which original's observation format the environment produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// verl-agent: `<information>{json.dumps({"result": …})}</information>`, empty observation
    /// for an invalid action.
    VerlAgent,
    /// Search-R1: `\n\n<information>Doc 1(Title: …) …</information>\n\n`, and its invalid-action
    /// message.
    SearchR1,
}

/// The verl-agent first-step prompt.
pub fn verl_prompt(question: &str, history: &[HistoryEntry], history_length: usize) -> String {
    let mut s = String::with_capacity(1024);
    s.push_str(VERL_HEAD);
    s.push_str(question);
    s.push('\n');
    if !history.is_empty() {
        let start = history.len().saturating_sub(history_length);
        let memory: Vec<String> = history[start..]
            .iter()
            .enumerate()
            .map(|(k, h)| format!("Step {}:{} {}\n", start + k + 1, h.action, h.observation))
            .collect();
        s.push_str(&format!(
            "\nPrior to this step, you have already taken {} step(s). Below is the interaction history where <search> </search> wrapped your past search queries and <information> </information> wrapped the corresponding search results returned by the external search engine. History:\n{}\n",
            history.len(),
            memory.join("\n")
        ));
    }
    s.push_str(VERL_TAIL);
    s
}

/// The Search-R1 prompt: the question stripped, with `?` appended when it lacks one.
pub fn search_r1_prompt(question: &str) -> String {
    let mut q = question.trim().to_string();
    if !q.ends_with('?') {
        q.push('?');
    }
    format!("Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get new information. After reasoning, if you find you lack some knowledge, you can call a search engine by <search> query </search> and it will return the top searched results between <information> and </information>. You can search as many times as your want. If you find no further external knowledge needed, you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. For example, <answer> Beijing </answer>. Question: {q}\n")
}

/// Python's `json.dumps` of a string (default `ensure_ascii=True`): quotes, `\"`, `\\`, the short
/// escapes `\n \r \t \b \f`, `\u00hh` for other control characters and DEL, and `\uhhhh`
/// (lowercase hex, surrogate pairs above U+FFFF) for every non-ASCII character.
pub fn python_json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{:04x}", unit));
                }
            }
        }
    }
    out.push('"');
    out
}

/// verl-agent's observation for one search: `<information>` + `json.dumps({"result": R})` +
/// `</information>`, `R = "Doc 1: <contents stripped>\nDoc 2: …\n"`; a query without hits
/// gives `R = ""`, as in the original, whose "No search results found." is only for a response
/// without any per-query list.
pub fn verl_information(hits: &[Hit]) -> String {
    let result: String = hits
        .iter()
        .enumerate()
        .map(|(i, h)| format!("Doc {}: {}\n", i + 1, h.passage.contents.trim()))
        .collect();
    format!(
        "<information>{{\"result\": {}}}</information>",
        python_json_string(&result)
    )
}

/// verl-agent's observation when retrieval failed.
pub fn verl_search_error(message: &str) -> String {
    format!(
        "<information>{{\"result\": {}}}</information>",
        python_json_string(&format!("Search error: {message}"))
    )
}

/// Search-R1's observation for one search: `\n\n<information>{docs.strip()}</information>\n\n`,
/// each doc `Doc {i}(Title: {first line, quotes kept}) {rest}\n`.
pub fn search_r1_information(hits: &[Hit]) -> String {
    let docs: String = hits
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let (title, rest) = h
                .passage
                .contents
                .split_once('\n')
                .unwrap_or((&h.passage.contents, ""));
            format!("Doc {}(Title: {title}) {rest}\n", i + 1)
        })
        .collect();
    format!("\n\n<information>{}</information>\n\n", docs.trim())
}

fn search_block() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"(?is)<search>(.*?)</search>").expect("static regex"))
}

fn answer_block() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"(?is)<answer>(.*?)</answer>").expect("static regex"))
}

/// verl-agent's search projection: trim after the first `</search>` (else `</answer>`), take the
/// first `<search>…</search>` block, else the first `<answer>…</answer>`, else `""` (invalid).
/// Also invalid: both tags in the raw text, or one of them more than once.
pub fn project(response: &str) -> Projected {
    let trimmed = if let Some(i) = response.find("</search>") {
        &response[..i + "</search>".len()]
    } else if let Some(i) = response.find("</answer>") {
        &response[..i + "</answer>".len()]
    } else {
        response
    };
    let (action, mut valid) = if let Some(c) = search_block().captures(trimmed) {
        (format!("<search>{}</search>", c[1].trim()), true)
    } else if let Some(c) = answer_block().captures(trimmed) {
        (format!("<answer>{}</answer>", c[1].trim()), true)
    } else {
        (String::new(), false)
    };
    let lower = response.to_lowercase();
    let searches = lower.matches("<search>").count();
    let answers = lower.matches("<answer>").count();
    if (searches > 0 && answers > 0) || searches > 1 || answers > 1 {
        valid = false;
    }
    Projected { action, valid }
}

/// The Search QA environment over a question set and a retriever. Cloning one is cheap (the
/// questions and the retriever are shared) and gives an independent episode.
#[derive(Clone)]
pub struct SearchQaEnv {
    questions: Arc<[Question]>,
    retriever: Arc<dyn Retriever>,
    /// Passages per search (3).
    pub topk: usize,
    /// Turns per episode (4).
    pub max_turns: usize,
    /// Observation format.
    pub flavor: Flavor,
    current: usize,
    turns: usize,
    done: bool,
    trajectory: String,
    last_observation: String,
}

impl SearchQaEnv {
    /// An environment over `questions` (non-empty; a `Vec<Question>` or an `Arc<[Question]>`
    /// shared with other environments) answered from `retriever`, verl-agent defaults: top-3,
    /// 4 turns, verl-agent observations.
    pub fn new(
        questions: impl Into<Arc<[Question]>>,
        retriever: Arc<dyn Retriever>,
    ) -> Result<Self, EnvError> {
        let questions = questions.into();
        if questions.is_empty() {
            return Err(EnvError::NoTasks {
                env: "Search QA",
                what: "the question list".into(),
            });
        }
        Ok(Self {
            questions,
            retriever,
            topk: 3,
            max_turns: 4,
            flavor: Flavor::VerlAgent,
            current: 0,
            turns: 0,
            done: false,
            trajectory: String::new(),
            last_observation: String::new(),
        })
    }

    /// Train and held-out environments over generated questions about `world`, answered from
    /// `retriever` (an index of `world.passages`). As in Search-R1, train is the NQ and HotpotQA
    /// roles only (`train_per_source` questions of each, ids prefixed `train_`, from `seed`);
    /// held out is every role of the evaluation, the three general (single-hop) and the four
    /// multi-hop ones (`held_out_per_source` each, from the seed `!seed`). The two sets ask
    /// about disjoint entities ([`corpus::Subjects`]: one in [`corpus::HELD_OUT_EVERY`] of each kind is
    /// held out), so a held-out question needs the search skill, never a remembered fact.
    pub fn generated_splits(
        world: &World,
        retriever: Arc<dyn Retriever>,
        train_per_source: usize,
        held_out_per_source: usize,
        seed: u64,
    ) -> Result<Splits<Self>, EnvError> {
        let train: Vec<Question> = world
            .train_questions(seed, train_per_source)
            .into_iter()
            .map(|q| Question {
                id: format!("train_{}", q.id),
                ..q
            })
            .collect();
        let held_out = world.held_out_questions(seed, held_out_per_source);
        Ok(Splits {
            train: Self::new(train, retriever.clone())?,
            held_out: Self::new(held_out, retriever)?,
        })
    }

    /// The shared questions, to build more environments over them.
    pub fn questions(&self) -> &Arc<[Question]> {
        &self.questions
    }

    /// The current question record.
    pub fn question(&self) -> &Question {
        &self.questions[self.current]
    }

    /// Turns used in this episode.
    pub fn turns(&self) -> usize {
        self.turns
    }

    fn finish(&mut self) -> (f64, Info) {
        self.done = true;
        let golden = &self.questions[self.current].golden_answers;
        let reward = em::score(&self.trajectory, golden, AnswerScope::Trajectory);
        let info = Info {
            won: reward >= 1.0,
            score: reward,
            source: self.questions[self.current].data_source.clone(),
            parts: Vec::new(),
        };
        (reward, info)
    }
}

impl Env for SearchQaEnv {
    fn num_tasks(&self) -> usize {
        self.questions.len()
    }

    fn reset(&mut self, index: usize) -> Observation {
        self.current = index % self.questions.len();
        self.turns = 0;
        self.done = false;
        self.trajectory.clear();
        self.last_observation = self.questions[self.current].question.clone();
        Observation {
            text: self.last_observation.clone(),
            admissible: Vec::new(),
        }
    }

    fn task(&self) -> &str {
        &self.questions[self.current].question
    }

    fn anchor(&self) -> &str {
        &self.last_observation
    }

    fn project(&self, response: &str) -> Projected {
        project(response)
    }

    fn step(&mut self, action: &Projected) -> Transition {
        let source = self.questions[self.current].data_source.clone();
        if self.done {
            return Transition::after_end(source);
        }
        self.turns += 1;
        self.trajectory.push_str(&action.action);
        let is_answer = action.action.contains("<answer>") && action.action.contains("</answer>");
        let search = search_block()
            .captures(&action.action)
            .map(|c| c[1].trim().to_string());
        let mut observation = String::new();
        if !is_answer && self.turns < self.max_turns {
            match (&search, self.flavor) {
                (Some(q), flavor) => {
                    observation = match self.retriever.search(std::slice::from_ref(q), self.topk) {
                        Ok(mut hits) => {
                            let hits = hits.pop().unwrap_or_default();
                            match flavor {
                                Flavor::VerlAgent => verl_information(&hits),
                                Flavor::SearchR1 => search_r1_information(&hits),
                            }
                        }
                        Err(e) => verl_search_error(&e.to_string()),
                    }
                }
                (None, Flavor::SearchR1) => observation = SEARCH_R1_INVALID.to_string(),
                (None, Flavor::VerlAgent) => {}
            }
        }
        self.trajectory.push_str(&observation);
        self.last_observation = observation.clone();
        let (reward, done, info) = if is_answer || self.turns >= self.max_turns {
            let (r, info) = self.finish();
            (r, true, info)
        } else {
            (
                0.0,
                false,
                Info {
                    source,
                    ..Info::default()
                },
            )
        };
        Transition {
            observation: Observation {
                text: observation,
                admissible: Vec::new(),
            },
            reward,
            done,
            info,
        }
    }

    fn prompt(&self, history: &[HistoryEntry], history_length: usize) -> String {
        match self.flavor {
            Flavor::VerlAgent => verl_prompt(self.task(), history, history_length),
            Flavor::SearchR1 => search_r1_prompt(self.task()),
        }
    }

    fn max_turns(&self) -> usize {
        self.max_turns
    }

    fn name(&self) -> &'static str {
        "search_qa"
    }

    /// verl-agent's search memory: each step is the action and the information it returned
    /// (`Step n:<search>q</search> <information>…</information>`).
    fn history_entry(
        &self,
        _before: &Observation,
        action: &Projected,
        after: &Observation,
    ) -> HistoryEntry {
        HistoryEntry {
            observation: after.text.clone(),
            action: action.action.clone(),
        }
    }
}

impl WithExpert for SearchQaEnv {
    type Expert = ExpertSession;

    fn expert(&self, seed: u64) -> ExpertSession {
        ExpertSession::new(self.task(), seed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corpus::Passage;

    #[test]
    fn projection_rules() {
        let p = project(
            "<think>hmm</think><search> capital of France </search> trailing <answer>x</answer>",
        );
        // Trimmed after </search>, but the raw text holds both tags: invalid.
        assert_eq!(p.action, "<search>capital of France</search>");
        assert!(!p.valid);
        let p = project("<think>ok</think>\n<SEARCH>Q</SEARCH>");
        assert_eq!((p.action.as_str(), p.valid), ("<search>Q</search>", true));
        let p = project("<think>done</think><answer> Paris </answer>");
        assert_eq!(
            (p.action.as_str(), p.valid),
            ("<answer>Paris</answer>", true)
        );
        let p = project("<search>a</search><search>b</search>");
        assert_eq!((p.action.as_str(), p.valid), ("<search>a</search>", false));
        let p = project("I think the answer is Paris");
        assert_eq!((p.action.as_str(), p.valid), ("", false));
        let p = project("<answer>multi\nline</answer>");
        assert_eq!(p.action, "<answer>multi\nline</answer>");
    }

    #[test]
    fn python_json_dumps_compatibility() {
        // Reference values produced by Python's json.dumps.
        assert_eq!(python_json_string("a\"b\\c\nd"), r#""a\"b\\c\nd""#);
        assert_eq!(python_json_string("café"), r#""caf\u00e9""#);
        assert_eq!(python_json_string("😀"), r#""\ud83d\ude00""#);
        assert_eq!(python_json_string("\u{1}\u{7f}\t"), r#""\u0001\u007f\t""#);
        assert_eq!(python_json_string("\u{8}\u{c}\r"), r#""\b\f\r""#);
    }

    fn hit(id: &str, contents: &str) -> Hit {
        Hit {
            passage: Passage {
                id: id.into(),
                contents: contents.into(),
            },
            score: 1.0,
        }
    }

    #[test]
    fn information_formats() {
        let hits = [
            hit("0", "\"Paris\"\nParis is the capital of France. "),
            hit("1", "\"Lyon\"\nLyon é"),
        ];
        assert_eq!(
            verl_information(&hits),
            r#"<information>{"result": "Doc 1: \"Paris\"\nParis is the capital of France.\nDoc 2: \"Lyon\"\nLyon \u00e9\n"}</information>"#
        );
        // Zero hits: the original's `_passages2string([])` is "", not its no-result message.
        assert_eq!(
            verl_information(&[]),
            r#"<information>{"result": ""}</information>"#
        );
        assert_eq!(
            search_r1_information(&hits),
            "\n\n<information>Doc 1(Title: \"Paris\") Paris is the capital of France. \nDoc 2(Title: \"Lyon\") Lyon é</information>\n\n"
        );
    }

    #[test]
    fn prompts() {
        let p = verl_prompt("Who?", &[], 4);
        assert!(p.starts_with("\nYou are an expert agent tasked with answering the given question step-by-step.\nYour question: Who?\n\nNow it's your turn"));
        let hist: Vec<HistoryEntry> = (0..6)
            .map(|i| HistoryEntry {
                observation: format!("obs{i}"),
                action: format!("<search>q{i}</search>"),
            })
            .collect();
        let p = verl_prompt("Who?", &hist, 4);
        assert!(p.contains("you have already taken 6 step(s)"));
        assert!(p.contains("History:\nStep 3:<search>q2</search> obs2\n\nStep 4:"));
        assert!(!p.contains("Step 2:"));
        assert!(p.contains("Step 6:<search>q5</search> obs5\n\n\nNow it's your turn"));
        assert_eq!(
            search_r1_prompt(" Who wrote it "),
            search_r1_prompt("Who wrote it?")
        );
        assert!(search_r1_prompt("x").ends_with("Question: x?\n"));
    }
}
