"""T²PO exploration control for inference engines: Python binding of t2po-control's C ABI.

The objects here own caller-side state buffers (``t2po_seq``, ``t2po_tds``) and hand raw
pointers of the caller's logits to the kernel: nothing is copied, rows are read (and masked by
:meth:`Batch.apply`) in place. Engine adapters: :mod:`t2po.hf` (transformers) and
:mod:`t2po.vllm` (vLLM V1).

    cfg = t2po.Config.paper(think_open=tok("<think>"), think_close=tok("</think>"),
                            queue=[tok("</think>"), tok("\\n"), tok("<action>")])
    batch = t2po.Batch(cfg, size=4)
    batch.accept_prompts(prompt_ids); batch.begin_generation()
    steps = batch.observe(logits)        # logits: [4, vocab] f32/bf16/f16, numpy or CPU torch
    batch.apply(steps, logits)           # forced rows: all -inf but the forced token
    ...sample...; batch.accept(tokens)
"""

from __future__ import annotations

import ctypes
import enum
import operator
import re
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence as Seq

import numpy as np

from . import _ffi
from ._ffi import ABI_VERSION, QUEUE_CAPACITY, lib

__all__ = [
    "ABI_VERSION",
    "Batch",
    "Config",
    "ConfigError",
    "Event",
    "Keep",
    "Norm",
    "Profile",
    "Sequence",
    "SeqInfo",
    "Status",
    "Step",
    "T2poError",
    "Tds",
    "TdsCounters",
    "TdsPool",
    "TokenStats",
    "token_stats",
    "TdsRule",
    "Term",
    "ThinkStart",
    "Trigger",
    "TurnMean",
    "Verdict",
    "version",
]

__version__ = "0.1.0"


def version() -> int:
    """``t2po_version()``: the loaded library's ABI version (checked equal at import)."""
    return int(lib.t2po_version())


class Status(enum.IntEnum):
    """``t2po_status`` (0 = OK); numbers are fixed by the ABI."""

    OK = 0
    NULL_POINTER = 1
    MISALIGNED = 2
    BAD_SIZE = 3
    NOT_INITIALIZED = 4
    PANIC = 5
    BAD_TOP_J = 10
    BAD_ALPHA = 11
    BAD_KIND = 12
    BAD_FLAG = 13
    BAD_TOLERANCE = 14
    BAD_WINDOW = 15
    BAD_PATIENCE = 16
    BAD_LENGTHS = 17
    BAD_THINK_TOKENS = 18
    BAD_QUEUE = 19
    BAD_PHI_FLOOR = 20
    EMPTY_ROW = 30
    NAN_LOGIT = 31
    POS_INF_LOGIT = 32
    NO_FINITE_LOGIT = 33
    BAD_STATS = 34
    LOGIT_RANGE = 35
    OUT_OF_ORDER = 40
    FORCED_MISMATCH = 41
    EMPTY_TURN = 42
    BAD_PHI = 43
    TOKEN_OUT_OF_ROW = 44
    BATCH_ROWS = 45
    BAD_FORCED_TOKEN = 46
    BAD_ACCUMULATOR = 47


class Profile(enum.IntEnum):
    """``t2po_profile``."""

    PAPER = 0
    RELEASED = 1


class Norm(enum.IntEnum):
    """``t2po_norm``."""

    RUNNING_MIN_MAX = 0
    LN_VOCAB = 1
    IDENTITY = 2


class Term(enum.IntEnum):
    """``t2po_term``."""

    DIRECT = 0
    COMPLEMENT = 1
    NEGATE = 2


class Trigger(enum.IntEnum):
    """``t2po_trigger``."""

    WINDOW_MEAN = 0
    PATIENCE = 1
    PEAK_CUT = 2


class TurnMean(enum.IntEnum):
    """``t2po_turn_mean``."""

    GEOMETRIC = 0
    ARITHMETIC = 1


class TdsRule(enum.IntEnum):
    """``t2po_tds_rule``."""

    BELOW_ETA = 0
    OPEN_INTERVAL = 1


