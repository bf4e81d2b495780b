//! The policy's tokenizer: a Qwen3-shaped byte-level BPE, trained here or loaded from a
//! Hugging Face `tokenizer.json`.
//!
//! Why it looks like Qwen3's: the reference trainer must be able to swap its small trained
//! tokenizer for a real Qwen3 one without touching the rollout code, and the saved folder must
//! load with `transformers.AutoTokenizer` so the Python side can inspect checkpoints. So the
//! pipeline is Qwen2/Qwen3's — a `Split` on Qwen's regex, then a `ByteLevel` pre-tokenizer
//! (no prefix space, no regex of its own), a `ByteLevel` decoder and a `ByteLevel`
//! post-processor that only touches offsets — and the chat format is `<|im_start|>role\n…
//! <|im_end|>\n`.
//!
//! One deliberate difference from Qwen3's file: no NFC normalizer. The environments compare
//! decoded responses with what the policy emitted, so `decode(encode(s)) == s` must hold for any
//! string, which a normalizer would break (it rewrites decomposed accents). Loading a real Qwen3
//! `tokenizer.json` keeps its NFC normalizer, as it should. The saved folder names
//! [`TOKENIZER_CLASS`] so that transformers runs this file as it is, not Qwen2's pipeline with
//! its normalizer.
//!
//! The control-token ids the T²PO decode loop needs (the `</think>` → `<action>` forced queue,
//! the end-of-sequence set, padding) are derived from whichever tokenizer is in use by
//! [`Tokenizer::control_tokens`], never hard-coded: in the trained tokenizer `<action>` is one
//! special token, in Qwen3 it is three ordinary ones.

use std::collections::HashSet;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::models::TrainerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, SplitDelimiterBehavior};

/// Document separator; also the padding token (Qwen3's choice, kept so ids line up in meaning).
pub const ENDOFTEXT: &str = "<|endoftext|>";
/// Opens a chat turn: `<|im_start|>role\n`.
pub const IM_START: &str = "<|im_start|>";
/// Closes a chat turn; the end-of-sequence token of a chat model.
pub const IM_END: &str = "<|im_end|>";
/// Opens the reasoning span.
pub const THINK_OPEN: &str = "<think>";
/// Closes the reasoning span; T²PO forces it when the thinking budget runs out.
pub const THINK_CLOSE: &str = "</think>";
/// Opens an environment action; forced right after `</think>` and a newline.
pub const ACTION_OPEN: &str = "<action>";
/// Closes an environment action.
pub const ACTION_CLOSE: &str = "</action>";

/// The special tokens of the trained tokenizer, in id order (ids 0..13 there).
///
/// They are single added tokens so that tags in prompts and responses can never be split into
/// pieces by BPE, and so the environments' tag parsing sees exactly what the policy emitted.
pub const SPECIAL_TOKENS: [&str; 13] = [
    ENDOFTEXT,
    IM_START,
    IM_END,
    THINK_OPEN,
    THINK_CLOSE,
    ACTION_OPEN,
    ACTION_CLOSE,
    "<search>",
    "</search>",
    "<answer>",
    "</answer>",
    "<information>",
    "</information>",
];

/// The tags [`Tokenizer::control_tokens`] needs as single tokens.
pub const CONTROL_TAGS: [&str; 5] = [THINK_OPEN, THINK_CLOSE, IM_START, IM_END, ENDOFTEXT];

/// Qwen2/Qwen3's pre-tokenization regex, verbatim from their `tokenizer.json`.
///
/// Contractions, letter runs with one optional leading non-letter, single digits, punctuation
/// runs with trailing newlines, newline runs, and whitespace (a trailing space stays with the
/// next word, as in GPT-4's scheme).
pub const QWEN_SPLIT_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A Qwen3-style Jinja chat template for `tokenizer_config.json`.
///
/// System, user and assistant turns are rendered as `<|im_start|>role\ncontent<|im_end|>\n`;
/// `add_generation_prompt` appends `<|im_start|>assistant\n` (Qwen3's thinking-mode prompt, no
/// pre-filled `<think>`). Other roles raise, rather than silently rendering a turn the policy
/// never saw in training. Unlike Qwen3's full template there is no tool-call or
/// `reasoning_content` handling: the T²PO environments use neither.
pub const CHAT_TEMPLATE: &str = "{%- for message in messages %}\
{%- if message['role'] not in ['system', 'user', 'assistant'] %}\
{{- raise_exception('Unexpected message role: ' + message['role']) }}\
{%- endif %}\
{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}\
{%- endfor %}\
{%- if add_generation_prompt %}\
{{- '<|im_start|>assistant\\n' }}\
{%- endif %}";

/// `tokenizer_class` written to `tokenizer_config.json`: the class that runs the saved
/// `tokenizer.json` verbatim.
///
/// Not Qwen3's own `Qwen2Tokenizer`: transformers 5 rebuilds that class from the vocabulary and
/// merges with its hard-wired Qwen2 pipeline, which includes an NFC normalizer this tokenizer
/// deliberately lacks, so `AutoTokenizer` gave other ids than ours on text with decomposed
/// characters (30 of the 624 strings of `tests/interop.py`, transformers 5.24). With
/// `PreTrainedTokenizerFast`, `AutoTokenizer` and `tokenizers.Tokenizer.from_file` both give our
/// ids on every string (transformers 4.57 and 5.24).
pub const TOKENIZER_CLASS: &str = "PreTrainedTokenizerFast";

/// `model_max_length` written to `tokenizer_config.json` unless set otherwise.
///
/// Only advisory (transformers warns past it); 32768 is Qwen3's native context.
pub const DEFAULT_MODEL_MAX_LENGTH: usize = 32768;

/// Number of symbols in the byte-level alphabet: every byte has one, so any text encodes.
pub const BYTE_ALPHABET_SIZE: usize = 256;

/// Everything that can go wrong building, loading, saving or using a [`Tokenizer`].
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// The requested vocabulary cannot even hold the byte alphabet and the special tokens.
    #[error(
        "vocab_size {requested} is too small: the {BYTE_ALPHABET_SIZE} byte-level symbols plus \
         the {} special tokens need at least {minimum}",
        SPECIAL_TOKENS.len()
    )]
    VocabTooSmall {
        /// What the caller asked for.
        requested: usize,
        /// The smallest usable size.
        minimum: usize,
    },
    /// A pipeline component (the Qwen split regex) could not be constructed.
    #[error("building the {component} failed: {source}")]
    Build {
        /// Which component.
        component: &'static str,
        /// The tokenizers crate's error.
        #[source]
        source: tokenizers::Error,
    },
    /// The BPE trainer failed.
    #[error("BPE training failed: {source}")]
    Train {
        /// The tokenizers crate's error.
        #[source]
        source: tokenizers::Error,
    },
    /// A file could not be read (missing, unreadable, not UTF-8).
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A `tokenizer.json` could not be parsed into a tokenizer.
    #[error("{} is not a valid tokenizer.json: {source}", path.display())]
    ParseTokenizer {
        /// The file.
        path: PathBuf,
        /// The tokenizers crate's (serde) error, with line and column.
        #[source]
        source: tokenizers::Error,
    },
    /// An added token of a `tokenizer.json` did not get the id the file gives it.
    ///
    /// The tokenizers crate ignores the ids stored in `added_tokens` and numbers added tokens
    /// consecutively after the model vocabulary; a file whose ids have gaps would otherwise load
    /// with every control id silently shifted, and a checkpoint's embeddings would no longer
    /// match its tokenizer.
    #[error(
        "{}: added token {token:?} is stored with id {stored} but loads as {loaded:?} \
         (added-token ids must follow the model vocabulary without gaps)",
        path.display()
    )]
    AddedTokenIdMismatch {
        /// The file.
        path: PathBuf,
        /// The token's text.
        token: String,
        /// The id written in the file.
        stored: u32,
        /// The id the tokenizers crate assigned (`None` if it dropped the token).
        loaded: Option<u32>,
    },
    /// A `tokenizer_config.json` next to the loaded `tokenizer.json` is not valid JSON.
    #[error("{} is not valid JSON: {source}", path.display())]
    ParseConfig {
        /// The file.
        path: PathBuf,
        /// The JSON error, with line and column.
        #[source]
        source: serde_json::Error,
    },
    /// A file or directory could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The tokenizer or its config could not be serialized.
    #[error("serializing {what} failed: {message}")]
    Serialize {
        /// `tokenizer.json` or `tokenizer_config.json`.
        what: &'static str,
        /// The serializer's message.
        message: String,
    },
    /// A token the trainer relies on is not in the vocabulary at all.
    #[error("the tokenizer has no token {token:?}; the T2PO control loop needs it")]
    MissingToken {
        /// The token's text.
        token: String,
    },
    /// A token that must be atomic is in the vocabulary but text containing it is split.
    #[error(
        "{token:?} must encode as one token but encodes as {ids:?}; \
         add it as an added (special) token"
    )]
    NotSingleToken {
        /// The token's text.
        token: String,
        /// What it encodes to.
        ids: Vec<u32>,
    },
    /// A piece of control text (e.g. `"\n"`) encodes to nothing.
    #[error("{text:?} encodes to no tokens")]
    EmptyEncoding {
        /// The text.
        text: String,
    },
    /// Encoding failed inside the tokenizers crate.
    #[error("encoding {excerpt:?} failed: {source}")]
    Encode {
        /// The start of the text that failed.
        excerpt: String,
        /// The tokenizers crate's error.
        #[source]
        source: tokenizers::Error,
    },
    /// An id passed to [`Tokenizer::decode`] names no token.
    #[error("token id {id} (at position {position}) is not in the vocabulary")]
    UnknownId {
        /// The id.
        id: u32,
        /// Its index in the decoded slice.
        position: usize,
    },
    /// Decoding failed inside the tokenizers crate.
    #[error("decoding failed: {source}")]
    Decode {
        /// The tokenizers crate's error.
        #[source]
        source: tokenizers::Error,
    },
}

