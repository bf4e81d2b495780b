//! WebShop data: the raw product schema of `items_shuffle*.json`, the `items_ins_v2*.json` and
//! `items_human_ins.json` records, the load-time transforms of `load_products` (spec §1.1–1.2),
//! streaming readers for the real files (the full product file is 5 GB: products are visited one
//! at a time, never held as JSON), the optional title-noun sidecar, and writers of the same formats.

use crate::error::LoadError;
use crate::rng::Rng;
use serde::de::{DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io::BufReader;
use std::path::Path;

/// One raw product record (`items_shuffle*.json` list element), the keys the code uses.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RawProduct {
    /// 10-character id; `"nan"` or longer ids are skipped.
    #[serde(default)]
    pub asin: Value,
    /// Title.
    #[serde(default)]
    pub name: String,
    /// Top-level category.
    #[serde(default)]
    pub category: String,
    /// Scraping query.
    #[serde(default)]
    pub query: String,
    /// Breadcrumb joined with ` › `.
    #[serde(default)]
    pub product_category: String,
    /// Description.
    #[serde(default)]
    pub full_description: Value,
    /// Bullet points: a list of strings or one string.
    #[serde(default)]
    pub small_description: Value,
    /// `"$10.99"`, `"$10.00 - $20.00"`, null or empty.
    #[serde(default)]
    pub pricing: Value,
    /// Option name → list of `{"value", "image"}`, in file order.
    #[serde(default)]
    pub customization_options: Value,
    /// Image urls.
    #[serde(default)]
    pub images: Value,
}

/// One `items_ins_v2` record.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InsRecord {
    /// Mined attribute phrases.
    #[serde(default)]
    pub attributes: Vec<String>,
    /// The templated instruction (null: the product gets no goal).
    #[serde(default)]
    pub instruction: Option<String>,
    /// The attributes the goal requires.
    #[serde(default)]
    pub instruction_attributes: Vec<String>,
}

/// One `items_human_ins` record.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HumanRecord {
    /// The instruction.
    #[serde(default)]
    pub instruction: String,
    /// Required attributes (records without any are skipped).
    #[serde(default)]
    pub instruction_attributes: Vec<String>,
    /// Required option values.
    #[serde(default)]
    pub instruction_options: Vec<String>,
}

/// A product after the load transforms.
#[derive(Clone, Debug, PartialEq)]
pub struct Product {
    /// ASIN.
    pub asin: String,
    /// `Title`.
    pub title: String,
    /// `category`.
    pub category: String,
    /// `query`, lowercased and stripped.
    pub query: String,
    /// `product_category`.
    pub product_category: String,
    /// `Description`.
    pub description: String,
    /// `BulletPoints`.
    pub bullet_points: Vec<String>,
    /// `pricing` as floats (`[100.0]` when missing).
    pub pricing: Vec<f64>,
    /// The `Price` tag (`"$19.99"`, `"$10.0 to $20.0"`).
    pub price_tag: String,
    /// `options`: lowercased name → transformed values, in file order.
    pub options: Vec<(String, Vec<String>)>,
    /// `MainImage`.
    pub main_image: Option<String>,
    /// `Attributes` (`["DUMMY_ATTR"]` without an items_ins_v2 record).
    pub attributes: Vec<String>,
    /// Synthetic instruction, if any.
    pub instruction: Option<String>,
    /// Synthetic goal attributes.
    pub instruction_attributes: Vec<String>,
    /// Human instructions.
    pub human: Vec<HumanRecord>,
    /// Title nouns (lowercased), exact when stored at generation or given by a sidecar.
    pub nouns: Vec<String>,
    /// Whether `nouns` is exact (else from the heuristic tagger: r_type may differ).
    pub nouns_exact: bool,
}

/// Python's `repr(float)` for the values prices take (`20` → `20.0`, `19.99` → `19.99`).
pub fn python_float(x: f64) -> String {
    let s = format!("{x}");
    if s.contains('.') || s.contains('e') || s.contains("inf") || s.contains("NaN") {
        s
    } else {
        format!("{s}.0")
    }
}