class Keep(enum.IntEnum):
    """``t2po_keep``."""

    LAST = 0
    BEST = 1


class ThinkStart(enum.IntEnum):
    """``t2po_think_start``."""

    FROM_PROMPT = 0
    INSIDE = 1
    OUTSIDE = 2


class Event(enum.IntEnum):
    """``t2po_event``."""

    NONE = 0
    CONVERGED = 1
    BUDGET = 2
    MODEL_CLOSED = 3


class T2poError(Exception):
    """A kernel call failed; ``status`` is the :class:`Status`. A failed batched observe has
    status ``BATCH_ROWS`` and ``rows``: each failed row's own status (the other rows went on)."""

    rows: dict = {}

    def __init__(self, status: int, what: str = ""):
        self.status = Status(status) if status in Status._value2member_map_ else status
        text = _ffi.message(status)
        super().__init__(f"{what}: {text}" if what else text)


class ConfigError(T2poError, ValueError):
    """An invalid :class:`Config`; ``field`` names the field, the message says what was wrong."""

    def __init__(self, status: int, field: str, message: str):
        T2poError.__init__(self, status)
        self.field = field
        self.args = (message,)

    def __str__(self) -> str:
        return self.args[0]


def _check(status: int, what: str = "") -> None:
    if status != 0:
        raise T2poError(status, what)


# ---------------------------------------------------------------------------------------------
# Config

_KINDS = {
    "entropy_norm": Norm,
    "confidence_norm": Norm,
    "entropy_term": Term,
    "confidence_term": Term,
    "trigger": Trigger,
    "turn_mean": TurnMean,
    "tds_rule": TdsRule,
    "keep": Keep,
}
_FLAGS = ("tti_enabled", "tds_enabled")
_FLOATS = {name for name, ty in _ffi.ConfigStruct._fields_ if ty is ctypes.c_float}
FIELDS = tuple(name for name, _ in _ffi.ConfigStruct._fields_ if name != "queue_len")


class Config:
    """Every T²PO parameter (``t2po_config``). Build with :meth:`paper` or :meth:`released`
    and keyword overrides; ``queue`` is a list of token ids (``queue_len`` follows it). Kind
    fields take the enum, its name (``"patience"``) or its number. Every change is checked
    for type, and :meth:`validate` (run by the constructors and by every state made from the
    config) raises :class:`ConfigError` naming the first field found wrong."""

    __slots__ = ("_c",)

    def __init__(self, profile: Profile | str | int = Profile.PAPER, **overrides: Any):
        object.__setattr__(self, "_c", _ffi.ConfigStruct())
        if isinstance(profile, str):
            profile = _enum_value(Profile, "profile", profile)
        st = lib.t2po_config_default(int(profile), ctypes.byref(self._c))
        if st != 0:
            raise ConfigError(st, "profile", f"profile = {profile}: expected paper (0) or released (1)")
        for name, value in overrides.items():
            setattr(self, name, value)
        self.validate()

    @classmethod
    def paper(cls, **overrides: Any) -> "Config":
        """The paper's defaults (Qwen3 token ids) with overrides."""
        return cls(Profile.PAPER, **overrides)

    @classmethod
    def released(cls, **overrides: Any) -> "Config":
        """The authors' released code's rules with overrides."""
        return cls(Profile.RELEASED, **overrides)

    def __getattr__(self, name: str) -> Any:
        if name == "queue":
            return list(self._c.queue[: min(self._c.queue_len, QUEUE_CAPACITY)])
        if name == "queue_len":
            return int(self._c.queue_len)
        if name in FIELDS:
            value = getattr(self._c, name)
            kind = _KINDS.get(name)
            return kind(value) if kind is not None and value in kind._value2member_map_ else value
        raise AttributeError(f"Config has no field {name!r}; fields: {', '.join(FIELDS)}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "queue":
            ids = list(value)
            if len(ids) > QUEUE_CAPACITY:
                raise ConfigError(
                    Status.BAD_QUEUE, "queue", f"queue has {len(ids)} tokens: at most {QUEUE_CAPACITY}"
                )
            arr = (ctypes.c_uint32 * QUEUE_CAPACITY)()
            for i, tok in enumerate(ids):
                arr[i] = _u32("queue", tok)
            self._c.queue = arr
            self._c.queue_len = len(ids)
            return
        if name not in FIELDS:
            raise ConfigError(
                Status.BAD_KIND, name, f"{name}: not a Config field; fields: {', '.join(FIELDS)}"
            )
        if name in _KINDS:
            value = _enum_value(_KINDS[name], name, value)
        elif name in _FLAGS and isinstance(value, bool):
            value = int(value)
        if name in _FLOATS:
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
                raise ConfigError(Status.BAD_TOLERANCE, name, f"{name} = {value!r}: expected a number")
            setattr(self._c, name, float(value))
        else:
            setattr(self._c, name, _u32(name, value))

    def validate(self) -> "Config":
        """Raises :class:`ConfigError` (with ``field``) when a field is out of range."""
        buf = ctypes.create_string_buffer(256)
        st = lib.t2po_config_explain(ctypes.byref(self._c), buf, len(buf))
        if st != 0:
            msg = buf.value.decode("utf-8", "replace")
            m = re.match(r"[a-z_]+", msg)
            field = m.group(0) if m else ""
            # Python sets the queue as a list; its length is not a field of its own here.
            raise ConfigError(st, "queue" if field == "queue_len" else field, msg)
        return self

    def to_dict(self) -> dict:
        """Every field by name (kind fields as their names, ``queue`` as a list)."""
        out = {}
        for name in FIELDS:
            v = getattr(self, name)
            out[name] = v.name.lower() if isinstance(v, enum.Enum) else v
        return out

    def copy(self) -> "Config":
        new = object.__new__(Config)
        object.__setattr__(new, "_c", _ffi.ConfigStruct.from_buffer_copy(self._c))
        return new

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and bytes(self._c) == bytes(other._c)

    def __repr__(self) -> str:
        return "Config(" + ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items()) + ")"


