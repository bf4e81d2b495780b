//! Generated Search QA data: a wiki-18-shaped passage corpus of synthetic entities and the
//! FlashRAG-shaped question sets over it (spec §3.2, §3.5).
//!
//! Entities (countries, cities, companies, people) carry facts that their passages state in
//! fixed sentences; questions are single-hop (the general sets: nq, triviaqa, popqa) or multi-hop
//! (2-hop bridge and comparison: hotpotqa, 2wikimultihopqa, musique, bamboogle), each with alias
//! answers that EM normalisation must equate ("the Republic of X" / "X", "J. Smith" forms, …).
//! Everything is a pure function of the seed. The jsonl readers and writers use the real formats
//! (`{"id","contents"}` passages; `{"id","question","golden_answers","data_source","metadata"}`).

use crate::error::LoadError;
use crate::rng::Rng;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;

/// One passage of the corpus (`wiki-18.jsonl` row: `{"id": "0", "contents": "\"Title\"\ntext"}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Passage {
    /// Row id, a decimal string.
    pub id: String,
    /// `"\"Title\"\ntext"`.
    pub contents: String,
}

impl Passage {
    /// The title: the first line with its quotes stripped (as the BM25 backends return it).
    pub fn title(&self) -> &str {
        self.contents.lines().next().unwrap_or("").trim_matches('"')
    }
    /// The text after the title line.
    pub fn text(&self) -> &str {
        self.contents.split_once('\n').map_or("", |(_, t)| t)
    }
}

/// One question (FlashRAG jsonl row plus the Search-R1 `data_source`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Question {
    /// Row id.
    pub id: String,
    /// The question text.
    pub question: String,
    /// Accepted answers (any one matches).
    pub golden_answers: Vec<String>,
    /// The dataset it belongs to (`nq`, `hotpotqa`, …).
    #[serde(default)]
    pub data_source: String,
    /// Free-form metadata (here: `{"hops": 1|2, "kind": "single"|"bridge"|"comparison"}`).
    #[serde(default)]
    pub metadata: serde_json::Value,
}

/// The general (single-hop) and multi-hop dataset roles of Search-R1's evaluation.
pub const GENERAL_SOURCES: [&str; 3] = ["nq", "triviaqa", "popqa"];
/// Multi-hop dataset roles.
pub const MULTI_HOP_SOURCES: [&str; 4] = ["hotpotqa", "2wikimultihopqa", "musique", "bamboogle"];
/// The roles Search-R1 trains on (NQ and HotpotQA); the others are evaluation-only.
pub const TRAIN_SOURCES: [&str; 2] = ["nq", "hotpotqa"];

const OCCUPATIONS: [&str; 12] = [
    "painter",
    "chemist",
    "architect",
    "novelist",
    "engineer",
    "composer",
    "botanist",
    "surgeon",
    "economist",
    "sculptor",
    "astronomer",
    "lawyer",
];
const INDUSTRIES: [&str; 8] = [
    "shipping",
    "textile",
    "software",
    "railway",
    "mining",
    "publishing",
    "brewing",
    "optics",
];

#[derive(Clone, Debug)]
struct Country {
    name: String,
    official: String,
    capital: usize,
}

#[derive(Clone, Debug)]
struct City {
    name: String,
    country: usize,
    founded: u32,
}

#[derive(Clone, Debug)]
struct Company {
    name: String,
    founder: usize,
    city: usize,
    founded: u32,
    industry: &'static str,
}

#[derive(Clone, Debug)]
struct Person {
    first: String,
    last: String,
    initial: char,
    born: u32,
    city: usize,
    occupation: &'static str,
    employer: Option<usize>,
}

impl Person {
    fn name(&self) -> String {
        format!("{} {}", self.first, self.last)
    }
    fn aliases(&self) -> Vec<String> {
        vec![
            self.name(),
            format!("{} {}. {}", self.first, self.initial, self.last),
        ]
    }
}

/// A generated world: entities, their passages, and questions over them.
#[derive(Clone, Debug)]
pub struct World {
    countries: Vec<Country>,
    cities: Vec<City>,
    companies: Vec<Company>,
    people: Vec<Person>,
    /// The corpus, one passage per entity, in id order.
    pub passages: Vec<Passage>,
}

