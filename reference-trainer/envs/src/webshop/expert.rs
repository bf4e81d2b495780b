//! A WebShop expert for demonstrations and for proving goals solvable, in two kinds
//! ([`Demonstrator`]):
//!
//! - **privileged** (the default): it knows the goal product (as a demonstrator holding the
//!   target page would). It searches with the instruction's words, pages through the results for
//!   the target, falls back to searching the target's title, opens it, clicks the goal's option
//!   values and buys. It always wins, but its choice among look-alike results rests on what no
//!   page shows, so a policy imitating it learns an arbitrary pick.
//! - **shopper**: it acts only on what the instruction and the pages show. It searches with the
//!   instruction as written (without its price text; the product words alone if that finds
//!   nothing), opens the first result whose listed price (the lower end of a range)
//!   is below the instruction's limit (the first result when none is), clicks the instruction's
//!   option values the page offers and buys. Every decision is a function of the prompt, so a
//!   policy can learn it exactly; it wins only when that product happens to satisfy the goal
//!   (measured on the generated shop of 1,000 products: README).
//!
//! Each response is a full policy response, `<think>…</think>\n<action>…</action>` (strict
//! format, valid under [`super::project`]), the cold-start demonstration data. The rationale is
//! built from what the page shows and what the instruction asks, with the wording and the
//! optional sentences chosen by the expert's seeded generator:
//!
//! - search page: what is wanted (the instruction's product words), optionally the required
//!   attributes, the required options and the price limit, then why this query
//!   (e.g. "The instruction asks for a pair of running shoes. It needs size: 9, and color: black.
//!   The price has to stay below 40.00 dollars. I'll search for the product words.");
//! - results page: how many results the page shows and that the listed item (ASIN, title,
//!   price) matches the instruction, or that none does and the next page or a more specific
//!   search (the product's title) comes next;
//! - product page: the option the instruction asks for and the values the page offers
//!   ("The instruction wants color: black; this page offers black, white. I'll select black."),
//!   or, once every option is set, the chosen options and the price against the limit before
//!   `buy now`; a wrong product or a sub-page leads back with `< prev`.

use super::goal::Goal;
use super::reward::GoalOptions;
use super::site::{Catalog, Page, Session, PRODUCT_WINDOW};
use super::WebshopEnv;
use crate::rng::Rng;
use crate::{format_response, Expert, Observation};

/// Which demonstrator an environment's [`crate::WithExpert::expert`] builds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Demonstrator {
    /// Knows the goal product; always wins.
    #[default]
    Privileged,
    /// Acts on what the instruction and the pages show (first result within the price limit).
    Shopper,
}

/// One episode of the expert.
#[derive(Clone, Debug)]
pub struct WebshopExpert {
    kind: Demonstrator,
    searched_title: bool,
    rng: Rng,
}

/// The lowest price a listed price tag shows (`"$24.33 to $36.49"` → 24.33), if it parses.
pub fn listed_price(tag: &str) -> Option<f64> {
    let first = tag.split(" to ").next()?.trim();
    first.strip_prefix('$')?.replace(',', "").parse().ok()
}

/// The search words of an instruction: without "find me" / "i am looking for" and the price text.
pub fn instruction_query(instruction: &str) -> String {
    let lower = instruction.to_lowercase();
    let body = lower
        .split(", and price lower than")
        .next()
        .unwrap_or(&lower);
    let body = body.split(" with ").next().unwrap_or(body);
    body.trim_start_matches("find me ")
        .trim_start_matches("i am looking for ")
        .trim()
        .to_string()
}

/// What an instruction asks for, as written: lowercased, without "find me" / "i am looking for"
/// and the price text ("modern chair with easy assemble with color: light pink, and size:
/// king"). The shopper's query: a span of the prompt, copied as it stands.
pub fn instruction_request(instruction: &str) -> String {
    let lower = instruction.to_lowercase();
    let body = lower
        .split(", and price lower than")
        .next()
        .unwrap_or(&lower);
    body.trim_start_matches("find me ")
        .trim_start_matches("i am looking for ")
        .trim()
        .to_string()
}

/// What the expert does next and why (the rationale is rendered from this).
enum Move {
    Search {
        title: bool,
    },
    Open,
    /// The shopper's search found nothing: a shorter query.
    SearchShorter,
    /// The shopper opens this listed product.
    OpenListed(usize),
    NextPage,
    WrongItem,
    Choose(String),
    Buy,
    Back(Page),
    Done,
}

