//! WebShop: page texts and clickables (goldens), transitions and the action grammar, the
//! verl-agent wrapper (observation formatting, available actions, projection, prompt), the real
//! file formats written and streamed back, and the expert on generated goals.

use std::path::Path;
use t2po_envs::webshop::data::{self, DataFiles, RawProduct};
use t2po_envs::webshop::generate::generate_catalog;
use t2po_envs::webshop::site::{Page, Session};
use t2po_envs::webshop::{self as ws, GoalMode, Shop, WebshopEnv, WebshopSplit};
use t2po_envs::{is_strict_format, run_expert_episode, Env, HistoryEntry, Projected};

fn shop() -> Shop {
    Shop::generated(7, 400, GoalMode::Synthetic, 11)
}

#[test]
fn pages_clickables_and_transitions() {
    let mut shop = shop();
    let goal = shop.goals[0].clone();
    let cat = &mut shop.catalog;
    let mut s = Session::new(1);
    let instr = goal.instruction_text.clone();
    assert_eq!(
        s.observation(cat, &goal),
        format!("WebShop [SEP] Instruction: [SEP] {instr} [SEP] Search")
    );
    assert_eq!(s.clickables(cat), ["search"]);
    assert!(
        !s.act(cat, &goal, "click[search]"),
        "click[search] is not an action"
    );
    assert!(!s.act(cat, &goal, "search[]"));
    assert!(!s.act(cat, &goal, "buy something"));
    let title = cat.products[goal.product].title.to_lowercase();
    assert!(s.act(cat, &goal, &format!("search[{title}]")));
    assert_eq!(s.page, Page::Results);
    let obs = s.observation(cat, &goal);
    assert!(
        obs.starts_with(&format!(
            "Instruction: [SEP] {instr} [SEP] Back to Search [SEP] Page 1 (Total results: "
        )),
        "{obs}"
    );
    assert!(obs.contains(") [SEP] Next > [SEP] B0"), "{obs}");
    let clicks = s.clickables(cat);
    assert_eq!(&clicks[..2], ["back to search", "next >"]);
    assert!(clicks[2..]
        .iter()
        .all(|c| c.starts_with("b0") && c.len() == 10));
    assert!(clicks.len() <= 12);
    // Next > is always there, even past the end; < Prev appears from page 2.
    for _ in 0..6 {
        assert!(s.act(cat, &goal, "click[next >]"));
    }
    let obs = s.observation(cat, &goal);
    assert!(
        obs.contains("Page 7 (Total results: ") && obs.contains("[SEP] < Prev [SEP] Next >"),
        "{obs}"
    );
    assert_eq!(
        &s.clickables(cat)[..3],
        ["back to search", "< prev", "next >"]
    );
    // Search works from any page and resets to results page 1.
    let target = cat.products[goal.product].asin.clone();
    assert!(s.act(cat, &goal, &format!("search[{title}]")));
    assert!(s.observation(cat, &goal).contains("Page 1 "));
    assert!(
        s.act(cat, &goal, &format!("click[{}]", target.to_lowercase())),
        "the target is on page 1"
    );
    assert_eq!(s.page, Page::Item);
    let p = cat.products[goal.product].clone();
    let mut want = vec![
        "Instruction:".to_string(),
        instr.clone(),
        "Back to Search".into(),
        "< Prev".into(),
    ];
    for (name, values) in &p.options {
        want.push(name.clone());
        want.extend(values.iter().cloned());
    }
    want.extend([
        p.title.clone(),
        format!("Price: {}", p.price_tag),
        "Rating: N.A.".into(),
    ]);
    want.extend(["Description", "Features", "Reviews", "Buy Now"].map(String::from));
    assert_eq!(s.observation(cat, &goal), want.join(" [SEP] "));
    let mut clicks = vec![
        "back to search",
        "< prev",
        "description",
        "features",
        "reviews",
        "buy now",
    ]
    .into_iter()
    .map(String::from)
    .collect::<Vec<_>>();
    for (_, values) in &p.options {
        for v in values {
            if !clicks.contains(v) {
                clicks.push(v.clone());
            }
        }
    }
    assert_eq!(s.clickables(cat), clicks);
    // Sub-pages and back.
    assert!(s.act(cat, &goal, "click[features]"));
    assert_eq!(
        s.observation(cat, &goal),
        format!(
            "Instruction: [SEP] {instr} [SEP] Back to Search [SEP] < Prev [SEP] {}",
            p.bullet_points.join(" [SEP] ")
        )
    );
    assert_eq!(s.clickables(cat), ["back to search", "< prev"]);
    assert!(s.act(cat, &goal, "click[< prev]"));
    assert!(s.act(cat, &goal, "click[description]"));
    assert!(s
        .observation(cat, &goal)
        .ends_with(&format!("< Prev [SEP] {}", p.description)));
    assert!(s.act(cat, &goal, "click[< prev]"));
    assert!(s.act(cat, &goal, "click[reviews]"));
    assert!(s
        .observation(cat, &goal)
        .ends_with("Back to Search [SEP] < Prev"));
    assert!(s.act(cat, &goal, "click[< prev]"));
    // Options: clicking sets, re-clicking another value of the same name overwrites.
    if let Some((name, values)) = p.options.iter().find(|(_, v)| v.len() >= 2) {
        assert!(s.act(cat, &goal, &format!("click[{}]", values[0])));
        assert!(s.act(cat, &goal, &format!("click[{}]", values[1])));
        assert_eq!(s.options, vec![(name.clone(), values[1].clone())]);
    }
    assert!(s.act(cat, &goal, "click[buy now]"));
    assert_eq!(s.page, Page::Done);
    let done = s.observation(cat, &goal);
    assert!(done.starts_with(&format!("Thank you for shopping with us! [SEP] Your code: [SEP] None [SEP] (Paste it in your MTurk interface.) [SEP] Purchased [SEP] asin [SEP] {target} [SEP] options [SEP] {{")), "{done}");
    assert!(
        done.contains("[SEP] instuction text [SEP]")
            && done.contains("Your score (min 0.0, max 1.0) [SEP] ")
    );
    assert!(s.clickables(cat).is_empty());
    // Hidden keywords.
    let mut s = Session::new(2);
    assert!(s.act(cat, &goal, "search[<r>]"));
    assert!(s.observation(cat, &goal).contains("(Total results: 50)"));
    let q = p.query.clone();
    assert!(s.act(cat, &goal, &format!("search[<q> {q}]")));
    let n = cat.products.iter().filter(|x| x.query == q).count();
    assert!(s
        .observation(cat, &goal)
        .contains(&format!("(Total results: {n})")));
    let c = p.category.clone();
    assert!(s.act(cat, &goal, &format!("search[<c> {c}]")));
    let n = cat.products.iter().filter(|x| x.category == c).count();
    assert!(s
        .observation(cat, &goal)
        .contains(&format!("(Total results: {n})")));
    // The grammar: greedy name, arg lowercased, trailing text ignored.
    let mut s = Session::new(3);
    assert!(s.act(cat, &goal, "search[Red SHOES]  and more"));
    assert_eq!(s.page, Page::Results);
}

