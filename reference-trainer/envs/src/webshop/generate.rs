//! A seeded WebShop catalog generator: products in the raw `items_shuffle` schema (ASINs, titles,
//! ` › ` breadcrumbs, descriptions, bullet points, single and range pricing strings, customization
//! options with images), their `items_ins_v2` records (mined-style attributes, a "Find me …"
//! instruction and the attributes it requires; some null, as upstream), human-style instructions
//! with option values, and each title's noun list: the words of the title spaCy's
//! `en_core_web_sm` tags NOUN or PROPN, as the original reward takes them (Title-Case adjectives
//! count), read from the tagger's verdicts on every title the generator can write
//! ([`super::title_nouns`]). Scales to 10⁵+ products.

use super::data::{HumanRecord, InsRecord, RawProduct};
use super::title_nouns::{title_index, TitleKey, TitleNouns};
use crate::rng::Rng;
use serde_json::{json, Value};
use std::collections::HashSet;

struct Spec {
    category: &'static str,
    queries: &'static [(&'static str, &'static str)],
    nouns: &'static [&'static str],
    adjectives: &'static [&'static str],
    attributes: &'static [&'static str],
    options: &'static [(&'static str, &'static [&'static str])],
    price: (u32, u32),
}

const COLORS: &[&str] = &[
    "black",
    "white",
    "navy blue",
    "dark grey",
    "red",
    "beige",
    "olive green",
    "light pink",
];

const SPECS: [Spec; 5] = [
    Spec {
        category: "beauty",
        queries: &[
            ("shampoo", "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos"),
            ("face moisturizer", "Beauty & Personal Care › Skin Care › Face › Moisturizers"),
            ("women's fragrance", "Beauty & Personal Care › Fragrance › Women's › Eau de Parfum"),
            ("lipstick", "Beauty & Personal Care › Makeup › Lips › Lipstick"),
        ],
        nouns: &["shampoo", "conditioner", "serum", "lotion", "cream", "perfume", "lipstick", "mask", "balm"],
        adjectives: &["soothing", "hydrating", "gentle", "luxury", "daily", "nourishing"],
        attributes: &[
            "tea tree", "essential oils", "natural ingredients", "paraben free", "cruelty free",
            "long lasting", "sensitive skin", "dry skin", "travel size", "fine lines",
        ],
        options: &[("scent", &["lavender", "vanilla", "citrus", "unscented"]), ("size", &["2 fl oz", "8 fl oz", "16 fl oz"])],
        price: (5, 60),
    },
    Spec {
        category: "fashion",
        queries: &[
            ("women's pants", "Clothing, Shoes & Jewelry › Women › Clothing › Pants"),
            ("men's shirts", "Clothing, Shoes & Jewelry › Men › Clothing › Shirts"),
            ("sneakers", "Clothing, Shoes & Jewelry › Men › Shoes › Fashion Sneakers"),
            ("dresses", "Clothing, Shoes & Jewelry › Women › Clothing › Dresses"),
        ],
        nouns: &["pants", "shirt", "sneakers", "dress", "jacket", "hoodie", "leggings", "shorts"],
        adjectives: &["casual", "classic", "stretchy", "lightweight", "vintage", "athletic"],
        attributes: &[
            "machine wash", "high waist", "button closure", "slim fit", "long sleeve",
            "tummy control", "quick drying", "rubber sole", "elastic waistband", "cotton spandex",
        ],
        options: &[("color", COLORS), ("size", &["small", "medium", "large", "x-large", "xx-large"])],
        price: (10, 90),
    },
    Spec {
        category: "electronics",
        queries: &[
            ("headphones", "Electronics › Headphones, Earbuds & Accessories › Headphones › Over-Ear Headphones"),
            ("phone chargers", "Electronics › Computers & Accessories › Cables › USB Cables"),
            ("bluetooth speakers", "Electronics › Portable Audio & Video › Portable Speakers & Docks"),
            ("hdmi cables", "Electronics › Television & Video › Accessories › Cables › HDMI Cables"),
        ],
        nouns: &["headphones", "charger", "cable", "speaker", "adapter", "case", "earbuds", "hub"],
        adjectives: &["portable", "wireless", "compact", "durable", "braided", "smart"],
        attributes: &[
            "fast charging", "noise cancelling", "wireless bluetooth", "high definition",
            "easy install", "usb port", "long battery life", "water resistant", "plug play", "hands free",
        ],
        options: &[("color", COLORS), ("style", &["1 pack", "2 pack", "3 pack"]), ("length", &["3ft", "6ft", "10ft"])],
        price: (8, 150),
    },
    Spec {
        category: "furniture",
        queries: &[
            ("office chairs", "Home & Kitchen › Furniture › Home Office Furniture › Home Office Chairs"),
            ("bookshelves", "Home & Kitchen › Furniture › Living Room Furniture › Bookcases"),
            ("coffee tables", "Home & Kitchen › Furniture › Living Room Furniture › Tables › Coffee Tables"),
            ("bed frames", "Home & Kitchen › Furniture › Bedroom Furniture › Beds, Frames & Bases"),
        ],
        nouns: &["chair", "table", "bookshelf", "frame", "stool", "desk", "cabinet", "ottoman"],
        adjectives: &["modern", "rustic", "foldable", "ergonomic", "industrial", "sturdy"],
        attributes: &[
            "easy assemble", "solid wood", "metal frame", "living room", "storage space",
            "high density", "lumbar support", "non slip", "space saving", "engineered wood",
        ],
        options: &[("color", COLORS), ("size", &["small", "medium", "large", "queen", "king"])],
        price: (30, 600),
    },
    Spec {
        category: "grocery",
        queries: &[
            ("green tea", "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Tea › Green"),
            ("snack bars", "Grocery & Gourmet Food › Snacks & Sweets › Snack Bars"),
            ("coffee beans", "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Coffee › Whole Coffee Beans"),
            ("spices", "Grocery & Gourmet Food › Pantry Staples › Herbs, Spices & Seasonings"),
        ],
        nouns: &["tea", "bar", "coffee", "beans", "snack", "sauce", "seasoning", "chips"],
        adjectives: &["organic", "roasted", "crunchy", "spicy", "premium", "classic"],
        attributes: &[
            "gluten free", "non gmo", "low sugar", "keto friendly", "individually wrapped",
            "dairy free", "high protein", "sugar free", "plant based", "caffeine free",
        ],
        options: &[("flavor name", &["original", "honey", "mint", "chocolate", "sea salt"]), ("size", &["pack of 6", "pack of 12", "24 count"])],
        price: (4, 45),
    },
];

