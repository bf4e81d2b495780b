//! Errors, and the fixed-number status codes C sees for them.
//!
//! Every failure is a value naming what was wrong; nothing here panics. [`Status`] numbers are
//! part of the ABI and never change meaning: new codes are only ever appended.

use thiserror::Error;

/// A configuration field out of range (see [`crate::Config::validate`]).
#[derive(Clone, Copy, Debug, PartialEq, Error)]
#[allow(missing_docs)] // each variant's fields are named in its message
pub enum ConfigError {
    /// `top_j` outside `1..=64`.
    #[error("top_j = {value}: expected 1..=64 (TOP_J_CAPACITY)")]
    TopJ { value: u32 },
    /// `alpha` outside `[0, 1]` or NaN.
    #[error("alpha = {value}: expected a number in [0, 1]")]
    Alpha { value: f32 },
    /// A kind field holds no known value.
    #[error("{field} = {value}: not a known kind value")]
    UnknownKind { field: &'static str, value: u32 },
    /// A boolean field is neither 0 nor 1.
    #[error("{field} = {value}: expected 0 or 1")]
    Flag { field: &'static str, value: u32 },
    /// A tolerance is negative, NaN or infinite.
    #[error("{field} = {value}: expected a finite number >= 0")]
    NonNegative { field: &'static str, value: f32 },
    /// `window + 1` exceeds the window capacity.
    #[error("window = {value}: the window holds window + 1 deltas, at most 32 (WINDOW_CAPACITY), so window <= 31")]
    Window { value: u32 },
    /// `patience` is 0.
    #[error("patience = 0: expected at least 1")]
    Patience,
    /// `max_think` is 0.
    #[error("max_think = 0: expected at least 1 (the think budget L_max)")]
    MaxThinkZero,
    /// `min_len > max_think`.
    #[error("min_len = {min_len} > max_think = {max_think}: expected L_min <= L_max")]
    Lengths { min_len: u32, max_think: u32 },
    /// `think_open == think_close`.
    #[error("think_open = think_close = {token}: the two think tokens must differ")]
    ThinkTokens { token: u32 },
    /// `queue_len` exceeds the queue capacity.
    #[error("queue_len = {len}: at most 8 (QUEUE_CAPACITY)")]
    QueueTooLong { len: u32 },
    /// TTI is enabled but the forced queue is empty.
    #[error("queue_len = 0 while tti_enabled = 1: TTI needs a forced queue")]
    EmptyQueue,
    /// The forced queue does not start with the think-close token.
    #[error("queue[0] = {head}: the forced queue must start with think_close = {think_close}")]
    QueueHead { head: u32, think_close: u32 },
    /// A queued token id does not fit the `int32_t` forced-token output.
    #[error("queue token {token} > 2147483647: forced tokens must fit int32_t")]
    TokenRange { token: u32 },
    /// `phi_floor` not a positive finite number.
    #[error("phi_floor = {value}: expected a finite number > 0")]
    PhiFloor { value: f32 },
}

/// Why a logits row has no statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[allow(missing_docs)] // each variant's fields are named in its message
pub enum RowError {
    /// The row has no entries.
    #[error("empty logits row")]
    Empty,
    /// A NaN logit.
    #[error("logit {index} is NaN")]
    NaN { index: usize },
    /// A `+inf` logit (`−inf` is a valid masked token; `+inf` has no softmax).
    #[error("logit {index} is +inf")]
    PosInf { index: usize },
    /// Every entry is `−inf`.
    #[error("no finite logit in the row (all {len} entries are -inf)")]
    NoFinite { len: usize },
    /// The finite logits span more than f32 can hold in the statistics (a confidence or
    /// log-sum-exp beyond ±3.4e38): only rows with logits near ±f32::MAX get here.
    #[error("the finite logits span more than f32 can represent in the statistics")]
    Range,
}

/// Everything a call into the kernel can report.
#[derive(Clone, Copy, Debug, PartialEq, Error)]
#[allow(missing_docs)] // each variant's fields are named in its message
pub enum Error {
    /// The configuration is invalid.
    #[error("invalid config: {0}")]
    Config(#[from] ConfigError),
    /// The logits row is unusable.
    #[error("bad logits row: {0}")]
    Row(#[from] RowError),
    /// `top_j` argument outside `1..=64`.
    #[error("top_j = {0}: expected 1..=64")]
    TopJ(u32),
    /// A call that does not fit the sequence's phase (see [`crate::Sequence`]).
    #[error("call out of order: {0}")]
    Order(&'static str),
    /// The engine accepted a token other than the one TTI forced.
    #[error("forced token {expected} was pending but token {got} was accepted")]
    ForcedMismatch { expected: u32, got: u32 },
    /// The turn has no token that enters Φ.
    #[error("the turn has no token that enters the turn signal")]
    EmptyTurn,
    /// Precomputed statistics that are not finite (or `vocab == 0`).
    #[error("token statistics with a non-finite entropy or confidence, or vocab = 0")]
    BadStats,
    /// A turn signal Φ that is NaN or infinite.
    #[error("turn signal {0} is not finite")]
    BadPhi(f32),
    /// A forced token id that is not inside the row.
    #[error("forced token {token} is outside the row of length {len}")]
    TokenOutOfRow { token: u32, len: usize },
    /// Batched buffers whose sizes do not match.
    #[error("size mismatch: {0}")]
    Size(&'static str),
    /// Some rows of a batched call failed; their steps carry their own status.
    #[error("{failed} row(s) of the batch failed; see each step's status")]
    BatchRows { failed: usize },
    /// A step whose `forced_token` is negative but not −1 (the only "sample freely" value).
    #[error("forced_token = {0}: expected -1 (sample freely) or a token id >= 0")]
    BadForcedToken(i32),
    /// The turn accumulator holds non-finite sums (corrupted state), so Φ is not a number.
    #[error("the turn accumulator is not finite (corrupted state)")]
    BadAccumulator,
}

/// Status codes of the C ABI (`t2po_status`). `OK` is 0; numbers are fixed forever.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// A required pointer was NULL.
    NullPointer = 1,
    /// A pointer was not aligned for its type.
    Misaligned = 2,
    /// A size argument was zero, too large, or inconsistent with another.
    BadSize = 3,
    /// The state was not initialised by its `_init` function (or was corrupted).
    NotInitialized = 4,
    /// A Rust panic was caught at the boundary (a bug: please report it).
    Panic = 5,
    /// `top_j` outside `1..=64`.
    BadTopJ = 10,
    /// `alpha` outside `[0, 1]`.
    BadAlpha = 11,
    /// A kind field (norm, term, trigger, turn mean, rule, keep, profile) holds an unknown value.
    BadKind = 12,
    /// A boolean field is neither 0 nor 1.
    BadFlag = 13,
    /// A tolerance (`range_eps`, `epsilon`, `patience_tol`, `eta`) is negative or not finite.
    BadTolerance = 14,
    /// `window + 1 > 32`.
    BadWindow = 15,
    /// `patience == 0`.
    BadPatience = 16,
    /// `max_think == 0` or `min_len > max_think`.
    BadLengths = 17,
    /// `think_open == think_close`.
    BadThinkTokens = 18,
    /// Forced queue empty (with TTI on), longer than 8, not headed by `think_close`, or an id > INT32_MAX.
    BadQueue = 19,
    /// `phi_floor` not a positive finite number.
    BadPhiFloor = 20,
    /// Empty logits row.
    EmptyRow = 30,
    /// A NaN logit.
    NanLogit = 31,
    /// A `+inf` logit.
    PosInfLogit = 32,
    /// No finite logit.
    NoFiniteLogit = 33,
    /// Precomputed statistics with a non-finite entropy or confidence, or `vocab == 0`.
    BadStats = 34,
    /// The finite logits span more than f32 can represent in the statistics.
    LogitRange = 35,
    /// Call out of order (observe twice without accept, accept without observe, …).
    OutOfOrder = 40,
    /// A token other than the pending forced token was accepted.
    ForcedMismatch = 41,
    /// No token of the turn enters Φ.
    EmptyTurn = 42,
    /// Φ is NaN or infinite.
    BadPhi = 43,
    /// The forced token id is outside the row.
    TokenOutOfRow = 44,
    /// Some rows of a batched call failed; each step carries its own status.
    BatchRows = 45,
    /// A step's `forced_token` is negative but not −1.
    BadForcedToken = 46,
    /// The turn accumulator is not finite (corrupted state), so Φ has no value.
    BadAccumulator = 47,
}

impl From<ConfigError> for Status {
    fn from(e: ConfigError) -> Self {
        use ConfigError as C;
        match e {
            C::TopJ { .. } => Status::BadTopJ,
            C::Alpha { .. } => Status::BadAlpha,
            C::UnknownKind { .. } => Status::BadKind,
            C::Flag { .. } => Status::BadFlag,
            C::NonNegative { .. } => Status::BadTolerance,
            C::Window { .. } => Status::BadWindow,
            C::Patience => Status::BadPatience,
            C::MaxThinkZero | C::Lengths { .. } => Status::BadLengths,
            C::ThinkTokens { .. } => Status::BadThinkTokens,
            C::QueueTooLong { .. } | C::EmptyQueue | C::QueueHead { .. } | C::TokenRange { .. } => {
                Status::BadQueue
            }
            C::PhiFloor { .. } => Status::BadPhiFloor,
        }
    }
}

impl From<RowError> for Status {
    fn from(e: RowError) -> Self {
        match e {
            RowError::Empty => Status::EmptyRow,
            RowError::NaN { .. } => Status::NanLogit,
            RowError::PosInf { .. } => Status::PosInfLogit,
            RowError::NoFinite { .. } => Status::NoFiniteLogit,
            RowError::Range => Status::LogitRange,
        }
    }
}

impl From<Error> for Status {
    fn from(e: Error) -> Self {
        match e {
            Error::Config(c) => c.into(),
            Error::Row(r) => r.into(),
            Error::TopJ(_) => Status::BadTopJ,
            Error::Order(_) => Status::OutOfOrder,
            Error::ForcedMismatch { .. } => Status::ForcedMismatch,
            Error::EmptyTurn => Status::EmptyTurn,
            Error::BadStats => Status::BadStats,
            Error::BadPhi(_) => Status::BadPhi,
            Error::TokenOutOfRow { .. } => Status::TokenOutOfRow,
            Error::Size(_) => Status::BadSize,
            Error::BatchRows { .. } => Status::BatchRows,
            Error::BadForcedToken(_) => Status::BadForcedToken,
            Error::BadAccumulator => Status::BadAccumulator,
        }
    }
}

impl Status {
    /// Every status, in numeric order.
    ///
    /// cbindgen:ignore
    pub const ALL: [Status; 31] = [
        Status::Ok,
        Status::NullPointer,
        Status::Misaligned,
        Status::BadSize,
        Status::NotInitialized,
        Status::Panic,
        Status::BadTopJ,
        Status::BadAlpha,
        Status::BadKind,
        Status::BadFlag,
        Status::BadTolerance,
        Status::BadWindow,
        Status::BadPatience,
        Status::BadLengths,
        Status::BadThinkTokens,
        Status::BadQueue,
        Status::BadPhiFloor,
        Status::EmptyRow,
        Status::NanLogit,
        Status::PosInfLogit,
        Status::NoFiniteLogit,
        Status::BadStats,
        Status::LogitRange,
        Status::OutOfOrder,
        Status::ForcedMismatch,
        Status::EmptyTurn,
        Status::BadPhi,
        Status::TokenOutOfRow,
        Status::BatchRows,
        Status::BadForcedToken,
        Status::BadAccumulator,
    ];

    /// A static, NUL-terminated description of the status.
    pub const fn message(self) -> &'static core::ffi::CStr {
        match self {
            Status::Ok => c"ok",
            Status::NullPointer => c"a required pointer was NULL",
            Status::Misaligned => c"a pointer was not aligned for its type",
            Status::BadSize => c"a size argument was zero, too large or inconsistent",
            Status::NotInitialized => c"state not initialised by its _init function",
            Status::Panic => c"internal panic caught at the C boundary (a bug)",
            Status::BadTopJ => c"top_j outside 1..=64",
            Status::BadAlpha => c"alpha outside [0, 1]",
            Status::BadKind => c"a kind field holds an unknown value",
            Status::BadFlag => c"a boolean field is neither 0 nor 1",
            Status::BadTolerance => c"a tolerance is negative or not finite",
            Status::BadWindow => c"window + 1 exceeds the window capacity 32",
            Status::BadPatience => c"patience must be at least 1",
            Status::BadLengths => c"max_think must be >= 1 and min_len <= max_think",
            Status::BadThinkTokens => c"think_open and think_close must differ",
            Status::BadQueue => {
                c"forced queue empty, longer than 8, not headed by think_close, or id > INT32_MAX"
            }
            Status::BadPhiFloor => c"phi_floor must be a positive finite number",
            Status::EmptyRow => c"empty logits row",
            Status::NanLogit => c"a logit is NaN",
            Status::PosInfLogit => c"a logit is +inf",
            Status::NoFiniteLogit => c"no finite logit in the row",
            Status::BadStats => c"token statistics not finite, or vocab = 0",
            Status::LogitRange => c"finite logits span more than f32 can represent",
            Status::OutOfOrder => c"call out of order for the sequence's phase",
            Status::ForcedMismatch => c"a token other than the pending forced token was accepted",
            Status::EmptyTurn => c"no token of the turn enters the turn signal",
            Status::BadPhi => c"turn signal is NaN or infinite",
            Status::TokenOutOfRow => c"forced token id outside the row",
            Status::BatchRows => c"some rows of the batch failed; see each step's status",
            Status::BadForcedToken => c"step.forced_token is negative but not -1",
            Status::BadAccumulator => c"turn accumulator not finite (corrupted state)",
        }
    }
}