#[test]
fn verl_agent_wrapper() {
    let mut env = WebshopEnv::new(shop(), WebshopSplit::All, 5).unwrap();
    let first = env.reset(0);
    assert_eq!(first.text, "'Search'");
    assert_eq!(first.admissible, ["search[<your query>]", "click[search]"]);
    let task = env.task().to_string();
    let p = env.prompt(&[], 2);
    assert!(p.starts_with(&format!(
        "\nYou are an expert autonomous agent operating in the WebShop e\u{2011}commerce environment. \nYour task is to: {task}.\nYour current observation is: 'Search'.\nYour admissible actions of the current situation are: \n[\n'search[<your query>]',\n'click[search]',\n].\n\nNow it's your turn"
    )), "{p}");
    let t = env.step(&env.project("<think>go</think><action>search[Shampoo]</action>"));
    assert!(!t.done && t.reward == 0.0);
    assert!(
        t.observation
            .text
            .starts_with("'Back to Search' [SEP] 'Page 1 (Total results: "),
        "{}",
        t.observation.text
    );
    assert!(t.observation.admissible.starts_with(&[
        "click[back to search]".to_string(),
        "click[next >]".to_string()
    ]));
    let hist = vec![HistoryEntry {
        observation: "'Search'".into(),
        action: "search[shampoo]".into(),
    }];
    let p = env.prompt(&hist, 2);
    assert!(
        p.contains("environment.\nYour task is to: "),
        "no trailing space with history"
    );
    assert!(p.contains("Below are the most recent 1 observations and the corresponding actions you took: [Observation 1: ''Search'', Action 1: 'search[shampoo]']\nYou are now at step 2 and your current observation is: 'Back to Search'"));
    // Projection.
    assert_eq!(
        ws::project("<think>x</think><action>Click[Buy Now]</action>"),
        Projected {
            action: "click[buy now]".into(),
            valid: true
        }
    );
    let p = ws::project("no tags at all, just text here and more");
    assert_eq!(
        (p.action.as_str(), p.valid),
        ("t text here and more", false)
    );
    assert_eq!(p.action.chars().count(), 20);
    // The step limit.
    env.reset(1);
    let mut last = None;
    for _ in 0..15 {
        last = Some(env.step(&Projected {
            action: "click[nothing]".into(),
            valid: false,
        }));
    }
    let t = last.unwrap();
    assert!(t.done && !t.info.won && t.reward == 0.0);
}