/// Name lists: `fake`'s English locale (first names, last names, countries, city affixes), so
/// entities read like the real datasets' names and split into few BPE pieces, as real names do
/// for a real tokenizer (issue 22: random-syllable names were copied only approximately).
/// Entries with anything but letters and spaces are left out (the expert's patterns stop at '.').
struct Lists {
    first: Vec<&'static str>,
    last: Vec<&'static str>,
    countries: Vec<&'static str>,
    city_prefix: &'static [&'static str],
    city_suffix: &'static [&'static str],
}

impl Lists {
    fn get() -> &'static Lists {
        use fake::locales::{Data, EN};
        static LISTS: std::sync::OnceLock<Lists> = std::sync::OnceLock::new();
        fn plain(xs: &'static [&'static str]) -> Vec<&'static str> {
            let mut seen = HashSet::new();
            xs.iter()
                .copied()
                .filter(|x| {
                    !x.is_empty()
                        && x.chars().all(|c| c.is_ascii_alphabetic() || c == ' ')
                        && seen.insert(x.to_lowercase())
                })
                .collect()
        }
        LISTS.get_or_init(|| {
            let first = plain(<EN as Data>::NAME_FIRST_NAME);
            let last = plain(<EN as Data>::NAME_LAST_NAME);
            // A country that is also a first or last name ("Chad", "Georgia") would make a
            // person's name contain a country's: no question may name two entities.
            let person_words: HashSet<String> = first
                .iter()
                .chain(&last)
                .map(|w| w.to_lowercase())
                .collect();
            let countries = plain(<EN as Data>::ADDRESS_COUNTRY)
                .into_iter()
                .filter(|c| {
                    c.split(' ')
                        .all(|w| !person_words.contains(&w.to_lowercase()))
                })
                .collect();
            Lists {
                first,
                last,
                countries,
                city_prefix: <EN as Data>::ADDRESS_CITY_PREFIX,
                city_suffix: <EN as Data>::ADDRESS_CITY_SUFFIX,
            }
        })
    }
}

/// Draws the names of one world, each unique (case-insensitively) within it.
struct Names {
    rng: Rng,
    used: HashSet<String>,
}

/// Draws of a list-built name before falling back to a random-syllable one (only a world larger
/// than the lists' combinations ever gets there: ~1.4 M people, ~500 K cities, ~220 K companies;
/// a world has at most 200 countries, fewer than the list holds).
const NAME_TRIES: usize = 64;

impl Names {
    /// A random-syllable word (the fallback when the lists run out).
    fn word(&mut self, syllables: usize) -> String {
        const ON: [&str; 20] = [
            "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br",
            "st", "tr", "gl",
        ];
        const NU: [&str; 8] = ["a", "e", "i", "o", "u", "ae", "io", "ou"];
        const CO: [&str; 8] = ["", "", "n", "r", "s", "l", "th", "m"];
        let mut w = String::new();
        for _ in 0..syllables {
            w.push_str(self.rng.pick(&ON));
            w.push_str(self.rng.pick(&NU));
            w.push_str(self.rng.pick(&CO));
        }
        let mut c = w.chars();
        match c.next() {
            Some(f) => f.to_uppercase().chain(c).collect(),
            None => w,
        }
    }

    /// A fresh name not used before in this world: `make` up to [`NAME_TRIES`] times, then
    /// `fallback` until one is fresh.
    fn unique(
        &mut self,
        make: impl Fn(&mut Self) -> String,
        fallback: impl Fn(&mut Self) -> String,
    ) -> String {
        for _ in 0..NAME_TRIES {
            let n = make(self);
            if self.used.insert(n.to_lowercase()) {
                return n;
            }
        }
        loop {
            let n = fallback(self);
            if self.used.insert(n.to_lowercase()) {
                return n;
            }
        }
    }

    fn syllables(&mut self) -> String {
        let syl = 2 + self.rng.below(2);
        self.word(syl)
    }

    /// A country: a real country's name (the facts about it are invented).
    fn country(&mut self) -> String {
        let l = Lists::get();
        self.unique(|s| s.rng.pick(&l.countries).to_string(), Self::syllables)
    }