def _u32(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(Status.BAD_KIND, field, f"{field} = {value!r}: expected an integer")
    if not 0 <= int(value) <= 0xFFFF_FFFF:
        raise ConfigError(Status.BAD_KIND, field, f"{field} = {value}: expected 0..=4294967295")
    return int(value)


def _arg_u32(what: str, value: Any, hi: int = 0xFFFF_FFFF) -> int:
    """An integer call argument in 0..=hi; ctypes would otherwise wrap it silently (token
    2**32 + 5 would be accepted as token 5)."""
    if isinstance(value, bool):
        raise TypeError(f"{what} = {value!r}: expected an integer, not a bool")
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} = {value!r}: expected an integer") from None
    if not 0 <= n <= hi:
        raise ValueError(f"{what} = {n}: expected 0..={hi}")
    return n


def _arg_start(value: Any) -> int:
    try:
        return int(ThinkStart(_arg_u32("think start", value)))
    except ValueError:
        names = ", ".join(f"{m.name.lower()} ({int(m)})" for m in ThinkStart)
        raise ValueError(f"think start = {value!r}: expected one of {names}") from None


def _enum_value(kind: type, field: str, value: Any) -> int:
    if isinstance(value, str):
        try:
            return int(kind[value.upper()])
        except KeyError:
            names = ", ".join(m.name.lower() for m in kind)
            raise ConfigError(Status.BAD_KIND, field, f"{field} = {value!r}: expected one of {names}") from None
    return _u32(field, value)


# ---------------------------------------------------------------------------------------------
# Logits rows (numpy or CPU torch, f32/bf16/f16, no copies)

_TORCH_KINDS = {"torch.float32": "f32", "torch.bfloat16": "bf16", "torch.float16": "f16"}
_NUMPY_KINDS = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
_ITEMSIZE = {"f32": 4, "bf16": 2, "f16": 2}


