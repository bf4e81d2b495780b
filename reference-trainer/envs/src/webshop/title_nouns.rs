//! The title nouns of every title the generator can write, as spaCy tags them.
//!
//! The original reward (`goal.py`, `get_type_reward`) keeps the lowercased tokens of the goal's
//! and the purchased product's `name` whose spaCy `pos_` is NOUN or PROPN, with
//! `spacy.load("en_core_web_sm")`. In Title-Case product titles spaCy tags most adjectives PROPN
//! ("Zevo Soothing Shampoo": all three), and what it tags depends on the whole title, brand
//! included, so the generator cannot know its nouns from its word lists: `title_nouns.bin`
//! holds spaCy's verdict for each of the generator's 8,799,744 possible titles (one byte each,
//! bit `t` = token `t` is a noun; gzip, ≈0.6 MB). It is written by
//! `tools/webshop_title_nouns.py` with en_core_web_sm 3.8.0 (the official release's weights,
//! checked by SHA-256; see the file's header and the script), and checked without spaCy by the
//! tests here (the header's grammar is the generator's, the size is the title count) and with
//! spaCy by `tests/webshop_spacy_parity.rs`.
//!
//! Title index: category-major (the generator's order), then adjective, then noun sequence
//! (single nouns `i`, then ordered pairs `(i, j)`, `j ≠ i`, lexicographic), then brand
//! (two-syllable brands `s0·16 + s1`, then three-syllable ones `256 + s0·256 + s1·16 + s2`).

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::OnceLock;

/// The generated file (header + gzip payload).
static FILE: &[u8] = include_bytes!("title_nouns.bin");

/// The first line of the file.
pub const MAGIC: &str = "t2po webshop title nouns v1";

/// A malformed title-noun file.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TitleNounsError {
    /// No `---` line ends the header, or the first line is not [`MAGIC`].
    #[error("title nouns: not a `{MAGIC}` file (header)")]
    Header,
    /// A header field is missing or unreadable.
    #[error("title nouns: header field `{0}` missing or invalid")]
    Field(&'static str),
    /// The payload does not decompress.
    #[error("title nouns: payload: {0}")]
    Payload(String),
    /// The payload holds a different number of titles than the header says.
    #[error("title nouns: {got} masks, the header says {want} titles")]
    Count {
        /// Masks in the payload.
        got: usize,
        /// `titles:` in the header.
        want: usize,
    },
}

/// The parsed file: header fields and one mask per title.
#[derive(Debug)]
pub struct TitleNouns {
    /// `key: value` lines of the header (model, provenance, command, grammar, …).
    pub header: BTreeMap<String, String>,
    masks: Vec<u8>,
}

impl TitleNouns {
    /// Parses a file in the format `tools/webshop_title_nouns.py` writes.
    pub fn parse(file: &[u8]) -> Result<Self, TitleNounsError> {
        const END: &[u8] = b"\n---\n";
        let end = file
            .windows(END.len())
            .position(|w| w == END)
            .ok_or(TitleNounsError::Header)?;
        let head = std::str::from_utf8(&file[..end]).map_err(|_| TitleNounsError::Header)?;
        let mut lines = head.lines();
        if lines.next() != Some(MAGIC) {
            return Err(TitleNounsError::Header);
        }
        let header: BTreeMap<String, String> = lines
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let want: usize = header
            .get("titles")
            .and_then(|t| t.parse().ok())
            .ok_or(TitleNounsError::Field("titles"))?;
        let mut masks = Vec::with_capacity(want);
        flate2::read::GzDecoder::new(&file[end + END.len()..])
            .read_to_end(&mut masks)
            .map_err(|e| TitleNounsError::Payload(e.to_string()))?;
        if masks.len() != want {
            return Err(TitleNounsError::Count {
                got: masks.len(),
                want,
            });
        }
        Ok(Self { header, masks })
    }

    /// The shipped file, parsed once.
    pub fn shipped() -> &'static Self {
        static PARSED: OnceLock<TitleNouns> = OnceLock::new();
        // The file is generated and checked in; the tests parse it, so this cannot fail in a
        // build whose tests pass.
        PARSED.get_or_init(|| Self::parse(FILE).expect("src/webshop/title_nouns.bin is valid"))
    }

    /// Number of titles covered.
    pub fn len(&self) -> usize {
        self.masks.len()
    }

    /// Whether no title is covered.
    pub fn is_empty(&self) -> bool {
        self.masks.is_empty()
    }

    /// The mask of title `index` (bit `t`: token `t` is NOUN/PROPN), if covered.
    pub fn mask(&self, index: usize) -> Option<u8> {
        self.masks.get(index).copied()
    }

    /// The `grammar:` header field parsed (what the file was generated for).
    pub fn grammar(&self) -> Option<serde_json::Value> {
        serde_json::from_str(self.header.get("grammar")?).ok()
    }
}

/// Where one title sits in the index space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TitleKey {
    /// The category (spec) index.
    pub spec: usize,
    /// The adjective index within the category.
    pub adjective: usize,
    /// The noun indices within the category (the second distinct from the first).
    pub nouns: (usize, Option<usize>),
    /// The brand's syllable indices (two or three).
    pub brand: (usize, usize, Option<usize>),
}

/// The index of a title. `specs` gives each category's `(adjectives, nouns)` counts in order;
/// `syllables` the syllable count.
pub(crate) fn title_index(specs: &[(usize, usize)], syllables: usize, key: TitleKey) -> usize {
    let brands = syllables.pow(2) + syllables.pow(3);
    let seqs = |n: usize| n + n * (n - 1);
    let before: usize = specs[..key.spec]
        .iter()
        .map(|&(a, n)| a * seqs(n) * brands)
        .sum();
    let n = specs[key.spec].1;
    let seq = match key.nouns {
        (i, None) => i,
        (i, Some(j)) => n + i * (n - 1) + if j > i { j - 1 } else { j },
    };
    let brand = match key.brand {
        (a, b, None) => a * syllables + b,
        (a, b, Some(c)) => syllables.pow(2) + (a * syllables + b) * syllables + c,
    };
    before + (key.adjective * seqs(n) + seq) * brands + brand
}
