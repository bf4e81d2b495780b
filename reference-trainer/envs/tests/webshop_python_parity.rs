//! The WebShop reward's text handling against the Python packages the original calls: thefuzz's
//! `token_set_ratio` (on rapidfuzz), `goal.py`'s `get_option_reward` on generated goals,
//! rapidfuzz's `default_process` and Python's `str.isprintable` on every code point, and
//! `str(tuple)` of option pairs.
//!
//! Needs a Python with `thefuzz==0.22.1 rapidfuzz==3.14.5` (`.ci/run` installs them into
//! `$HOME/.cache/t2po-fuzz-venv`, exports `T2PO_FUZZ_PYTHON` and runs it with `--ignored`):
//!
//! ```text
//! python3 -m venv ~/.cache/t2po-fuzz-venv
//! ~/.cache/t2po-fuzz-venv/bin/pip install thefuzz==0.22.1 rapidfuzz==3.14.5
//! ```
//!
//! The test is `#[ignore]`d, so a plain `cargo test` does not count it as passed; asked for with
//! `--ignored`, a missing Python is a failure.

use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use t2po_envs::rng::Rng;
use t2po_envs::webshop::python_text::{
    self, is_assigned, isalnum, isprintable, lower, lower_first,
};
use t2po_envs::webshop::reward::{
    option_matches, token_set_ratio, GoalOptions, OptionItem, COLOR_SET,
};
use t2po_envs::webshop::{GoalMode, Shop};

fn python() -> Option<PathBuf> {
    let path = match std::env::var_os("T2PO_FUZZ_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/t2po-fuzz-venv/bin/python"),
    };
    let ok = Command::new(&path)
        .args(["-c", "import thefuzz, rapidfuzz"])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(path)
}

/// One side of a case: a string or a `(name, value)` tuple.
#[derive(Clone, Debug)]
enum Side {
    Text(String),
    Pair(String, String),
}

impl Side {
    fn json(&self) -> Value {
        match self {
            Side::Text(s) => json!(s),
            Side::Pair(n, v) => json!([n, v]),
        }
    }
    /// What thefuzz sees: `str(x)`.
    fn python_str(&self) -> String {
        match self {
            Side::Text(s) => OptionItem::Text(s.clone()).python_str(),
            Side::Pair(n, v) => OptionItem::Pair(n.clone(), v.clone()).python_str(),
        }
    }
}

/// Characters where Python's rules, Rust's, or thefuzz's `force_ascii` matter.
const ADVERSARIAL: &[char] = &[
    '\u{130}',
    '\u{131}',
    'İ',
    'ß',
    'ẞ',
    'Σ',
    'ς',
    'ǅ',
    'Ⅻ',
    'ⅻ',
    '²',
    '½',
    '①',
    '五',
    '〇',
    'Ⓐ',
    'ⓐ',
    '\u{93f}',
    '\u{941}',
    '\u{301}',
    '\u{a0}',
    '\u{ad}',
    '\u{200b}',
    '\u{200e}',
    '\u{feff}',
    '\u{2009}',
    '\u{3000}',
    '\u{2028}',
    '\u{85}',
    '\t',
    '\n',
    '\r',
    '\u{7f}',
    '\u{1}',
    '_',
    '-',
    '\'',
    '"',
    '\\',
    '™',
    '😀',
    'ﬁ',
    'Ａ',
    '٣',
    '\u{e000}',
    '\u{378}',
    '\u{870}',
    '\u{e0001}',
    'é',
    'ï',
    'ü',
    'µ',
    'ª',
    'º',
    'Ω',
    'K',
    'Å',
    'ǈ',
    'ᾈ',
    'ﬀ',
    '𝐀',
    '𝟘',
    '𐐀',
    'ⰰ',
    'Ⰰ',
    '\u{2c2f}',
    'ꭰ',
];