def _rows(logits: Any, writable: bool = False) -> tuple[int, str, int, int, int]:
    """(address, kind, rows, vocab, row_stride in elements) of a 1-D or 2-D logits array whose
    last axis is contiguous. Raises TypeError/ValueError naming what is wrong; never copies."""
    mod = type(logits).__module__
    if mod.startswith("torch"):
        kind = _TORCH_KINDS.get(str(logits.dtype))
        if kind is None:
            raise TypeError(f"logits dtype {logits.dtype}: expected float32, bfloat16 or float16")
        if logits.device.type != "cpu":
            raise ValueError(f"logits on {logits.device}: t2po reads CPU memory (use t2po-cuda on GPU)")
        if logits.dim() not in (1, 2):
            raise ValueError(f"logits with {logits.dim()} dimensions: expected [vocab] or [rows, vocab]")
        if logits.numel() == 0:
            raise ValueError("empty logits")
        if logits.stride(-1) != 1:
            raise ValueError("logits' last dimension is not contiguous (stride != 1)")
        rows, vocab = (1, logits.shape[0]) if logits.dim() == 1 else tuple(logits.shape)
        stride = vocab if logits.dim() == 1 else logits.stride(0)
        return int(logits.data_ptr()), kind, int(rows), int(vocab), int(stride)
    if isinstance(logits, np.ndarray):
        kind = _NUMPY_KINDS.get(logits.dtype.name)
        if kind is None:
            raise TypeError(f"logits dtype {logits.dtype}: expected float32, bfloat16 or float16")
        if logits.ndim not in (1, 2):
            raise ValueError(f"logits with {logits.ndim} dimensions: expected [vocab] or [rows, vocab]")
        if logits.size == 0:
            raise ValueError("empty logits")
        item = logits.itemsize
        if logits.strides[-1] != item:
            raise ValueError("logits' last axis is not contiguous")
        if writable and not logits.flags.writeable:
            raise ValueError("logits are read-only: apply masks them in place")
        if logits.ndim == 1:
            return logits.ctypes.data, kind, 1, logits.shape[0], logits.shape[0]
        if logits.strides[0] % item or logits.strides[0] < 0:
            raise ValueError("logits' row stride is not a positive whole number of elements")
        return logits.ctypes.data, kind, logits.shape[0], logits.shape[1], logits.strides[0] // item
    raise TypeError(f"logits of type {type(logits).__name__}: expected a numpy array or a CPU torch tensor")


@dataclass(frozen=True)
class TokenStats:
    """``t2po_token_stats`` of one row (natural logs)."""

    entropy: float
    confidence: float
    max_logit: float
    log_sum_exp: float
    vocab: int
    top_count: int


def token_stats(row: Any, top_j: int) -> TokenStats:
    """The kernel's statistics of one logits row (f32/bf16/f16, numpy or CPU torch)."""
    addr, kind, rows, vocab, _ = _rows(row)
    if rows != 1:
        raise ValueError(f"token_stats takes one row, got {rows}")
    out = _ffi.TokenStatsStruct()
    top_j = _arg_u32("top_j", top_j)
    _check(getattr(lib, f"t2po_token_stats_{kind}")(addr, vocab, top_j, ctypes.byref(out)), "token_stats")
    return TokenStats(out.entropy, out.confidence, out.max_logit, out.log_sum_exp, out.vocab, out.top_count)


# ---------------------------------------------------------------------------------------------
# Steps, infos, verdicts

STEP_DTYPE = np.dtype(
    [("forced_token", "<i4"), ("event", "<u4"), ("signal", "<f4"), ("position", "<u4"), ("status", "<u4")]
)
assert STEP_DTYPE.itemsize == ctypes.sizeof(_ffi.StepStruct)


@dataclass(frozen=True)
class Step:
    """One observed decode step: ``forced_token`` ≥ 0 must be emitted (−1: sample freely)."""

    forced_token: int
    event: Event
    signal: float
    position: int

    @property
    def forced(self) -> Optional[int]:
        return self.forced_token if self.forced_token >= 0 else None


@dataclass(frozen=True)
class SeqInfo:
    """``t2po_seq_info``: a sequence's state (see the header for each field)."""

    position: int
    generated: int
    think_len: int
    inside_think: bool
    forcing: bool
    fired_position: int
    fired_event: Event
    tti_armed: bool
    prompt_inside_think: bool
    queue_dropped: bool


