//! WebShop search (spec §1.5): BM25 with Pyserini's defaults over
//! `" ".join([Title, Description, BulletPoints[0], option_text]).lower()`.
//!
//! Lowercasing happens twice, as in the original: the indexed text (`convert_product_file_format.py`)
//! and the query (the text env's `action_arg.lower()`, the app's `search_query.lower()`) with
//! Python's `str.lower()` ([`python_text::lower`]: full mapping, `İ` → `i̇`, final sigma), then
//! inside Lucene's analyzer by its LowerCaseFilter, Java's `Character.toLowerCase` per code point
//! ([`lucene_lowercase`]: the simple mapping, `İ` → `i`, `Σ` → `σ` everywhere) — not Rust's
//! `to_lowercase`, which differs from both.
//!
//! Analyzer (Anserini 0.14.3's `DefaultEnglishAnalyzer.newDefaultInstance()`, what pyserini
//! 0.17's `LuceneSearcher` uses): a StandardTokenizer (UAX #29 word rules: letters and digits,
//! joined across `'`/`.`/`’`/`:` between letters, `.`/`,`/`;` between digits, `_` anywhere) →
//! EnglishPossessiveFilter (a trailing `'s`/`’s`/`＇s` dropped) → LowerCaseFilter → Lucene's 33
//! English stopwords → Porter stemmer ([`super::porter`]: Lucene's `PorterStemmer`, ported). Scoring is Lucene ≥ 8 BM25 with
//! k1 = 0.9, b = 0.4: `idf = ln(1 + (N − df + 0.5)/(df + 0.5))`, per query term
//! `w − w/(1 + tf·normInverse)` in f32 with the document length stored lossily as Lucene's
//! SmallFloat byte; ties broken by index order. Hand-written because tantivy fixes k1 = 1.2 and
//! b = 0.75; what may still differ from Lucene: StandardTokenizer's rarer UAX #29 cases (emoji,
//! ideographs and kana, combining marks, Hebrew and Southeast Asian scripts), measured by
//! `tests/webshop_lucene_parity.rs` against the real analyzer.

use super::data::Product;
use super::python_text;
use std::collections::HashMap;

/// Lucene's `EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`.
pub const STOPWORDS: [&str; 33] = [
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with",
];

/// BM25 `k1`.
pub const K1: f32 = 0.9;
/// BM25 `b`.
pub const B: f32 = 0.4;

/// UAX #29 ExtendNumLet (connector punctuation and U+202F): part of a word wherever it stands.
fn extend_num_let(c: char) -> bool {
    matches!(
        c,
        '_' | '\u{202f}'
            | '\u{203f}'
            | '\u{2040}'
            | '\u{2054}'
            | '\u{fe33}'
            | '\u{fe34}'
            | '\u{fe4d}'..='\u{fe4f}' | '\u{ff3f}'
    )
}

/// StandardTokenizer-like word split.
pub fn tokenize(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut cur = String::new();
    // A run of connector punctuation alone is no token.
    fn flush(cur: &mut String, out: &mut Vec<String>) {
        if cur.chars().any(|c| !extend_num_let(c)) {
            out.push(std::mem::take(cur));
        } else {
            cur.clear();
        }
    }
    for i in 0..chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || extend_num_let(c) {
            cur.push(c);
            continue;
        }
        let (prev, next) = (
            i.checked_sub(1).map(|j| chars[j]),
            chars.get(i + 1).copied(),
        );
        let joins = match (prev, next) {
            (Some(p), Some(n)) if !cur.is_empty() => {
                // WB6/7: ALetter (MidLetter | MidNumLet | Single_Quote) ALetter.
                (matches!(c, '\'' | '.' | ':' | '\u{b7}' | '\u{2018}' | '\u{2019}' | '\u{ff07}')
                    && p.is_alphabetic()
                    && n.is_alphabetic())
                // WB11/12: Numeric (MidNum | MidNumLet | Single_Quote) Numeric.
                    || (matches!(c, '.' | ',' | ';' | '\'' | '\u{2018}' | '\u{2019}' | '\u{ff07}')
                        && p.is_ascii_digit()
                        && n.is_ascii_digit())
            }
            _ => false,
        };
        if joins {
            cur.push(c);
        } else if !cur.is_empty() {
            flush(&mut cur, &mut out);
        }
    }
    if !cur.is_empty() {
        flush(&mut cur, &mut out);
    }
    out
}