const WORDS: &[&str] = &[
    "x-large",
    "xl",
    "small",
    "pack of 12",
    "12 pack",
    "10 inch",
    "dark blue",
    "navy",
    "men's",
    "women's",
    "tea tree",
    "essential oils",
    "light weight",
    "lightweight",
    "3.4 fl oz",
    "1 count",
    "standard",
    "grey",
    "black",
    "natural ingredients",
    "long lasting",
    "x",
    "xx-large",
    "2xl",
];

fn random_char(rng: &mut Rng) -> char {
    loop {
        let cp = match rng.below(6) {
            0 => 0x20 + rng.below(0x5f) as u32,
            1 => 0x80 + rng.below(0x180) as u32,
            2 => rng.below(0x1_0000) as u32,
            3 => rng.below(0x11_0000) as u32,
            _ => return rng.pick(ADVERSARIAL),
        };
        if let Some(c) = char::from_u32(cp) {
            return c;
        }
    }
}

fn random_text(rng: &mut Rng) -> String {
    match rng.below(4) {
        // WebShop-like words with adversarial characters spliced in.
        0 | 1 => {
            let mut s = String::new();
            for _ in 0..1 + rng.below(3) {
                if !s.is_empty() {
                    s.push(' ');
                }
                s.push_str(rng.pick(WORDS));
            }
            let mut chars: Vec<char> = s.chars().collect();
            for _ in 0..rng.below(3) {
                let at = rng.below(chars.len() + 1);
                chars.insert(at, random_char(rng));
            }
            if rng.chance(0.3) {
                chars = chars.iter().flat_map(|c| c.to_uppercase()).collect();
            }
            chars.into_iter().collect()
        }
        // Arbitrary code points, a few tokens.
        2 => (0..1 + rng.below(12))
            .map(|_| {
                if rng.chance(0.2) {
                    ' '
                } else {
                    random_char(rng)
                }
            })
            .collect(),
        // A small alphabet: many exact-half scores (rounding ties).
        _ => (0..1 + rng.below(14))
            .map(|_| rng.pick(&['a', 'b', 'c', ' ', 'a', 'b']))
            .collect(),
    }
}

fn cases() -> Vec<(Side, Side)> {
    let mut out = Vec::new();
    // Every adversarial character alone, inside a word, and inside a tuple.
    for &c in ADVERSARIAL {
        out.push((Side::Text(format!("{c}")), Side::Text("a".into())));
        out.push((
            Side::Text(format!("ab{c}cd ef")),
            Side::Text("abcd ef".into()),
        ));
        out.push((
            Side::Text(format!("10{c}inch")),
            Side::Pair("size".into(), format!("10{c}inch")),
        ));
    }
    out.push((
        Side::Text("x".repeat(23) + &"y".repeat(17)),
        Side::Text("x".repeat(23) + &"z".repeat(17)),
    ));
    // Final-sigma contexts: Σ among cased, case-ignorable and other characters.
    let mut rng = Rng::new(12);
    let around = [
        'Σ', 'Σ', 'Α', 'a', ' ', '.', '\'', '1', '\u{345}', '\u{301}', '\u{2be}', 'Ⓐ', 'ǅ', 'ʰ',
        '\u{ad}', '\u{200d}', 'İ', '\u{2c2f}',
    ];
    for _ in 0..3000 {
        let s: String = (0..1 + rng.below(6))
            .map(|_| {
                if rng.chance(0.1) {
                    random_char(&mut rng)
                } else {
                    rng.pick(&around)
                }
            })
            .collect();
        out.push((Side::Text(s), Side::Text("σ".into())));
    }
    for _ in 0..20_000 {
        let a = Side::Text(random_text(&mut rng));
        let b = if rng.chance(0.3) {
            Side::Pair(
                rng.pick(&["size", "color", "style"]).into(),
                random_text(&mut rng),
            )
        } else {
            Side::Text(random_text(&mut rng))
        };
        out.push((a, b));
    }
    out
}

