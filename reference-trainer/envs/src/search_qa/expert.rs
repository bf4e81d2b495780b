//! A Search QA expert for the generated question sets: it reads the question, searches for the
//! entity it names, reads the needed fact from the retrieved passage whose title is that entity
//! (parsing the observation text it was shown, like a model would), hops once more for bridge
//! and comparison questions, and answers. Every response carries a short `<think>` rationale.
//! It proves generated questions answerable and writes cold-start demonstrations.

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
}

impl ExpertSession {
    /// A session for `question`.
    pub fn new(question: &str) -> Self {
        Self {
            plan: plan(question),
            stage: 0,
            first: None,
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

    /// The next response, given the observation of the previous step (`None` at the start).
    pub fn respond(&mut self, observation: Option<&str>) -> String {
        let obs = observation.unwrap_or("");
        let stage = self.stage;
        self.stage += 1;
        let Some(plan) = self.plan.clone() else {
            return "<think>I do not recognise this question's form, so I cannot look it up.</think><answer>unknown</answer>".into();
        };
        match (plan, stage) {
            (Plan::Single(e, f), 0) | (Plan::Bridge(e, f, _), 0) => format!(
                "<think>I need the {} of {e}. I will search for {e}.</think><search>{e}</search>",
                f.describe()
            ),
            (Plan::Single(e, f), _) => match Self::lookup(obs, &e, f) {
                Some(v) => format!(
                    "<think>The passage about {e} gives the {}: {v}.</think><answer>{v}</answer>",
                    f.describe()
                ),
                None => format!("<think>The results do not mention the {} of {e}.</think><answer>unknown</answer>", f.describe()),
            },
            (Plan::Bridge(e, f1, f2), 1) => match Self::lookup(obs, &e, f1) {
                Some(v) => {
                    self.first = Some(v.clone());
                    format!(
                        "<think>The {} of {e} is {v}. Now I need the {} of {v}.</think><search>{v}</search>",
                        f1.describe(),
                        f2.describe()
                    )
                }
                None => {
                    self.stage = 99;
                    format!("<think>I could not find the {} of {e}.</think><answer>unknown</answer>", f1.describe())
                }
            },
            (Plan::Bridge(_, _, f2), _) => {
                let v1 = self.first.clone().unwrap_or_default();
                match Self::lookup(obs, &v1, f2) {
                    Some(v) => format!(
                        "<think>The {} of {v1} is {v}.</think><answer>{v}</answer>",
                        f2.describe()
                    ),
                    None => format!("<think>I could not find the {} of {v1}.</think><answer>unknown</answer>", f2.describe()),
                }
            }
            (Plan::Compare(a, _), 0) => format!(
                "<think>I need the birth years of both. First {a}.</think><search>{a}</search>"
            ),
            (Plan::Compare(a, b), 1) => {
                self.first = Self::lookup(obs, &a, Fact::BirthYear);
                format!(
                    "<think>{a} was born in {}. Now {b}.</think><search>{b}</search>",
                    self.first.as_deref().unwrap_or("an unknown year")
                )
            }
            (Plan::Compare(a, b), _) => {
                let ya: Option<u32> = self.first.as_deref().and_then(|y| y.parse().ok());
                let yb: Option<u32> = Self::lookup(obs, &b, Fact::BirthYear).and_then(|y| y.parse().ok());
                match (ya, yb) {
                    (Some(ya), Some(yb)) => {
                        let older = if ya <= yb { &a } else { &b };
                        format!("<think>{a}: {ya}; {b}: {yb}. {older} was born first.</think><answer>{older}</answer>")
                    }
                    _ => "<think>I could not find both birth years.</think><answer>unknown</answer>".into(),
                }
            }
        }
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