/// The pricing transform: split on `$`, drop the first piece, keep digits and `.`, parse.
pub fn parse_pricing(pricing: &Value) -> (Vec<f64>, String) {
    let text = pricing.as_str().unwrap_or("");
    if text.is_empty() {
        return (vec![100.0], "$100.0".to_string());
    }
    let nums: Vec<f64> = text
        .split('$')
        .skip(1)
        .filter_map(|piece| {
            let kept: String = piece
                .chars()
                .filter(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            kept.parse::<f64>().ok()
        })
        .collect();
    match nums.as_slice() {
        [] => (vec![100.0], "$100.0".to_string()),
        [a] => (vec![*a], format!("${}", python_float(*a))),
        [a, b, ..] => (
            vec![*a, *b],
            format!("${} to ${}", python_float(*a), python_float(*b)),
        ),
    }
}

fn string_list(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(xs) => xs
            .iter()
            .filter_map(|x| x.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    }
}

/// The valid ASIN of a raw record (`None` for `"nan"`, longer than 10, or not a string).
pub fn raw_asin(raw: &RawProduct) -> Option<String> {
    let a = raw.asin.as_str()?;
    (a != "nan" && a.chars().count() <= 10 && !a.is_empty()).then(|| a.to_string())
}

/// `load_products`' transforms for one record.
pub fn transform(
    raw: &RawProduct,
    ins: Option<&InsRecord>,
    human: Vec<HumanRecord>,
    nouns: Option<Vec<String>>,
) -> Option<Product> {
    let asin = raw_asin(raw)?;
    let (pricing, price_tag) = parse_pricing(&raw.pricing);
    let mut options = Vec::new();
    if let Value::Object(map) = &raw.customization_options {
        for (name, values) in map {
            let Value::Array(values) = values else {
                continue;
            };
            let vals: Vec<String> = values
                .iter()
                .filter_map(|v| v.get("value").and_then(Value::as_str))
                .map(|v| v.trim().replace('/', " | ").to_lowercase())
                .collect();
            options.push((name.to_lowercase(), vals));
        }
    }
    let (nouns, nouns_exact) = match nouns {
        Some(n) => (n, true),
        None => (heuristic_nouns(&raw.name), false),
    };
    Some(Product {
        asin,
        title: raw.name.clone(),
        category: raw.category.clone(),
        query: raw.query.to_lowercase().trim().to_string(),
        product_category: raw.product_category.clone(),
        description: raw.full_description.as_str().unwrap_or("").to_string(),
        bullet_points: string_list(&raw.small_description),
        pricing,
        price_tag,
        options,
        main_image: raw
            .images
            .as_array()
            .and_then(|i| i.first())
            .and_then(Value::as_str)
            .map(String::from),
        attributes: ins.map_or_else(|| vec!["DUMMY_ATTR".to_string()], |i| i.attributes.clone()),
        instruction: ins.and_then(|i| i.instruction.clone()),
        instruction_attributes: ins
            .map(|i| i.instruction_attributes.clone())
            .unwrap_or_default(),
        human,
        nouns,
        nouns_exact,
    })
}

/// A stand-in for spaCy's NOUN/PROPN tags when no noun list is stored: alphabetic tokens that are
/// not function words or common adjectives. Flagged as inexact (`Product::nouns_exact`).
pub fn heuristic_nouns(title: &str) -> Vec<String> {
    const SKIP: [&str; 40] = [
        "a", "an", "and", "the", "for", "with", "of", "in", "on", "to", "by", "from", "or", "at",
        "new", "pack", "set", "large", "small", "medium", "soft", "black", "white", "red", "blue",
        "green", "natural", "organic", "premium", "best", "high", "low", "light", "dark", "men",
        "women", "mens", "womens", "long", "short",
    ];
    title
        .split(|c: char| !c.is_alphanumeric())
        .filter(|t| t.chars().any(|c| c.is_alphabetic()) && t.len() > 1)
        .map(|t| t.to_lowercase())
        .filter(|t| !SKIP.contains(&t.as_str()))
        .collect()
}

/// The product price the reward uses: a single price as is; a range drawn uniformly once.
pub fn reward_price(p: &Product, rng: &mut Rng) -> f64 {
    match p.pricing.as_slice() {
        [a, b, ..] => {
            let u = rng.unit();
            a + (b - a) * u
        }
        [a] => *a,
        [] => 100.0,
    }
}

/// A streaming JSON deserializer over a file (1 MiB buffer).
fn json_file(
    path: &Path,
) -> Result<serde_json::Deserializer<serde_json::de::IoRead<BufReader<std::fs::File>>>, LoadError> {
    let file = std::fs::File::open(path).map_err(LoadError::io(path, "open"))?;
    Ok(serde_json::Deserializer::from_reader(
        BufReader::with_capacity(1 << 20, file),
    ))
}

/// Runs a streaming visit over `path`: `visit` hands every element to the caller's callback,
/// which may stop it with its own error (kept in `stopped` and returned as is, typed); a JSON
/// error becomes [`LoadError::Json`] with the parser's line and column.
fn stream<E: From<LoadError>>(
    path: &Path,
    expected: &'static str,
    stopped: &mut Option<E>,
    visit: impl FnOnce(
        &mut serde_json::Deserializer<serde_json::de::IoRead<BufReader<std::fs::File>>>,
        &mut Option<E>,
    ) -> Result<usize, serde_json::Error>,
) -> Result<usize, E> {
    let mut de = json_file(path)?;
    match visit(&mut de, stopped) {
        Ok(n) => {
            de.end()
                .map_err(|e| LoadError::json(path, None, expected, e))?;
            Ok(n)
        }
        Err(e) => match stopped.take() {
            Some(theirs) => Err(theirs),
            None => Err(LoadError::json(path, None, expected, e).into()),
        },
    }
}

/// Applies `each` to every element of a top-level JSON list, streaming; the first error (the
/// file's, or `each`'s, returned as is) ends it.
pub fn stream_list<T: for<'de> Deserialize<'de>, E: From<LoadError>>(
    path: &Path,
    mut each: impl FnMut(T) -> Result<(), E>,
) -> Result<usize, E> {
    struct Seed<'a, T, F, E>(&'a mut F, &'a mut Option<E>, std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>, F: FnMut(T) -> Result<(), E>, E> DeserializeSeed<'de>
        for Seed<'_, T, F, E>
    {
        type Value = usize;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
            d.deserialize_seq(self)
        }
    }
    impl<'de, T: Deserialize<'de>, F: FnMut(T) -> Result<(), E>, E> Visitor<'de> for Seed<'_, T, F, E> {
        type Value = usize;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON list")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
            let mut n = 0;
            while let Some(x) = seq.next_element::<T>()? {
                if let Err(e) = (self.0)(x) {
                    *self.1 = Some(e);
                    return Err(A::Error::custom(format!("stopped at element {n}")));
                }
                n += 1;
            }
            Ok(n)
        }
    }
    let mut stopped = None;
    stream(
        path,
        "a JSON list of records",
        &mut stopped,
        |de, stopped| Seed(&mut each, stopped, std::marker::PhantomData).deserialize(de),
    )
}