    /// A city as `fake` builds them: `[Prefix ]Name+suffix` ("Port Aaronville", "Abbottburgh").
    fn city(&mut self) -> String {
        let l = Lists::get();
        self.unique(
            |s| {
                let stem = if s.rng.below(2) == 0 {
                    s.rng.pick(&l.first)
                } else {
                    s.rng.pick(&l.last)
                };
                let suffix = s.rng.pick(l.city_suffix);
                if s.rng.below(4) == 0 {
                    format!("{} {stem}{suffix}", s.rng.pick(l.city_prefix))
                } else {
                    format!("{stem}{suffix}")
                }
            },
            Self::syllables,
        )
    }

    /// A person's (first, last) name, the full name unique in the world.
    fn person(&mut self) -> (String, String) {
        let l = Lists::get();
        let full = self.unique(
            |s| format!("{} {}", s.rng.pick(&l.first), s.rng.pick(&l.last)),
            |s| {
                let first = s.rng.pick(&l.first);
                format!("{first} {}", s.syllables())
            },
        );
        let (first, last) = full.split_once(' ').expect("a full name has a space");
        (first.to_string(), last.to_string())
    }

    /// A company: `Last Kind` or `Last and Last` (after `fake`'s company templates; the second
    /// form has no kind so that no company's name contains another's, as "A and B Group" would
    /// contain "B Group").
    fn company(&mut self) -> String {
        const KINDS: [&str; 5] = ["Works", "Holdings", "Company", "Industries", "Group"];
        let l = Lists::get();
        self.unique(
            |s| {
                let a = s.rng.pick(&l.last);
                if s.rng.below(3) == 0 {
                    format!("{a} and {}", s.rng.pick(&l.last))
                } else {
                    format!("{a} {}", s.rng.pick(&KINDS))
                }
            },
            |s| {
                let w = s.word(2);
                format!("{w} {}", s.rng.pick(&KINDS))
            },
        )
    }
}

impl World {
    /// A world with about `passages` passages (at least 10), from `seed`.
    pub fn generate(seed: u64, passages: usize) -> Self {
        let n = passages.max(10);
        let mut rng = Rng::new(seed);
        let mut names = Names {
            rng: Rng::new(seed.wrapping_add(1)),
            used: HashSet::new(),
        };
        let n_countries = (n / 50).clamp(3, 200);
        let n_cities = (n / 5).max(n_countries);
        let n_companies = n / 5;
        let n_people = n - n_countries - n_cities - n_companies;

        let mut countries: Vec<Country> = (0..n_countries)
            .map(|_| {
                let name = names.country();
                let official = format!(
                    "{} of {name}",
                    rng.pick(&["Republic", "Kingdom", "Federation", "Commonwealth"])
                );
                Country {
                    name,
                    official,
                    capital: 0,
                }
            })
            .collect();
        let cities: Vec<City> = (0..n_cities)
            .map(|i| City {
                name: names.city(),
                // Every country gets at least one city (its capital).
                country: if i < n_countries {
                    i
                } else {
                    rng.below(n_countries)
                },
                founded: 800 + rng.below(1100) as u32,
            })
            .collect();
        for (i, c) in countries.iter_mut().enumerate() {
            c.capital = i;
        }
        let mut people: Vec<Person> = (0..n_people)
            .map(|_| {
                let (first, last) = names.person();
                Person {
                    initial: (b'A' + rng.below(26) as u8) as char,
                    first,
                    last,
                    born: 1820 + rng.below(180) as u32,
                    city: rng.below(n_cities),
                    occupation: rng.pick(&OCCUPATIONS),
                    employer: None,
                }
            })
            .collect();
        let companies: Vec<Company> = (0..n_companies)
            .map(|_| {
                let name = names.company();
                Company {
                    name,
                    founder: rng.below(n_people.max(1)),
                    city: rng.below(n_cities),
                    founded: 1850 + rng.below(170) as u32,
                    industry: rng.pick(&INDUSTRIES),
                }
            })
            .collect();
        if !companies.is_empty() {
            for p in people.iter_mut() {
                if rng.below(3) > 0 {
                    p.employer = Some(rng.below(companies.len()));
                }
            }
        }
        let mut world = World {
            countries,
            cities,
            companies,
            people,
            passages: Vec::new(),
        };
        world.passages = world.render_passages(&mut rng);
        world
    }