@dataclass(frozen=True)
class Verdict:
    """``t2po_tds_verdict``: resample, or keep try ``kept_try`` (Φ ``kept_phi``)."""

    resample: bool
    kept_try: int
    gamma: float
    kept_phi: float


@dataclass(frozen=True)
class TdsCounters:
    """Committed turns, their resamples, and the current turn's resamples so far."""

    turns: int
    resamples: int
    tries: int

    @property
    def resample_rate(self) -> float:
        """Resamples per generated turn over committed turns (0 before any)."""
        total = self.turns + self.resamples
        return self.resamples / total if total else 0.0


def _token_array(tokens: Any) -> np.ndarray:
    if type(tokens).__module__.startswith("torch"):
        tokens = tokens.detach().cpu().numpy()
    arr = np.asarray(tokens if isinstance(tokens, np.ndarray) else list(tokens))
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise TypeError(f"tokens: expected a 1-D sequence of integer ids, got {arr.dtype} {arr.shape}")
    if arr.size and (arr.min() < 0 or arr.max() > 0xFFFF_FFFF):
        raise ValueError("tokens: ids must be in 0..=4294967295")
    return np.ascontiguousarray(arr, dtype=np.uint32)


def _aligned_buffer(nbytes: int, align: int) -> tuple[np.ndarray, int]:
    buf = np.zeros(nbytes + align, dtype=np.uint8)
    addr = buf.ctypes.data
    return buf, addr + (-addr) % align


# ---------------------------------------------------------------------------------------------
# Sequences


class Sequence:
    """One sequence's controller (``t2po_seq``). Standalone (``Sequence(config)``) or a view
    into a :class:`Batch` (``batch[i]``). Per generation: :meth:`reset`, :meth:`accept_prompt`,
    :meth:`begin_generation`, then per step :meth:`observe` → (:meth:`apply` or emit
    ``step.forced_token``) → :meth:`accept`; :meth:`turn_signal` gives Φ."""

    __slots__ = ("_owner", "_ptr")

    def __init__(self, config: Config, *, _owner: Any = None, _ptr: int = 0):
        if _owner is None:
            buf, ptr = _aligned_buffer(_ffi.SEQ_SIZE, _ffi.SEQ_ALIGN)
            config.validate()
            _check(lib.t2po_seq_init(ptr, ctypes.byref(config._c)), "t2po_seq_init")
            self._owner, self._ptr = buf, ptr
        else:
            self._owner, self._ptr = _owner, _ptr

    def reset(self) -> None:
        """Back to the prompt phase (the config is kept)."""
        _check(lib.t2po_seq_reset(self._ptr), "reset")

    def accept_prompt(self, tokens: Iterable[int]) -> None:
        """The prompt's tokens, in one call (before :meth:`begin_generation`)."""
        arr = _token_array(tokens)
        st = lib.t2po_seq_accept_prompt(self._ptr, arr.ctypes.data if arr.size else None, arr.size)
        _check(st, "accept_prompt")

    def begin_generation(self, start: ThinkStart | int = ThinkStart.FROM_PROMPT) -> None:
        """Starts a generation; by default from the think state the prompt left."""
        _check(lib.t2po_seq_begin_generation(self._ptr, _arg_start(start)), "begin_generation")

    def observe(self, row: Any) -> Step:
        """This step's raw logits row (1-D, f32/bf16/f16, numpy or CPU torch)."""
        addr, kind, rows, vocab, _ = _rows(row)
        if rows != 1:
            raise ValueError(f"Sequence.observe takes one row, got {rows}: use Batch.observe")
        out = _ffi.StepStruct()
        fn = getattr(lib, f"t2po_seq_observe_{kind}")
        _check(fn(self._ptr, addr, vocab, ctypes.byref(out)), "observe")
        return Step(out.forced_token, Event(out.event), out.signal, out.position)

    def observe_stats(self, entropy: float, confidence: float, vocab: int, top_count: int = 1,
                      max_logit: float = 0.0, log_sum_exp: float = 0.0) -> Step:
        """Statistics computed elsewhere (e.g. :func:`t2po.torch_stats.token_stats` on the
        GPU) instead of a row."""
        stats = _ffi.TokenStatsStruct(
            float(entropy), float(confidence), float(max_logit), float(log_sum_exp),
            _arg_u32("vocab", vocab), _arg_u32("top_count", top_count),
        )
        out = _ffi.StepStruct()
        _check(lib.t2po_seq_observe_stats(self._ptr, ctypes.byref(stats), ctypes.byref(out)), "observe_stats")
        return Step(out.forced_token, Event(out.event), out.signal, out.position)

    def accept(self, token: int) -> Event:
        """The token emitted at this step; returns :data:`Event.MODEL_CLOSED` when the model
        closed think itself on the firing step (the forced queue was dropped)."""
        ev = ctypes.c_uint32(0)
        token = _arg_u32("token", token)
        _check(lib.t2po_seq_accept_event(self._ptr, token, ctypes.byref(ev)), f"accept({token})")
        return Event(ev.value)

    def turn_signal(self) -> float:
        """Φ of the generation so far."""
        phi = ctypes.c_float(0.0)
        _check(lib.t2po_seq_turn_signal(self._ptr, ctypes.byref(phi)), "turn_signal")
        return phi.value

    def info(self) -> SeqInfo:
        out = _ffi.SeqInfoStruct()
        _check(lib.t2po_seq_inspect(self._ptr, ctypes.byref(out)), "inspect")
        return SeqInfo(
            out.position,
            out.generated,
            out.think_len,
            bool(out.inside_think),
            bool(out.forcing),
            out.fired_position,
            Event(out.fired_event),
            bool(out.tti_armed),
            bool(out.prompt_inside_think),
            bool(out.queue_dropped),
        )

    @staticmethod
    def apply(step: Step, row: Any) -> bool:
        """Masks a 1-D row in place for a forced step; returns whether it changed."""
        if step.forced_token == -1:
            return False
        forced = _arg_u32("step.forced_token", step.forced_token, hi=0x7FFF_FFFF)
        addr, kind, _, vocab, _ = _rows(row, writable=True)
        s = _ffi.StepStruct(forced, 0, 0.0, 0, 0)
        _check(getattr(lib, f"t2po_step_apply_{kind}")(ctypes.byref(s), addr, vocab), "apply")
        return True


