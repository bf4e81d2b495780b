//! The WebShop reward, exactly as `web_agent_site/engine/goal.py` computes it (spec §1.4):
//! type reward from query/category/title nouns, fuzzy attribute and option matches with
//! `token_set_ratio > 85` (thefuzz → rapidfuzz semantics, rounded half-to-even), the
//! `normalize_color` substring quirk and the dict-options-become-tuples quirk, and the price test.

use super::python_text;
use std::collections::BTreeSet;

/// `COLOR_SET` in its exact order (the first match wins). The spec calls it "100 words"; the
/// listed set has 102.
pub const COLOR_SET: [&str; 102] = [
    "alabaster",
    "apricot",
    "aqua",
    "ash",
    "asphalt",
    "azure",
    "banana",
    "beige",
    "black",
    "blue",
    "blush",
    "bordeaux",
    "bronze",
    "brown",
    "burgundy",
    "camel",
    "camo",
    "caramel",
    "champagne",
    "charcoal",
    "cheetah",
    "chestnut",
    "chocolate",
    "christmas",
    "coffee",
    "cognac",
    "copper",
    "coral",
    "cranberry",
    "cream",
    "crystal",
    "dark",
    "denim",
    "eggplant",
    "elephant",
    "espresso",
    "fuchsia",
    "gold",
    "granite",
    "grape",
    "graphite",
    "grass",
    "gray",
    "green",
    "grey",
    "heather",
    "indigo",
    "ivory",
    "ivy",
    "khaki",
    "lavender",
    "lemon",
    "leopard",
    "light",
    "lilac",
    "lime",
    "magenta",
    "maroon",
    "mauve",
    "merlot",
    "midnight",
    "mint",
    "mocha",
    "multicolor",
    "mushroom",
    "mustard",
    "natural",
    "navy",
    "nude",
    "olive",
    "orange",
    "peach",
    "pewter",
    "pink",
    "plum",
    "purple",
    "rainbow",
    "red",
    "rose",
    "royal",
    "rust",
    "sand",
    "sapphire",
    "seashell",
    "silver",
    "skull",
    "slate",
    "steel",
    "stone",
    "stonewash",
    "sunflower",
    "tan",
    "taupe",
    "teal",
    "tiger",
    "turquoise",
    "violet",
    "walnut",
    "wheat",
    "white",
    "wine",
    "yellow",
];

/// thefuzz's `full_process(s, force_ascii=True)`: drop U+0080–U+00FF (`ascii_only`), then
/// rapidfuzz's `default_process` — a character that is not alphanumeric by Python's
/// `str.isalnum()` becomes a space, any other is replaced by the first code point of its
/// `str.lower()` (so `İ` → `i`), and spaces are trimmed from both ends. Python's Unicode 13.0
/// tables, see [`super::python_text`].
pub fn full_process(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if ('\u{80}'..='\u{ff}').contains(&c) {
            continue;
        }
        out.push(if python_text::isalnum(c) {
            python_text::lower_first(c)
        } else {
            ' '
        });
    }
    out.trim_matches(' ').to_string()
}

