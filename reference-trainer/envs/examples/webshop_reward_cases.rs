//! Writes WebShop cross-product reward cases for `tools/webshop_reward_crosscheck.py`, which
//! scores them with the original `goal.py` (spaCy's nouns) and compares: every one of the first
//! `GOALS` goals of a generated shop against every product, bought with the goal's option values
//! where the product has them (else its first values). Each case carries this crate's reward
//! with the generator's noun lists (`ours`) and with the earlier lists — brand and nouns, the
//! adjective left out (`ours_before`) — so one run gives the agreement before and after.
//!
//! ```text
//! cargo run --release -p t2po-envs --example webshop_reward_cases -- OUT_DIR [GOALS] [PRODUCTS]
//! ```
//!
//! Writes `OUT_DIR/products.jsonl` (the fields `goal.py` reads, as the original's product dicts
//! name them), `OUT_DIR/goals.jsonl` and `OUT_DIR/cases.jsonl` (`{"goal", "product",
//! "options", "price", "ours", "ours_before"}`).

use serde_json::{json, Map, Value};
use std::io::Write;
use t2po_envs::webshop::reward::{reward, GoalOptions, Purchased, RewardGoal};
use t2po_envs::webshop::{GoalMode, Shop};

/// The earlier generator's list: every title word but the adjective (word 1).
fn before(title: &str) -> Vec<String> {
    title
        .split(' ')
        .enumerate()
        .filter(|&(i, _)| i != 1)
        .map(|(_, w)| w.to_lowercase())
        .collect()
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let out = std::path::PathBuf::from(args.get(1).expect("OUT_DIR"));
    let goals_n: usize = args.get(2).map_or(280, |s| s.parse().expect("GOALS"));
    let products_n: usize = args.get(3).map_or(300, |s| s.parse().expect("PRODUCTS"));
    std::fs::create_dir_all(&out)?;
    let shop = Shop::generated(5, products_n, GoalMode::Synthetic, 7);
    let cat = &shop.catalog;
    let mut w = std::io::BufWriter::new(std::fs::File::create(out.join("products.jsonl"))?);
    for p in &cat.products {
        let v = json!({
            "query": p.query, "product_category": p.product_category, "name": p.title,
            "Title": p.title, "BulletPoints": p.bullet_points, "Description": p.description,
            "Attributes": p.attributes,
        });
        writeln!(w, "{v}")?;
    }
    w.flush()?;
    let goals = &shop.goals[..goals_n.min(shop.goals.len())];
    let mut w = std::io::BufWriter::new(std::fs::File::create(out.join("goals.jsonl"))?);
    for g in goals {
        let opts = match &g.reward.goal_options {
            GoalOptions::Dict(v) => Value::Object(
                v.iter()
                    .map(|(n, x)| (n.clone(), json!(x)))
                    .collect::<Map<_, _>>(),
            ),
            GoalOptions::List(v) => json!(v),
        };
        let v = json!({
            "query": g.reward.query, "product_category": g.reward.product_category,
            "name": cat.products[g.product].title, "attributes": g.reward.attributes,
            "goal_options": opts, "price_upper": g.reward.price_upper,
        });
        writeln!(w, "{v}")?;
    }
    w.flush()?;
    let mut w = std::io::BufWriter::new(std::fs::File::create(out.join("cases.jsonl"))?);
    let mut n = 0;
    for (gi, g) in goals.iter().enumerate() {
        let want: Vec<(String, String)> = match &g.reward.goal_options {
            GoalOptions::Dict(v) => v.clone(),
            GoalOptions::List(_) => Vec::new(),
        };
        let goal_before = RewardGoal {
            nouns: before(&cat.products[g.product].title),
            ..g.reward.clone()
        };
        for (pi, p) in cat.products.iter().enumerate() {
            let options: Vec<(String, String)> = p
                .options
                .iter()
                .filter(|(_, vs)| !vs.is_empty())
                .map(|(name, vs)| {
                    let v = want
                        .iter()
                        .find(|(n, x)| n == name && vs.contains(x))
                        .map_or(&vs[0], |(_, x)| x);
                    (name.clone(), v.clone())
                })
                .collect();
            let values: Vec<String> = options.iter().map(|(_, v)| v.clone()).collect();
            let bullets = p.bullet_points.join(" ");
            let nouns_before = before(&p.title);
            let purchased = |nouns: &[String], goal: &RewardGoal| {
                reward(
                    &Purchased {
                        query: &p.query,
                        product_category: &p.product_category,
                        nouns,
                        attributes: &p.attributes,
                        title: &p.title,
                        bullets_joined: &bullets,
                        description: &p.description,
                        price: cat.prices[pi],
                    },
                    goal,
                    &values,
                )
            };
            let ours = purchased(&p.nouns, &g.reward);
            let ours_before = purchased(&nouns_before, &goal_before);
            let v = json!({
                "goal": gi, "product": pi,
                "options": options.iter().map(|(n, x)| (n.clone(), json!(x))).collect::<Map<_, _>>(),
                "price": cat.prices[pi], "ours": ours.reward, "ours_before": ours_before.reward,
                "r_type": ours.r_type, "r_type_before": ours_before.r_type,
            });
            writeln!(w, "{v}")?;
            n += 1;
        }
    }
    w.flush()?;
    eprintln!(
        "{n} cases ({} goals × {} products)",
        goals.len(),
        cat.products.len()
    );
    Ok(())
}