/// The goal's option values in goal order, each with its option name when the goal has one.
fn wanted_options(goal: &Goal) -> Vec<(Option<String>, String)> {
    match &goal.reward.goal_options {
        GoalOptions::Dict(d) => d
            .iter()
            .map(|(n, v)| (Some(n.clone()), v.clone()))
            .collect(),
        GoalOptions::List(l) => l.iter().map(|v| (None, v.clone())).collect(),
    }
}

/// At most `n` words of `title` (real titles run to 200 characters).
fn short_title(title: &str, n: usize) -> String {
    let words: Vec<&str> = title.split_whitespace().collect();
    if words.len() <= n {
        words.join(" ")
    } else {
        format!("{} ...", words[..n].join(" "))
    }
}

fn price_limit(goal: &Goal) -> Option<String> {
    // The price rule's "no limit" value (the product costs more than 980).
    (goal.reward.price_upper < 1_000_000.0).then(|| format!("{:.2}", goal.reward.price_upper))
}

impl WebshopExpert {
    /// A privileged expert for one episode; `seed` chooses the rationale wording.
    pub fn new(seed: u64) -> Self {
        Self::of_kind(Demonstrator::Privileged, seed)
    }

    /// An expert of `kind` for one episode; `seed` chooses the rationale wording.
    pub fn of_kind(kind: Demonstrator, seed: u64) -> Self {
        Self {
            kind,
            searched_title: false,
            rng: Rng::new(seed),
        }
    }

    /// The shopper's product on a results page: the first whose listed price is below the
    /// instruction's limit, else the first (`None` on an empty page).
    fn shopper_pick(session: &Session, catalog: &Catalog, goal: &Goal) -> Option<usize> {
        let results = session.page_results();
        results
            .iter()
            .copied()
            .find(|&i| {
                listed_price(&catalog.products[i].price_tag)
                    .is_some_and(|p| p < goal.reward.price_upper)
            })
            .or_else(|| results.first().copied())
    }

    fn decide(&mut self, session: &Session, catalog: &Catalog, goal: &Goal) -> (String, Move) {
        if self.kind == Demonstrator::Shopper {
            return self.decide_shopper(session, catalog, goal);
        }
        let target = catalog.products[goal.product].asin.to_lowercase();
        let clickables = session.clickables(catalog);
        let title_search = |this: &mut Self| {
            this.searched_title = true;
            (
                format!(
                    "search[{}]",
                    catalog.products[goal.product].title.to_lowercase()
                ),
                Move::Search { title: true },
            )
        };
        match session.page {
            Page::Search => (
                format!("search[{}]", instruction_query(&goal.instruction_text)),
                Move::Search { title: false },
            ),
            Page::Results => {
                if clickables.contains(&target) {
                    (format!("click[{target}]"), Move::Open)
                } else if session.page_results().is_empty() || self.searched_title {
                    title_search(self)
                } else if session.page_results().len() == PRODUCT_WINDOW {
                    ("click[next >]".to_string(), Move::NextPage)
                } else {
                    title_search(self)
                }
            }
            Page::Item if session.item() != Some(goal.product) => {
                ("click[< prev]".to_string(), Move::WrongItem)
            }
            p @ (Page::Item | Page::Description | Page::Features | Page::Reviews | Page::Done) => {
                Self::on_the_product(p, session, &clickables, goal)
            }
        }
    }

    /// Both kinds on the product they opened (the privileged expert only once it is the goal's):
    /// click the goal's next offered option value, else buy; back from a detail page.
    fn on_the_product(
        page: Page,
        session: &Session,
        clickables: &[String],
        goal: &Goal,
    ) -> (String, Move) {
        match page {
            Page::Item => {
                let chosen: Vec<&String> = session.options.iter().map(|(_, v)| v).collect();
                match wanted_options(goal)
                    .into_iter()
                    .find(|(_, w)| clickables.contains(w) && !chosen.contains(&w))
                {
                    Some((_, v)) => (format!("click[{v}]"), Move::Choose(v)),
                    None => ("click[buy now]".to_string(), Move::Buy),
                }
            }
            Page::Done => ("click[back to search]".to_string(), Move::Done),
            p => ("click[< prev]".to_string(), Move::Back(p)),
        }
    }

    fn decide_shopper(
        &mut self,
        session: &Session,
        catalog: &Catalog,
        goal: &Goal,
    ) -> (String, Move) {
        let clickables = session.clickables(catalog);
        let query = instruction_request(&goal.instruction_text);
        match session.page {
            Page::Search => (format!("search[{query}]"), Move::Search { title: false }),
            Page::Results => match Self::shopper_pick(session, catalog, goal) {
                Some(i) => (
                    format!("click[{}]", catalog.products[i].asin.to_lowercase()),
                    Move::OpenListed(i),
                ),
                // No result at all: a shorter query (the last two product words) may find some.
                None => (
                    format!("search[{}]", instruction_query(&goal.instruction_text)),
                    Move::SearchShorter,
                ),
            },
            p @ (Page::Item | Page::Description | Page::Features | Page::Reviews | Page::Done) => {
                Self::on_the_product(p, session, &clickables, goal)
            }
        }
    }