/// `get_option_reward` cases from generated shops (synthetic goals: dict options; human goals:
/// list options): the purchase picks each option's goal value or another of the product's
/// values, and some values get an adversarial character spliced in (on either side).
fn option_cases() -> Vec<(Vec<String>, GoalOptions)> {
    let mut rng = Rng::new(31);
    let mut out = Vec::new();
    let splice = |s: &str, rng: &mut Rng| -> String {
        if !rng.chance(0.15) {
            return s.to_string();
        }
        let mut chars: Vec<char> = s.chars().collect();
        let at = rng.below(chars.len() + 1);
        chars.insert(at, rng.pick(ADVERSARIAL));
        chars.into_iter().collect()
    };
    for mode in [GoalMode::Synthetic, GoalMode::Human] {
        let shop = Shop::generated(5, 2000, mode, 7);
        for goal in shop.goals.iter().take(10_000) {
            let product = &shop.catalog.products[goal.product];
            let wanted: Vec<String> = match &goal.reward.goal_options {
                GoalOptions::Dict(d) => d.iter().map(|(_, v)| v.clone()).collect(),
                GoalOptions::List(l) => l.clone(),
            };
            let mut purchased = Vec::new();
            for (i, (_, values)) in product.options.iter().enumerate() {
                let v = match wanted.get(i) {
                    Some(w) if rng.chance(0.7) => w.clone(),
                    _ if !values.is_empty() => values[rng.below(values.len())].clone(),
                    _ => continue,
                };
                purchased.push(splice(&v, &mut rng));
            }
            let goal_options = match &goal.reward.goal_options {
                GoalOptions::Dict(d) => GoalOptions::Dict(
                    d.iter()
                        .map(|(n, v)| (n.clone(), splice(v, &mut rng)))
                        .collect(),
                ),
                GoalOptions::List(l) => {
                    GoalOptions::List(l.iter().map(|v| splice(v, &mut rng)).collect())
                }
            };
            out.push((purchased, goal_options));
        }
    }
    out
}

/// The rule this crate used before (Rust's `is_alphanumeric` and `to_lowercase`).
fn rust_rule(c: char) -> char {
    let l = c.to_lowercase().next().unwrap_or(c);
    if l.is_alphanumeric() {
        l
    } else {
        ' '
    }
}