/// Lucene `SmallFloat.intToByte4`.
pub fn int_to_byte4(i: u32) -> u8 {
    const FREE: u32 = 24;
    if i < FREE {
        return i as u8;
    }
    let v = (i - FREE) as u64;
    let bits = 64 - v.leading_zeros();
    let encoded = if bits < 4 {
        v as u32
    } else {
        let shift = bits - 4;
        (((v >> shift) as u32) & 0x07) | ((shift + 1) << 3)
    };
    (FREE + encoded) as u8
}

/// Lucene `SmallFloat.byte4ToInt`.
pub fn byte4_to_int(b: u8) -> u32 {
    const FREE: u32 = 24;
    let i = b as u32;
    if i < FREE {
        return i;
    }
    let e = i - FREE;
    let bits = e & 0x07;
    let shift = (e >> 3) as i32 - 1;
    let decoded = if shift == -1 {
        bits as u64
    } else {
        ((bits | 0x08) as u64) << shift
    };
    FREE + decoded as u32
}

/// Tokens → lowercase → stopwords dropped → Porter stems, without a cache: what a query goes
/// through at search time (queries are a few words, so stemming them again costs little and
/// keeps [`Bm25::search`] a `&self` method that many environments can share).
pub fn analyze(text: &str) -> Vec<String> {
    analyzed_tokens(text)
        .map(|t| super::porter::stem(&t))
        .collect()
}

/// Lucene's `EnglishPossessiveFilter`: a token ending in `'s`, `’s` or `＇s` (`s` or `S`) loses
/// those two characters.
pub fn strip_possessive(token: &str) -> &str {
    let mut rev = token.chars().rev();
    match (rev.next(), rev.next()) {
        (Some('s' | 'S'), Some(q @ ('\'' | '\u{2019}' | '\u{ff07}'))) => {
            &token[..token.len() - 1 - q.len_utf8()]
        }
        _ => token,
    }
}

/// Lucene's `LowerCaseFilter`: Java's `Character.toLowerCase(int)` on each code point — the
/// simple one-to-one mapping (`İ` → `i`, `Σ` → `σ` whatever follows, `ẞ` → `ß`), Unicode 13.0
/// as Java 17 and this crate's Python tables (Java 11, which the original ran, has Unicode 10.0:
/// the few mappings added since reach it only already lowercased by Python's `str.lower()`).
pub fn lucene_lowercase(token: &str) -> String {
    token.chars().map(python_text::lower_first).collect()
}

fn analyzed_tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    tokenize(text)
        .into_iter()
        .map(|t| lucene_lowercase(strip_possessive(&t)))
        .filter(|t| !t.is_empty() && !STOPWORDS.contains(&t.as_str()))
}

/// The analyzer with a stem cache, for indexing (the vocabulary is small next to the token
/// count of a catalog). Gives the same terms as [`analyze`].
#[derive(Default)]
pub struct Analyzer {
    stems: HashMap<String, String>,
}

impl Analyzer {
    /// Tokens → lowercase → stopwords dropped → Porter stems.
    pub fn analyze(&mut self, text: &str) -> Vec<String> {
        analyzed_tokens(text)
            .map(|t| {
                if let Some(s) = self.stems.get(&t) {
                    return s.clone();
                }
                let s = super::porter::stem(&t);
                self.stems.insert(t, s.clone());
                s
            })
            .collect()
    }
}