fn lcs(a: &[char], b: &[char]) -> usize {
    let mut prev = vec![0usize; b.len() + 1];
    let mut cur = vec![0usize; b.len() + 1];
    for &x in a {
        for (j, &y) in b.iter().enumerate() {
            cur[j + 1] = if x == y {
                prev[j] + 1
            } else {
                cur[j].max(prev[j + 1])
            };
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The Indel distance (insertions + deletions) between two strings, in code points.
fn indel_distance(a: &[char], b: &[char]) -> usize {
    a.len() + b.len() - 2 * lcs(a, b)
}

/// rapidfuzz's `norm_distance`: `100 − 100·d/L` in f64, 100 for `L = 0`. The order of the
/// operations matters for exact halves: `100·(1 − d/L)` rounds some of them the other way
/// (`"x"*23+"y"*17` vs `"x"*23+"z"*17`: 57.5 exactly here, 57.49… the other way).
fn norm_score(dist: usize, lensum: usize) -> f64 {
    if lensum == 0 {
        100.0
    } else {
        100.0 - 100.0 * dist as f64 / lensum as f64
    }
}

/// Python's `round()` of a float to an integer: half to even.
fn round_half_even(x: f64) -> i64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 && (r as i64) % 2 != 0 {
        (r - x.signum()) as i64
    } else {
        r as i64
    }
}

/// thefuzz `token_set_ratio` (an integer in 0..=100): `int(round(...))` of rapidfuzz's
/// `fuzz.token_set_ratio` on the processed strings. Tokens are deduplicated and sorted by code
/// point; with `sect` the joined intersection and `ab`/`ba` the joined differences, the score is
/// the best of `norm(indel(ab, ba), |sect ab| + |sect ba|)` and, when `sect` is not empty,
/// `norm(1 + |ab|, |sect| + |sect ab|)` and `norm(1 + |ba|, |sect| + |sect ba|)`.
pub fn token_set_ratio(s1: &str, s2: &str) -> i64 {
    let (p1, p2) = (full_process(s1), full_process(s2));
    let a: BTreeSet<&str> = p1.split(' ').filter(|t| !t.is_empty()).collect();
    let b: BTreeSet<&str> = p2.split(' ').filter(|t| !t.is_empty()).collect();
    if a.is_empty() || b.is_empty() {
        return 0;
    }
    let join = |set: Vec<&&str>| set.into_iter().copied().collect::<Vec<_>>().join(" ");
    let inter: Vec<char> = join(a.intersection(&b).collect()).chars().collect();
    let ab: Vec<char> = join(a.difference(&b).collect()).chars().collect();
    let ba: Vec<char> = join(b.difference(&a).collect()).chars().collect();
    if !inter.is_empty() && (ab.is_empty() || ba.is_empty()) {
        return 100;
    }
    let sep = usize::from(!inter.is_empty());
    let sect_ab = inter.len() + sep + ab.len();
    let sect_ba = inter.len() + sep + ba.len();
    let mut best = norm_score(indel_distance(&ab, &ba), sect_ab + sect_ba);
    if !inter.is_empty() {
        best = best
            .max(norm_score(sep + ab.len(), inter.len() + sect_ab))
            .max(norm_score(sep + ba.len(), inter.len() + sect_ba));
    }
    round_half_even(best)
}

/// An option as the reward sees it: a purchased or human-goal value, or a synthetic goal's
/// `(name, value)` pair (a Python tuple).
#[derive(Clone, Debug, PartialEq)]
pub enum OptionItem {
    /// A plain string.
    Text(String),
    /// A `(name, value)` tuple.
    Pair(String, String),
}

impl OptionItem {
    /// Python `str()` of the item: a tuple prints as `('size', 'xl')`, each element by
    /// Python's `repr` (so `10\u{a0}inch` is written `'10\\xa0inch'`).
    pub fn python_str(&self) -> String {
        match self {
            OptionItem::Text(s) => s.clone(),
            OptionItem::Pair(n, v) => {
                format!("({}, {})", python_text::repr(n), python_text::repr(v))
            }
        }
    }
}

/// `normalize_color`: the first `COLOR_SET` word `c` with `c in x` — a substring test for a
/// string ("standard" → "tan"), an element-equality test for a tuple.
pub fn normalize_color(x: &OptionItem) -> OptionItem {
    for c in COLOR_SET {
        let hit = match x {
            OptionItem::Text(s) => s.contains(c),
            OptionItem::Pair(n, v) => n == c || v == c,
        };
        if hit {
            return OptionItem::Text(c.to_string());
        }
    }
    x.clone()
}

/// A goal's options: a list (human goals) or a dict (synthetic goals; iterated as tuples).
#[derive(Clone, Debug, PartialEq)]
pub enum GoalOptions {
    /// Human goals: option values.
    List(Vec<String>),
    /// Synthetic goals: `{name: value}` in insertion order.
    Dict(Vec<(String, String)>),
}

impl GoalOptions {
    /// `len(goal_options)`.
    pub fn len(&self) -> usize {
        match self {
            GoalOptions::List(v) => v.len(),
            GoalOptions::Dict(v) => v.len(),
        }
    }
    /// Whether there is no option.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn items(&self) -> Vec<OptionItem> {
        match self {
            GoalOptions::List(v) => v.iter().map(|s| OptionItem::Text(s.clone())).collect(),
            GoalOptions::Dict(v) => v
                .iter()
                .map(|(n, x)| OptionItem::Pair(n.clone(), x.clone()))
                .collect(),
        }
    }
}

/// What the reward reads of the goal.
#[derive(Clone, Debug, PartialEq)]
pub struct RewardGoal {
    /// The goal product's `query`.
    pub query: String,
    /// The goal product's `product_category`.
    pub product_category: String,
    /// The goal product's title nouns (lowercased, duplicates kept).
    pub nouns: Vec<String>,
    /// Required attributes.
    pub attributes: Vec<String>,
    /// Required options.
    pub goal_options: GoalOptions,
    /// Price limit.
    pub price_upper: f64,
}

/// What the reward reads of the purchased product.
#[derive(Clone, Debug, PartialEq)]
pub struct Purchased<'a> {
    /// `query`.
    pub query: &'a str,
    /// `product_category`.
    pub product_category: &'a str,
    /// Title nouns (lowercased).
    pub nouns: &'a [String],
    /// `Attributes`.
    pub attributes: &'a [String],
    /// `Title`.
    pub title: &'a str,
    /// `BulletPoints` joined by single spaces.
    pub bullets_joined: &'a str,
    /// `Description`.
    pub description: &'a str,
    /// The price used for the reward.
    pub price: f64,
}