#[test]
#[ignore = "needs thefuzz + rapidfuzz: python3 -m venv ~/.cache/t2po-fuzz-venv && ~/.cache/t2po-fuzz-venv/bin/pip install thefuzz==0.22.1 rapidfuzz==3.14.5; then cargo test -p t2po-envs --test webshop_python_parity -- --ignored"]
fn token_set_ratio_and_character_rules_match_thefuzz() {
    let py = python().unwrap_or_else(|| {
        panic!(
            "no Python with thefuzz and rapidfuzz (T2PO_FUZZ_PYTHON={:?}, or \
             ~/.cache/t2po-fuzz-venv): this test was asked for (--ignored), so a missing tool is \
             a failure",
            std::env::var_os("T2PO_FUZZ_PYTHON")
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let cases = cases();
    let cases_path = dir.path().join("cases.jsonl");
    let mut fh = std::io::BufWriter::new(std::fs::File::create(&cases_path).unwrap());
    for (a, b) in &cases {
        writeln!(fh, "{}", json!({"a": a.json(), "b": b.json()})).unwrap();
    }
    fh.flush().unwrap();
    drop(fh);
    let options = option_cases();
    let options_path = dir.path().join("options.in.jsonl");
    let mut fh = std::io::BufWriter::new(std::fs::File::create(&options_path).unwrap());
    writeln!(fh, "{}", json!({ "colors": COLOR_SET.to_vec() })).unwrap();
    for (purchased, goal) in &options {
        let (goal, dict) = match goal {
            GoalOptions::Dict(d) => (
                json!(d.iter().map(|(n, v)| [n, v]).collect::<Vec<_>>()),
                true,
            ),
            GoalOptions::List(l) => (json!(l), false),
        };
        writeln!(
            fh,
            "{}",
            json!({"purchased": purchased, "goal": goal, "dict": dict})
        )
        .unwrap();
    }
    fh.flush().unwrap();
    drop(fh);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/fuzz_oracle.py");
    let run = Command::new(&py)
        .arg(script)
        .arg(&cases_path)
        .arg(dir.path())
        .arg(&options_path)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let meta: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("meta.json")).unwrap()).unwrap();
    eprintln!("oracle: {meta}");

    // token_set_ratio and str(x) on every case.
    let results = std::fs::read_to_string(dir.path().join("results.jsonl")).unwrap();
    let results: Vec<Value> = results
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), cases.len());
    // The tables are Unicode 13.0 (Python 3.10, what verl-agent runs WebShop on). Under a newer
    // Python, repr also writes characters assigned after 13.0 as they are; those (and only
    // those) are escaped here before comparing.
    let exact = meta["unicode"] == python_text::UNICODE_VERSION;
    let as_of_13 = |side: &Side, python: &str| -> String {
        if exact || matches!(side, Side::Text(_)) {
            return python.to_string();
        }
        python
            .chars()
            .map(|c| {
                if !c.is_ascii() && !is_assigned(c) {
                    // repr of one character, without its quotes.
                    let r = python_text::repr(&c.to_string());
                    r[1..r.len() - 1].to_string()
                } else {
                    c.to_string()
                }
            })
            .collect()
    };
    let (mut ratio_bad, mut str_bad, mut halves) = (Vec::new(), 0usize, 0usize);
    let (mut lower_bad, mut rust_lower_differs) = (Vec::new(), 0usize);
    for ((a, b), r) in cases.iter().zip(&results) {
        let (sa, sb) = (a.python_str(), b.python_str());
        let (pa, pb) = (r["str_a"].as_str().unwrap(), r["str_b"].as_str().unwrap());
        if sa != as_of_13(a, pa) || sb != as_of_13(b, pb) {
            str_bad += 1;
            eprintln!("str(): {sa:?} / {sb:?} vs Python {pa:?} / {pb:?}");
        }
        if let Side::Text(text) = a {
            let want = r["lower_a"].as_str().unwrap();
            rust_lower_differs += usize::from(text.to_lowercase() != want);
            // Characters assigned after 13.0 may lowercase under a newer Python.
            if lower(text) != want && (exact || text.chars().all(is_assigned)) {
                lower_bad.push(format!("{text:?}: {:?}, Python {want:?}", lower(text)));
            }
        }
        let raw = r["raw"].as_f64().unwrap();
        if (raw * 2.0).fract() == 0.0 && (raw * 2.0) as i64 % 2 == 1 {
            halves += 1;
        }
        let want = r["ratio"].as_i64().unwrap();
        // What thefuzz scored: its own str() of the two sides (equal to ours under Python 3.10).
        let got = if exact {
            token_set_ratio(&sa, &sb)
        } else {
            token_set_ratio(pa, pb)
        };
        if got != want {
            ratio_bad.push(format!("{a:?} vs {b:?}: {got}, thefuzz {want} (raw {raw})"));
        }
    }
    eprintln!(
        "token_set_ratio: {} cases ({halves} exact halves), {} differ; str(): {str_bad} differ",
        cases.len(),
        ratio_bad.len()
    );
    assert!(
        ratio_bad.is_empty(),
        "{}",
        ratio_bad[..ratio_bad.len().min(20)].join("\n")
    );
    assert_eq!(str_bad, 0);
    eprintln!(
        "str.lower(): {} of the text cases differ (Rust's to_lowercase: {rust_lower_differs})",
        lower_bad.len()
    );
    assert!(
        lower_bad.is_empty(),
        "{}",
        lower_bad[..lower_bad.len().min(20)].join("\n")
    );

    // get_option_reward on generated goals and purchases.
    let results = std::fs::read_to_string(dir.path().join("options.jsonl")).unwrap();
    let (mut bad, mut matched, mut goal_options) = (Vec::new(), 0, 0);
    for ((purchased, goal), line) in options.iter().zip(results.lines()) {
        let want = serde_json::from_str::<Value>(line).unwrap()["matches"]
            .as_u64()
            .unwrap() as usize;
        let got = option_matches(purchased, goal);
        matched += want;
        goal_options += goal.len();
        // Under a newer Python, repr writes characters assigned after 13.0 as they are.
        let newer_chars = match goal {
            GoalOptions::Dict(d) => d
                .iter()
                .any(|(n, v)| !(n.chars().chain(v.chars())).all(is_assigned)),
            GoalOptions::List(_) => false,
        };
        if got != want && (exact || !newer_chars) {
            bad.push(format!("{purchased:?} vs {goal:?}: {got}, goal.py {want}"));
        }
    }
    assert_eq!(results.lines().count(), options.len());
    eprintln!(
        "get_option_reward: {} cases ({goal_options} goal options, {matched} matched), {} differ",
        options.len(),
        bad.len()
    );
    assert!(bad.is_empty(), "{}", bad[..bad.len().min(20)].join("\n"));

    // default_process on every code point.
    let proc = std::fs::read(dir.path().join("process.u32")).unwrap();
    let (mut bad, mut rust_rule_differs) = (Vec::new(), 0usize);
    for (cp, word) in proc.chunks_exact(4).enumerate() {
        let want = u32::from_le_bytes(word.try_into().unwrap());
        let Some(c) = char::from_u32(cp as u32) else {
            continue;
        };
        let ours = if isalnum(c) { lower_first(c) } else { ' ' };
        if ours as u32 != want {
            bad.push(format!(
                "U+{cp:04X}: {:?}, rapidfuzz {:?}",
                ours,
                char::from_u32(want)
            ));
        }
        if rust_rule(c) as u32 != want {
            rust_rule_differs += 1;
        }
    }
    eprintln!(
        "default_process: {} code points differ from rapidfuzz (Rust's is_alphanumeric/to_lowercase \
         rule: {rust_rule_differs})",
        bad.len()
    );
    assert!(bad.is_empty(), "{}", bad[..bad.len().min(20)].join("\n"));

    // str.lower() of every code point.
    let low = std::fs::read(dir.path().join("lower.u32")).unwrap();
    let mut bad = Vec::new();
    for (cp, pair) in low.chunks_exact(8).enumerate() {
        let Some(c) = char::from_u32(cp as u32) else {
            continue;
        };
        let first = u32::from_le_bytes(pair[..4].try_into().unwrap());
        let second = u32::from_le_bytes(pair[4..].try_into().unwrap());
        let want: String = std::iter::once(first)
            .chain((second != 0).then_some(second))
            .filter_map(char::from_u32)
            .collect();
        let ours = lower(&c.to_string());
        if ours != want && (exact || is_assigned(c)) {
            bad.push(format!("U+{cp:04X}: {ours:?}, Python {want:?}"));
        }
    }
    eprintln!("str.lower(): {} code points differ", bad.len());
    assert!(bad.is_empty(), "{}", bad[..bad.len().min(20)].join("\n"));

    // str.isprintable on every code point (what repr escapes). Tables are Unicode 13.0 (Python
    // 3.10); under a newer Python only characters assigned later may differ.
    let bits = std::fs::read(dir.path().join("printable.bits")).unwrap();
    let (mut bad, mut newer) = (Vec::new(), 0usize);
    for cp in 0..0x11_0000u32 {
        let Some(c) = char::from_u32(cp) else {
            continue;
        };
        let want = bits[(cp / 8) as usize] >> (cp % 8) & 1 == 1;
        if isprintable(c) != want {
            if !exact && want && !is_assigned(c) {
                newer += 1;
            } else {
                bad.push(format!("U+{cp:04X}: {}, Python {want}", isprintable(c)));
            }
        }
    }
    eprintln!(
        "isprintable: {} code points differ; {newer} printable in Unicode {} but unassigned in {}",
        bad.len(),
        meta["unicode"],
        python_text::UNICODE_VERSION
    );
    assert!(bad.is_empty(), "{}", bad[..bad.len().min(20)].join("\n"));
}
