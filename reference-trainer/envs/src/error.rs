//! The library's error types: the fallible public functions return these, the retrieval's
//! [`RetrievalError`](crate::search_qa::retriever::RetrievalError) or the corpus reader's
//! [`CorpusError`](crate::search_qa::corpus_file::CorpusError); `anyhow` is for the binaries.

use std::path::{Path, PathBuf};

/// A data file (WebShop items, Search QA corpus or questions, an ALFWorld game folder or the
/// game logic) could not be read or written. Every variant names the file, and where in it when
/// the content is at fault.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Opening, creating, reading or writing the file failed.
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done: "open", "create", "read", "write".
        action: &'static str,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The JSON is malformed or a record lacks the shape the format requires.
    #[error("{}: line {line}, column {column}: expected {expected}: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line of the file.
        line: usize,
        /// 1-based column (0 when the parser did not report one).
        column: usize,
        /// What the format requires there.
        expected: &'static str,
        /// What the JSON parser said.
        #[source]
        source: serde_json::Error,
    },
    /// A record parses but one of its fields has a value the format rules out.
    #[error("{}: line {line}: field `{field}`: {reason}", path.display())]
    Field {
        /// The file.
        path: PathBuf,
        /// 1-based line of the record.
        line: usize,
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// An s-expression (PDDL) held in the file does not parse.
    #[error("{}: {what}: {source}", path.display())]
    Sexp {
        /// The file.
        path: PathBuf,
        /// Which text of the file (`pddl_problem` of a `game.tw-pddl`).
        what: &'static str,
        /// Where and why the parser stopped.
        #[source]
        source: ParseError,
    },
    /// The file parses but does not describe what it must (an ALFWorld game without an
    /// `:init`, a receptacle without a location, a grammar without its task placeholder).
    #[error("{}: {reason}", path.display())]
    Game {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

impl LoadError {
    /// An I/O error on `path` while doing `action`.
    pub fn io<'a>(
        path: &'a Path,
        action: &'static str,
    ) -> impl FnOnce(std::io::Error) -> Self + 'a {
        move |source| LoadError::Io {
            path: path.to_path_buf(),
            action,
            source,
        }
    }

    /// A JSON error in `path`, located where serde_json says (`line` overrides its line for
    /// one-record-per-line files, where the parser sees a single line).
    pub fn json(
        path: &Path,
        line: Option<usize>,
        expected: &'static str,
        source: serde_json::Error,
    ) -> Self {
        LoadError::Json {
            path: path.to_path_buf(),
            line: line.unwrap_or(source.line()),
            column: source.column(),
            expected,
            source,
        }
    }

    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            LoadError::Io { path, .. }
            | LoadError::Json { path, .. }
            | LoadError::Field { path, .. }
            | LoadError::Sexp { path, .. }
            | LoadError::Game { path, .. } => path,
        }
    }
}

/// An s-expression ([`crate::alfworld::game::parse_sexp`]) is malformed. Every variant but
/// [`ParseError::Empty`] names the byte offset in the text where the parser stopped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A `)` with no open list.
    #[error("unbalanced ')' at byte {offset}")]
    UnbalancedClose {
        /// Byte offset of the `)`.
        offset: usize,
    },
    /// A list closes after the first top-level expression was complete.
    #[error("a second expression at byte {offset}")]
    SecondExpression {
        /// Byte offset of the `)` that closes the second expression.
        offset: usize,
    },
    /// An atom at the top level, outside every list.
    #[error("an atom outside any list at byte {offset}")]
    AtomOutsideList {
        /// Byte offset of the atom's first byte.
        offset: usize,
    },
    /// The text ends with lists still open.
    #[error("{open} unclosed '(' at the end (the outermost at byte {offset})")]
    Unclosed {
        /// How many lists are open.
        open: usize,
        /// Byte offset of the outermost unclosed `(`.
        offset: usize,
    },
    /// The text holds no expression (empty, blanks or comments only).
    #[error("no expression")]
    Empty,
}

impl ParseError {
    /// The byte offset the error is at (`None` for [`ParseError::Empty`]).
    pub fn offset(&self) -> Option<usize> {
        match self {
            ParseError::UnbalancedClose { offset }
            | ParseError::SecondExpression { offset }
            | ParseError::AtomOutsideList { offset }
            | ParseError::Unclosed { offset, .. } => Some(*offset),
            ParseError::Empty => None,
        }
    }
}

/// An environment could not be built or a task could not be selected.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// The task list is empty.
    #[error("{env}: {what} has no task")]
    NoTasks {
        /// The environment ("WebShop", "ALFWorld", "Search QA").
        env: &'static str,
        /// Which list ("the Test split", "the question list", …).
        what: String,
    },
    /// A task index past the end of the list.
    #[error("{env}: task {index} is out of range: there are {len} tasks (0..{len})")]
    TaskOutOfRange {
        /// The environment.
        env: &'static str,
        /// The index asked for.
        index: usize,
        /// How many tasks there are.
        len: usize,
    },
    /// An argument the environment cannot work with.
    #[error("{env}: {reason}")]
    Invalid {
        /// The environment.
        env: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// Reading the environment's data failed.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The retrieval failed (Search QA).
    #[error(transparent)]
    Retrieval(#[from] crate::search_qa::retriever::RetrievalError),
}