/// Plays every task of `env` (at most `limit`) with the expert; checks that every response is
/// a strict-format, valid full response; returns (won, played).
fn expert_wins(env: &mut WebshopEnv, limit: usize) -> (usize, usize) {
    let (mut wins, mut total) = (0, 0);
    for i in 0..env.num_tasks().min(limit) {
        let episode = run_expert_episode(env, i, i as u64, None);
        for step in &episode.steps {
            assert!(step.action.valid, "{}", step.response);
            assert!(
                is_strict_format(&step.response, &["action"]),
                "{}",
                step.response
            );
        }
        assert!(episode.done);
        assert_eq!(episode.total_reward, if episode.won { 10.0 } else { 0.0 });
        // The purchase step reports its reward's parts, and only it; they give back the score.
        let last = episode.steps.last().unwrap();
        for step in &episode.steps[..episode.steps.len() - 1] {
            assert!(step.info.parts.is_empty());
        }
        if last.action.action.starts_with("click[buy") {
            let p: std::collections::BTreeMap<_, _> = last.info.parts.iter().copied().collect();
            let options = p.get("w_option").copied().unwrap_or(0.0)
                * p.get("r_option").copied().unwrap_or(0.0);
            let total =
                p["r_type"] * (p["w_att"] * p["r_att"] + options + p["w_price"] * p["r_price"]);
            assert!(
                (total - episode.score).abs() < 1e-9,
                "{p:?} vs {}",
                episode.score
            );
            assert!(p.contains_key("title_score"));
        }
        wins += episode.won as usize;
        total += 1;
    }
    (wins, total)
}

