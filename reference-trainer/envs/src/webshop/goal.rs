//! WebShop goals (spec §1.3): synthetic goals (one per element of the Cartesian product of a
//! product's option values, names sorted, dict options) and human goals (one per human record
//! with attributes, list options), the shared price rule, weights, the seeded shuffle and the
//! verl-agent split (test = first 500, train = the rest). The random draws use this crate's
//! seeded generator, not Python's `random`, so the same seed gives other (equally distributed)
//! prices and orders than the original.

use super::data::Product;
use super::reward::{GoalOptions, RewardGoal};
use crate::rng::Rng;
use std::collections::HashMap;

/// A goal.
#[derive(Clone, Debug, PartialEq)]
pub struct Goal {
    /// The goal product (its index in the catalog).
    pub product: usize,
    /// ASIN of the goal product.
    pub asin: String,
    /// The instruction shown to the agent (price text included).
    pub instruction_text: String,
    /// What the reward compares against.
    pub reward: RewardGoal,
    /// Sampling weight: synthetic goals, the mean of 1/count over the goal's attributes (count =
    /// how many goals share the attribute); human goals, 1 (as the original).
    pub weight: f64,
}

/// `price_upper` and the price text: two distinct draws among the first 4 of 10, 20, …, 990
/// above the price, the larger one; none above 980 → 1,000,000 and no text.
pub fn price_rule(price: f64, rng: &mut Rng) -> (f64, String) {
    let cand: Vec<u32> = (1..100)
        .map(|i| i * 10)
        .filter(|&p| p as f64 > price)
        .take(4)
        .collect();
    if cand.len() < 2 {
        return (1_000_000.0, String::new());
    }
    let i = rng.below(cand.len());
    let mut j = rng.below(cand.len() - 1);
    if j >= i {
        j += 1;
    }
    let upper = cand[i].max(cand[j]) as f64;
    (upper, format!(", and price lower than {upper:.2} dollars"))
}

fn reward_goal(
    p: &Product,
    attributes: Vec<String>,
    goal_options: GoalOptions,
    price_upper: f64,
) -> RewardGoal {
    RewardGoal {
        query: p.query.clone(),
        product_category: p.product_category.clone(),
        nouns: p.nouns.clone(),
        attributes,
        goal_options,
        price_upper,
    }
}

fn set_weights(goals: &mut [Goal]) {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for g in goals.iter() {
        for a in &g.reward.attributes {
            *counts.entry(a.clone()).or_insert(0) += 1;
        }
    }
    for g in goals.iter_mut() {
        let attrs = &g.reward.attributes;
        g.weight = if attrs.is_empty() {
            0.0
        } else {
            attrs.iter().map(|a| 1.0 / counts[a] as f64).sum::<f64>() / attrs.len() as f64
        };
    }
}

/// Synthetic goals (verl-agent's default). `prices[i]` is product `i`'s reward price.
pub fn synthetic_goals(products: &[Product], prices: &[f64], rng: &mut Rng) -> Vec<Goal> {
    let mut goals = Vec::new();
    for (i, p) in products.iter().enumerate() {
        let Some(instruction) = &p.instruction else {
            continue;
        };
        let (price_upper, price_text) = price_rule(prices[i], rng);
        let mut names: Vec<&(String, Vec<String>)> = p.options.iter().collect();
        names.sort_by(|a, b| a.0.cmp(&b.0));
        let mut combos: Vec<Vec<(String, String)>> = vec![Vec::new()];
        for (name, values) in names {
            if values.is_empty() {
                combos.clear();
                break;
            }
            combos = combos
                .into_iter()
                .flat_map(|c| {
                    values.iter().map(move |v| {
                        let mut c = c.clone();
                        c.push((name.clone(), v.clone()));
                        c
                    })
                })
                .collect();
        }
        for combo in combos {
            let opts = if combo.is_empty() {
                String::new()
            } else {
                format!(
                    " with {}",
                    combo
                        .iter()
                        .map(|(n, v)| format!("{n}: {v}"))
                        .collect::<Vec<_>>()
                        .join(", and ")
                )
            };
            goals.push(Goal {
                product: i,
                asin: p.asin.clone(),
                instruction_text: format!("{instruction}{opts}{price_text}"),
                reward: reward_goal(
                    p,
                    p.instruction_attributes.clone(),
                    GoalOptions::Dict(combo),
                    price_upper,
                ),
                weight: 0.0,
            });
        }
    }
    set_weights(&mut goals);
    goals
}

/// Human goals: one per human record with non-empty attributes, each with weight 1.
pub fn human_goals(products: &[Product], prices: &[f64], rng: &mut Rng) -> Vec<Goal> {
    let mut goals = Vec::new();
    for (i, p) in products.iter().enumerate() {
        for h in &p.human {
            if h.instruction_attributes.is_empty() {
                continue;
            }
            let (price_upper, price_text) = price_rule(prices[i], rng);
            goals.push(Goal {
                product: i,
                asin: p.asin.clone(),
                instruction_text: format!("{}{price_text}", h.instruction.trim_matches('.')),
                reward: reward_goal(
                    p,
                    h.instruction_attributes.clone(),
                    GoalOptions::List(h.instruction_options.clone()),
                    price_upper,
                ),
                // The original's `get_human_goals` gives every human goal weight 1.
                weight: 1.0,
            });
        }
    }
    goals
}

/// Fisher–Yates shuffle with the seeded generator.
pub fn shuffle<T>(xs: &mut [T], rng: &mut Rng) {
    for i in (1..xs.len()).rev() {
        xs.swap(i, rng.below(i + 1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn price_rule_distribution() {
        let mut rng = Rng::new(1);
        let mut counts = HashMap::new();
        for _ in 0..60_000 {
            let (u, text) = price_rule(12.5, &mut rng);
            *counts.entry(u as u32).or_insert(0usize) += 1;
            assert_eq!(text, format!(", and price lower than {u:.2} dollars"));
        }
        // Candidates 20, 30, 40, 50: the larger of two distinct draws is 30/40/50 with 1/6, 2/6, 3/6.
        assert_eq!(counts.get(&20), None);
        let p = |k: u32| counts[&k] as f64 / 60_000.0;
        assert!(
            (p(30) - 1.0 / 6.0).abs() < 0.01
                && (p(40) - 2.0 / 6.0).abs() < 0.01
                && (p(50) - 0.5).abs() < 0.01
        );
        assert_eq!(price_rule(985.0, &mut rng), (1_000_000.0, String::new()));
        assert_eq!(price_rule(975.0, &mut rng).0, 990.0, "980 and 990 remain");
    }
}