    fn render_passages(&self, rng: &mut Rng) -> Vec<Passage> {
        let mut out = Vec::with_capacity(
            self.countries.len() + self.cities.len() + self.companies.len() + self.people.len(),
        );
        let mut push = |title: &str, text: String| {
            let id = out.len().to_string();
            out.push(Passage {
                id,
                contents: format!("\"{title}\"\n{text}"),
            });
        };
        for c in &self.countries {
            let cap = &self.cities[c.capital].name;
            push(
                &c.name,
                format!(
                    "{name}, officially the {off}, is a country whose capital is {cap}. {name} is \
                     known for its {a} and {b} industries and a long coastline.",
                    name = c.name,
                    off = c.official,
                    a = rng.pick(&INDUSTRIES),
                    b = rng.pick(&INDUSTRIES),
                ),
            );
        }
        for c in &self.cities {
            let country = &self.countries[c.country].name;
            push(
                &c.name,
                format!(
                    "{name} is a city in {country}. It was founded in {year}. The city is known \
                     for its old harbour, its {ind} trade and its annual festival.",
                    name = c.name,
                    year = c.founded,
                    ind = rng.pick(&INDUSTRIES),
                ),
            );
        }
        for c in &self.companies {
            let founder = self
                .people
                .get(c.founder)
                .map_or("an unknown founder".into(), Person::name);
            push(
                &c.name,
                format!(
                    "{name} is a {ind} company founded in {year} by {founder}. Its headquarters \
                     are in {city}. The company grew quickly in its first decades.",
                    name = c.name,
                    ind = c.industry,
                    year = c.founded,
                    city = self.cities[c.city].name,
                ),
            );
        }
        for p in &self.people {
            let employer = p.employer.map_or(String::new(), |e| {
                format!(" {} worked for {}.", p.last, self.companies[e].name)
            });
            push(
                &p.name(),
                format!(
                    "{name} (also {alias}) was a {occ} born in {year} in {city}.{employer} \
                     {last} is remembered for work that influenced a generation.",
                    name = p.name(),
                    alias = p.aliases()[1],
                    occ = p.occupation,
                    year = p.born,
                    city = self.cities[p.city].name,
                    last = p.last,
                ),
            );
        }
        out
    }

    fn country_answers(&self, c: usize) -> Vec<String> {
        let c = &self.countries[c];
        vec![
            c.name.clone(),
            c.official.clone(),
            format!("the {}", c.official),
        ]
    }

    /// `count` questions for each dataset role, from `seed`: single-hop for the general roles,
    /// bridge and comparison for the multi-hop ones, about any entity.
    pub fn questions(&self, seed: u64, count: usize) -> Vec<Question> {
        self.questions_about(seed, count, Subjects::All)
    }

    /// The training questions of Search-R1's recipe: the [`TRAIN_SOURCES`] roles only, about
    /// training subjects ([`Subjects::Train`]), `per_source` of each, from `seed`.
    pub fn train_questions(&self, seed: u64, per_source: usize) -> Vec<Question> {
        self.questions_about(seed, per_source, Subjects::Train)
            .into_iter()
            .filter(|q| TRAIN_SOURCES.contains(&q.data_source.as_str()))
            .collect()
    }

    /// The held-out questions: every role of the evaluation about held-out subjects
    /// ([`Subjects::HeldOut`]), `per_source` of each, from the seed `!seed` (so they never
    /// share draws with [`train_questions`](Self::train_questions) for the same seed).
    pub fn held_out_questions(&self, seed: u64, per_source: usize) -> Vec<Question> {
        self.questions_about(!seed, per_source, Subjects::HeldOut)
    }

    /// [`questions`](Self::questions) whose subjects (the entities a question names) are all in
    /// `subjects`: the training and held-out splits ask about disjoint entities, so a held-out
    /// question is answered by the search skill, not by a fact remembered from training (every
    /// passage stays in the corpus for both). A world too small to have any admitted subject
    /// gives fewer questions (none).
    pub fn questions_about(&self, seed: u64, count: usize, subjects: Subjects) -> Vec<Question> {
        let mut rng = Rng::new(seed ^ 0x5EA7_C400);
        let mut ask = Asker {
            world: self,
            subjects,
        };
        let mut out = Vec::new();
        for source in GENERAL_SOURCES {
            for i in 0..count {
                let Some((question, golden)) = ask.single_hop(&mut rng) else {
                    break;
                };
                out.push(Question {
                    id: format!("{source}_{i}"),
                    question,
                    golden_answers: golden,
                    data_source: source.to_string(),
                    metadata: serde_json::json!({"hops": 1, "kind": "single"}),
                });
            }
        }
        for source in MULTI_HOP_SOURCES {
            for i in 0..count {
                let Some((question, golden, kind)) = ask.multi_hop(&mut rng) else {
                    break;
                };
                out.push(Question {
                    id: format!("{source}_{i}"),
                    question,
                    golden_answers: golden,
                    data_source: source.to_string(),
                    metadata: serde_json::json!({"hops": 2, "kind": kind}),
                });
            }
        }
        out
    }
}