/// The reward and its parts (the original's verbose info).
#[derive(Clone, Debug, PartialEq)]
pub struct RewardInfo {
    /// The total reward.
    pub reward: f64,
    /// Type reward.
    pub r_type: f64,
    /// `query_match`.
    pub query_match: bool,
    /// `category_match`.
    pub category_match: bool,
    /// `title_score`.
    pub title_score: f64,
    /// Matched goal attributes.
    pub num_attr_matches: usize,
    /// Matched goal options.
    pub num_option_matches: usize,
    /// `price <= price_upper`.
    pub r_price: bool,
}

/// `get_type_reward`: `(r_type, query_match, category_match, title_score)`.
pub fn type_reward(p: &Purchased, g: &RewardGoal) -> (f64, bool, bool, f64) {
    let query_match = p.query == g.query;
    let cats = |s: &str| {
        s.split('›')
            .map(|x| x.trim().to_string())
            .collect::<BTreeSet<_>>()
    };
    let category_match = cats(p.product_category)
        .intersection(&cats(&g.product_category))
        .count()
        >= 2;
    let title_score = if g.nouns.is_empty() {
        0.2
    } else {
        let pn: BTreeSet<&String> = p.nouns.iter().collect();
        let gn: BTreeSet<&String> = g.nouns.iter().collect();
        pn.intersection(&gn).count() as f64 / g.nouns.len() as f64
    };
    let mut r_type = 1.0;
    if !(query_match || category_match || title_score > 0.2) {
        r_type = 0.5;
    }
    if title_score < 0.1 {
        r_type = 0.1;
    }
    if title_score == 0.0 {
        r_type = 0.0;
    }
    (r_type, query_match, category_match, title_score)
}

/// `get_attribute_reward`'s match count.
pub fn attribute_matches(p: &Purchased, g: &RewardGoal) -> usize {
    // Python's str.lower(), not Rust's to_lowercase (Unicode 13.0 as Python 3.10).
    let (title, bullets, desc) = (
        python_text::lower(p.title),
        python_text::lower(p.bullets_joined),
        python_text::lower(p.description),
    );
    g.attributes
        .iter()
        .filter(|ga| {
            p.attributes.iter().any(|pa| token_set_ratio(pa, ga) > 85)
                || title.contains(ga.as_str())
                || bullets.contains(ga.as_str())
                || desc.contains(ga.as_str())
        })
        .count()
}