/// The indexed text of a product.
pub fn indexed_text(p: &Product) -> String {
    let option_text = p
        .options
        .iter()
        .map(|(name, values)| format!("{name}: {}", values.join(", ")))
        .collect::<Vec<_>>()
        .join(", and ");
    let first_bullet = p.bullet_points.first().map_or("", String::as_str);
    let text = [
        p.title.as_str(),
        p.description.as_str(),
        first_bullet,
        option_text.as_str(),
    ]
    .join(" ");
    // `convert_product_file_format.py`: `' '.join([...]).lower()` in Python.
    python_text::lower(&text)
}

/// Java's `Math.round(score * 1e4f)` (the float product, then `floor(x + 0.5)`): the key
/// Anserini's tie adjuster rounds scores to.
fn anserini_rounded(score: f32) -> i64 {
    (f64::from(score * 1e4f32) + 0.5).floor() as i64
}

/// An in-memory BM25 index over products (doc id = product index).
pub struct Bm25 {
    postings: HashMap<String, Vec<(u32, u32)>>,
    norms: Vec<u8>,
    /// Each document's ASIN (the index's docid), for Anserini's tie order.
    asins: Vec<String>,
    /// `1 / (k1·((1 − b) + b·len/avgdl))` per SmallFloat length byte, computed once at build.
    norm_inverse: [f32; 256],
}

impl Bm25 {
    /// Indexes the products.
    pub fn build(products: &[Product]) -> Self {
        let mut analyzer = Analyzer::default();
        let mut postings: HashMap<String, Vec<(u32, u32)>> = HashMap::new();
        let mut norms = Vec::with_capacity(products.len());
        let mut total: u64 = 0;
        let mut tf: HashMap<String, u32> = HashMap::new();
        for (d, p) in products.iter().enumerate() {
            let terms = analyzer.analyze(&indexed_text(p));
            total += terms.len() as u64;
            norms.push(int_to_byte4(terms.len() as u32));
            tf.clear();
            for t in terms {
                *tf.entry(t).or_insert(0) += 1;
            }
            for (t, f) in tf.drain() {
                postings.entry(t).or_default().push((d as u32, f));
            }
        }
        let avgdl = if products.is_empty() {
            1.0
        } else {
            (total as f64 / products.len() as f64) as f32
        };
        let mut norm_inverse = [0f32; 256];
        for (i, c) in norm_inverse.iter_mut().enumerate() {
            *c = 1.0 / (K1 * ((1.0 - B) + B * byte4_to_int(i as u8) as f32 / avgdl));
        }
        Self {
            postings,
            norms,
            asins: products.iter().map(|p| p.asin.clone()).collect(),
            norm_inverse,
        }
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.norms.len()
    }

    /// Whether no document is indexed.
    pub fn is_empty(&self) -> bool {
        self.norms.is_empty()
    }

