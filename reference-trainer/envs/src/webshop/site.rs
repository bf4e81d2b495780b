//! The WebShop text environment (`WebAgentTextEnv`, spec §1.5–1.6): pages, their `text`-mode
//! rendering (visible text nodes joined by ` [SEP] `), clickables, the `name[arg]` action grammar
//! and the transitions, including search accepted on every page, `Next >` always shown, 10
//! results a page out of the top 50, and the hidden `<r>`/`<a>`/`<c>`/`<q>` keywords.

use super::data::{python_float, Product};
use super::goal::Goal;
use super::reward::{reward, Purchased, RewardInfo};
use super::search::Bm25;
use crate::rng::Rng;
use crate::search_qa::python_json_string;
use regex::Regex;
use std::sync::OnceLock;

/// Results per page.
pub const PRODUCT_WINDOW: usize = 10;
/// Results kept from a search.
pub const SEARCH_RETURN_N: usize = 50;

/// The page the session is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Page {
    /// The search (index) page.
    Search,
    /// A results page.
    Results,
    /// A product page.
    Item,
    /// Description sub-page.
    Description,
    /// Features sub-page.
    Features,
    /// Reviews sub-page.
    Reviews,
    /// After `Buy Now`.
    Done,
}

/// The catalog a session shops in: products after the load transforms, their reward prices and
/// the search index.
pub struct Catalog {
    /// Products.
    pub products: Vec<Product>,
    /// `product_prices` (ranges drawn once at load).
    pub prices: Vec<f64>,
    /// BM25 over the products.
    pub index: Bm25,
}

/// One shopping session (`session` of the original): page, results, item, chosen options.
#[derive(Clone, Debug)]
pub struct Session {
    rng: Rng,
    /// The current page.
    pub page: Page,
    results: Vec<usize>,
    page_no: usize,
    item: Option<usize>,
    /// Chosen options, `(name, value)` in the order first set.
    pub options: Vec<(String, String)>,
    /// The reward details once bought.
    pub bought: Option<RewardInfo>,
}

fn action_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"(?s)^(.+)\[(.+)\]").expect("static regex"))
}

