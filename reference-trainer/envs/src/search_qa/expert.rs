//! A Search QA expert for the generated question sets: it reads the question, searches for the
//! entity it names, reads the needed fact from the retrieved passage whose title is that entity
//! (parsing the observation text it was shown, like a model would), hops once more for bridge
//! and comparison questions, and answers. It proves generated questions answerable and writes
//! cold-start demonstrations.
//!
//! Each response is a full policy response, `<think>…</think>\n<search> … </search>` or
//! `<think>…</think>\n<answer> … </answer>` (strict format, valid under [`super::project`]). The
//! rationale says what is known so far and what must be looked up next, with the wording and
//! optional sentences chosen by the expert's seeded generator:
//!
//! - first turn: the fact the question asks for and the entity to search ("The question asks
//!   for the birthplace of Abe Lin. I don't know it yet, so I'll search for Abe Lin.");
//!   comparisons: both birth years are needed, the first person first;
//! - after a search: the fact read from the passage titled with the entity ("The passage about
//!   Abe Lin says the birthplace is Toro."), then the second hop ("Now I need the country of
//!   Toro.") or the answer ("So the answer is Toro."), or that the results lack it;
//! - comparisons: both years and which is earlier.

use super::SearchQaEnv;
use crate::rng::Rng;
use crate::{format_response, Expert, Observation};
use regex::Regex;
use std::sync::OnceLock;

/// A fact a passage states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fact {
    BirthCity,
    BirthYear,
    Founder,
    Capital,
    CountryOfCity,
    Employer,
}

impl Fact {
    fn pattern(self) -> &'static Regex {
        static RES: OnceLock<[Regex; 6]> = OnceLock::new();
        let all = RES.get_or_init(|| {
            [
                Regex::new(r"born in \d+ in ([^.]+)\.").expect("static regex"),
                Regex::new(r"born in (\d+) in ").expect("static regex"),
                Regex::new(r"founded in \d+ by ([^.]+)\.").expect("static regex"),
                Regex::new(r"whose capital is ([^.]+)\.").expect("static regex"),
                Regex::new(r"is a city in ([^.]+)\.").expect("static regex"),
                Regex::new(r"worked for ([^.]+)\.").expect("static regex"),
            ]
        });
        &all[self as usize]
    }

    fn describe(self) -> &'static str {
        match self {
            Fact::BirthCity => "birthplace",
            Fact::BirthYear => "birth year",
            Fact::Founder => "founder",
            Fact::Capital => "capital",
            Fact::CountryOfCity => "country",
            Fact::Employer => "employer",
        }
    }
}

#[derive(Clone, Debug)]
enum Plan {
    /// Look one fact up.
    Single(String, Fact),
    /// Look a fact up, then a second fact of the entity it names.
    Bridge(String, Fact, Fact),
    /// Compare two people's birth years.
    Compare(String, String),
}

fn plan(question: &str) -> Option<Plan> {
    static RES: OnceLock<Vec<(Regex, u8)>> = OnceLock::new();
    let res = RES.get_or_init(|| {
        [
            (r"^Who was born first, (.+) or (.+)\?$", 0),
            (r"^In which country was (.+) born\?$", 1),
            (r"^Who founded the company that (.+) worked for\?$", 2),
            (r"^Where was (.+) born\?$", 3),
            (r"^In which year was (.+) born\?$", 4),
            (r"^Who founded (.+)\?$", 5),
            (r"^What is the capital of (.+)\?$", 6),
            (r"^In which country is (.+)\?$", 7),
        ]
        .iter()
        .map(|(p, k)| (Regex::new(p).expect("static regex"), *k))
        .collect()
    });
    let q = question.trim();
    for (re, kind) in res {
        if let Some(c) = re.captures(q) {
            let a = c[1].to_string();
            return Some(match kind {
                0 => Plan::Compare(a, c[2].to_string()),
                1 => Plan::Bridge(a, Fact::BirthCity, Fact::CountryOfCity),
                2 => Plan::Bridge(a, Fact::Employer, Fact::Founder),
                3 => Plan::Single(a, Fact::BirthCity),
                4 => Plan::Single(a, Fact::BirthYear),
                5 => Plan::Single(a, Fact::Founder),
                6 => Plan::Single(a, Fact::Capital),
                _ => Plan::Single(a, Fact::CountryOfCity),
            });
        }
    }
    None
}