    /// Top `n` (doc, score), best first, in Anserini's order: pyserini's `LuceneSearcher`
    /// sorts by score and then by the docid string (`BREAK_SCORE_TIES_BY_DOCID`), and its
    /// `ScoreTiesAdjusterReranker` rounds scores to 4 decimals (`Math.round(s·1e4f)/1e4f`) and
    /// keeps that order; here scores are rounded first and ties go by ASIN ascending, so scores
    /// that differ from Lucene's only in the last float bits still order as Anserini's (the
    /// returned score is the unrounded one). Every query token is a SHOULD clause of its own
    /// (repeated words count again, as in Lucene's BooleanQuery).
    pub fn search(&self, query: &str, n: usize) -> Vec<(usize, f32)> {
        // The env lowercases the query with Python's str.lower() before pyserini sees it.
        let terms = analyze(&python_text::lower(query));
        let docs = self.norms.len() as f64;
        let mut scores: HashMap<u32, f32> = HashMap::new();
        for t in &terms {
            let Some(list) = self.postings.get(t) else {
                continue;
            };
            let df = list.len() as f64;
            let idf = (1.0 + (docs - df + 0.5) / (df + 0.5)).ln() as f32;
            for &(d, f) in list {
                let norm_inverse = self.norm_inverse[self.norms[d as usize] as usize];
                let s = idf - idf / (1.0 + f as f32 * norm_inverse);
                *scores.entry(d).or_insert(0.0) += s;
            }
        }
        let mut ranked: Vec<(i64, usize, f32)> = scores
            .into_iter()
            .map(|(d, s)| (anserini_rounded(s), d as usize, s))
            .collect();
        ranked.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then_with(|| self.asins[a.1].cmp(&self.asins[b.1]))
                .then(a.1.cmp(&b.1))
        });
        ranked.truncate(n);
        ranked.into_iter().map(|(_, d, s)| (d, s)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_follows_word_rules() {
        assert_eq!(
            tokenize("Women's X-Large, 3.5 oz U.S.A. 1,000"),
            ["Women's", "X", "Large", "3.5", "oz", "U.S.A", "1,000"]
        );
        assert_eq!(tokenize("4K ultra-hd"), ["4K", "ultra", "hd"]);
        let mut a = Analyzer::default();
        assert_eq!(
            a.analyze("The running shoes are for hiking"),
            ["run", "shoe", "hike"]
        );
    }

    /// Code points where Rust's `to_lowercase` and Java's `Character.toLowerCase` (Java 17,
    /// Unicode 13.0: what `tests/webshop_lucene_parity.rs` dumps) disagree, and some where they
    /// agree: (code point, Java's lowercase).
    #[test]
    fn lucene_lowercases_as_java() {
        const JAVA: [(char, char); 12] = [
            ('\u{130}', 'i'),           // İ: Rust gives "i\u{307}"
            ('\u{3a3}', '\u{3c3}'),     // Σ: σ even where Rust writes final ς
            ('\u{1e9e}', '\u{df}'),     // ẞ → ß (both)
            ('\u{212a}', 'k'),          // Kelvin sign (both)
            ('\u{1c5}', '\u{1c6}'),     // titlecase ǅ (both)
            ('\u{1c90}', '\u{10d0}'),   // Georgian Mtavruli, Unicode 11 (both)
            ('\u{a7c7}', '\u{a7c8}'),   // Unicode 13 (both)
            ('\u{2c2f}', '\u{2c2f}'),   // Unicode 14: Rust lowercases, Java 17 does not
            ('\u{a7c0}', '\u{a7c0}'),   // Unicode 14
            ('\u{10570}', '\u{10570}'), // Vithkuqi, Unicode 14
            ('A', 'a'),
            ('\u{df}', '\u{df}'),
        ];
        for (c, want) in JAVA {
            assert_eq!(
                lucene_lowercase(&c.to_string()),
                want.to_string(),
                "U+{:04X}",
                c as u32
            );
        }
        // Where Rust differs: the two-code-point İ, final sigma, newer Unicode.
        assert_eq!("\u{130}".to_lowercase(), "i\u{307}");
        assert_eq!("ΟΔΟΣ".to_lowercase(), "οδος");
        assert_eq!(lucene_lowercase("ΟΔΟΣ"), "οδοσ");
        assert_eq!("\u{2c2f}".to_lowercase(), "\u{2c5f}");
        // The analyzer lowercases as Lucene; the indexed text and the query go through Python's
        // str.lower() first (final sigma kept, İ → i̇), as in the original.
        assert_eq!(analyze("İSTANBUL ΟΔΟΣ"), ["istanbul", "οδοσ"]);
        assert_eq!(python_text::lower("ΟΔΟΣ"), "οδος");
    }

    #[test]
    fn possessives_underscores_and_colons_as_lucene() {
        assert_eq!(strip_possessive("Dog's"), "Dog");
        assert_eq!(strip_possessive("DOG'S"), "DOG");
        assert_eq!(strip_possessive("dog’s"), "dog");
        assert_eq!(strip_possessive("dog＇s"), "dog");
        assert_eq!(strip_possessive("dogs"), "dogs");
        assert_eq!(strip_possessive("'s"), "");
        // Outputs of Anserini 0.14.3's StandardTokenizer on the same lines.
        assert_eq!(
            tokenize("foo_bar _foo foo_ ___ a_1"),
            ["foo_bar", "_foo", "foo_", "a_1"]
        );
        assert_eq!(
            tokenize("a:b a::b 1:2 1;2 a;b 1'2 a’b 1’2 a‘b a·b"),
            ["a:b", "a", "b", "1", "2", "1;2", "a", "b", "1'2", "a’b", "1’2", "a‘b", "a·b"]
        );
        assert_eq!(
            analyze("Women's dog’s THE Running shoes"),
            ["women", "dog", "run", "shoe"]
        );
    }

    #[test]
    fn cached_and_uncached_analysis_agree() {
        let text = "Women's X-Large running shoes, 3.5 oz; the hiking boots are waterproof";
        let mut a = Analyzer::default();
        assert_eq!(a.analyze(text), analyze(text));
        // Second pass through the warm cache.
        assert_eq!(a.analyze(text), analyze(text));
    }

    fn product(asin: &str, title: &str) -> Product {
        Product {
            asin: asin.into(),
            title: title.into(),
            category: String::new(),
            query: String::new(),
            product_category: String::new(),
            description: String::new(),
            bullet_points: vec![],
            pricing: vec![10.0],
            price_tag: "$10.0".into(),
            options: vec![],
            main_image: None,
            attributes: vec![],
            instruction: None,
            instruction_attributes: vec![],
            human: vec![],
            nouns: vec![],
            nouns_exact: false,
        }
    }

    /// Equal scores go by ASIN ascending (not index order), also across the cut-off; scores
    /// equal after rounding to 4 decimals are ties too.
    #[test]
    fn ties_in_anserini_order() {
        let products = [
            product("B0C", "red shoe"),
            product("B0A", "red shoe"),
            product("B0D", "red shoe box"),
            product("B0B", "red shoe"),
            product("A99", "blue shoe"),
        ];
        let index = Bm25::build(&products);
        let ranked = index.search("red shoe", 3);
        let asins: Vec<&str> = ranked
            .iter()
            .map(|&(d, _)| products[d].asin.as_str())
            .collect();
        assert_eq!(asins, ["B0A", "B0B", "B0C"]);
        let all: Vec<&str> = index
            .search("red shoe", 10)
            .iter()
            .map(|&(d, _)| products[d].asin.as_str())
            .collect();
        assert_eq!(all, ["B0A", "B0B", "B0C", "B0D", "A99"]);
        // Scores within the same 1e-4 step share a key; an exact half rounds up, as Java's.
        assert_eq!(anserini_rounded(2.5), 25_000);
        assert_eq!(anserini_rounded(0.5 / 1024.0), 5); // 4.8828125
        assert_eq!(anserini_rounded(1.000_01), anserini_rounded(1.000_04));
        assert_ne!(anserini_rounded(1.000_01), anserini_rounded(1.000_2));
    }

    #[test]
    fn smallfloat_round_trips_small_and_is_lossy_large() {
        for i in 0..24 {
            assert_eq!(byte4_to_int(int_to_byte4(i)), i);
        }
        for i in [24u32, 25, 31, 40, 100, 1000, 123_456] {
            let d = byte4_to_int(int_to_byte4(i));
            assert!(d <= i && d as f64 >= i as f64 * 0.85, "{i} → {d}");
        }
        // Monotone.
        let mut last = 0;
        for i in 0..5000u32 {
            let b = int_to_byte4(i);
            assert!(b >= last);
            last = b;
        }
    }
}