    /// The next action (`search[...]` or `click[...]`) for the session.
    pub fn act(&mut self, session: &Session, catalog: &Catalog, goal: &Goal) -> String {
        self.decide(session, catalog, goal).0
    }

    /// The full response (`<think>…</think>\n<action>…</action>`) for the session.
    pub fn response(&mut self, session: &Session, catalog: &Catalog, goal: &Goal) -> String {
        let (action, why) = self.decide(session, catalog, goal);
        let think = self.think(&why, session, catalog, goal);
        format_response(&think, "action", &action)
    }

    fn think(&mut self, why: &Move, session: &Session, catalog: &Catalog, goal: &Goal) -> String {
        let kind = self.kind;
        let query = instruction_query(&goal.instruction_text);
        // The product the pages are about: the goal's for the privileged expert, the open one
        // for the shopper (who never knows the goal's).
        let product = match (self.kind, session.item()) {
            (Demonstrator::Shopper, Some(i)) => &catalog.products[i],
            _ => &catalog.products[goal.product],
        };
        let wanted = wanted_options(goal);
        let limit = price_limit(goal);
        let rng = &mut self.rng;
        let mut s: Vec<String> = Vec::new();
        match why {
            Move::Search { title: false } if kind == Demonstrator::Shopper => {
                s.push(match rng.below(3) {
                    0 => format!("The instruction asks for {query}."),
                    1 => format!("I need to find {query}."),
                    _ => format!("I'm shopping for {query}."),
                });
                if let Some(l) = &limit {
                    if rng.chance(0.5) {
                        s.push(format!("The price has to stay below {l} dollars."));
                    }
                }
                s.push(
                    rng.pick(&[
                        "I'll search with the whole request.",
                        "A search with every word of the request should bring it up first.",
                    ])
                    .to_string(),
                );
            }
            Move::Search { title: false } => {
                s.push(match rng.below(3) {
                    0 => format!("The instruction asks for {query}."),
                    1 => format!("I need to find {query}."),
                    _ => format!("I'm shopping for {query}."),
                });
                let attrs = &goal.reward.attributes;
                if !attrs.is_empty() && rng.chance(0.6) {
                    s.push(format!("It should be {}.", attrs.join(", ")));
                }
                if !wanted.is_empty() && rng.chance(0.7) {
                    let list: Vec<String> = wanted
                        .iter()
                        .map(|(n, v)| n.as_ref().map_or(v.clone(), |n| format!("{n}: {v}")))
                        .collect();
                    s.push(format!("It needs {}.", list.join(", and ")));
                }
                if let Some(l) = &limit {
                    if rng.chance(0.7) {
                        s.push(format!("The price has to stay below {l} dollars."));
                    }
                }
                s.push(
                    rng.pick(&[
                        "I'll search for the product words.",
                        "A search with the main product words should bring it up.",
                        "Let me search for it first.",
                    ])
                    .to_string(),
                );
            }
            Move::Search { title: true } => {
                s.push(match rng.below(2) {
                    0 => format!("The results so far don't show a good match for {query}."),
                    _ => format!("I haven't found {query} in these results."),
                });
                s.push(
                    rng.pick(&[
                        "A more specific search with the full product name should find it.",
                        "I'll search again with a more specific query.",
                    ])
                    .to_string(),
                );
            }
            Move::Open => {
                let n = session.page_results().len();
                if rng.chance(0.5) {
                    s.push(format!("This results page lists {n} products."));
                }
                s.push(format!(
                    "{} ({}, {}) matches {query}.",
                    product.asin,
                    short_title(&product.title, 10),
                    product.price_tag
                ));
                if let Some(l) = &limit {
                    if rng.chance(0.5) {
                        s.push(format!("Its price looks within the {l} dollar limit."));
                    }
                }
                s.push(
                    rng.pick(&[
                        "I'll open it to check the options.",
                        "Let me open this product.",
                        "I'll click on it.",
                    ])
                    .to_string(),
                );
            }
            Move::SearchShorter => {
                s.push(format!("The search for {query} shows no result."));
                s.push("I'll search again with fewer words.".to_string());
            }
            Move::OpenListed(i) => {
                let p = &catalog.products[*i];
                let first = session.page_results().first() == Some(i);
                let fits = listed_price(&p.price_tag).is_some_and(|x| x < goal.reward.price_upper);
                s.push(match (&limit, fits, first) {
                    (Some(l), true, true) => format!(
                        "The first result, {} at {}, is within the {l} dollar limit.",
                        short_title(&p.title, 8),
                        p.price_tag
                    ),
                    (Some(l), true, false) => format!(
                        "The first result within the {l} dollar limit is {} at {}.",
                        short_title(&p.title, 8),
                        p.price_tag
                    ),
                    (Some(l), false, _) => format!(
                        "No result is below the {l} dollar limit; the first is {} at {}.",
                        short_title(&p.title, 8),
                        p.price_tag
                    ),
                    (None, _, _) => format!(
                        "There is no price limit; the first result is {} at {}.",
                        short_title(&p.title, 8),
                        p.price_tag
                    ),
                });
                s.push(
                    rng.pick(&["I'll open it to check the options.", "Let me open it."])
                        .to_string(),
                );
            }
            Move::NextPage => {
                let n = session.page_results().len();
                s.push(match rng.below(2) {
                    0 => format!("None of the {n} products on this page is the {query} I need."),
                    _ => format!("I don't see {query} among these {n} results."),
                });
                s.push(
                    rng.pick(&["I'll check the next page.", "The next page may have it."])
                        .to_string(),
                );
            }
            Move::WrongItem => {
                s.push(format!(
                    "This product isn't the {query} the instruction describes."
                ));
                s.push("I'll go back to the results.".to_string());
            }
            Move::Choose(v) => {
                let name = wanted
                    .iter()
                    .find(|(_, w)| w == v)
                    .and_then(|(n, _)| n.clone());
                let offered = product
                    .options
                    .iter()
                    .find(|(_, vs)| vs.contains(v))
                    .map(|(n, vs)| (n.clone(), vs.clone()));
                if rng.chance(0.4) {
                    s.push(format!(
                        "I'm on the page of {}.",
                        short_title(&product.title, 8)
                    ));
                }
                let wanted_text = match &name {
                    Some(n) => format!("{n}: {v}"),
                    None => v.clone(),
                };
                s.push(format!("The instruction wants {wanted_text}."));
                if let Some((n, vs)) = offered {
                    if rng.chance(0.7) {
                        let shown: Vec<&str> = vs.iter().take(6).map(String::as_str).collect();
                        let more = if vs.len() > 6 { ", ..." } else { "" };
                        s.push(format!(
                            "The {n} options here are {}{more}.",
                            shown.join(", ")
                        ));
                    }
                }
                s.push(match rng.below(2) {
                    0 => format!("I'll select {v}."),
                    _ => format!("So I click {v}."),
                });
            }
            Move::Buy => {
                if session.options.is_empty() && kind == Demonstrator::Shopper {
                    s.push("This product has no option to set.".to_string());
                } else if session.options.is_empty() {
                    s.push(
                        rng.pick(&[
                            "This is the product, and there is no option to set.",
                            "This product matches and needs no option choice.",
                        ])
                        .to_string(),
                    );
                } else {
                    let set: Vec<String> = session
                        .options
                        .iter()
                        .map(|(n, v)| format!("{n}: {v}"))
                        .collect();
                    s.push(format!(
                        "Every requested option is selected ({}).",
                        set.join(", ")
                    ));
                }
                let fits =
                    listed_price(&product.price_tag).is_some_and(|x| x < goal.reward.price_upper);
                match &limit {
                    Some(l) if fits || kind == Demonstrator::Privileged => s.push(format!(
                        "The listed price {} fits within the {l} dollar limit.",
                        product.price_tag
                    )),
                    Some(l) => s.push(format!(
                        "The listed price {} is above the {l} dollar limit, but no result was below it.",
                        product.price_tag
                    )),
                    None if rng.chance(0.5) => {
                        s.push("The instruction sets no price limit.".to_string())
                    }
                    None => {}
                }
                s.push(
                    rng.pick(&["I'll buy it now.", "Time to buy it.", "I'll click buy now."])
                        .to_string(),
                );
            }
            Move::Back(page) => {
                let name = match page {
                    Page::Description => "description",
                    Page::Features => "features",
                    _ => "reviews",
                };
                s.push(format!(
                    "This is the {name} page; I need the product page to choose options and buy."
                ));
                s.push("I'll go back.".to_string());
            }
            Move::Done => s.push("The purchase is done.".to_string()),
        }
        s.join(" ")
    }
}

impl Expert<WebshopEnv> for WebshopExpert {
    fn respond(&mut self, env: &WebshopEnv, _observation: &Observation) -> String {
        // The session holds everything the page shows; the formatted observation adds nothing.
        self.response(env.session(), &env.shop().catalog, env.goal())
    }
}