impl Session {
    /// A session at the search page (`seed` drives the `<r>` keyword).
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Rng::new(seed),
            page: Page::Search,
            results: Vec::new(),
            page_no: 1,
            item: None,
            options: Vec::new(),
            bought: None,
        }
    }

    /// The product page's product, if any.
    pub fn item(&self) -> Option<usize> {
        self.item
    }

    /// The products on the current results page.
    pub fn page_results(&self) -> &[usize] {
        let start = ((self.page_no - 1) * PRODUCT_WINDOW).min(self.results.len());
        let end = (start + PRODUCT_WINDOW).min(self.results.len());
        &self.results[start..end]
    }

    /// Whether the page has the search bar.
    pub fn has_search_bar(&self) -> bool {
        self.page == Page::Search
    }

    /// The current page's clickables, in the original's order.
    pub fn clickables(&self, cat: &Catalog) -> Vec<String> {
        let mut c: Vec<String> = Vec::new();
        let mut push = |s: String| {
            if !c.contains(&s) {
                c.push(s);
            }
        };
        match self.page {
            Page::Search => push("search".into()),
            Page::Results => {
                push("back to search".into());
                if self.page_no > 1 {
                    push("< prev".into());
                }
                push("next >".into());
                for &i in self.page_results() {
                    push(cat.products[i].asin.to_lowercase());
                }
            }
            Page::Item => {
                for s in [
                    "back to search",
                    "< prev",
                    "description",
                    "features",
                    "reviews",
                    "buy now",
                ] {
                    push(s.into());
                }
                if let Some(i) = self.item {
                    for (_, values) in &cat.products[i].options {
                        for v in values {
                            push(v.clone());
                        }
                    }
                }
            }
            Page::Description | Page::Features | Page::Reviews => {
                push("back to search".into());
                push("< prev".into());
            }
            Page::Done => {}
        }
        c
    }

    /// The `text` observation.
    pub fn observation(&self, cat: &Catalog, goal: &Goal) -> String {
        let instr = &goal.instruction_text;
        let mut parts: Vec<String> = Vec::new();
        let head = |parts: &mut Vec<String>, prev: bool| {
            parts.extend([
                "Instruction:".to_string(),
                instr.clone(),
                "Back to Search".to_string(),
            ]);
            if prev {
                parts.push("< Prev".to_string());
            }
        };
        match self.page {
            Page::Search => parts.extend([
                "WebShop".to_string(),
                "Instruction:".into(),
                instr.clone(),
                "Search".into(),
            ]),
            Page::Results => {
                head(&mut parts, false);
                parts.push(format!(
                    "Page {} (Total results: {})",
                    self.page_no,
                    self.results.len()
                ));
                if self.page_no > 1 {
                    parts.push("< Prev".into());
                }
                parts.push("Next >".into());
                for &i in self.page_results() {
                    let p = &cat.products[i];
                    parts.extend([p.asin.clone(), p.title.clone(), p.price_tag.clone()]);
                }
            }
            Page::Item => {
                head(&mut parts, true);
                if let Some(i) = self.item {
                    let p = &cat.products[i];
                    for (name, values) in &p.options {
                        parts.push(name.clone());
                        parts.extend(values.iter().cloned());
                    }
                    parts.extend([
                        p.title.clone(),
                        format!("Price: {}", p.price_tag),
                        "Rating: N.A.".into(),
                    ]);
                    parts.extend(
                        ["Description", "Features", "Reviews", "Buy Now"].map(String::from),
                    );
                }
            }
            Page::Description => {
                head(&mut parts, true);
                parts.extend(self.item.map(|i| cat.products[i].description.clone()));
            }
            Page::Features => {
                head(&mut parts, true);
                parts.extend(
                    self.item
                        .into_iter()
                        .flat_map(|i| cat.products[i].bullet_points.clone()),
                );
            }
            Page::Reviews => head(&mut parts, true),
            Page::Done => {
                let asin = self
                    .item
                    .map_or("None".to_string(), |i| cat.products[i].asin.clone());
                let opts = format!(
                    "{{{}}}",
                    self.options
                        .iter()
                        .map(|(k, v)| format!(
                            "{}: {}",
                            python_json_string(k),
                            python_json_string(v)
                        ))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                let r = self.bought.as_ref().map_or(0.0, |b| b.reward);
                parts.extend(
                    [
                        "Thank you for shopping with us!",
                        "Your code:",
                        "None",
                        "(Paste it in your MTurk interface.)",
                        "Purchased",
                        "asin",
                        &asin,
                        "options",
                        &opts,
                        "attrs",
                        "None",
                        "category",
                        "None",
                        "query",
                        "None",
                        "product category",
                        "None",
                        "Target",
                        "asin",
                        "options",
                        "attrs",
                        "price upper",
                        "instuction text",
                        "category",
                        "product category",
                        "query",
                        "Goal",
                        "None",
                        "Reward",
                        "Your score (min 0.0, max 1.0)",
                        &python_float(r),
                        "Reward Details",
                        "None",
                    ]
                    .map(String::from),
                );
            }
        }
        parts
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" [SEP] ")
    }

    fn search(&mut self, cat: &Catalog, arg: &str) {
        let keywords: Vec<&str> = arg.split(' ').collect();
        let rest = keywords[1..].join(" ");
        self.results = match keywords[0] {
            "<r>" => {
                let mut all: Vec<usize> = (0..cat.products.len()).collect();
                super::goal::shuffle(&mut all, &mut self.rng);
                all.truncate(SEARCH_RETURN_N);
                all
            }
            "<a>" => (0..cat.products.len())
                .filter(|&i| cat.products[i].attributes.contains(&rest))
                .collect(),
            "<c>" => (0..cat.products.len())
                .filter(|&i| cat.products[i].category == rest)
                .collect(),
            "<q>" => (0..cat.products.len())
                .filter(|&i| cat.products[i].query == rest)
                .collect(),
            _ => cat
                .index
                .search(&keywords.join(" "), SEARCH_RETURN_N)
                .into_iter()
                .map(|(d, _)| d)
                .collect(),
        };
        self.page = Page::Results;
        self.page_no = 1;
        self.item = None;
        self.options.clear();
    }

    /// Applies an action text; invalid ones change nothing. Returns whether it was valid.
    pub fn act(&mut self, cat: &Catalog, goal: &Goal, action: &str) -> bool {
        if self.page == Page::Done {
            return false;
        }
        let Some(c) = action_re().captures(action) else {
            return false;
        };
        // The text env's `action_arg.lower()`: Python's str.lower(), not Rust's to_lowercase.
        let (name, arg) = (c[1].to_string(), super::python_text::lower(&c[2]));
        match name.as_str() {
            "search" if !arg.is_empty() => {
                self.search(cat, &arg);
                true
            }
            "click" if arg != "search" && self.clickables(cat).contains(&arg) => {
                self.click(cat, goal, &arg);
                true
            }
            _ => false,
        }
    }

    fn click(&mut self, cat: &Catalog, goal: &Goal, arg: &str) {
        match (self.page, arg) {
            (_, "back to search") => {
                *self = Session::new(self.rng.next_u64());
            }
            (Page::Results, "next >") => self.page_no += 1,
            (Page::Results, "< prev") => self.page_no -= 1,
            (Page::Item, "< prev") => {
                self.page = Page::Results;
                self.item = None;
                self.options.clear();
            }
            (Page::Description | Page::Features | Page::Reviews, "< prev") => {
                self.page = Page::Item
            }
            (Page::Item, "description") => self.page = Page::Description,
            (Page::Item, "features") => self.page = Page::Features,
            (Page::Item, "reviews") => self.page = Page::Reviews,
            (Page::Item, "buy now") => {
                if let Some(i) = self.item {
                    let p = &cat.products[i];
                    let bullets = p.bullet_points.join(" ");
                    let purchased = Purchased {
                        query: &p.query,
                        product_category: &p.product_category,
                        nouns: &p.nouns,
                        attributes: &p.attributes,
                        title: &p.title,
                        bullets_joined: &bullets,
                        description: &p.description,
                        price: cat.prices[i],
                    };
                    let values: Vec<String> = self.options.iter().map(|(_, v)| v.clone()).collect();
                    self.bought = Some(reward(&purchased, &goal.reward, &values));
                }
                self.page = Page::Done;
            }
            (Page::Results, asin) => {
                if let Some(i) = self
                    .page_results()
                    .iter()
                    .copied()
                    .find(|&i| cat.products[i].asin.to_lowercase() == asin)
                {
                    self.item = Some(i);
                    self.page = Page::Item;
                }
            }
            (Page::Item, value) => {
                if let Some(i) = self.item {
                    if let Some((name, _)) = cat.products[i]
                        .options
                        .iter()
                        .find(|(_, vs)| vs.iter().any(|v| v == value))
                    {
                        match self.options.iter_mut().find(|(n, _)| n == name) {
                            Some(slot) => slot.1 = value.to_string(),
                            None => self.options.push((name.clone(), value.to_string())),
                        }
                    }
                }
            }
            _ => {}
        }
    }
}