/// Which entities questions may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subjects {
    /// Any entity.
    All,
    /// The training part: every entity but the held-out ones.
    Train,
    /// The held-out part: one entity in [`HELD_OUT_EVERY`] of each kind (every country, city,
    /// company and person whose index is `HELD_OUT_EVERY − 1` modulo it).
    HeldOut,
}

/// One entity in this many (of each kind) is a held-out subject.
pub const HELD_OUT_EVERY: usize = 8;

impl Subjects {
    fn admits(self, index: usize) -> bool {
        let held_out = index % HELD_OUT_EVERY == HELD_OUT_EVERY - 1;
        match self {
            Subjects::All => true,
            Subjects::Train => !held_out,
            Subjects::HeldOut => held_out,
        }
    }
}

/// Draws questions about the admitted subjects of a world.
struct Asker<'a> {
    world: &'a World,
    subjects: Subjects,
}

impl Asker<'_> {
    /// A uniformly drawn admitted index below `n` (`None` when there is none).
    fn pick(&self, rng: &mut Rng, n: usize) -> Option<usize> {
        if n == 0 || (n < HELD_OUT_EVERY && self.subjects == Subjects::HeldOut) {
            return None;
        }
        loop {
            let i = rng.below(n);
            if self.subjects.admits(i) {
                return Some(i);
            }
        }
    }

    /// A single-hop question about an admitted subject; `None` after many draws found none.
    fn single_hop(&mut self, rng: &mut Rng) -> Option<(String, Vec<String>)> {
        let w = self.world;
        for _ in 0..MAX_DRAWS {
            match rng.below(5) {
                0 if !w.people.is_empty() => {
                    let Some(i) = self.pick(rng, w.people.len()) else {
                        continue;
                    };
                    let p = &w.people[i];
                    return Some((
                        format!("Where was {} born?", p.name()),
                        vec![w.cities[p.city].name.clone()],
                    ));
                }
                1 if !w.people.is_empty() => {
                    let Some(i) = self.pick(rng, w.people.len()) else {
                        continue;
                    };
                    let p = &w.people[i];
                    return Some((
                        format!("In which year was {} born?", p.name()),
                        vec![p.born.to_string()],
                    ));
                }
                2 if !w.companies.is_empty() => {
                    let Some(i) = self.pick(rng, w.companies.len()) else {
                        continue;
                    };
                    let c = &w.companies[i];
                    if let Some(f) = w.people.get(c.founder) {
                        return Some((format!("Who founded {}?", c.name), f.aliases()));
                    }
                }
                3 => {
                    let Some(i) = self.pick(rng, w.countries.len()) else {
                        continue;
                    };
                    let c = &w.countries[i];
                    return Some((
                        format!("What is the capital of {}?", c.name),
                        vec![w.cities[c.capital].name.clone()],
                    ));
                }
                _ => {
                    let Some(c) = self.pick(rng, w.cities.len()) else {
                        continue;
                    };
                    return Some((
                        format!("In which country is {}?", w.cities[c].name),
                        w.country_answers(w.cities[c].country),
                    ));
                }
            }
        }
        None
    }

    /// A bridge or comparison question about admitted subjects; `None` after many draws found
    /// none.
    fn multi_hop(&mut self, rng: &mut Rng) -> Option<(String, Vec<String>, &'static str)> {
        let w = self.world;
        for _ in 0..MAX_DRAWS {
            match rng.below(3) {
                0 if !w.people.is_empty() => {
                    let Some(i) = self.pick(rng, w.people.len()) else {
                        continue;
                    };
                    let p = &w.people[i];
                    return Some((
                        format!("In which country was {} born?", p.name()),
                        w.country_answers(w.cities[p.city].country),
                        "bridge",
                    ));
                }
                1 => {
                    let subjects = self.subjects;
                    let with_employer: Vec<&Person> = w
                        .people
                        .iter()
                        .enumerate()
                        .filter(|(i, p)| p.employer.is_some() && subjects.admits(*i))
                        .map(|(_, p)| p)
                        .take(4096)
                        .collect();
                    if with_employer.is_empty() {
                        continue;
                    }
                    let p = with_employer[rng.below(with_employer.len())];
                    let c = &w.companies[p.employer.unwrap_or(0)];
                    if let Some(f) = w.people.get(c.founder) {
                        return Some((
                            format!("Who founded the company that {} worked for?", p.name()),
                            f.aliases(),
                            "bridge",
                        ));
                    }
                }
                _ if w.people.len() >= 2 => {
                    let (Some(a), Some(b)) = (
                        self.pick(rng, w.people.len()),
                        self.pick(rng, w.people.len()),
                    ) else {
                        continue;
                    };
                    let (pa, pb) = (&w.people[a], &w.people[b]);
                    if a == b || pa.born == pb.born {
                        continue;
                    }
                    let older = if pa.born < pb.born { pa } else { pb };
                    return Some((
                        format!("Who was born first, {} or {}?", pa.name(), pb.name()),
                        older.aliases(),
                        "comparison",
                    ));
                }
                _ => continue,
            }
        }
        None
    }
}