class Batch:
    """``size`` sequences in one caller-owned ``t2po_seq`` array, one config. Rows are
    independent: a row that finishes early is left out of later calls with ``rows=``."""

    def __init__(self, config: Config, size: int):
        if size < 1:
            raise ValueError(f"size = {size}: expected at least 1")
        config.validate()
        self.size = int(size)
        self.config = config.copy()
        self._buf, self._base = _aligned_buffer(_ffi.SEQ_SIZE * self.size, _ffi.SEQ_ALIGN)
        for b in range(self.size):
            _check(lib.t2po_seq_init(self._ptr(b), ctypes.byref(config._c)), "t2po_seq_init")

    def _ptr(self, b: int) -> int:
        if isinstance(b, bool):
            raise TypeError(f"row {b!r}: expected an integer")
        try:
            b = operator.index(b)
        except TypeError:
            raise TypeError(f"row {b!r}: expected an integer") from None
        if not 0 <= b < self.size:
            raise IndexError(f"row {b} outside the batch of {self.size}")
        return self._base + b * _ffi.SEQ_SIZE

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, b: int) -> Sequence:
        return Sequence(self.config, _owner=self, _ptr=self._ptr(b))

    def reset(self) -> None:
        for b in range(self.size):
            _check(lib.t2po_seq_reset(self._ptr(b)), "reset")

    def accept_prompts(self, prompts: Seq[Iterable[int]]) -> None:
        """One token list per row (a 2-D array works too)."""
        if len(prompts) != self.size:
            raise ValueError(f"{len(prompts)} prompts for a batch of {self.size}")
        for b, p in enumerate(prompts):
            self[b].accept_prompt(p)

    def begin_generation(self, start: ThinkStart | int = ThinkStart.FROM_PROMPT) -> None:
        start = _arg_start(start)
        for b in range(self.size):
            _check(lib.t2po_seq_begin_generation(self._ptr(b), start), "begin_generation")

    def observe(self, logits: Any, rows: Optional[Seq[int]] = None) -> np.ndarray:
        """One decode step. ``logits`` is ``[size, vocab]`` (any row stride), or
        ``[len(rows), vocab]`` with ``rows`` naming the batch rows its rows belong to. Returns
        a structured array (``STEP_DTYPE``) with one step per logits row."""
        addr, kind, n, vocab, stride = _rows(logits)
        steps = np.zeros(n, dtype=STEP_DTYPE)
        steps["forced_token"] = -1
        item = _ITEMSIZE[kind]
        if rows is None:
            if n != self.size:
                raise ValueError(f"logits have {n} rows for a batch of {self.size}: pass rows=")
            fn = getattr(lib, f"t2po_seq_observe_batch_{kind}")
            st = fn(self._base, n, addr, vocab, stride, steps.ctypes.data)
            if st == Status.BATCH_ROWS:
                bad = {int(b): int(s) for b, s in enumerate(steps["status"]) if s}
                text = "; ".join(f"row {b}: {_ffi.message(s)}" for b, s in bad.items())
                err = T2poError(st, f"observe ({text})")
                err.rows = {b: Status(s) if s in Status._value2member_map_ else s for b, s in bad.items()}
                raise err
            _check(st, "observe")
            return steps
        if len(rows) != n:
            raise ValueError(f"{len(rows)} row indices for {n} logits rows")
        fn = getattr(lib, f"t2po_seq_observe_{kind}")
        out = _ffi.StepStruct()
        for i, b in enumerate(rows):
            _check(fn(self._ptr(b), addr + i * stride * item, vocab, ctypes.byref(out)), f"observe row {b}")
            steps[i] = (out.forced_token, out.event, out.signal, out.position, 0)
        return steps

    def apply(self, steps: np.ndarray, logits: Any) -> int:
        """Masks the forced rows of ``logits`` (rows as in :meth:`observe`) in place; returns
        how many rows were forced."""
        addr, kind, n, vocab, stride = _rows(logits, writable=True)
        if len(steps) != n:
            raise ValueError(f"{len(steps)} steps for {n} logits rows")
        fn = getattr(lib, f"t2po_step_apply_{kind}")
        item = _ITEMSIZE[kind]
        forced = np.flatnonzero(steps["forced_token"] != -1)
        for i in forced:
            token = _arg_u32(f"steps[{i}].forced_token", int(steps["forced_token"][i]), hi=0x7FFF_FFFF)
            s = _ffi.StepStruct(token, 0, 0.0, 0, 0)
            _check(fn(ctypes.byref(s), addr + int(i) * stride * item, vocab), f"apply row {i}")
        return len(forced)

    def accept(self, tokens: Seq[int], rows: Optional[Seq[int]] = None) -> np.ndarray:
        """The emitted tokens (one per row, or per entry of ``rows``); returns the events."""
        idx = range(self.size) if rows is None else rows
        if len(tokens) != len(idx):
            raise ValueError(f"{len(tokens)} tokens for {len(idx)} rows")
        events = np.zeros(len(idx), dtype=np.uint32)
        ev = ctypes.c_uint32(0)
        for i, (b, tok) in enumerate(zip(idx, tokens)):
            tok = _arg_u32(f"tokens[{i}]", tok)
            st = lib.t2po_seq_accept_event(self._ptr(b), tok, ctypes.byref(ev))
            _check(st, f"accept row {b} token {int(tok)}")
            events[i] = ev.value
        return events

    def turn_signals(self) -> np.ndarray:
        return np.array([self[b].turn_signal() for b in range(self.size)], dtype=np.float32)

    def infos(self) -> list[SeqInfo]:
        return [self[b].info() for b in range(self.size)]