/// Goal weights as the original's `goal.py`: human goals 1; synthetic goals the mean over
/// their attributes of 1/(how many goals carry the attribute).
#[test]
fn goal_weights_follow_the_original() {
    let human = Shop::generated(3, 200, GoalMode::Human, 21);
    assert!(!human.goals.is_empty());
    assert!(human.goals.iter().all(|g| g.weight == 1.0));
    let synthetic = Shop::generated(3, 200, GoalMode::Synthetic, 21);
    let mut counts = std::collections::HashMap::new();
    for g in &synthetic.goals {
        for a in &g.reward.attributes {
            *counts.entry(a.clone()).or_insert(0usize) += 1;
        }
    }
    for g in &synthetic.goals {
        let attrs = &g.reward.attributes;
        if attrs.is_empty() {
            continue;
        }
        let want = attrs.iter().map(|a| 1.0 / counts[a] as f64).sum::<f64>() / attrs.len() as f64;
        assert!(
            (g.weight - want).abs() <= 1e-15 * want,
            "{} vs {want}",
            g.weight
        );
        assert!(g.weight > 0.0 && g.weight <= 1.0);
    }
}

#[test]
fn expert_buys_the_goal_on_generated_goals() {
    let shop = Shop::generated(3, 1000, GoalMode::Synthetic, 21);
    let n_goals = shop.goals.len();
    let mut env = WebshopEnv::new(shop, WebshopSplit::Test, 9).unwrap();
    let (wins, total) = expert_wins(&mut env, usize::MAX);
    let rate = wins as f64 / total as f64;
    println!("{n_goals} synthetic goals from 1000 products; expert success on the test split: {wins}/{total} = {rate:.3}");
    assert!(rate >= 0.98, "{wins}/{total}");
    // Human goals too.
    let shop = Shop::generated(3, 400, GoalMode::Human, 21);
    let mut env = WebshopEnv::new(shop, WebshopSplit::All, 9).unwrap();
    let (wins, total) = expert_wins(&mut env, 300);
    println!("human goals: expert success {wins}/{total}");
    assert!(wins as f64 / total as f64 >= 0.98);
}

#[test]
fn expert_responses_are_full_and_varied() {
    let mut env = WebshopEnv::new(shop(), WebshopSplit::All, 5).unwrap();
    let a = run_expert_episode(&mut env, 3, 1, Some(2));
    let b = run_expert_episode(&mut env, 3, 2, Some(2));
    // The seed changes the wording, never the actions.
    let actions =
        |e: &t2po_envs::Episode| e.steps.iter().map(|s| s.action.clone()).collect::<Vec<_>>();
    assert_eq!(actions(&a), actions(&b));
    let first = &a.steps[0].response;
    assert!(
        first.starts_with("<think>") && first.contains("</think>\n<action>search["),
        "{first}"
    );
    // The rationale names what the instruction asks for.
    let query = t2po_envs::webshop::expert::instruction_query(env.task());
    assert!(first.contains(&query), "{first} / {query}");
    let thinks: std::collections::HashSet<&str> = a
        .steps
        .iter()
        .chain(&b.steps)
        .map(|s| s.response.split("</think>").next().unwrap())
        .collect();
    assert!(thinks.len() > 1, "templates vary");
    // Prompts were recorded as the policy would see them.
    assert!(a
        .steps
        .iter()
        .all(|s| s.prompt.as_deref().is_some_and(|p| p.contains(env.task()))));
}

#[test]
fn generated_splits_share_one_shop() {
    let splits = WebshopEnv::generated_splits(200, 3).unwrap();
    assert!(std::sync::Arc::ptr_eq(
        splits.train.shared_shop(),
        splits.held_out.shared_shop()
    ));
    assert_eq!(splits.held_out.num_tasks(), 500);
    assert_eq!(
        splits.train.num_tasks() + 500,
        splits.train.shop().goals.len()
    );
    assert_eq!(
        (splits.train.max_turns(), splits.train.name()),
        (15, "webshop")
    );
    // Clones are independent episodes over the same data.
    let mut a = splits.train.clone();
    let mut b = splits.train.clone();
    a.reset(0);
    b.reset(1);
    assert_ne!(a.task(), b.task());
    let ep = run_expert_episode(&mut a, 0, 0, None);
    assert!(ep.won);
    assert!(
        b.raw_observation()
            .starts_with("WebShop [SEP] Instruction:"),
        "b is untouched by a's episode"
    );
}