/// One generated product in every file format.
#[derive(Clone, Debug)]
pub struct Generated {
    /// The `items_shuffle` record.
    pub raw: RawProduct,
    /// The `items_ins_v2` record.
    pub ins: InsRecord,
    /// The `items_human_ins` records.
    pub human: Vec<HumanRecord>,
    /// The title's nouns: the lowercased words spaCy tags NOUN/PROPN, in title order.
    pub nouns: Vec<String>,
}

fn capitalize(w: &str) -> String {
    let mut c = w.chars();
    c.next()
        .map_or_else(String::new, |f| f.to_uppercase().chain(c).collect())
}

/// The syllables brands are made of (two or three of them).
const SYLLABLES: [&str; 16] = [
    "ze", "vo", "ra", "lu", "mi", "ko", "ta", "ne", "qu", "by", "ro", "sa", "fi", "do", "xe", "pa",
];

/// A brand and its syllable indices.
fn brand(rng: &mut Rng) -> (String, (usize, usize, Option<usize>)) {
    let n = 2 + rng.below(2);
    let idx: Vec<usize> = (0..n).map(|_| rng.below(SYLLABLES.len())).collect();
    let name = capitalize(&idx.iter().map(|&i| SYLLABLES[i]).collect::<String>());
    (name, (idx[0], idx[1], idx.get(2).copied()))
}

fn pick_distinct<'a>(rng: &mut Rng, xs: &[&'a str], n: usize) -> Vec<&'a str> {
    let mut pool: Vec<&str> = xs.to_vec();
    let mut out = Vec::new();
    for _ in 0..n.min(pool.len()) {
        out.push(pool.swap_remove(rng.below(pool.len())));
    }
    out
}

/// [`pick_distinct`] on indices `0..n` (the same draws).
fn pick_distinct_indices(rng: &mut Rng, n: usize, k: usize) -> Vec<usize> {
    let mut pool: Vec<usize> = (0..n).collect();
    let mut out = Vec::new();
    for _ in 0..k.min(pool.len()) {
        out.push(pool.swap_remove(rng.below(pool.len())));
    }
    out
}

/// The title grammar as `tools/webshop_title_nouns.py` reads it (and as the header of
/// `title_nouns.bin` records it): syllables, brand lengths, and each category's adjectives and
/// nouns in the generator's order. `cargo run -p t2po-envs --example webshop_title_grammar`
/// prints it.
pub fn title_grammar() -> Value {
    json!({
        "syllables": SYLLABLES,
        "brand_syllables": [2, 3],
        "specs": SPECS.iter().map(|s| json!({
            "category": s.category,
            "adjectives": s.adjectives,
            "nouns": s.nouns,
        })).collect::<Vec<_>>(),
    })
}

/// The lowercased title words spaCy tags NOUN/PROPN, in title order (duplicates kept, as
/// `goal.py`'s list).
fn title_nouns(
    spec: usize,
    adjective: usize,
    nouns: &[usize],
    brand: (usize, usize, Option<usize>),
    words: &[&str],
) -> Vec<String> {
    let sizes: Vec<(usize, usize)> = SPECS
        .iter()
        .map(|s| (s.adjectives.len(), s.nouns.len()))
        .collect();
    let key = TitleKey {
        spec,
        adjective,
        nouns: (nouns[0], nouns.get(1).copied()),
        brand,
    };
    let mask = TitleNouns::shipped()
        .mask(title_index(&sizes, SYLLABLES.len(), key))
        .expect("title_nouns.bin covers every title (tested)");
    words
        .iter()
        .enumerate()
        .filter(|&(t, _)| mask & (1 << t) != 0)
        .map(|(_, w)| w.to_lowercase())
        .collect()
}