# ---------------------------------------------------------------------------------------------
# TDS


class Tds:
    """Turn-level dynamical sampling for one episode (``t2po_tds``). Per turn: :meth:`decide`
    with each try's Φ until the verdict keeps one, step the environment with it, :meth:`commit`."""

    def __init__(self, config: Config):
        config.validate()
        self._buf, self._ptr = _aligned_buffer(_ffi.TDS_SIZE, _ffi.TDS_ALIGN)
        _check(lib.t2po_tds_init(self._ptr, ctypes.byref(config._c)), "t2po_tds_init")

    def begin_episode(self) -> None:
        _check(lib.t2po_tds_begin_episode(self._ptr), "begin_episode")

    def decide(self, phi: float) -> Verdict:
        out = _ffi.VerdictStruct()
        _check(lib.t2po_tds_decide(self._ptr, float(phi), ctypes.byref(out)), "decide")
        return Verdict(bool(out.resample), out.kept_try, out.gamma, out.kept_phi)

    def commit(self) -> None:
        _check(lib.t2po_tds_commit(self._ptr), "commit")

    def counters(self) -> TdsCounters:
        out = _ffi.CountersStruct()
        _check(lib.t2po_tds_get_counters(self._ptr, ctypes.byref(out)), "counters")
        return TdsCounters(out.turns, out.resamples, out.tries)


