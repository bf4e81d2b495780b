//! The trainer's error type: every failure a user can cause names the file, tensor or key.

use std::path::PathBuf;

/// Errors of the reference trainer's library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A tensor operation failed (shapes, dtypes, devices).
    #[error("tensor operation: {0}")]
    Candle(#[from] candle_core::Error),
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A JSON file did not parse or lacks a field.
    #[error("{path}: {message}")]
    Json {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// A model config is not one this crate runs.
    #[error("{path}: key `{key}`: {message}")]
    Config {
        /// The config file (or `<embedded>`).
        path: PathBuf,
        /// The offending key.
        key: String,
        /// What was expected.
        message: String,
    },
    /// A TOML file did not parse: a syntax error, an unknown key or a wrong type (the message
    /// shows the key and its line).
    #[error("{path}: {message}")]
    Toml {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A checkpoint misses a tensor, has one of the wrong shape, or one nobody asked for.
    #[error("{path}: tensor `{tensor}`: {message}")]
    Checkpoint {
        /// The checkpoint folder or file.
        path: PathBuf,
        /// The tensor name (Hugging Face naming).
        tensor: String,
        /// What was wrong.
        message: String,
    },
    /// The tokenizer could not be built, loaded or used.
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    /// The control kernel rejected a config or a row.
    #[error("t2po-control: {0}")]
    Control(#[from] t2po_control::Error),
    /// A file of a training checkpoint is missing or is not what the checkpoint recorded
    /// (truncated, changed on disk): its weights would silently differ, so it is not loaded.
    #[error(
        "{path}: {problem}; the checkpoint is damaged (an older one in the same folder may be \
         intact: point `latest` at it to resume from there)"
    )]
    CheckpointFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: FileProblem,
    },
    /// The caller asked the run to stop (a signal), and a stage saw it at a safe point; what
    /// was in progress since the last checkpoint is dropped. Turned into
    /// [`Error::Interrupted`] by [`crate::train::train`].
    #[error("stopped by {} at a safe point", signal_name(*.signal))]
    Stopped {
        /// The signal number (SIGINT 2, SIGTERM 15).
        signal: i32,
    },
    /// A training run stopped on request (a signal): what it left and how to continue.
    #[error("{}", interrupted_message(*.signal, .out, .latest.as_deref()))]
    Interrupted {
        /// The signal number (SIGINT 2, SIGTERM 15).
        signal: i32,
        /// The run's output folder.
        out: PathBuf,
        /// The checkpoint a resume continues from (`None`: none was written yet).
        latest: Option<PathBuf>,
    },
    /// A value given by the user is out of range or unknown.
    #[error("{what}: {message}")]
    Invalid {
        /// The option, argument or field.
        what: String,
        /// What was wrong and what is allowed.
        message: String,
    },
}

/// What is wrong with a checkpoint file ([`Error::CheckpointFile`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileProblem {
    /// The file is gone.
    Missing,
    /// The file has another size than was written (truncated or appended to).
    Size {
        /// Bytes written.
        expected: u64,
        /// Bytes there now.
        found: u64,
    },
    /// The file has the size written but other bytes (SHA-256, hex).
    Checksum {
        /// The SHA-256 written.
        expected: String,
        /// The SHA-256 of the bytes there now.
        found: String,
    },
    /// The file could not be read.
    Unreadable(String),
}

impl std::fmt::Display for FileProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing => write!(f, "missing (the checkpoint lists it)"),
            Self::Size { expected, found } => {
                write!(f, "{found} bytes, but {expected} were written")
            }
            Self::Checksum { expected, found } => write!(
                f,
                "SHA-256 {found}, but {expected} was written (the bytes changed on disk)"
            ),
            Self::Unreadable(why) => write!(f, "cannot be read: {why}"),
        }
    }
}

/// `SIGINT`, `SIGTERM`, or `signal N`.
pub fn signal_name(signal: i32) -> String {
    match signal {
        2 => "SIGINT".into(),
        15 => "SIGTERM".into(),
        n => format!("signal {n}"),
    }
}

fn interrupted_message(
    signal: i32,
    out: &std::path::Path,
    latest: Option<&std::path::Path>,
) -> String {
    let how = format!(
        "run the same command with --resume (or `reference-trainer train --out {} --resume`)",
        out.display()
    );
    match latest {
        Some(dir) => format!(
            "stopped by {}: the latest checkpoint is {}; to continue, {how}",
            signal_name(signal),
            dir.display()
        ),
        None => format!(
            "stopped by {} before the first checkpoint: nothing to continue from; {how} to \
             start it over",
            signal_name(signal)
        ),
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    /// A bad user-provided value.
    pub fn invalid(what: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            what: what.into(),
            message: message.into(),
        }
    }
}