fn write_files(
    dir: &Path,
    n: usize,
) -> (
    std::path::PathBuf,
    std::path::PathBuf,
    std::path::PathBuf,
    std::path::PathBuf,
) {
    let gen = generate_catalog(13, n);
    let mut raws: Vec<RawProduct> = gen.iter().map(|g| g.raw.clone()).collect();
    // Records the loader must skip: a "nan" asin, a too-long asin, a duplicate (first wins).
    let mut nan = raws[0].clone();
    nan.asin = serde_json::json!("nan");
    let mut long = raws[0].clone();
    long.asin = serde_json::json!("B0TOOLONGASIN");
    let mut dup = raws[1].clone();
    dup.name = "A DUPLICATE".into();
    raws.extend([nan, long, dup]);
    let products = dir.join("items_shuffle.json");
    data::write_list(&products, &raws).unwrap();
    let asin =
        |g: &t2po_envs::webshop::generate::Generated| g.raw.asin.as_str().unwrap().to_string();
    let ins = dir.join("items_ins_v2.json");
    data::write_map(
        &ins,
        &gen.iter()
            .map(|g| (asin(g), g.ins.clone()))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let human = dir.join("items_human_ins.json");
    data::write_map(
        &human,
        &gen.iter()
            .map(|g| (asin(g), g.human.clone()))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let nouns = dir.join("nouns.json");
    data::write_map(
        &nouns,
        &gen.iter()
            .map(|g| (asin(g), g.nouns.clone()))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    (products, ins, human, nouns)
}

#[test]
fn real_file_formats_stream_back() {
    let dir = tempfile::tempdir().unwrap();
    let (products, ins, human, nouns) = write_files(dir.path(), 300);
    let files = DataFiles {
        products: &products,
        ins: &ins,
        human: Some(&human),
        nouns: Some(&nouns),
    };
    let loaded = data::load_products(&files).unwrap();
    assert_eq!(
        loaded.len(),
        300,
        "nan, long and duplicate asins are skipped"
    );
    assert_ne!(loaded[1].title, "A DUPLICATE", "the first record wins");
    let generated = Shop::generated(13, 300, GoalMode::Synthetic, 4);
    assert_eq!(
        loaded, generated.catalog.products,
        "the loader reproduces the in-memory transforms"
    );
    assert!(loaded.iter().all(|p| p.nouns_exact));
    // The same shop either way.
    let from_files = Shop::load(&files, GoalMode::Synthetic, 4).unwrap();
    assert_eq!(from_files.goals, generated.goals);
    // Optional files may be absent: the human file (the original crashes) and the nouns.
    let files = DataFiles {
        products: &products,
        ins: &ins,
        human: None,
        nouns: None,
    };
    let loaded = data::load_products(&files).unwrap();
    assert!(loaded.iter().all(|p| p.human.is_empty() && !p.nouns_exact));
    // Wrong shapes are errors naming the file.
    std::fs::write(&products, "{\"not\": \"a list\"}").unwrap();
    let err = format!(
        "{:#}",
        data::load_products(&DataFiles {
            products: &products,
            ins: &ins,
            human: None,
            nouns: None
        })
        .unwrap_err()
    );
    assert!(
        err.contains("items_shuffle.json") && err.contains("list"),
        "{err}"
    );
}

/// The shopper acts on what the prompt shows only: with every goal pointed at another product
/// (same instruction, same reward targets), it takes the same actions on every task; it
/// searches with the instruction's request as written, opens
/// the first result whose listed price is below the limit (else the first), asks for every
/// offered option the instruction names, and buys; its responses are strict and valid, and the
/// purchase's parts give back its score (as the privileged expert's).
#[test]
fn shopper_acts_only_on_what_the_pages_show() {
    use t2po_envs::webshop::expert::{listed_price, Demonstrator};
    let build = |moved: bool| {
        let mut shop = Shop::generated(3, 1000, GoalMode::Synthetic, 21);
        if moved {
            let n = shop.catalog.products.len();
            for g in &mut shop.goals {
                g.product = (g.product + 1) % n;
                g.asin = shop.catalog.products[g.product].asin.clone();
            }
        }
        let mut env = WebshopEnv::new(shop, WebshopSplit::Test, 9).unwrap();
        env.set_demonstrator(Demonstrator::Shopper);
        env
    };
    let (mut env, mut moved) = (build(false), build(true));
    assert_eq!(env.demonstrator(), Demonstrator::Shopper);
    let actions = |ep: &t2po_envs::Episode| -> Vec<String> {
        ep.steps.iter().map(|s| s.action.action.clone()).collect()
    };
    let (mut wins, mut score, n) = (0, 0.0, 300);
    for i in 0..n {
        let a = run_expert_episode(&mut env, i, i as u64, None);
        let b = run_expert_episode(&mut moved, i, i as u64, None);
        assert_eq!(actions(&a), actions(&b), "task {i}");
        // Replay it and check the rule on the results page and the product page.
        env.reset(i);
        let goal = env.goal().clone();
        assert_eq!(
            a.steps[0].action.action,
            format!(
                "search[{}]",
                ws::expert::instruction_request(&goal.instruction_text)
            )
        );
        for step in &a.steps {
            assert!(step.action.valid && is_strict_format(&step.response, &["action"]));
            let s = env.session().clone();
            let shop = env.shared_shop().clone();
            let cat = &shop.catalog;
            match s.page {
                Page::Results if !s.page_results().is_empty() => {
                    let res = s.page_results();
                    let below = |&&p: &&usize| {
                        listed_price(&cat.products[p].price_tag)
                            .is_some_and(|x| x < goal.reward.price_upper)
                    };
                    let want = *res.iter().find(below).unwrap_or(&res[0]);
                    assert_eq!(
                        step.action.action,
                        format!("click[{}]", cat.products[want].asin.to_lowercase())
                    );
                }
                Page::Item => {
                    let offered = s.clickables(cat);
                    let chosen: Vec<&String> = s.options.iter().map(|(_, v)| v).collect();
                    let wanted: Vec<String> = match &goal.reward.goal_options {
                        ws::reward::GoalOptions::Dict(d) => {
                            d.iter().map(|(_, v)| v.clone()).collect()
                        }
                        ws::reward::GoalOptions::List(l) => l.clone(),
                    };
                    let left = wanted
                        .iter()
                        .any(|w| offered.contains(w) && !chosen.contains(&w));
                    assert_eq!(step.action.action == "click[buy now]", !left);
                }
                _ => {}
            }
            env.step(&step.action);
        }
        assert!(a.done);
        assert!(a.steps.last().unwrap().action.action == "click[buy now]");
        wins += a.won as usize;
        score += a.score;
    }
    let (rate, mean) = (wins as f64 / n as f64, score / n as f64);
    println!("shopper on {n} test goals of 1000 products: success {rate:.3}, score {mean:.3}");
    // Searching with the whole request ranks a product that meets it first on the generated
    // shop (measured: 0.992 of the 500 test goals; with the product words alone, 0.168).
    assert!(rate >= 0.95, "{rate}");
    assert!(mean >= rate, "{mean}");
    assert_eq!(listed_price("$24.33 to $36.49"), Some(24.33));
    assert_eq!(listed_price("$1,024.50"), Some(1024.5));
    assert_eq!(listed_price("N.A."), None);
    assert_eq!(
        ws::expert::instruction_request(
            "Find me modern chair with easy assemble with color: light pink, and size: king, \
             and price lower than 480.00 dollars"
        ),
        "modern chair with easy assemble with color: light pink, and size: king"
    );
    assert_eq!(
        ws::expert::instruction_request("i am looking for a red mug"),
        "a red mug"
    );
}