class TdsPool:
    """TDS for a rollout batch keyed by trajectory (verl-agent's ``traj_uid``): one :class:`Tds`
    per trajectory, created on first sight. Per turn: :meth:`decide` with the batch's keys and
    each row's Φ returns which rows to generate again; regenerate those rows and call
    :meth:`decide` with them again until none is left; step the environments with the kept tries
    (:meth:`kept`), then :meth:`commit`. A trajectory's kept try may be an earlier one
    (``keep = best``): :meth:`kept` says which."""

    def __init__(self, config: Config):
        config.validate()
        self.config = config.copy()
        self._tds: dict = {}
        self._verdicts: dict = {}

    def __len__(self) -> int:
        return len(self._tds)

    def decide(self, keys: Seq[Any], phis: Seq[float]) -> np.ndarray:
        """One try per row of the current turn; returns a boolean mask: True = resample it.
        A key may appear once per call; ``phi`` is None/NaN-free (rows without Φ, e.g. a turn
        shorter than the released profile's skip, pass ``None`` and are kept as they are)."""
        if len(keys) != len(phis):
            raise ValueError(f"{len(keys)} keys for {len(phis)} turn signals")
        if len(set(keys)) != len(keys):
            raise ValueError("a trajectory key appears twice in one decide call")
        again = np.zeros(len(keys), dtype=bool)
        for i, (key, phi) in enumerate(zip(keys, phis)):
            if key in self._verdicts:
                raise T2poError(Status.OUT_OF_ORDER, f"trajectory {key!r} already has a kept try: commit first")
            tds = self._tds.get(key)
            if tds is None:
                tds = self._tds[key] = Tds(self.config)
            if phi is None:
                self._verdicts[key] = None
                continue
            v = tds.decide(float(phi))
            if v.resample:
                again[i] = True
            else:
                self._verdicts[key] = v
        return again

    def kept(self, key: Any) -> Optional[Verdict]:
        """The keep verdict of a trajectory in the current turn (None: no Φ, its only try kept)."""
        if key not in self._verdicts:
            raise KeyError(f"trajectory {key!r} has no kept try in this turn yet")
        return self._verdicts[key]

    def commit(self) -> None:
        """Every trajectory decided this turn stepped its environment with its kept try."""
        for key, v in self._verdicts.items():
            if v is not None:
                self._tds[key].commit()
        self._verdicts = {}

    def end(self, keys: Iterable[Any]) -> None:
        """Forgets finished trajectories."""
        for key in keys:
            self._tds.pop(key, None)
            self._verdicts.pop(key, None)

    def counters(self) -> TdsCounters:
        """Summed over the live trajectories."""
        cs = [t.counters() for t in self._tds.values()]
        return TdsCounters(sum(c.turns for c in cs), sum(c.resamples for c in cs), sum(c.tries for c in cs))