/// The ids the T²PO decode loop steers with, derived from a tokenizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlTokens {
    /// `<think>`.
    pub think_open: u32,
    /// `</think>`; forcing it ends the reasoning span.
    pub think_close: u32,
    /// `<|im_start|>`.
    pub im_start: u32,
    /// `<|im_end|>`.
    pub im_end: u32,
    /// `<|endoftext|>`.
    pub endoftext: u32,
    /// `encode("\n")`.
    pub newline: Vec<u32>,
    /// `encode("<action>")`: one id in the trained tokenizer, `<`, `action`, `>` in Qwen3.
    pub action_open: Vec<u32>,
    /// What is forced when thinking is cut off: `encode("</think>") ++ encode("\n") ++
    /// encode("<action>")`. Built from the three separate encodings, not from encoding the
    /// joined string, because that is how the decode loop feeds them one at a time.
    pub forced_queue: Vec<u32>,
    /// Ids that end a response: `<|im_end|>`, then `<|endoftext|>`.
    pub eos: Vec<u32>,
    /// The padding id, `<|endoftext|>` (as in Qwen3's config).
    pub pad: u32,
}

/// A Qwen3-shaped tokenizer: a [`tokenizers::Tokenizer`] plus the config fields saved with it.
///
/// Immutable once built or loaded, which is what lets the vocabulary sizes be computed once
/// (they cost a pass over the whole vocabulary, 151k entries for Qwen3).
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    model_max_length: usize,
    vocab_size: usize,
    id_bound: usize,
    /// The `tokenizer_config.json` this tokenizer came with (loaded next to its
    /// `tokenizer.json`, or built from a GGUF file's metadata): written back as it was, so a
    /// Llama's or Qwen's chat template, special tokens and class survive a save. `None` for the
    /// trained default, which is saved with this module's Qwen3-shaped config.
    source_config: Option<serde_json::Map<String, serde_json::Value>>,
}

impl std::fmt::Debug for Tokenizer {
    // The inner tokenizer's Debug prints the whole vocabulary; a summary is what a log wants.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("id_bound", &self.id_bound())
            .field("model_max_length", &self.model_max_length)
            .finish()
    }
}