/// The passages in an observation the environment showed (either flavour): `(title, contents)`.
pub fn read_observation(observation: &str) -> Vec<(String, String)> {
    let inner = observation
        .split_once("<information>")
        .and_then(|(_, r)| r.rsplit_once("</information>"))
        .map_or("", |(i, _)| i);
    let mut docs = Vec::new();
    // verl-agent: {"result": "Doc 1: \"Title\"\ntext\nDoc 2: …"}
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(inner) {
        let text = v.get("result").and_then(|r| r.as_str()).unwrap_or("");
        for chunk in split_docs(text, "Doc ", ": ") {
            if let Some((title, rest)) = chunk.split_once('\n') {
                docs.push((title.trim_matches('"').to_string(), rest.to_string()));
            }
        }
        return docs;
    }
    // Search-R1: Doc 1(Title: "Title") text
    for chunk in split_docs(inner, "Doc ", "(Title: ") {
        if let Some((title, rest)) = chunk.split_once(") ") {
            docs.push((title.trim_matches('"').to_string(), rest.to_string()));
        }
    }
    docs
}

/// Splits `Doc 1<sep>…Doc 2<sep>…` into the parts after each `Doc N<sep>`.
fn split_docs<'a>(text: &'a str, prefix: &str, sep: &str) -> Vec<&'a str> {
    let mut starts = Vec::new();
    let mut n = 1;
    let mut from = 0;
    while let Some(i) = text[from..].find(&format!("{prefix}{n}{sep}")) {
        let at = from + i;
        starts.push((at, at + format!("{prefix}{n}{sep}").len()));
        from = at + 1;
        n += 1;
    }
    starts
        .iter()
        .enumerate()
        .map(|(k, &(_, body))| {
            let end = starts.get(k + 1).map_or(text.len(), |&(next, _)| next);
            &text[body..end]
        })
        .collect()
}

/// One episode of the expert.
#[derive(Clone, Debug)]
pub struct ExpertSession {
    plan: Option<Plan>,
    stage: usize,
    first: Option<String>,
    rng: Rng,
}

impl ExpertSession {
    /// A session for `question`; `seed` chooses the rationale wording.
    pub fn new(question: &str, seed: u64) -> Self {
        Self {
            plan: plan(question),
            stage: 0,
            first: None,
            rng: Rng::new(seed),
        }
    }

    fn lookup(observation: &str, entity: &str, fact: Fact) -> Option<String> {
        read_observation(observation)
            .into_iter()
            .find(|(title, _)| title == entity)
            .and_then(|(_, text)| {
                fact.pattern()
                    .captures(&text)
                    .map(|c| c[1].trim().to_string())
            })
    }

    /// Query and answer bodies are written with a space on each side, as the Search-R1 and
    /// verl-agent prompts show them (`<search> query </search>`, `<answer> Beijing </answer>`):
    /// the name then starts with the same space-led token as in the question or passage it is
    /// copied from (the projection strips the spaces).
    fn search(&mut self, think: String, query: &str) -> String {
        format_response(&think, "search", &format!(" {query} "))
    }

    /// An answer response; `conclude` may add "So the answer is …" (not after a comparison,
    /// whose rationale already concludes).
    fn answer(&mut self, mut think: String, answer: &str, conclude: bool) -> String {
        if conclude && answer != "unknown" && self.rng.chance(0.5) {
            think.push_str(&format!(" So the answer is {answer}."));
        }
        format_response(&think, "answer", &format!(" {answer} "))
    }

    /// "The passage about E says the F is V." in one of a few wordings.
    fn read(&mut self, entity: &str, fact: Fact, value: &str) -> String {
        let f = fact.describe();
        match self.rng.below(3) {
            0 => format!("The passage about {entity} says the {f} is {value}."),
            1 => format!("According to the {entity} article, the {f} is {value}."),
            _ => format!("The results show that the {f} of {entity} is {value}."),
        }
    }

    fn missing(&mut self, entity: &str, fact: Fact) -> String {
        let f = fact.describe();
        match self.rng.below(2) {
            0 => format!("The results do not mention the {f} of {entity}."),
            _ => format!("I could not find the {f} of {entity} in the retrieved passages."),
        }
    }