/// Applies `each` to every `key: value` of a top-level JSON object, streaming; the first error
/// (the file's, or `each`'s, returned as is) ends it.
pub fn stream_map<T: for<'de> Deserialize<'de>, E: From<LoadError>>(
    path: &Path,
    mut each: impl FnMut(String, T) -> Result<(), E>,
) -> Result<usize, E> {
    struct Seed<'a, T, F, E>(&'a mut F, &'a mut Option<E>, std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>, F: FnMut(String, T) -> Result<(), E>, E> DeserializeSeed<'de>
        for Seed<'_, T, F, E>
    {
        type Value = usize;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
            d.deserialize_map(self)
        }
    }
    impl<'de, T: Deserialize<'de>, F: FnMut(String, T) -> Result<(), E>, E> Visitor<'de>
        for Seed<'_, T, F, E>
    {
        type Value = usize;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
            let mut n = 0;
            while let Some((k, v)) = map.next_entry::<String, T>()? {
                if let Err(e) = (self.0)(k.clone(), v) {
                    *self.1 = Some(e);
                    return Err(A::Error::custom(format!("stopped at key {k}")));
                }
                n += 1;
            }
            Ok(n)
        }
    }
    let mut stopped = None;
    stream(
        path,
        "a JSON object keyed by asin",
        &mut stopped,
        |de, stopped| Seed(&mut each, stopped, std::marker::PhantomData).deserialize(de),
    )
}