/// `get_option_reward`'s match count for the purchased option values.
pub fn option_matches(purchased: &[String], goal: &GoalOptions) -> usize {
    let bought: Vec<String> = purchased
        .iter()
        .map(|v| normalize_color(&OptionItem::Text(v.clone())).python_str())
        .collect();
    goal.items()
        .iter()
        .map(|g| normalize_color(g).python_str())
        .filter(|g| bought.iter().any(|p| token_set_ratio(p, g) > 85))
        .count()
}

/// `get_reward`: the total and its parts. `options` are the chosen option values in the order
/// they were set.
pub fn reward(p: &Purchased, g: &RewardGoal, options: &[String]) -> RewardInfo {
    let (r_type, query_match, category_match, title_score) = type_reward(p, g);
    let num_attr_matches = attribute_matches(p, g);
    let num_option_matches = option_matches(options, &g.goal_options);
    let r_price = p.price <= g.price_upper;
    let total = (num_attr_matches + num_option_matches + r_price as usize) as f64
        / (g.attributes.len() + g.goal_options.len() + 1) as f64;
    RewardInfo {
        reward: r_type * total,
        r_type,
        query_match,
        category_match,
        title_score,
        num_attr_matches,
        num_option_matches,
        r_price,
    }
}

/// The parts of a purchase's reward, as the original's `get_reward(..., verbose=True)` reports
/// them: `r_type`, `r_att` (`num_attr_matches / len(attributes)`), `r_option`
/// (`num_option_matches / len(goal_options)`, absent when the goal has no options, where the
/// original gives `None`), `r_price` (0/1), `title_score`, `query_match` and `category_match`
/// (0/1), and the weights `w_att`, `w_option`, `w_price` of the three parts in the total
/// (`reward = r_type · (w_att·r_att + w_option·r_option + w_price·r_price)`).
pub fn parts(info: &RewardInfo, g: &RewardGoal) -> Vec<(&'static str, f64)> {
    let (na, no) = (g.attributes.len(), g.goal_options.len());
    let denom = (na + no + 1) as f64;
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    let mut v = vec![
        ("r_type", info.r_type),
        // The original divides by len(attributes) unguarded; every goal has attributes.
        ("r_att", info.num_attr_matches as f64 / na.max(1) as f64),
        ("w_att", na as f64 / denom),
        ("query_match", flag(info.query_match)),
        ("category_match", flag(info.category_match)),
        ("title_score", info.title_score),
    ];
    if no > 0 {
        v.push(("r_option", info.num_option_matches as f64 / no as f64));
        v.push(("w_option", no as f64 / denom));
    }
    v.push(("r_price", flag(info.r_price)));
    v.push(("w_price", 1.0 / denom));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_set_ratio_reference_values() {
        for (a, b, want) in [
            ("essential oil", "essential oils", 96),
            ("light weight", "lightweight", 96),
            ("xx-large", "x-large", 93),
            ("pack of 12", "12 pack", 100),
            ("pack of 12", "12 count", 44),
            ("x-large", "xl", 22),
            ("dark blue", "navy", 15),
            ("small", "medium", 18),
            ("standard", "tan", 55),
            ("tea tree", "tea tree oil", 100),
        ] {
            assert_eq!(token_set_ratio(a, b), want, "{a:?} vs {b:?}");
        }
        assert_eq!(token_set_ratio("", "x"), 0);
        assert_eq!(token_set_ratio("!!", "x"), 0);
        assert_eq!(round_half_even(85.5), 86);
        assert_eq!(round_half_even(86.5), 86);
    }

    /// Exact halves, where the order of operations and Python's half-to-even rounding decide
    /// the integer; the values are thefuzz 0.22.1 / rapidfuzz 3.14.5's (`fuzz.token_set_ratio`).
    #[test]
    fn token_set_ratio_rounding_ties() {
        let (x23y17, x23z17) = (
            "x".repeat(23) + &"y".repeat(17),
            "x".repeat(23) + &"z".repeat(17),
        );
        for (a, b, want) in [
            (x23y17.as_str(), x23z17.as_str(), 58), // 57.5: 100·(1 − 34/80) gives 57.4999…
            ("abcdefgh", "abcdefgq", 88),           // 87.5 → 88 (even)
            ("abcdefgh", "bcdefghi", 88),
            ("abcdefgh", "abcdexyz", 62), // 62.5 → 62 (even)
            ("abcdefgh", "abcvwxyz", 38), // 37.5 → 38
            ("abcdefgh", "aqrstuvw", 12), // 12.5 → 12
            ("abcdefgh", "abcdefxy", 75),
            ("a b", "a c", 67),
            ("aa bb", "aa cc", 60),
            ("tea tree", "tea trees", 94),
            ("abcd efgh", "abcd efgi", 89),
        ] {
            assert_eq!(token_set_ratio(a, b), want, "{a:?} vs {b:?}");
        }
        // The difference the formula makes, spelled out.
        assert_eq!(norm_score(34, 80), 57.5);
        let d = std::hint::black_box(34.0f64);
        assert!(
            100.0 * (1.0 - d / 80.0) < 57.5,
            "the old formula's 57.4999…"
        );
    }

    /// Preprocessing by Python's character rules (thefuzz 0.22.1 / rapidfuzz 3.14.5's values).
    #[test]
    fn token_set_ratio_python_character_rules() {
        for (a, b, want) in [
            ("İstanbul", "istanbul", 100), // İ → i (rapidfuzz keeps the first of "i̇")
            ("Ⓐpple", "apple", 89),        // Ⓐ is So: a space
            ("किताब", "कताब", 89),         // the vowel sign ि is Mc: a space
            ("x_y", "x y", 100),           // _ is not alphanumeric
            ("café", "caf", 100),          // é (U+00E9) dropped by force_ascii
            ("naïve", "nave", 100),
            ("ΣΑΣ", "σας", 67),        // per-character lowercase: no final sigma
            ("Straße", "strasse", 83), // ß dropped by force_ascii
            ("ǅemal", "ǆemal", 100),   // titlecase digraph lowercases
            ("Ⅻ pack", "ⅻ pack", 100), // Nl numerals are alphanumeric
            ("10\\xa0inch", "10 inch", 82),
            ("size ™", "size", 100),
            ("ﬁne", "fine", 57),  // the ligature is one letter
            ("ＡＢＣ", "abc", 0), // fullwidth letters stay fullwidth
            ("😀 red", "red", 100),
        ] {
            assert_eq!(token_set_ratio(a, b), want, "{a:?} vs {b:?}");
        }
        assert_eq!(full_process(" Ⓐ-B_c! "), "b c");
        assert_eq!(full_process("İ"), "i");
    }

    #[test]
    fn color_normalisation_quirks() {
        let t = |s: &str| OptionItem::Text(s.to_string());
        assert_eq!(normalize_color(&t("standard")), t("tan"));
        assert_eq!(normalize_color(&t("washable")), t("ash"));
        assert_eq!(normalize_color(&t("dark blue")), t("blue"));
        assert_eq!(normalize_color(&t("light grey")), t("grey"));
        assert_eq!(normalize_color(&t("xl")), t("xl"));
        let pair = OptionItem::Pair("color".into(), "grey".into());
        assert_eq!(normalize_color(&pair), t("grey"));
        let pair = OptionItem::Pair("color".into(), "dark grey".into());
        assert_eq!(
            normalize_color(&pair),
            pair,
            "a tuple only matches a whole color word"
        );
        assert_eq!(
            OptionItem::Pair("size".into(), "XL".into()).python_str(),
            "('size', 'XL')"
        );
        assert_eq!(
            OptionItem::Pair("size".into(), "men's".into()).python_str(),
            "('size', \"men's\")"
        );
        assert_eq!(
            OptionItem::Pair("size".into(), "10\u{a0}inch".into()).python_str(),
            "('size', '10\\xa0inch')"
        );
        // The escape is what the original scores: `('size', '10\xa0inch')` against a bought
        // "10\u{a0}inch" (which is not a tuple, so not escaped) misses.
        let goal = GoalOptions::Dict(vec![("size".into(), "10\u{a0}inch".into())]);
        assert_eq!(option_matches(&["10\u{a0}inch".to_string()], &goal), 0);
    }

    fn nouns(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    /// The four cases of the original's `test_get_reward` (tests/web-agent-site/engine/test_goal.py),
    /// with the title noun lists spaCy gives those names.
    #[test]
    fn acceptance_cases_of_the_original() {
        let shoe = nouns(&[
            "mens",
            "d.o.n",
            "issue",
            "gca",
            "basketball",
            "sneakers",
            "shoes",
            "casual",
            "white",
        ]);
        let mut goal = RewardGoal {
            query: "Query 1".into(),
            product_category: "a › b › c".into(),
            nouns: shoe.clone(),
            attributes: nouns(&["tea tree", "essential oils", "natural ingredients"]),
            goal_options: GoalOptions::Dict(vec![
                ("color".into(), "grey".into()),
                ("size".into(), "XL".into()),
            ]),
            price_upper: 40.0,
        };
        let attrs = nouns(&["tea tree", "essential oil", "natural ingredients"]);
        let bought = nouns(&["grey", "XL"]);
        let p = Purchased {
            query: "Query 1",
            product_category: "a › b › c",
            nouns: &shoe,
            attributes: &attrs,
            title: "",
            bullets_joined: "",
            description: "",
            price: 35.0,
        };
        assert_eq!(reward(&p, &goal, &bought).reward, 1.0);

        // Attributes only in bullets/description. The test passes BulletPoints as a str, which
        // " ".join() spreads into single characters, so only the description matches.
        let bullets: String = "This shampoo has essential oils and smells like lemons"
            .chars()
            .map(String::from)
            .collect::<Vec<_>>()
            .join(" ");
        let p2 = Purchased {
            attributes: &[],
            bullets_joined: &bullets,
            description: "Best shampoo on the market, made with natural ingredients",
            ..p.clone()
        };
        let r = reward(&p2, &goal, &bought);
        assert_eq!(r.num_attr_matches, 1);
        assert!((r.reward - 2.0 / 3.0).abs() < 1e-2, "{r:?}");

        goal.goal_options = GoalOptions::Dict(vec![
            ("color".into(), "grey".into()),
            ("size".into(), "XL".into()),
            ("amount".into(), "pack of 12".into()),
        ]);
        let r = reward(&p2, &goal, &bought);
        assert!((r.reward - 0.5714).abs() < 1e-2, "{r:?}");

        goal.nouns = nouns(&[
            "saireed", "ul", "prong", "power", "cord", "jbl", "bar", "bar", "channel", "k", "hd",
            "soundbar",
        ]);
        let cord = nouns(&[
            "brst",
            "ac",
            "power",
            "cord",
            "outlet",
            "socket",
            "cable",
            "plug",
            "lead",
            "panasonic",
            "sc",
            "ht830v",
            "dvd",
            "vcr",
            "combo",
            "home",
            "theater",
            "system",
        ]);
        let p3 = Purchased {
            query: "Query 2",
            product_category: "a › d › e",
            nouns: &cord,
            ..p2.clone()
        };
        let r = reward(&p3, &goal, &bought);
        assert!((r.title_score - 0.17).abs() < 1e-2);
        assert_eq!(r.r_type, 0.5);
        assert!((r.reward - 0.2857).abs() < 1e-2, "{r:?}");

        // The verbose parts put the total back together, and name the original's keys.
        for (pp, options) in [
            (&p, &bought),
            (&p2, &bought),
            (&p3, &bought),
            (&p3, &vec![]),
        ] {
            let r = reward(pp, &goal, options);
            let parts: std::collections::BTreeMap<_, _> = parts(&r, &goal).into_iter().collect();
            let total = parts["r_type"]
                * (parts["w_att"] * parts["r_att"]
                    + parts["w_option"] * parts["r_option"]
                    + parts["w_price"] * parts["r_price"]);
            assert!((total - r.reward).abs() < 1e-12, "{parts:?} vs {r:?}");
            assert_eq!(parts["title_score"], r.title_score);
        }
        let r = reward(&p3, &goal, &bought);
        let ps = parts(&r, &goal);
        // 3 goal attributes, 3 goal options: 3 + 3 + 1 parts in the denominator.
        let r_att = r.num_attr_matches as f64 / 3.0;
        assert_eq!(ps.iter().find(|(k, _)| *k == "r_att").unwrap().1, r_att);
        assert_eq!(
            ps.iter().find(|(k, _)| *k == "w_option").unwrap().1,
            3.0 / 7.0
        );
        // A goal without options has no r_option (the original's None), and w_att + w_price = 1.
        goal.goal_options = GoalOptions::List(vec![]);
        let r = reward(&p3, &goal, &bought);
        let ps: std::collections::BTreeMap<_, _> = parts(&r, &goal).into_iter().collect();
        assert!(!ps.contains_key("r_option") && !ps.contains_key("w_option"));
        assert!((ps["w_att"] + ps["w_price"] - 1.0).abs() < 1e-12);
        let total = ps["r_type"] * (ps["w_att"] * ps["r_att"] + ps["w_price"] * ps["r_price"]);
        assert!((total - r.reward).abs() < 1e-12);
    }

    #[test]
    fn option_reward_cases_of_the_original() {
        let l = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let goal = GoalOptions::List(l(&["grey", "XL", "pack of 12"]));
        assert_eq!(option_matches(&l(&["pack of 12", "grey", "XL"]), &goal), 3);
        assert_eq!(option_matches(&l(&["pack of 12", "blue", "XL"]), &goal), 2);
        let fuzzy = GoalOptions::List(l(&["cool powder snow", "XL", "pack of 12"]));
        assert_eq!(
            option_matches(&l(&["pack of 12", "powder snow", "XL"]), &fuzzy),
            3
        );
        assert_eq!(
            option_matches(&l(&["goal 1"]), &GoalOptions::List(vec![])),
            0
        );
        assert_eq!(
            option_matches(&[], &GoalOptions::List(l(&["goal 1", "goal 2"]))),
            0
        );
        // Synthetic dict options read as "name value"; a normalised purchase fails.
        let dict = GoalOptions::Dict(vec![("size".into(), "standard".into())]);
        assert_eq!(
            option_matches(&l(&["standard"]), &dict),
            0,
            "standard → tan"
        );
    }

    #[test]
    fn type_reward_cases_of_the_original() {
        let g = RewardGoal {
            query: "Query 1".into(),
            product_category: "a › b › c".into(),
            nouns: vec!["name".into()],
            attributes: vec![],
            goal_options: GoalOptions::List(vec![]),
            price_upper: 1.0,
        };
        let n = vec!["name".to_string()];
        let mk = |cat: &'static str| Purchased {
            query: "Query 2",
            product_category: cat,
            nouns: &n,
            attributes: &[],
            title: "",
            bullets_joined: "",
            description: "",
            price: 0.0,
        };
        for (cat, want) in [
            ("b › c › a", true),
            ("d › e › f", false),
            ("a › d › b", true),
            ("a › a › b", true),
            ("a › a › d", false),
        ] {
            assert_eq!(type_reward(&mk(cat), &g).2, want, "{cat}");
        }
        let (r, q, _, t) = type_reward(&mk("a › b › c"), &g);
        assert_eq!((r, q, t), (1.0, false, 1.0));
    }
}