/// Draws a question generator makes before it gives up on a world with no admitted subject.
const MAX_DRAWS: usize = 100_000;

/// Writes JSON lines to `path` through a temp file renamed into place when complete.
fn write_jsonl<T: Serialize>(path: &Path, items: &[T]) -> Result<(), LoadError> {
    let tmp = temp_sibling(path);
    let write = || -> Result<(), LoadError> {
        let file = std::fs::File::create(&tmp).map_err(LoadError::io(&tmp, "create"))?;
        let mut w = BufWriter::new(file);
        for item in items {
            serde_json::to_writer(&mut w, item)
                .map_err(|e| LoadError::io(&tmp, "write")(e.into()))?;
            w.write_all(b"\n").map_err(LoadError::io(&tmp, "write"))?;
        }
        w.flush().map_err(LoadError::io(&tmp, "write"))?;
        std::fs::rename(&tmp, path).map_err(LoadError::io(path, "write"))
    };
    write().inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// `dir/.name.tmp-<pid>-<n>`: a temp file next to `path` (so on the same file system), unique
/// to this process and call.
pub(crate) fn temp_sibling(path: &Path) -> std::path::PathBuf {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path
        .file_name()
        .map_or_else(Default::default, |n| n.to_string_lossy());
    path.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

/// Writes passages as `wiki-18.jsonl` (one `{"id","contents"}` object per line).
pub fn write_corpus(path: &Path, passages: &[Passage]) -> Result<(), LoadError> {
    write_jsonl(path, passages)
}

/// Streams a `wiki-18.jsonl`-shaped corpus, calling `each` per passage (the real file has 21 M);
/// the first error (the file's, or `each`'s) ends it. For gzip and a progress count, see
/// [`super::corpus_file::CorpusFile`].
pub fn read_corpus<E: From<LoadError>>(
    path: &Path,
    mut each: impl FnMut(Passage) -> Result<(), E>,
) -> Result<usize, E> {
    let file = std::fs::File::open(path).map_err(LoadError::io(path, "open"))?;
    let mut n = 0;
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(LoadError::io(path, "read"))?;
        if line.trim().is_empty() {
            continue;
        }
        let p: Passage = serde_json::from_str(&line).map_err(|e| {
            LoadError::json(path, Some(i + 1), "{\"id\": str, \"contents\": str}", e)
        })?;
        each(p)?;
        n += 1;
    }
    Ok(n)
}

/// Writes questions as FlashRAG jsonl.
pub fn write_questions(path: &Path, questions: &[Question]) -> Result<(), LoadError> {
    write_jsonl(path, questions)
}

/// Reads FlashRAG jsonl questions (`data_source` may be absent; pass it as `default_source`).
pub fn read_questions(path: &Path, default_source: &str) -> Result<Vec<Question>, LoadError> {
    let file = std::fs::File::open(path).map_err(LoadError::io(path, "open"))?;
    let mut out = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(LoadError::io(path, "read"))?;
        if line.trim().is_empty() {
            continue;
        }
        let mut q: Question = serde_json::from_str(&line).map_err(|e| {
            LoadError::json(
                path,
                Some(i + 1),
                "{\"id\", \"question\", \"golden_answers\": [str, …]}",
                e,
            )
        })?;
        if q.golden_answers.is_empty() {
            return Err(LoadError::Field {
                path: path.to_path_buf(),
                line: i + 1,
                field: "golden_answers",
                reason: "empty (a question needs at least one answer)".into(),
            });
        }
        if q.data_source.is_empty() {
            q.data_source = default_source.to_string();
        }
        out.push(q);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first country, city, company and person of `World::generate(7, 500)`.
    const PINNED_FIRST_NAMES: [&str; 4] =
        ["Yemen", "Monteberg", "Blanda Group", "Freddie Williamson"];

    #[test]
    fn deterministic_and_shaped() {
        let a = World::generate(7, 500);
        let b = World::generate(7, 500);
        assert_eq!(a.passages, b.passages);
        assert_eq!(a.passages.len(), 500);
        let p = &a.passages[0];
        assert!(p.contents.starts_with('"'));
        assert_eq!(
            p.contents.lines().next().unwrap(),
            format!("\"{}\"", p.title())
        );
        let qs = a.questions(1, 5);
        assert_eq!(qs.len(), 5 * 7);
        assert!(qs.iter().all(|q| !q.golden_answers.is_empty()));
        let titles: HashSet<&str> = a.passages.iter().map(Passage::title).collect();
        assert_eq!(titles.len(), a.passages.len(), "titles are unique");
    }

    /// The names come from `fake`'s lists through our seeded RNG: the same world on every
    /// machine and build, and a change to the lists (a `fake` upgrade) fails here instead of
    /// silently changing every generated task, cached tokenizer and index.
    #[test]
    fn names_are_realistic_unique_and_pinned() {
        let w = World::generate(7, 500);
        let titles: Vec<&str> = w.passages.iter().map(Passage::title).collect();
        let country = w.countries.len();
        let city = country + w.cities.len();
        let company = city + w.companies.len();
        let firsts = [titles[0], titles[country], titles[city], titles[company]];
        assert_eq!(firsts, PINNED_FIRST_NAMES, "the generated names changed");
        let lists = Lists::get();
        for p in &w.people {
            assert!(lists.first.contains(&p.first.as_str()), "{}", p.first);
            assert!(lists.last.contains(&p.last.as_str()), "{}", p.last);
        }
        for c in &w.countries {
            assert!(lists.countries.contains(&c.name.as_str()), "{}", c.name);
        }
        for t in &titles {
            assert!(
                t.chars().all(|c| c.is_ascii_alphabetic() || c == ' '),
                "{t}"
            );
        }
        // When a list's combinations run out, names fall back to syllables and stay unique.
        let mut names = Names {
            rng: Rng::new(1),
            used: HashSet::new(),
        };
        let drawn: HashSet<String> = (0..50)
            .map(|_| names.unique(|_| "Oman".to_string(), Names::syllables))
            .collect();
        assert_eq!(drawn.len(), 50);
        assert!(drawn.contains("Oman"));
        let big = World::generate(1, 20_000);
        let titles: HashSet<String> = big
            .passages
            .iter()
            .map(|p| p.title().to_lowercase())
            .collect();
        assert_eq!(titles.len(), big.passages.len());
    }

    #[test]
    fn jsonl_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let w = World::generate(3, 50);
        let corpus = dir.path().join("wiki-18.jsonl");
        write_corpus(&corpus, &w.passages).unwrap();
        let mut back = Vec::new();
        read_corpus(&corpus, |p| {
            back.push(p);
            Ok::<(), LoadError>(())
        })
        .unwrap();
        assert_eq!(back, w.passages);
        let qs = w.questions(2, 3);
        let qpath = dir.path().join("test.jsonl");
        write_questions(&qpath, &qs).unwrap();
        assert_eq!(read_questions(&qpath, "nq").unwrap(), qs);
        // A FlashRAG row without data_source or metadata.
        std::fs::write(
            &qpath,
            "{\"id\":\"1\",\"question\":\"q?\",\"golden_answers\":[\"a\"]}\n",
        )
        .unwrap();
        let q = read_questions(&qpath, "popqa").unwrap();
        assert_eq!(q[0].data_source, "popqa");
        std::fs::write(&qpath, "{\"id\":\"1\",\"question\":\"q?\"}\n").unwrap();
        let err = read_questions(&qpath, "nq").unwrap_err();
        assert!(
            matches!(&err, LoadError::Json { line: 1, path, .. } if *path == qpath),
            "{err:?}"
        );
        assert!(err.to_string().contains("line 1"), "{err}");
        std::fs::write(
            &qpath,
            "{\"id\":\"1\",\"question\":\"q?\",\"golden_answers\":[\"a\"]}\n\n{\"id\":\"2\",\"question\":\"q?\",\"golden_answers\":[]}\n",
        )
        .unwrap();
        let err = read_questions(&qpath, "nq").unwrap_err();
        assert!(
            matches!(
                &err,
                LoadError::Field {
                    line: 3,
                    field: "golden_answers",
                    ..
                }
            ),
            "{err:?}"
        );
        let missing = dir.path().join("missing.jsonl");
        let err = read_questions(&missing, "nq").unwrap_err();
        assert!(
            matches!(&err, LoadError::Io { action: "open", .. }),
            "{err:?}"
        );
        assert_eq!(err.path(), missing);
        // The writers leave no temp file behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.contains(".tmp-")), "{names:?}");
    }
}