/// Trains the default tokenizer: a byte-level BPE with Qwen3's pipeline and the
/// [`SPECIAL_TOKENS`], with exactly `vocab_size` entries unless the corpus runs out of pairs to
/// merge first (then fewer; [`Tokenizer::vocab_size`] says how many).
///
/// The special tokens take ids `0..13`, the 256 byte symbols the next ids (all of them, seen in
/// the corpus or not, so any text encodes), and merges the rest. There is no frequency floor:
/// `vocab_size` alone decides where merging stops, so the model's embedding size is predictable.
///
/// Special-token strings in the corpus are cut out before counting, exactly as
/// [`Tokenizer::encode`] cuts them out, so no merge budget is spent on pieces of `<|im_start|>`
/// and no merge ever spans a tag boundary.
///
/// Deterministic: BPE training has no randomness (hence no seed parameter), and the trainer
/// breaks ties between equally frequent pairs by pair ids, so the same corpus (as a multiset of
/// lines; order does not matter) and `vocab_size` give the same `tokenizer.json`, byte for byte,
/// with or without the trainer's rayon parallelism. The corpus is collected in memory first.
pub fn build_default<I, S>(corpus: I, vocab_size: usize) -> Result<Tokenizer, TokenizerError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let minimum = BYTE_ALPHABET_SIZE + SPECIAL_TOKENS.len();
    if vocab_size < minimum {
        return Err(TokenizerError::VocabTooSmall {
            requested: vocab_size,
            minimum,
        });
    }

    let mut inner = tokenizers::Tokenizer::new(BPE::default());
    let split = Split::new(
        SplitPattern::Regex(QWEN_SPLIT_REGEX.to_string()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .map_err(|source| TokenizerError::Build {
        component: "Qwen split pre-tokenizer",
        source,
    })?;
    let byte_level = ByteLevel::new(false, false, false);
    inner
        .with_pre_tokenizer(Some(PreTokenizerWrapper::Sequence(Sequence::new(vec![
            PreTokenizerWrapper::Split(split),
            PreTokenizerWrapper::ByteLevel(byte_level),
        ]))))
        .with_decoder(Some(byte_level))
        .with_post_processor(Some(byte_level));

    let specials: Vec<AddedToken> = SPECIAL_TOKENS
        .iter()
        .map(|token| AddedToken::from(*token, true))
        .collect();
    let alphabet: HashSet<char> = ByteLevel::alphabet().into_iter().collect();
    let mut trainer = TrainerWrapper::BpeTrainer(
        BpeTrainerBuilder::new()
            .show_progress(false)
            .vocab_size(vocab_size)
            .min_frequency(0)
            .special_tokens(specials)
            .initial_alphabet(alphabet)
            .build(),
    );

    let mut segments = Vec::new();
    for line in corpus {
        segments.extend(split_out_specials(line.as_ref()).map(str::to_owned));
    }
    inner
        .train(&mut trainer, segments.into_iter())
        .map_err(|source| TokenizerError::Train { source })?;

    Ok(Tokenizer::from_inner(inner, DEFAULT_MODEL_MAX_LENGTH))
}

/// The non-empty pieces of `text` between occurrences of [`SPECIAL_TOKENS`], left to right,
/// taking the earliest (then longest) match at each step like the added-token matcher does.
///
/// Each token's next occurrence is cached and only searched again once the cursor has passed
/// it, so a corpus given as one huge line with many tags is still split in linear time.
fn split_out_specials(text: &str) -> impl Iterator<Item = &str> {
    let mut cursor = 0;
    let mut next_at: Vec<Option<usize>> = SPECIAL_TOKENS.iter().map(|t| text.find(t)).collect();
    std::iter::from_fn(move || loop {
        if cursor >= text.len() {
            return None;
        }
        let mut best: Option<(usize, usize)> = None;
        for (slot, token) in next_at.iter_mut().zip(SPECIAL_TOKENS) {
            if matches!(*slot, Some(at) if at < cursor) {
                *slot = text[cursor..].find(token).map(|at| at + cursor);
            }
            if let Some(at) = *slot {
                // Earliest start wins; at the same start, the longer token.
                if best.is_none_or(|(b_at, b_len)| at < b_at || (at == b_at && token.len() > b_len))
                {
                    best = Some((at, token.len()));
                }
            }
        }
        let start = cursor;
        match best {
            None => {
                cursor = text.len();
                return Some(&text[start..]);
            }
            Some((at, len)) => {
                cursor = at + len;
                if at > start {
                    return Some(&text[start..at]);
                }
            }
        }
    })
}

/// The `added_tokens` entries of a `tokenizer.json`, id and text only.
#[derive(serde::Deserialize)]
struct StoredAddedTokens {
    #[serde(default)]
    added_tokens: Vec<StoredAddedToken>,
}

/// One stored added token.
#[derive(serde::Deserialize)]
struct StoredAddedToken {
    id: u32,
    content: String,
}

/// Checks that every added token stored in `text` (the file at `path`) loaded with its stored
/// id; see [`TokenizerError::AddedTokenIdMismatch`] for why this is not a given.
fn check_added_token_ids(
    path: &Path,
    text: &str,
    inner: &tokenizers::Tokenizer,
) -> Result<(), TokenizerError> {
    // The file already parsed as a tokenizer, so this cannot fail on well-formed input; map
    // the error anyway rather than assume.
    let stored: StoredAddedTokens =
        serde_json::from_str(text).map_err(|source| TokenizerError::ParseTokenizer {
            path: path.to_path_buf(),
            source: Box::new(source),
        })?;
    for token in stored.added_tokens {
        let loaded = inner.token_to_id(&token.content);
        if loaded != Some(token.id) {
            return Err(TokenizerError::AddedTokenIdMismatch {
                path: path.to_path_buf(),
                token: token.content,
                stored: token.id,
                loaded,
            });
        }
    }
    Ok(())
}

/// Distinguishes temp files of concurrent saves from one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `path` via a temp file in the same directory, fsync, then rename, so a
/// reader (or a crash) sees the old file or the new one, never a truncated one.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), TokenizerError> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(format!(
        ".{name}.tmp.{}.{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut file = fs::File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temp, path)
    })();
    result.map_err(|source| {
        // Best effort: the temp file is garbage whether or not removing it works.
        let _ = fs::remove_file(&temp);
        TokenizerError::Write {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// The first 40 characters of `text`, for error messages about possibly huge inputs.
fn excerpt(text: &str) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(40).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

/// One `added_tokens_decoder` entry, with the fields and order transformers writes.
#[derive(Serialize)]
struct AddedTokenEntry {
    content: String,
    lstrip: bool,
    normalized: bool,
    rstrip: bool,
    single_word: bool,
    special: bool,
}

/// `added_tokens_decoder`: serialized in ascending id order (a JSON object keyed by the id as a
/// string), as transformers writes it; a sorted `serde_json::Map` would put "10" before "2".
struct AddedTokensDecoder(Vec<(u32, AddedTokenEntry)>);

impl Serialize for AddedTokensDecoder {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (id, entry) in &self.0 {
            map.serialize_entry(&id.to_string(), entry)?;
        }
        map.end()
    }
}

/// `tokenizer_config.json`, field for field as Qwen3's (keys in the same, alphabetical, order).
#[derive(Serialize)]
struct TokenizerConfig<'a> {
    add_bos_token: bool,
    add_prefix_space: bool,
    added_tokens_decoder: AddedTokensDecoder,
    additional_special_tokens: Vec<String>,
    bos_token: Option<&'a str>,
    chat_template: &'a str,
    clean_up_tokenization_spaces: bool,
    eos_token: &'a str,
    errors: &'a str,
    model_max_length: usize,
    pad_token: &'a str,
    split_special_tokens: bool,
    tokenizer_class: &'a str,
    unk_token: Option<&'a str>,
}

impl Tokenizer {
    /// Loads a tokenizer from a `tokenizer.json`, given either the file or a directory holding
    /// it (a Hugging Face model folder, e.g. Qwen3's, or one written by [`Tokenizer::save`]).
    ///
    /// If a `tokenizer_config.json` sits next to it, its integer `model_max_length` is kept so
    /// that load → save preserves it; the rest of that file is not needed here. Truncation and
    /// padding stored in the `tokenizer.json` are switched off: the trainer needs every token of
    /// a sequence, and pads batches itself.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, TokenizerError> {
        let path = path.as_ref();
        let file = if path.is_dir() {
            path.join("tokenizer.json")
        } else {
            path.to_path_buf()
        };
        let text = fs::read_to_string(&file).map_err(|source| TokenizerError::Read {
            path: file.clone(),
            source,
        })?;
        let mut inner: tokenizers::Tokenizer =
            text.parse()
                .map_err(|source| TokenizerError::ParseTokenizer {
                    path: file.clone(),
                    source,
                })?;
        check_added_token_ids(&file, &text, &inner)?;
        inner.with_padding(None);
        inner
            .with_truncation(None)
            .map_err(|source| TokenizerError::ParseTokenizer {
                path: file.clone(),
                source,
            })?;

        let mut model_max_length = DEFAULT_MODEL_MAX_LENGTH;
        let mut source_config = None;
        let config_path = file.with_file_name("tokenizer_config.json");
        if config_path.is_file() {
            let config_text =
                fs::read_to_string(&config_path).map_err(|source| TokenizerError::Read {
                    path: config_path.clone(),
                    source,
                })?;
            let config: serde_json::Value =
                serde_json::from_str(&config_text).map_err(|source| {
                    TokenizerError::ParseConfig {
                        path: config_path.clone(),
                        source,
                    }
                })?;
            // Some configs hold a huge float "no limit" sentinel (1e30); keep the default then.
            if let Some(n) = config
                .get("model_max_length")
                .and_then(serde_json::Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
            {
                model_max_length = n;
            }
            source_config = config.as_object().cloned();
        }
        let mut tok = Self::from_inner(inner, model_max_length);
        tok.source_config = source_config;
        Ok(tok)
    }

    /// Wraps a tokenizer built elsewhere (e.g. from a GGUF file's metadata: [`crate::gguf`])
    /// with the `tokenizer_config.json` object [`Tokenizer::save`] is to write for it (its
    /// `model_max_length`, when an integer, is the one kept).
    pub fn from_parts(
        mut inner: tokenizers::Tokenizer,
        config: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Self, TokenizerError> {
        inner.with_padding(None);
        inner
            .with_truncation(None)
            .map_err(|source| TokenizerError::Build {
                component: "tokenizer (truncation off)",
                source,
            })?;
        let model_max_length = config
            .get("model_max_length")
            .and_then(serde_json::Value::as_u64)
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(DEFAULT_MODEL_MAX_LENGTH);
        let mut tok = Self::from_inner(inner, model_max_length);
        tok.source_config = Some(config);
        Ok(tok)
    }

    /// Wraps a finished tokenizers-crate tokenizer, computing the cached sizes.
    fn from_inner(inner: tokenizers::Tokenizer, model_max_length: usize) -> Self {
        let vocab = inner.get_vocab(true);
        let id_bound = vocab.values().max().map_or(0, |&max| max as usize + 1);
        Self {
            vocab_size: vocab.len(),
            id_bound,
            inner,
            model_max_length,
            source_config: None,
        }
    }

    /// Writes `tokenizer.json` and `tokenizer_config.json` into `dir` (created if missing), so
    /// `transformers.AutoTokenizer.from_pretrained(dir)` loads the folder.
    ///
    /// Each file is replaced atomically (temp file, fsync, rename), so a concurrent reader never
    /// sees a half-written file; the pair is not replaced as one unit (a crash between the two
    /// renames leaves the new `tokenizer.json` next to the old config).
    pub fn save(&self, dir: impl AsRef<Path>) -> Result<(), TokenizerError> {
        let dir = dir.as_ref();
        fs::create_dir_all(dir).map_err(|source| TokenizerError::Write {
            path: dir.to_path_buf(),
            source,
        })?;
        let tokenizer_json = self.to_json()?;
        let config_json = self.config_json()?;
        write_atomic(&dir.join("tokenizer.json"), tokenizer_json.as_bytes())?;
        write_atomic(&dir.join("tokenizer_config.json"), config_json.as_bytes())
    }

    /// Writes `generation_config.json` into a checkpoint folder: `eos_token_id` =
    /// [`<|im_end|>`, `<|endoftext|>`] and `pad_token_id` = `<|endoftext|>`, the ids Qwen3's
    /// own file names, so transformers' `generate` stops at the end of a turn (without this file
    /// it reads `eos_token_id` from `config.json`, which does not know the tokenizer). No
    /// sampling defaults are written: `generate` stays greedy unless asked, as verl validates.
    pub fn save_generation_config(&self, dir: impl AsRef<Path>) -> Result<(), TokenizerError> {
        let dir = dir.as_ref();
        let ct = self.control_tokens()?;
        let text = serde_json::to_string_pretty(&serde_json::json!({
            "eos_token_id": [ct.im_end, ct.endoftext],
            "pad_token_id": ct.pad,
        }))
        .map_err(|e| TokenizerError::Serialize {
            what: "generation_config.json",
            message: e.to_string(),
        })?;
        write_atomic(&dir.join("generation_config.json"), text.as_bytes())
    }

    /// The `tokenizer.json` text [`Tokenizer::save`] writes (pretty-printed, vocabulary in id
    /// order, so equal tokenizers give equal bytes).
    pub fn to_json(&self) -> Result<String, TokenizerError> {
        self.inner
            .to_string(true)
            .map_err(|e| TokenizerError::Serialize {
                what: "tokenizer.json",
                message: e.to_string(),
            })
    }

    /// The `tokenizer_config.json` text [`Tokenizer::save`] writes. A tokenizer that came with
    /// one (loaded, or built from a GGUF file) writes it back as it was, with this tokenizer's
    /// `model_max_length` (and [`TOKENIZER_CLASS`] for a `Qwen2Tokenizer` without a
    /// normalizer: see there). The trained default writes Qwen3's keys and values
    /// (but [`TOKENIZER_CLASS`]; eos `<|im_end|>`, pad `<|endoftext|>`, no bos/unk), this module's
    /// [`CHAT_TEMPLATE`], and an `added_tokens_decoder` entry per added token of this tokenizer
    /// with its own flags.
    pub fn config_json(&self) -> Result<String, TokenizerError> {
        if let Some(source) = &self.source_config {
            let mut config = source.clone();
            config.insert(
                "model_max_length".into(),
                serde_json::json!(self.model_max_length),
            );
            // A folder written before TOKENIZER_CLASS changed (this trainer's, or its cached
            // default tokenizer's) names Qwen2Tokenizer without an NFC normalizer in its
            // tokenizer.json: transformers 5 would tokenize it with one. Written back with the
            // class that runs the file as it is.
            if config.get("tokenizer_class") == Some(&serde_json::json!("Qwen2Tokenizer"))
                && self.inner.get_normalizer().is_none()
            {
                config.insert("tokenizer_class".into(), serde_json::json!(TOKENIZER_CLASS));
            }
            return serde_json::to_string_pretty(&config).map_err(|e| TokenizerError::Serialize {
                what: "tokenizer_config.json",
                message: e.to_string(),
            });
        }
        let mut added: Vec<(u32, AddedToken)> =
            self.inner.get_added_tokens_decoder().into_iter().collect();
        added.sort_by_key(|(id, _)| *id);
        let additional_special_tokens = added
            .iter()
            .filter(|(_, token)| token.special && token.content != ENDOFTEXT)
            .map(|(_, token)| token.content.clone())
            .collect();
        let decoder = AddedTokensDecoder(
            added
                .into_iter()
                .map(|(id, token)| {
                    (
                        id,
                        AddedTokenEntry {
                            content: token.content,
                            lstrip: token.lstrip,
                            normalized: token.normalized,
                            rstrip: token.rstrip,
                            single_word: token.single_word,
                            special: token.special,
                        },
                    )
                })
                .collect(),
        );
        let config = TokenizerConfig {
            add_bos_token: false,
            add_prefix_space: false,
            added_tokens_decoder: decoder,
            additional_special_tokens,
            bos_token: None,
            chat_template: CHAT_TEMPLATE,
            clean_up_tokenization_spaces: false,
            eos_token: IM_END,
            errors: "replace",
            model_max_length: self.model_max_length,
            pad_token: ENDOFTEXT,
            split_special_tokens: false,
            tokenizer_class: TOKENIZER_CLASS,
            unk_token: None,
        };
        serde_json::to_string_pretty(&config).map_err(|e| TokenizerError::Serialize {
            what: "tokenizer_config.json",
            message: e.to_string(),
        })
    }

    /// Sets the `model_max_length` written by [`Tokenizer::save`] (advisory for transformers).
    pub fn with_model_max_length(mut self, model_max_length: usize) -> Self {
        self.model_max_length = model_max_length;
        self
    }

    /// The `model_max_length` [`Tokenizer::save`] writes.
    pub fn model_max_length(&self) -> usize {
        self.model_max_length
    }

    /// Token ids for `text`. Added/special tokens appearing in the text (`<think>`,
    /// `<|im_end|>`, …) become their single ids; no template tokens are added around it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        self.inner
            .encode_fast(text, false)
            .map(|encoding| encoding.get_ids().to_vec())
            .map_err(|source| TokenizerError::Encode {
                excerpt: excerpt(text),
                source,
            })
    }

    /// The text for `ids`, special tokens included (the environments parse `<action>` and
    /// `<answer>` tags out of it). An id outside the vocabulary is an error rather than being
    /// skipped silently, as the tokenizers crate would. Ids that cut a multi-byte character in
    /// half decode to U+FFFD, so decode whole responses, not single ids, when exact text matters.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        if let Some((position, &id)) = ids
            .iter()
            .enumerate()
            .find(|(_, &id)| self.inner.id_to_token(id).is_none())
        {
            return Err(TokenizerError::UnknownId { id, position });
        }
        self.inner
            .decode(ids, false)
            .map_err(|source| TokenizerError::Decode { source })
    }

    /// Number of distinct tokens, added tokens included (Qwen3: 151 669).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// One past the largest id in use: the number of embedding rows a model needs. Equals
    /// [`Tokenizer::vocab_size`] unless the id space has holes.
    pub fn id_bound(&self) -> usize {
        self.id_bound
    }

    /// The id of `token` (an added token or a model vocabulary entry, in byte-level form).
    pub fn id_of(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The token with id `id`, in byte-level form (a space shows as `Ġ`).
    pub fn token_of(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The wrapped tokenizers-crate tokenizer, for batch encoding or offsets.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// The Qwen3 chat prompt for one user turn, ready for the assistant to answer:
    /// `<|im_start|>user\n{msg}<|im_end|>\n<|im_start|>assistant\n` — the same text
    /// [`CHAT_TEMPLATE`] renders with `add_generation_prompt=True`.
    pub fn chat_prompt(&self, user_message: &str) -> String {
        format!("{IM_START}user\n{user_message}{IM_END}\n{IM_START}assistant\n")
    }

    /// This tokenizer with every tag of [`CONTROL_TAGS`] that is not already a single token
    /// added as one, at the next free ids (from [`Tokenizer::id_bound`] on, for a tag the
    /// vocabulary lacks); returns the tags added. A Llama's or Qwen2's tokenizer has the chat
    /// tags but not `<think>`/`</think>`, which [`Tokenizer::control_tokens`] needs. The think
    /// tags are added as Qwen3 holds them (not special: transformers' `skip_special_tokens`
    /// keeps them), the chat tags as special tokens.
    pub fn with_control_tags(mut self) -> Result<(Self, Vec<String>), TokenizerError> {
        let mut added = Vec::new();
        for tag in CONTROL_TAGS {
            let single = match self.id_of(tag) {
                Some(id) => self.encode(tag)? == [id],
                None => false,
            };
            if single {
                continue;
            }
            let special = tag != THINK_OPEN && tag != THINK_CLOSE;
            let token = AddedToken::from(tag, special).normalized(false);
            if special {
                self.inner.add_special_tokens(vec![token])
            } else {
                self.inner.add_tokens(vec![token])
            }
            .map_err(|source| TokenizerError::Build {
                component: "added control tag",
                source,
            })?;
            added.push(tag.to_string());
        }
        if added.is_empty() {
            return Ok((self, added));
        }
        let source_config = self.source_config.take();
        let mut tok = Self::from_inner(self.inner, self.model_max_length);
        tok.source_config = source_config;
        Ok((tok, added))
    }

    /// Derives the [`ControlTokens`] from this tokenizer.
    ///
    /// `<think>`, `</think>`, `<|im_start|>`, `<|im_end|>` and `<|endoftext|>` must each exist
    /// and encode as exactly their own single id (otherwise the decode loop could not detect or
    /// force them); `"\n"` and `"<action>"` may be any non-empty sequence.
    pub fn control_tokens(&self) -> Result<ControlTokens, TokenizerError> {
        let think_open = self.single_token(THINK_OPEN)?;
        let think_close = self.single_token(THINK_CLOSE)?;
        let im_start = self.single_token(IM_START)?;
        let im_end = self.single_token(IM_END)?;
        let endoftext = self.single_token(ENDOFTEXT)?;
        let newline = self.non_empty_encoding("\n")?;
        let action_open = self.non_empty_encoding(ACTION_OPEN)?;
        let mut forced_queue = vec![think_close];
        forced_queue.extend_from_slice(&newline);
        forced_queue.extend_from_slice(&action_open);
        Ok(ControlTokens {
            think_open,
            think_close,
            im_start,
            im_end,
            endoftext,
            newline,
            action_open,
            forced_queue,
            eos: vec![im_end, endoftext],
            pad: endoftext,
        })
    }

    /// The id of `token`, checked to be what encoding its text yields.
    fn single_token(&self, token: &str) -> Result<u32, TokenizerError> {
        let id = self
            .id_of(token)
            .ok_or_else(|| TokenizerError::MissingToken {
                token: token.to_string(),
            })?;
        let ids = self.encode(token)?;
        if ids == [id] {
            Ok(id)
        } else {
            Err(TokenizerError::NotSingleToken {
                token: token.to_string(),
                ids,
            })
        }
    }

    /// `encode(text)`, which must not be empty.
    fn non_empty_encoding(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let ids = self.encode(text)?;
        if ids.is_empty() {
            Err(TokenizerError::EmptyEncoding {
                text: text.to_string(),
            })
        } else {
            Ok(ids)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha12Rng;
    use serde_json::{json, Value};

    /// A few hundred deterministic lines shaped like the environments' prompts and responses.
    fn synthetic_corpus() -> Vec<String> {
        let products = [
            "wireless earbuds",
            "stainless steel water bottle",
            "organic green tea",
            "running shoes size 10",
            "ceramic coffee mug",
            "usb-c charging cable",
            "yoga mat, non-slip",
            "LED desk lamp",
        ];
        let rooms = ["kitchen", "bathroom", "bedroom", "living room", "garage"];
        let objects = ["apple", "mug", "towel", "book", "knife", "soap bar", "lamp"];
        let questions = [
            ("Who wrote Pride and Prejudice?", "Jane Austen"),
            ("What is the capital of Australia?", "Canberra"),
            ("When did the Berlin Wall fall?", "1989"),
            ("Which element has the symbol Fe?", "iron"),
            ("How many legs does a spider have?", "8"),
        ];
        let mut lines = Vec::new();
        for (i, product) in products.iter().enumerate() {
            let price = 10 + 7 * i;
            lines.push(format!(
                "{IM_START}user\nWebShop: find {product} under ${price}.00 and buy it.{IM_END}\n"
            ));
            lines.push(format!(
                "<think>The user wants {product}; budget is ${price}. I should search first.</think>\n\
                 <action>search[{product}]</action>"
            ));
            lines.push(format!(
                "Observation: [Back to Search] Page 1 (Total results: {}) [B0{i}X{price}] {product} ${}.99",
                3 * i + 2,
                price - 1
            ));
            lines.push(format!(
                "<think>Item B0{i}X{price} matches and costs less than ${price}.</think>\n\
                 <action>click[B0{i}X{price}]</action>"
            ));
            lines.push("<action>click[Buy Now]</action><|endoftext|>".to_string());
        }
        for (i, room) in rooms.iter().enumerate() {
            for (j, object) in objects.iter().enumerate() {
                lines.push(format!(
                    "You are in the {room}. Looking quickly around you, you see a countertop {}, \
                     a cabinet {}, and a drawer {}.\nYour task is to: put a clean {object} in the {room}.",
                    i + 1,
                    j + 2,
                    i + j + 3
                ));
                lines.push(format!(
                    "<think>I need a clean {object}. It may be on countertop {}.</think>\n\
                     <action>go to countertop {}</action>",
                    i + 1,
                    i + 1
                ));
                lines.push(format!(
                    "On the countertop {}, you see a {object} {}. You pick up the {object} {} from it.",
                    i + 1,
                    j,
                    j
                ));
            }
        }
        for (q, a) in questions {
            for k in 0..6 {
                lines.push(format!(
                    "{IM_START}system\nAnswer the question. Use <search>query</search> to look things up.\
                     {IM_END}\n{IM_START}user\nQuestion {k}: {q}{IM_END}\n{IM_START}assistant\n"
                ));
                lines.push(format!(
                    "<think>I am not sure; let me search.</think>\n<search>{q}</search>\n\
                     <information>Doc {k}: ... the answer is {a} ...</information>\n\
                     <think>The documents say {a}.</think>\n<answer>{a}</answer>{IM_END}"
                ));
            }
        }
        lines.push("Résumé, naïve café — déjà vu. 北京欢迎你 🙂👍 tabs\tand\r\nCRLF".to_string());
        lines
    }

    const TEST_VOCAB: usize = 700;

    fn built() -> Tokenizer {
        build_default(synthetic_corpus(), TEST_VOCAB).expect("training on the synthetic corpus")
    }

    /// Strings that stress byte-level round-tripping.
    fn tricky_strings() -> Vec<String> {
        let mut strings: Vec<String> = [
            "",
            " ",
            "\n",
            "\r\n",
            "a\r\nb\rc\n\nd",
            "  leading and trailing  ",
            "\t\u{0}\u{1}\u{7}\u{1b}[31m\u{7f}\u{85}\u{a0}",
            "emoji 🙂👍🏽👨‍👩‍👧‍👦 flags 🇩🇪",
            "CJK 北京欢迎你 日本語のテキスト 한국어",
            "combining e\u{301} vs \u{e9}, Å vs A\u{30a}",
            "RTL مرحبا بالعالم עברית",
            "math ∑∫√∞ ≠ ≤ and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
            "<think>reasoning</think>\n<action>click[Buy Now]</action>",
            "<thi nk> </think <|im_end <action >",
            "it's we'RE they'll I'd 12345 3.14159",
            "\u{feff}BOM and \u{200b}zero width\u{2028}\u{2029}",
            "\u{10ffff}\u{e000}\u{fffd}",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // Pseudo-random strings over many Unicode ranges, from a seeded ChaCha12 stream (the
        // crate's one RNG, as in the model's initialisation). Test data only: the default
        // tokenizer is trained without randomness.
        let mut rng = ChaCha12Rng::seed_from_u64(0x9e37_79b9_7f4a_7c15);
        let ranges: [(u32, u32); 8] = [
            (0x00, 0x7f),
            (0x80, 0x7ff),
            (0x800, 0xd7ff),
            (0xe000, 0xffff),
            (0x1_0000, 0x1_ffff),
            (0x1f300, 0x1faff),
            (0x4e00, 0x9fff),
            (0x09, 0x0d),
        ];
        for _ in 0..200 {
            let mut s = String::new();
            let len = rng.random_range(0..24usize);
            for _ in 0..len {
                let (lo, hi) = ranges[rng.random_range(0..ranges.len())];
                // No range holds a surrogate, so every draw is a char.
                if let Some(c) = char::from_u32(rng.random_range(lo..=hi)) {
                    s.push(c);
                }
            }
            strings.push(s);
        }
        strings
    }

    /// GPT-2's byte → printable-char map, listed in the order Qwen's vocabulary assigns ids
    /// 0..256 to them (printable bytes first, then the remapped ones).
    fn byte_level_symbols_in_qwen_order() -> Vec<char> {
        let printable: Vec<u32> = (33..=126).chain(161..=172).chain(174..=255).collect();
        let mut symbols: Vec<char> = printable
            .iter()
            .filter_map(|&b| char::from_u32(b))
            .collect();
        let mut n = 0;
        for b in 0u32..256 {
            if !printable.contains(&b) {
                symbols.extend(char::from_u32(256 + n));
                n += 1;
            }
        }
        symbols
    }

    /// Qwen3's added tokens between `<|im_end|>` (151645) and `<think>` (151667).
    const QWEN3_MIDDLE_ADDED: [&str; 21] = [
        "<|object_ref_start|>",
        "<|object_ref_end|>",
        "<|box_start|>",
        "<|box_end|>",
        "<|quad_start|>",
        "<|quad_end|>",
        "<|vision_start|>",
        "<|vision_end|>",
        "<|vision_pad|>",
        "<|image_pad|>",
        "<|video_pad|>",
        "<tool_call>",
        "</tool_call>",
        "<|fim_prefix|>",
        "<|fim_middle|>",
        "<|fim_suffix|>",
        "<|fim_pad|>",
        "<|repo_name|>",
        "<|file_sep|>",
        "<tool_response>",
        "</tool_response>",
    ];

    /// Size of Qwen3's BPE vocabulary (ids 0..151643); added tokens follow.
    const QWEN3_MODEL_VOCAB: u32 = 151_643;

    /// A model vocabulary just big enough for the fixture's merges, for fast shape-only tests.
    const SMALL_MODEL_VOCAB: u32 = 1312;

    /// A tokenizer.json with Qwen3's layout and Qwen3's ids for everything the control loop
    /// uses: bytes at 0..256 (so `<` = 27, `>` = 29, `Ċ` = 198), `action` = 1311 through a
    /// merge chain, and Qwen3's 26 added tokens stored at `model_vocab..model_vocab + 26`
    /// (`<think>`/`</think>` marked non-special, as Qwen3 does).
    ///
    /// The tokenizers crate numbers added tokens consecutively after the model vocabulary
    /// whatever ids the file stores, so with `fill` the vocabulary is padded with inert entries
    /// (no merge produces them) up to `model_vocab`. With `model_vocab` = 151643 that is Qwen3's
    /// exact id layout (`</think>` = 151668), ~3 MB, hence generated at run time; tests that only
    /// need the shape use a small `model_vocab`. `fill = false` leaves a gap the crate misnumbers.
    /// `think = false` drops `<think>`/`</think>`.
    fn qwen3_shaped_json(think: bool, model_vocab: u32, fill: bool) -> Value {
        let mut vocab = serde_json::Map::new();
        for (id, symbol) in byte_level_symbols_in_qwen_order().into_iter().enumerate() {
            vocab.insert(symbol.to_string(), json!(id));
        }
        for (token, id) in [
            ("io", 256),
            ("ion", 257),
            ("tion", 258),
            ("ac", 259),
            ("action", 1311),
        ] {
            vocab.insert(token.to_string(), json!(id));
        }
        if fill {
            for id in (260..1311).chain(1312..model_vocab) {
                vocab.insert(format!("filler{id}"), json!(id));
            }
        }
        let merges = json!([
            ["i", "o"],
            ["io", "n"],
            ["t", "ion"],
            ["a", "c"],
            ["ac", "tion"]
        ]);
        let added = |id: u32, content: &str, special: bool| {
            json!({"id": id, "content": content, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": special})
        };
        let mut added_tokens = vec![
            added(model_vocab, ENDOFTEXT, true),
            added(model_vocab + 1, IM_START, true),
            added(model_vocab + 2, IM_END, true),
        ];
        for (i, token) in QWEN3_MIDDLE_ADDED.iter().enumerate() {
            // Qwen3 marks the tool-call and think tags non-special; the rest are special.
            let special = !token.starts_with("<tool") && !token.starts_with("</tool");
            added_tokens.push(added(model_vocab + 3 + i as u32, token, special));
        }
        if think {
            added_tokens.push(added(model_vocab + 24, THINK_OPEN, false));
            added_tokens.push(added(model_vocab + 25, THINK_CLOSE, false));
        }
        let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false,
                                "trim_offsets": false, "use_regex": false});
        json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added_tokens,
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN_SPLIT_REGEX},
                 "behavior": "Isolated", "invert": false},
                byte_level.clone()
            ]},
            "post_processor": byte_level.clone(),
            "decoder": byte_level,
            "model": {"type": "BPE", "dropout": null, "unk_token": null,
                      "continuing_subword_prefix": "", "end_of_word_suffix": "",
                      "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                      "vocab": vocab, "merges": merges}
        })
    }

    fn write_json(dir: &Path, name: &str, value: &Value) -> PathBuf {
        let path = dir.join(name);
        fs::write(&path, serde_json::to_string(value).unwrap()).unwrap();
        path
    }

    #[test]
    fn special_tokens_are_single_special_ids_in_order() {
        let tok = built();
        let decoder = tok.inner().get_added_tokens_decoder();
        for (i, token) in SPECIAL_TOKENS.iter().enumerate() {
            let id = i as u32;
            assert_eq!(tok.id_of(token), Some(id), "{token}");
            assert_eq!(tok.encode(token).unwrap(), vec![id], "{token}");
            assert!(decoder[&id].special, "{token} must be special");
        }
        let ids = tok
            .encode("x<think>y</think>\n<action>buy</action><|im_end|>")
            .unwrap();
        for token in [THINK_OPEN, THINK_CLOSE, ACTION_OPEN, ACTION_CLOSE, IM_END] {
            assert!(
                ids.contains(&tok.id_of(token).unwrap()),
                "{token} in {ids:?}"
            );
        }
        assert_eq!(
            tok.decode(&ids).unwrap(),
            "x<think>y</think>\n<action>buy</action><|im_end|>"
        );
    }

    #[test]
    fn vocab_has_requested_size_and_full_byte_alphabet() {
        let tok = built();
        assert_eq!(tok.vocab_size(), TEST_VOCAB);
        assert_eq!(tok.id_bound(), TEST_VOCAB);
        for symbol in ByteLevel::alphabet() {
            assert!(tok.id_of(&symbol.to_string()).is_some(), "{symbol:?}");
        }
        // Merges were learned from the corpus (common words become one token).
        assert!(tok.encode(" the").unwrap().len() == 1);
    }

    #[test]
    fn no_merge_is_learned_from_inside_special_tokens() {
        let tok = built();
        let json: Value = serde_json::from_str(&tok.to_json().unwrap()).unwrap();
        let vocab = json["model"]["vocab"].as_object().unwrap();
        for token in vocab.keys() {
            if SPECIAL_TOKENS.contains(&token.as_str()) {
                continue;
            }
            assert!(!token.contains("im_start"), "{token}");
            assert!(!token.contains("<|"), "{token}");
        }
    }

    #[test]
    fn round_trip_is_identity_on_arbitrary_unicode() {
        let tok = built();
        for s in tricky_strings() {
            let ids = tok.encode(&s).unwrap();
            assert_eq!(tok.decode(&ids).unwrap(), s, "ids {ids:?}");
        }
    }

    #[test]
    fn empty_corpus_still_encodes_everything() {
        let tok = build_default(Vec::<String>::new(), 1000).unwrap();
        assert_eq!(tok.vocab_size(), BYTE_ALPHABET_SIZE + SPECIAL_TOKENS.len());
        for s in tricky_strings() {
            assert_eq!(tok.decode(&tok.encode(&s).unwrap()).unwrap(), s);
        }
    }

    #[test]
    fn training_is_deterministic() {
        let corpus = synthetic_corpus();
        let first = build_default(corpus.clone(), TEST_VOCAB)
            .unwrap()
            .to_json()
            .unwrap();
        let second = build_default(corpus.clone(), TEST_VOCAB)
            .unwrap()
            .to_json()
            .unwrap();
        assert_eq!(first, second);
        // Line order does not matter: training counts words.
        let mut reversed = corpus.clone();
        reversed.reverse();
        let third = build_default(reversed, TEST_VOCAB)
            .unwrap()
            .to_json()
            .unwrap();
        assert_eq!(first, third);
        // Neither does the trainer's rayon parallelism.
        tokenizers::utils::parallelism::set_parallelism(false);
        let serial = build_default(corpus.clone(), TEST_VOCAB).unwrap().to_json();
        tokenizers::utils::parallelism::set_parallelism(true);
        let parallel = build_default(corpus, TEST_VOCAB).unwrap().to_json();
        assert_eq!(first, serial.unwrap());
        assert_eq!(first, parallel.unwrap());
    }

    #[test]
    fn control_tokens_of_the_built_tokenizer() {
        let tok = built();
        let ct = tok.control_tokens().unwrap();
        let id = |t: &str| tok.id_of(t).unwrap();
        assert_eq!(ct.think_open, id(THINK_OPEN));
        assert_eq!(ct.think_close, id(THINK_CLOSE));
        assert_eq!(ct.action_open, vec![id(ACTION_OPEN)]);
        assert_eq!(ct.newline, tok.encode("\n").unwrap());
        assert_eq!(ct.newline.len(), 1);
        assert_eq!(
            ct.forced_queue,
            vec![id(THINK_CLOSE), ct.newline[0], id(ACTION_OPEN)]
        );
        assert_eq!(ct.eos, vec![id(IM_END), id(ENDOFTEXT)]);
        assert_eq!(ct.pad, id(ENDOFTEXT));
        assert_eq!(ct.im_start, id(IM_START));
        assert_eq!(tok.decode(&ct.forced_queue).unwrap(), "</think>\n<action>");
    }

    #[test]
    fn generation_config_names_the_turn_end() {
        let tok = built();
        let ct = tok.control_tokens().unwrap();
        let dir = tempfile::tempdir().unwrap();
        tok.save_generation_config(dir.path()).unwrap();
        let v: serde_json::Value = serde_json::from_str(
            &fs::read_to_string(dir.path().join("generation_config.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(
            v["eos_token_id"],
            serde_json::json!([ct.im_end, ct.endoftext])
        );
        assert_eq!(v["pad_token_id"], serde_json::json!(ct.endoftext));
        assert_eq!(tok.id_of(IM_END), Some(ct.im_end));
        assert_eq!(v.as_object().unwrap().len(), 2, "no sampling defaults: {v}");
    }

    #[test]
    fn save_then_load_is_identical() {
        let tok = built().with_model_max_length(4096);
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("nested").join("tok");
        tok.save(&out).unwrap();
        let mut names: Vec<String> = fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["tokenizer.json", "tokenizer_config.json"],
            "no temp files left"
        );

        let loaded = Tokenizer::load(&out).unwrap();
        assert_eq!(loaded.to_json().unwrap(), tok.to_json().unwrap());
        assert_eq!(
            fs::read_to_string(out.join("tokenizer.json")).unwrap(),
            tok.to_json().unwrap()
        );
        assert_eq!(loaded.model_max_length(), 4096);
        for s in tricky_strings() {
            assert_eq!(loaded.encode(&s).unwrap(), tok.encode(&s).unwrap(), "{s:?}");
        }
        assert_eq!(
            loaded.control_tokens().unwrap(),
            tok.control_tokens().unwrap()
        );
        // Loading the file itself works too, and so does the plain tokenizers crate.
        let by_file = Tokenizer::load(out.join("tokenizer.json")).unwrap();
        assert_eq!(by_file.vocab_size(), tok.vocab_size());
        let plain = tokenizers::Tokenizer::from_file(out.join("tokenizer.json")).unwrap();
        let text = "<think>ok</think>\n<action>search[mug]</action> 🙂";
        assert_eq!(
            plain.encode(text, false).unwrap().get_ids(),
            tok.encode(text).unwrap().as_slice()
        );
        // Saving over an existing folder replaces the files.
        loaded.save(&out).unwrap();
        assert_eq!(
            Tokenizer::load(&out).unwrap().to_json().unwrap(),
            tok.to_json().unwrap()
        );
    }

    #[test]
    fn tokenizer_config_is_qwen3_shaped() {
        let tok = built();
        let config: Value = serde_json::from_str(&tok.config_json().unwrap()).unwrap();
        assert_eq!(config["tokenizer_class"], TOKENIZER_CLASS);
        assert_eq!(config["eos_token"], IM_END);
        assert_eq!(config["pad_token"], ENDOFTEXT);
        assert_eq!(config["bos_token"], Value::Null);
        assert_eq!(config["unk_token"], Value::Null);
        assert_eq!(config["chat_template"], CHAT_TEMPLATE);
        assert_eq!(config["model_max_length"], DEFAULT_MODEL_MAX_LENGTH);
        let decoder = config["added_tokens_decoder"].as_object().unwrap();
        assert_eq!(decoder.len(), SPECIAL_TOKENS.len());
        for (i, token) in SPECIAL_TOKENS.iter().enumerate() {
            let entry = &decoder[&i.to_string()];
            assert_eq!(
                *entry,
                json!({"content": token, "lstrip": false, "normalized": false,
                       "rstrip": false, "single_word": false, "special": true})
            );
        }
        // Written in id order, as transformers does ("2" before "10").
        let text = tok.config_json().unwrap();
        assert!(text.find("\"2\":").unwrap() < text.find("\"10\":").unwrap());
        let additional = config["additional_special_tokens"].as_array().unwrap();
        assert_eq!(additional.len(), SPECIAL_TOKENS.len() - 1);
        assert!(!additional.contains(&json!(ENDOFTEXT)));
    }

    /// A folder saved before the class changed names `Qwen2Tokenizer` over a file without a
    /// normalizer (transformers 5 would add NFC): saved again, it names [`TOKENIZER_CLASS`].
    /// A Qwen-shaped file with its NFC normalizer keeps `Qwen2Tokenizer`.
    #[test]
    fn an_old_qwen2tokenizer_class_without_a_normalizer_is_written_back_fixed() {
        let dir = tempfile::tempdir().unwrap();
        built().save(dir.path()).unwrap();
        let path = dir.path().join("tokenizer_config.json");
        let mut config: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
        config["tokenizer_class"] = json!("Qwen2Tokenizer");
        write_json(dir.path(), "tokenizer_config.json", &config);
        let again: Value =
            serde_json::from_str(&Tokenizer::load(dir.path()).unwrap().config_json().unwrap())
                .unwrap();
        assert_eq!(again["tokenizer_class"], TOKENIZER_CLASS);

        let qwen = tempfile::tempdir().unwrap();
        write_json(
            qwen.path(),
            "tokenizer.json",
            &qwen3_shaped_json(true, QWEN3_MODEL_VOCAB, true),
        );
        write_json(qwen.path(), "tokenizer_config.json", &config);
        let kept: Value =
            serde_json::from_str(&Tokenizer::load(qwen.path()).unwrap().config_json().unwrap())
                .unwrap();
        assert_eq!(kept["tokenizer_class"], "Qwen2Tokenizer");
    }

    #[test]
    fn chat_prompt_is_qwen3_format() {
        let tok = built();
        let prompt = tok.chat_prompt("hi");
        assert_eq!(
            prompt,
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
        let ids = tok.encode(&prompt).unwrap();
        assert_eq!(ids[0], tok.id_of(IM_START).unwrap());
        assert_eq!(tok.decode(&ids).unwrap(), prompt);
    }

    #[test]
    fn qwen3_shaped_fixture_gives_qwen3_control_ids() {
        let dir = tempfile::tempdir().unwrap();
        let value = qwen3_shaped_json(true, QWEN3_MODEL_VOCAB, true);
        write_json(dir.path(), "tokenizer.json", &value);
        let tok = Tokenizer::load(dir.path()).unwrap();
        assert_eq!(tok.encode("<action>").unwrap(), vec![27, 1311, 29]);
        assert_eq!(tok.encode("\n").unwrap(), vec![198]);
        let ct = tok.control_tokens().unwrap();
        assert_eq!(ct.forced_queue, vec![151668, 198, 27, 1311, 29]);
        assert_eq!(ct.think_open, 151667);
        assert_eq!(ct.think_close, 151668);
        assert_eq!(ct.im_start, 151644);
        assert_eq!(ct.im_end, 151645);
        assert_eq!(ct.eos, vec![151645, 151643]);
        assert_eq!(ct.pad, 151643);
        assert_eq!(tok.id_bound(), 151669);
        assert_eq!(tok.vocab_size(), 151669);
        let prompt = tok.chat_prompt("hi");
        let ids = tok.encode(&prompt).unwrap();
        assert_eq!(ids[0], 151644);
        assert_eq!(tok.decode(&ids).unwrap(), prompt);
        assert_eq!(tok.decode(&ct.forced_queue).unwrap(), "</think>\n<action>");
    }

    #[test]
    fn qwen3_shaped_fixture_with_think_as_special_tokens_works_too() {
        let mut value = qwen3_shaped_json(true, QWEN3_MODEL_VOCAB, true);
        for token in value["added_tokens"].as_array_mut().unwrap() {
            token["special"] = json!(true);
        }
        let dir = tempfile::tempdir().unwrap();
        let path = write_json(dir.path(), "tokenizer.json", &value);
        let ct = Tokenizer::load(path).unwrap().control_tokens().unwrap();
        assert_eq!(ct.forced_queue, vec![151668, 198, 27, 1311, 29]);
    }

    #[test]
    fn missing_think_tokens_are_named() {
        let dir = tempfile::tempdir().unwrap();
        write_json(
            dir.path(),
            "tokenizer.json",
            &qwen3_shaped_json(false, SMALL_MODEL_VOCAB, true),
        );
        let err = Tokenizer::load(dir.path())
            .unwrap()
            .control_tokens()
            .unwrap_err();
        assert!(
            matches!(&err, TokenizerError::MissingToken { token } if token == THINK_OPEN),
            "{err:?}"
        );
        assert!(err.to_string().contains("<think>"), "{err}");

        // `<think>` present, `</think>` absent.
        let mut value = qwen3_shaped_json(true, SMALL_MODEL_VOCAB, true);
        value["added_tokens"].as_array_mut().unwrap().pop();
        write_json(dir.path(), "tokenizer.json", &value);
        let err = Tokenizer::load(dir.path())
            .unwrap()
            .control_tokens()
            .unwrap_err();
        assert!(
            matches!(&err, TokenizerError::MissingToken { token } if token == THINK_CLOSE),
            "{err:?}"
        );
    }

    #[test]
    fn think_close_as_plain_vocab_entry_is_not_single() {
        // `</think>` is in the BPE vocabulary but not an added token, so encoding its text
        // splits it ("</", "think", ">" pieces) and the decode loop could never see it.
        let mut value = qwen3_shaped_json(true, SMALL_MODEL_VOCAB + 1, true);
        value["added_tokens"].as_array_mut().unwrap().pop();
        let vocab = value["model"]["vocab"].as_object_mut().unwrap();
        let filler = format!("filler{SMALL_MODEL_VOCAB}");
        let id = vocab.remove(&filler).expect("the last filler entry");
        vocab.insert(THINK_CLOSE.to_string(), id);
        let dir = tempfile::tempdir().unwrap();
        write_json(dir.path(), "tokenizer.json", &value);
        let err = Tokenizer::load(dir.path())
            .unwrap()
            .control_tokens()
            .unwrap_err();
        match &err {
            TokenizerError::NotSingleToken { token, ids } => {
                assert_eq!(token, THINK_CLOSE);
                assert!(ids.len() > 1, "{ids:?}");
            }
            other => panic!("expected NotSingleToken, got {other:?}"),
        }
        assert!(err.to_string().contains("</think>"), "{err}");
    }

    #[test]
    fn gapped_added_token_ids_are_rejected_not_renumbered() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_json(
            dir.path(),
            "tokenizer.json",
            &qwen3_shaped_json(true, QWEN3_MODEL_VOCAB, false),
        );
        let err = Tokenizer::load(&path).unwrap_err();
        match &err {
            TokenizerError::AddedTokenIdMismatch {
                path: p,
                token,
                stored,
                loaded,
            } => {
                assert_eq!(*p, path);
                assert_eq!(token, ENDOFTEXT);
                assert_eq!(*stored, 151643);
                assert_eq!(*loaded, Some(261));
            }
            other => panic!("expected AddedTokenIdMismatch, got {other:?}"),
        }
        assert!(err.to_string().contains("<|endoftext|>"), "{err}");
    }

    #[test]
    fn stored_truncation_and_padding_are_switched_off() {
        let mut value = qwen3_shaped_json(true, SMALL_MODEL_VOCAB, true);
        value["truncation"] = json!({"direction": "Right", "max_length": 2,
                                     "strategy": "LongestFirst", "stride": 0});
        value["padding"] = json!({"strategy": {"Fixed": 64}, "direction": "Right",
                                  "pad_to_multiple_of": null, "pad_id": 0,
                                  "pad_type_id": 0, "pad_token": "!"});
        let dir = tempfile::tempdir().unwrap();
        write_json(dir.path(), "tokenizer.json", &value);
        // The file as stored truncates to 2 ids and pads to 64 …
        let plain = tokenizers::Tokenizer::from_file(dir.path().join("tokenizer.json")).unwrap();
        let ids = plain
            .encode("<action>\n", false)
            .unwrap()
            .get_ids()
            .to_vec();
        assert_eq!(ids.len(), 64);
        assert_eq!(ids[..3], [27, 1311, 0]);
        // … the loaded tokenizer does neither.
        let tok = Tokenizer::load(dir.path()).unwrap();
        assert_eq!(tok.encode("<action>\n").unwrap(), vec![27, 1311, 29, 198]);
    }

    #[test]
    fn missing_file_is_a_read_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let err = Tokenizer::load(dir.path()).unwrap_err();
        let expected = dir.path().join("tokenizer.json");
        assert!(
            matches!(&err, TokenizerError::Read { path, .. } if *path == expected),
            "{err:?}"
        );
        assert!(err.to_string().contains(&expected.display().to_string()));

        let nowhere = dir.path().join("no-such-file.json");
        let err = Tokenizer::load(&nowhere).unwrap_err();
        assert!(matches!(&err, TokenizerError::Read { path, .. } if *path == nowhere));
    }

    #[test]
    fn invalid_json_is_a_parse_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        for bad in ["{ not json", "{\"model\": 3}", "[]", ""] {
            fs::write(&path, bad).unwrap();
            let err = Tokenizer::load(&path).unwrap_err();
            assert!(
                matches!(&err, TokenizerError::ParseTokenizer { path: p, .. } if *p == path),
                "{bad:?}: {err:?}"
            );
            assert!(err.to_string().contains("tokenizer.json"), "{err}");
        }
        fs::write(&path, [0xff, 0xfe, 0x00]).unwrap();
        assert!(matches!(
            Tokenizer::load(&path).unwrap_err(),
            TokenizerError::Read { .. }
        ));
    }

    #[test]
    fn invalid_config_next_to_tokenizer_is_named() {
        let dir = tempfile::tempdir().unwrap();
        write_json(
            dir.path(),
            "tokenizer.json",
            &qwen3_shaped_json(true, SMALL_MODEL_VOCAB, true),
        );
        let config = dir.path().join("tokenizer_config.json");
        fs::write(&config, "{,}").unwrap();
        let err = Tokenizer::load(dir.path()).unwrap_err();
        assert!(
            matches!(&err, TokenizerError::ParseConfig { path, .. } if *path == config),
            "{err:?}"
        );
        // A "no limit" float sentinel keeps the default.
        fs::write(&config, r#"{"model_max_length": 1e30}"#).unwrap();
        let tok = Tokenizer::load(dir.path()).unwrap();
        assert_eq!(tok.model_max_length(), DEFAULT_MODEL_MAX_LENGTH);
        fs::write(&config, r#"{"model_max_length": 131072}"#).unwrap();
        assert_eq!(
            Tokenizer::load(dir.path()).unwrap().model_max_length(),
            131072
        );
    }

    #[test]
    fn too_small_vocab_is_rejected() {
        let err = build_default(synthetic_corpus(), 100).unwrap_err();
        assert!(
            matches!(
                err,
                TokenizerError::VocabTooSmall {
                    requested: 100,
                    minimum: 269
                }
            ),
            "{err:?}"
        );
        assert!(build_default(Vec::<String>::new(), 269).is_ok());
    }

    #[test]
    fn unknown_ids_are_errors_not_skipped() {
        let tok = built();
        let err = tok.decode(&[5, u32::MAX, 7]).unwrap_err();
        assert!(
            matches!(
                err,
                TokenizerError::UnknownId {
                    id: u32::MAX,
                    position: 1
                }
            ),
            "{err:?}"
        );
        assert_eq!(tok.decode(&[]).unwrap(), "");
    }

    #[test]
    fn save_into_a_file_path_fails_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("occupied");
        fs::write(&file, "x").unwrap();
        let err = built().save(&file).unwrap_err();
        assert!(
            matches!(&err, TokenizerError::Write { path, .. } if *path == file),
            "{err:?}"
        );
    }

    #[test]
    fn specials_are_cut_out_of_training_text() {
        let pieces: Vec<&str> =
            split_out_specials("a<think>b</think>\n<action><action>c<|im_end|>").collect();
        assert_eq!(pieces, ["a", "b", "\n", "c"]);
        assert_eq!(split_out_specials("").count(), 0);
        assert_eq!(split_out_specials("<think>").count(), 0);
        assert_eq!(split_out_specials("plain").collect::<Vec<_>>(), ["plain"]);
        // Tags sharing a prefix ("<|im_start|>" / "<|im_end|>") are told apart.
        assert_eq!(
            split_out_specials("x<|im_start|>y").collect::<Vec<_>>(),
            ["x", "y"]
        );
        // Repeated and adjacent tags, a tag at the very end, non-ASCII around tags.
        assert_eq!(
            split_out_specials("é<think><think>北</think></think>🙂<|endoftext|>")
                .collect::<Vec<_>>(),
            ["é", "北", "🙂"]
        );
        // A long single line with many tags splits into every piece.
        let line = "ab<action>".repeat(10_000);
        let pieces: Vec<&str> = split_out_specials(&line).collect();
        assert_eq!(pieces.len(), 10_000);
        assert!(pieces.iter().all(|p| *p == "ab"));
    }
}
