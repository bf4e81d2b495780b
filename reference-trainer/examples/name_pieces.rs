//! How many BPE pieces the default tokenizer spends on the generated Search QA names: the golden
//! answers of the training and the held-out questions, side by side (issue 22: held-out names
//! must split no worse than training names, or a copy skill learnt on one does not carry over).
//!
//! ```text
//! cargo run --release -p reference-trainer --example name_pieces -- [SEED]
//! ```

use anyhow::Result;
use reference_trainer::defaults;
use reference_trainer::rollout::EnvKind;
use t2po_envs::search_qa::corpus::World;

fn main() -> Result<()> {
    let seed: u64 = std::env::args().nth(1).map_or(Ok(2026), |s| s.parse())?;
    let size = defaults::pool_size(EnvKind::Search)?;
    let tok = defaults::tokenizer(seed)?;
    let world = World::generate(seed, size.passages);
    let splits = [
        ("train", world.train_questions(seed, size.train_questions)),
        (
            "held-out",
            world.held_out_questions(seed, size.held_out_questions),
        ),
    ];
    println!("| split | answers | pieces/answer | pieces/char | examples |");
    println!("|---|---|---|---|---|");
    for (name, qs) in splits {
        let (mut pieces, mut chars, mut n) = (0usize, 0usize, 0usize);
        let mut examples = Vec::new();
        for q in &qs {
            let a = &q.golden_answers[0];
            // As the policy writes it: after a tag, with no leading space.
            let ids = tok.encode(a)?;
            pieces += ids.len();
            chars += a.chars().count();
            n += 1;
            if examples.len() < 3 && a.chars().any(char::is_alphabetic) {
                examples.push(format!("{a} ({})", ids.len()));
            }
        }
        println!(
            "| {name} | {n} | {:.2} | {:.3} | {} |",
            pieces as f64 / n.max(1) as f64,
            pieces as f64 / chars.max(1) as f64,
            examples.join(", ")
        );
    }
    Ok(())
}