    /// The next response, given the observation of the previous step (`None` at the start).
    pub fn response(&mut self, observation: Option<&str>) -> String {
        let obs = observation.unwrap_or("");
        let stage = self.stage;
        self.stage += 1;
        let Some(plan) = self.plan.clone() else {
            return format_response(
                "I do not recognise this question's form, so I cannot look it up.",
                "answer",
                " unknown ",
            );
        };
        match (plan, stage) {
            (Plan::Single(e, f), 0) | (Plan::Bridge(e, f, _), 0) => {
                let mut t = match self.rng.below(3) {
                    0 => format!("The question asks for the {} of {e}.", f.describe()),
                    1 => format!("I need to know the {} of {e}.", f.describe()),
                    _ => format!("To answer, I first need the {} of {e}.", f.describe()),
                };
                let second = match &self.plan {
                    Some(Plan::Bridge(_, _, f2)) => Some(*f2),
                    _ => None,
                };
                t.push(' ');
                t.push_str(&match self.rng.below(2) {
                    0 => format!("I don't know it yet, so I'll search for {e}."),
                    _ => format!("I'll search for {e}."),
                });
                if let (Some(f2), true) = (second, self.rng.chance(0.6)) {
                    t.push_str(&format!(
                        " Then I can look up the {} of that {}.",
                        f2.describe(),
                        f.describe()
                    ));
                }
                self.search(t, &e)
            }
            (Plan::Single(e, f), _) => match Self::lookup(obs, &e, f) {
                Some(v) => {
                    let t = self.read(&e, f, &v);
                    self.answer(t, &v, true)
                }
                None => {
                    let t = self.missing(&e, f);
                    self.answer(t, "unknown", false)
                }
            },
            (Plan::Bridge(e, f1, f2), 1) => match Self::lookup(obs, &e, f1) {
                Some(v) => {
                    self.first = Some(v.clone());
                    let mut t = self.read(&e, f1, &v);
                    t.push(' ');
                    t.push_str(&match self.rng.below(2) {
                        0 => format!(
                            "Now I need the {} of {v}; I'll search for {v}.",
                            f2.describe()
                        ),
                        _ => format!("Next I look up {v} to find its {}.", f2.describe()),
                    });
                    self.search(t, &v)
                }
                None => {
                    self.stage = 99;
                    let t = self.missing(&e, f1);
                    self.answer(t, "unknown", false)
                }
            },
            (Plan::Bridge(e, f1, f2), _) => {
                let v1 = self.first.clone().unwrap_or_default();
                match Self::lookup(obs, &v1, f2) {
                    Some(v) => {
                        let mut t = String::new();
                        if self.rng.chance(0.5) {
                            t.push_str(&format!("I know the {} of {e} is {v1}. ", f1.describe()));
                        }
                        t.push_str(&self.read(&v1, f2, &v));
                        self.answer(t, &v, true)
                    }
                    None => {
                        let t = self.missing(&v1, f2);
                        self.answer(t, "unknown", false)
                    }
                }
            }
            (Plan::Compare(a, b), 0) => {
                let t = match self.rng.below(2) {
                    0 => format!("To tell who was born first I need the birth years of {a} and {b}. I'll start with {a}."),
                    _ => format!("I need both birth years. First I'll look up {a}."),
                };
                self.search(t, &a)
            }
            (Plan::Compare(a, b), 1) => {
                self.first = Self::lookup(obs, &a, Fact::BirthYear);
                let known = match &self.first {
                    Some(y) => format!("{a} was born in {y}."),
                    None => format!("The results do not give the birth year of {a}."),
                };
                let t = match self.rng.below(2) {
                    0 => format!("{known} Now I need the birth year of {b}."),
                    _ => format!("{known} Next I'll search for {b}."),
                };
                self.search(t, &b)
            }
            (Plan::Compare(a, b), _) => {
                let ya: Option<u32> = self.first.as_deref().and_then(|y| y.parse().ok());
                let yb: Option<u32> =
                    Self::lookup(obs, &b, Fact::BirthYear).and_then(|y| y.parse().ok());
                match (ya, yb) {
                    (Some(ya), Some(yb)) => {
                        let older = if ya <= yb { a.clone() } else { b.clone() };
                        let t = match self.rng.below(2) {
                            0 => format!(
                                "{a} was born in {ya} and {b} in {yb}, so {older} was born first."
                            ),
                            _ => format!(
                                "{b} was born in {yb}; {a} in {ya}. {older} is the older one."
                            ),
                        };
                        self.answer(t, &older, false)
                    }
                    _ => self.answer(
                        "I could not find both birth years.".to_string(),
                        "unknown",
                        false,
                    ),
                }
            }
        }
    }
}

impl Expert<SearchQaEnv> for ExpertSession {
    fn respond(&mut self, _env: &SearchQaEnv, observation: &Observation) -> String {
        // The first turn plans from the question alone; later turns read the last results.
        let started = self.stage > 0;
        self.response(started.then_some(observation.text.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_observation_flavours() {
        let verl = r#"<information>{"result": "Doc 1: \"Abe Lin\"\nAbe Lin was a painter born in 1900 in Toro.\nDoc 2: \"Toro\"\nToro is a city in Vanu.\n"}</information>"#;
        let docs = read_observation(verl);
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].0, "Abe Lin");
        assert_eq!(docs[1].1, "Toro is a city in Vanu.\n");
        let r1 = "\n\n<information>Doc 1(Title: \"Abe Lin\") Abe Lin was born in 1900 in Toro.\nDoc 2(Title: \"Toro\") Toro is a city in Vanu.</information>\n\n";
        let docs = read_observation(r1);
        assert_eq!(docs[1].0, "Toro");
        assert_eq!(
            ExpertSession::lookup(r1, "Toro", Fact::CountryOfCity).as_deref(),
            Some("Vanu")
        );
    }
}
