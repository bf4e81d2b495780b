//! A WebShop expert for demonstrations and for proving goals solvable. It is privileged: it knows
//! the goal product (as a demonstrator holding the target page would). It searches with the
//! instruction's words, pages through the results for the target, falls back to searching the
//! target's title, opens it, clicks the goal's option values and buys. Each response carries a
//! short `<think>` rationale.

use super::goal::Goal;
use super::reward::GoalOptions;
use super::site::{Catalog, Page, Session};

/// One episode of the expert.
#[derive(Clone, Debug, Default)]
pub struct WebshopExpert {
    searched_title: bool,
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

impl WebshopExpert {
    /// The next action (`search[...]` or `click[...]`) for the session.
    pub fn act(&mut self, session: &Session, catalog: &Catalog, goal: &Goal) -> String {
        let target = catalog.products[goal.product].asin.to_lowercase();
        let clickables = session.clickables(catalog);
        match session.page {
            Page::Search => format!("search[{}]", instruction_query(&goal.instruction_text)),
            Page::Results => {
                if clickables.contains(&target) {
                    format!("click[{target}]")
                } else if session.page_results().is_empty() || self.searched_title {
                    self.searched_title = true;
                    format!(
                        "search[{}]",
                        catalog.products[goal.product].title.to_lowercase()
                    )
                } else if session.page_results().len() == super::site::PRODUCT_WINDOW {
                    "click[next >]".to_string()
                } else {
                    self.searched_title = true;
                    format!(
                        "search[{}]",
                        catalog.products[goal.product].title.to_lowercase()
                    )
                }
            }
            Page::Item if session.item() != Some(goal.product) => "click[< prev]".to_string(),
            Page::Item => {
                let wanted: Vec<String> = match &goal.reward.goal_options {
                    GoalOptions::Dict(d) => d.iter().map(|(_, v)| v.clone()).collect(),
                    GoalOptions::List(l) => l.clone(),
                };
                let chosen: Vec<&String> = session.options.iter().map(|(_, v)| v).collect();
                match wanted
                    .iter()
                    .find(|w| clickables.contains(w) && !chosen.contains(w))
                {
                    Some(v) => format!("click[{v}]"),
                    None => "click[buy now]".to_string(),
                }
            }
            Page::Description | Page::Features | Page::Reviews => "click[< prev]".to_string(),
            Page::Done => "click[back to search]".to_string(),
        }
    }

    /// A full response with a rationale.
    pub fn respond(&mut self, session: &Session, catalog: &Catalog, goal: &Goal) -> String {
        let action = self.act(session, catalog, goal);
        let why = if action.starts_with("search[") {
            "I search for the product the instruction describes."
        } else if action == "click[buy now]" {
            "The options match the instruction and the price is within budget, so I buy it."
        } else if action == "click[next >]" {
            "The matching product is not on this page; I look at the next one."
        } else {
            "This is the product (or option) the instruction asks for."
        };
        format!("<think>{why}</think><action>{action}</action>")
    }
}