/// `n` products from `seed`.
pub fn generate_catalog(seed: u64, n: usize) -> Vec<Generated> {
    let mut rng = Rng::new(seed ^ 0x5E0_5407);
    let mut asins = HashSet::new();
    let mut out = Vec::with_capacity(n);
    const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    while out.len() < n {
        let asin: String = "B0"
            .chars()
            .chain((0..8).map(|_| ALNUM[rng.below(ALNUM.len())] as char))
            .collect();
        if !asins.insert(asin.clone()) {
            continue;
        }
        let spec_index = rng.below(SPECS.len());
        let spec = &SPECS[spec_index];
        let (query, breadcrumb) = spec.queries[rng.below(spec.queries.len())];
        let (b, brand_key) = brand(&mut rng);
        let k = 1 + rng.below(2);
        let noun_indices = pick_distinct_indices(&mut rng, spec.nouns.len(), k);
        let nouns_used: Vec<&str> = noun_indices.iter().map(|&i| spec.nouns[i]).collect();
        let adj_index = rng.below(spec.adjectives.len());
        let adj = spec.adjectives[adj_index];
        let words: Vec<String> = [b.clone(), capitalize(adj)]
            .into_iter()
            .chain(nouns_used.iter().map(|w| capitalize(w)))
            .collect();
        let title = words.join(" ");
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        let nouns = title_nouns(spec_index, adj_index, &noun_indices, brand_key, &words);
        let k = 3 + rng.below(3);
        let attributes: Vec<String> = pick_distinct(&mut rng, spec.attributes, k)
            .into_iter()
            .map(String::from)
            .collect();
        let main = nouns_used[0];
        let description = format!(
            "{title} is made for everyday use. This {main} is {} and {}. Satisfaction guaranteed.",
            attributes[0], attributes[1]
        );
        let mut bullets: Vec<String> = attributes
            .iter()
            .skip(1)
            .map(|a| format!("{}: {a}", capitalize(main)))
            .collect();
        bullets.push(format!("Brand: {b}"));
        let (lo, hi) = spec.price;
        let base = lo as f64 + rng.below(((hi - lo) * 100) as usize) as f64 / 100.0;
        let pricing = if rng.below(5) == 0 {
            format!("${base:.2} - ${:.2}", base * 1.5)
        } else {
            format!("${base:.2}")
        };
        let mut options = serde_json::Map::new();
        let mut chosen_options: Vec<(String, Vec<String>)> = Vec::new();
        let k = rng.below(3);
        for (name, values) in pick_distinct_options(&mut rng, spec.options, k) {
            let k = 2 + rng.below(3);
            let vals = pick_distinct(&mut rng, values, k);
            options.insert(
                capitalize(name),
                Value::Array(vals.iter().map(|v| json!({"value": capitalize(v), "image": format!("https://images.example/{asin}/{v}.jpg")})).collect()),
            );
            chosen_options.push((
                name.to_string(),
                vals.iter().map(|v| v.to_string()).collect(),
            ));
        }
        let required: Vec<String> = attributes.iter().take(1 + rng.below(2)).cloned().collect();
        let instruction = (rng.below(10) != 0)
            .then(|| format!("Find me {} {} with {}", adj, main, required.join(", ")));
        let mut human = Vec::new();
        for _ in 0..rng.below(3) {
            let opts: Vec<String> = chosen_options
                .iter()
                .map(|(_, vs)| vs[rng.below(vs.len())].clone())
                .collect();
            let opt_text = if opts.is_empty() {
                String::new()
            } else {
                format!(" in {}", opts.join(" and "))
            };
            human.push(HumanRecord {
                instruction: format!(
                    "i am looking for a {} {main} that is {}{opt_text}.",
                    adj, required[0]
                ),
                instruction_attributes: vec![required[0].clone()],
                instruction_options: opts,
            });
        }
        let raw = RawProduct {
            asin: Value::String(asin),
            name: title,
            category: spec.category.to_string(),
            query: query.to_string(),
            product_category: breadcrumb.to_string(),
            full_description: Value::String(description),
            small_description: Value::Array(bullets.into_iter().map(Value::String).collect()),
            pricing: Value::String(pricing),
            customization_options: if options.is_empty() {
                Value::Null
            } else {
                Value::Object(options)
            },
            images: json!([format!("https://images.example/{}.jpg", out.len())]),
        };
        out.push(Generated {
            raw,
            ins: InsRecord {
                attributes,
                instruction,
                instruction_attributes: required,
            },
            human,
            nouns,
        });
    }
    out
}

fn pick_distinct_options(
    rng: &mut Rng,
    xs: &'static [(&'static str, &'static [&'static str])],
    n: usize,
) -> Vec<(&'static str, &'static [&'static str])> {
    let mut pool = xs.to_vec();
    let mut out = Vec::new();
    for _ in 0..n.min(pool.len()) {
        out.push(pool.swap_remove(rng.below(pool.len())));
    }
    out
}