#[cfg(test)]
mod subject_tests {
    use super::*;

    /// `text` with every non-alphanumeric character a space, padded: whole names are then
    /// found as `" name "`.
    fn words(text: &str) -> String {
        let t: String = text
            .chars()
            .map(|c| if c.is_alphanumeric() { c } else { ' ' })
            .collect();
        format!(" {} ", t.split_whitespace().collect::<Vec<_>>().join(" "))
    }

    #[test]
    fn train_and_held_out_questions_ask_about_disjoint_entities() {
        let world = World::generate(3, 2000);
        let held = |i: usize| Subjects::HeldOut.admits(i);
        // The held-out subjects' names: people (full name), companies, countries, cities.
        let mut held_names: Vec<String> = Vec::new();
        held_names.extend(
            world
                .people
                .iter()
                .enumerate()
                .filter(|(i, _)| held(*i))
                .map(|(_, p)| p.name()),
        );
        let named: [Vec<String>; 3] = [
            world.companies.iter().map(|c| c.name.clone()).collect(),
            world.countries.iter().map(|c| c.name.clone()).collect(),
            world.cities.iter().map(|c| c.name.clone()).collect(),
        ];
        for names in named {
            held_names.extend(
                names
                    .into_iter()
                    .enumerate()
                    .filter(|(i, _)| held(*i))
                    .map(|(_, s)| s),
            );
        }
        let train = world.questions_about(11, 300, Subjects::Train);
        let test = world.questions_about(!11, 40, Subjects::HeldOut);
        assert_eq!(train.len(), 7 * 300);
        assert_eq!(test.len(), 7 * 40);
        // Every held-out question names a held-out subject …
        for q in &test {
            let w = words(&q.question);
            assert!(
                held_names.iter().any(|n| w.contains(&words(n))),
                "{}",
                q.question
            );
        }
        // … and no training question names one as its subject (answers may still be held-out
        // entities: the founder of a training company, the capital of a training country).
        let subject = |q: &str| -> String {
            for pre in [
                "Where was ",
                "In which year was ",
                "Who founded the company that ",
                "Who founded ",
                "What is the capital of ",
                "In which country is ",
                "In which country was ",
                "Who was born first, ",
            ] {
                if let Some(r) = q.strip_prefix(pre) {
                    return r.to_string();
                }
            }
            panic!("unknown question form: {q}");
        };
        for q in &train {
            let w = words(&subject(&q.question));
            for n in &held_names {
                assert!(!w.contains(&words(n)), "{} names held-out {n}", q.question);
            }
        }
        // `All` keeps the draws of the original generator.
        assert_eq!(
            world.questions(5, 3),
            world.questions_about(5, 3, Subjects::All)
        );
        // A world too small to hold a held-out subject gives no held-out questions.
        let tiny = World::generate(1, 10);
        assert!(tiny.questions_about(1, 2, Subjects::HeldOut).is_empty());
    }
}