/// The files of a WebShop dataset.
#[derive(Clone, Debug)]
pub struct DataFiles<'a> {
    /// `items_shuffle*.json`.
    pub products: &'a Path,
    /// `items_ins_v2*.json`.
    pub ins: &'a Path,
    /// `items_human_ins.json`, optional (the original crashes without it; we do not).
    pub human: Option<&'a Path>,
    /// A noun sidecar (`{asin: [nouns…]}`), optional.
    pub nouns: Option<&'a Path>,
}

/// Loads a catalog with the original's transforms: skips bad and duplicate asins (first wins).
pub fn load_products(files: &DataFiles) -> Result<Vec<Product>, LoadError> {
    let mut ins: HashMap<String, InsRecord> = HashMap::new();
    stream_map(files.ins, |k, v: InsRecord| {
        ins.insert(k, v);
        Ok::<(), LoadError>(())
    })?;
    let mut human: HashMap<String, Vec<HumanRecord>> = HashMap::new();
    if let Some(h) = files.human {
        stream_map(h, |k, v: Vec<HumanRecord>| {
            human.insert(k, v);
            Ok::<(), LoadError>(())
        })?;
    }
    let mut nouns: HashMap<String, Vec<String>> = HashMap::new();
    if let Some(n) = files.nouns {
        stream_map(n, |k, v: Vec<String>| {
            nouns.insert(k, v);
            Ok::<(), LoadError>(())
        })?;
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    stream_list(files.products, |raw: RawProduct| {
        if let Some(asin) = raw_asin(&raw) {
            if seen.insert(asin.clone()) {
                let p = transform(
                    &raw,
                    ins.get(&asin),
                    human.remove(&asin).unwrap_or_default(),
                    nouns.remove(&asin),
                );
                out.extend(p);
            }
        }
        Ok::<(), LoadError>(())
    })?;
    Ok(out)
}

/// Writes `value` as JSON to `path` through a temp file renamed into place when complete.
fn write_json<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<(), LoadError> {
    let tmp = crate::search_qa::corpus::temp_sibling(path);
    let write = || -> Result<(), LoadError> {
        let f = std::fs::File::create(&tmp).map_err(LoadError::io(&tmp, "create"))?;
        let mut w = std::io::BufWriter::new(f);
        serde_json::to_writer(&mut w, value).map_err(|e| LoadError::io(&tmp, "write")(e.into()))?;
        std::io::Write::flush(&mut w).map_err(LoadError::io(&tmp, "write"))?;
        std::fs::rename(&tmp, path).map_err(LoadError::io(path, "write"))
    };
    write().inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Writes records as one JSON list (the `items_shuffle` format).
pub fn write_list<T: Serialize>(path: &Path, items: &[T]) -> Result<(), LoadError> {
    write_json(path, items)
}

/// Writes `asin → record` as one JSON object, in the given order.
pub fn write_map<T: Serialize>(path: &Path, items: &[(String, T)]) -> Result<(), LoadError> {
    let mut map = serde_json::Map::new();
    for (k, v) in items {
        let v = serde_json::to_value(v).map_err(|e| LoadError::io(path, "write")(e.into()))?;
        map.insert(k.clone(), v);
    }
    write_json(path, &Value::Object(map))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pricing_transform() {
        assert_eq!(
            parse_pricing(&json!("$10.99")),
            (vec![10.99], "$10.99".to_string())
        );
        assert_eq!(
            parse_pricing(&json!("$10.00 - $20.00")),
            (vec![10.0, 20.0], "$10.0 to $20.0".to_string())
        );
        assert_eq!(
            parse_pricing(&json!("$1,299.00")),
            (vec![1299.0], "$1299.0".to_string())
        );
        assert_eq!(
            parse_pricing(&json!("")),
            (vec![100.0], "$100.0".to_string())
        );
        assert_eq!(
            parse_pricing(&Value::Null),
            (vec![100.0], "$100.0".to_string())
        );
        assert_eq!(parse_pricing(&json!("$1 - $2 - $3")).0, vec![1.0, 2.0]);
    }

    /// Errors name the file and the place, and a callback's own error comes back as it is.
    #[test]
    fn streaming_errors_are_typed() {
        #[derive(Debug, thiserror::Error)]
        enum Mine {
            #[error("mine")]
            Mine,
            #[error(transparent)]
            Load(#[from] LoadError),
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("items.json");
        std::fs::write(&path, "[1, 2,\n 3, \"x\"]").unwrap();
        let err = stream_list(&path, |_: u32| Ok::<(), LoadError>(())).unwrap_err();
        match &err {
            LoadError::Json {
                path: p,
                line: 2,
                expected,
                ..
            } => {
                assert_eq!(p, &path);
                assert_eq!(*expected, "a JSON list of records");
            }
            other => panic!("{other:?}"),
        }
        let mut seen = 0;
        let err = stream_list(&path, |x: Value| {
            seen += 1;
            if x == json!(2) {
                Err(Mine::Mine)
            } else {
                Ok(())
            }
        })
        .unwrap_err();
        assert!(matches!(err, Mine::Mine) && seen == 2, "{err:?}");
        std::fs::write(&path, "{\"a\": 1} trailing").unwrap();
        let err = stream_map(&path, |_, _: u32| Ok::<(), LoadError>(())).unwrap_err();
        assert!(matches!(err, LoadError::Json { line: 1, .. }), "{err:?}");
        let missing = dir.path().join("none.json");
        let err = stream_map(&missing, |_, _: u32| Ok::<(), LoadError>(())).unwrap_err();
        assert!(matches!(&err, LoadError::Io { action: "open", path, .. } if *path == missing));
        assert!(
            err.to_string().starts_with(&missing.display().to_string()),
            "{err}"
        );
        // Writers go through a temp file: a folder in the way is an error naming the file,
        // and nothing is left behind.
        let blocked = dir.path().join("blocked");
        std::fs::create_dir(&blocked).unwrap();
        let err = write_list(&blocked, &[1, 2]).unwrap_err();
        assert!(matches!(&err, LoadError::Io { .. }), "{err:?}");
        write_list(&path, &[1, 2]).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "[1,2]");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 2, "{left:?}");
    }

    #[test]
    fn record_transform() {
        let raw: RawProduct = serde_json::from_value(json!({
            "asin": "B0ABCDEFGH", "name": "Soft Tea Tree Shampoo", "category": "beauty",
            "query": "  Shampoo ", "product_category": "Beauty › Hair", "full_description": "desc",
            "small_description": "one bullet", "pricing": "$5.00",
            "customization_options": {"Color": [{"value": " Red/Blue ", "image": null}], "Size": null},
            "images": ["u1", "u2"], "brand": "dropped"
        }))
        .unwrap();
        let p = transform(&raw, None, vec![], None).unwrap();
        assert_eq!(p.query, "shampoo");
        assert_eq!(p.bullet_points, ["one bullet"]);
        assert_eq!(
            p.options,
            vec![("color".to_string(), vec!["red | blue".to_string()])]
        );
        assert_eq!(p.attributes, ["DUMMY_ATTR"]);
        assert_eq!(p.main_image.as_deref(), Some("u1"));
        assert!(!p.nouns_exact);
        let mut bad = raw.clone();
        bad.asin = json!("nan");
        assert!(transform(&bad, None, vec![], None).is_none());
        bad.asin = json!("B0ABCDEFGHIJ");
        assert!(transform(&bad, None, vec![], None).is_none());
    }
}
