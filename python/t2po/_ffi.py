"""ctypes declarations of t2po.h (the C ABI of t2po-control) and the library loader.

Struct layouts are declared here field by field and checked against the library's own
``t2po_*_size``/``t2po_*_align`` queries at import, after ``t2po_version()`` is compared with
:data:`ABI_VERSION`: a library from another ABI fails the import with a clear message instead
of corrupting memory later. ``t2po_seq`` and ``t2po_tds`` are opaque here (their size and
alignment come from the library).
"""

from __future__ import annotations

import ctypes
import glob
import os
from ctypes import POINTER, c_char_p, c_float, c_int32, c_size_t, c_uint16, c_uint32, c_void_p

#: The ``T2PO_ABI_VERSION`` this binding was written for.
ABI_VERSION = 1

QUEUE_CAPACITY = 8


class ConfigStruct(ctypes.Structure):
    """``t2po_config``."""

    _fields_ = [
        ("top_j", c_uint32),
        ("alpha", c_float),
        ("entropy_norm", c_uint32),
        ("entropy_term", c_uint32),
        ("confidence_norm", c_uint32),
        ("confidence_term", c_uint32),
        ("range_eps", c_float),
        ("tti_enabled", c_uint32),
        ("trigger", c_uint32),
        ("window", c_uint32),
        ("epsilon", c_float),
        ("patience", c_uint32),
        ("patience_tol", c_float),
        ("min_len", c_uint32),
        ("max_think", c_uint32),
        ("think_open", c_uint32),
        ("think_close", c_uint32),
        ("queue_len", c_uint32),
        ("queue", c_uint32 * QUEUE_CAPACITY),
        ("tds_enabled", c_uint32),
        ("turn_mean", c_uint32),
        ("phi_floor", c_float),
        ("phi_skip", c_uint32),
        ("tds_rule", c_uint32),
        ("eta", c_float),
        ("max_resamples", c_uint32),
        ("keep", c_uint32),
    ]


class TokenStatsStruct(ctypes.Structure):
    """``t2po_token_stats``."""

    _fields_ = [
        ("entropy", c_float),
        ("confidence", c_float),
        ("max_logit", c_float),
        ("log_sum_exp", c_float),
        ("vocab", c_uint32),
        ("top_count", c_uint32),
    ]


class StepStruct(ctypes.Structure):
    """``t2po_step``."""

    _fields_ = [
        ("forced_token", c_int32),
        ("event", c_uint32),
        ("signal", c_float),
        ("position", c_uint32),
        ("status", c_uint32),
    ]


class SeqInfoStruct(ctypes.Structure):
    """``t2po_seq_info``."""

    _fields_ = [
        ("position", c_uint32),
        ("generated", c_uint32),
        ("think_len", c_uint32),
        ("inside_think", c_uint32),
        ("forcing", c_uint32),
        ("fired_position", c_uint32),
        ("fired_event", c_uint32),
        ("tti_armed", c_uint32),
        ("prompt_inside_think", c_uint32),
        ("queue_dropped", c_uint32),
    ]


class VerdictStruct(ctypes.Structure):
    """``t2po_tds_verdict``."""

    _fields_ = [
        ("resample", c_uint32),
        ("kept_try", c_uint32),
        ("gamma", c_float),
        ("kept_phi", c_float),
    ]


class CountersStruct(ctypes.Structure):
    """``t2po_tds_counters``."""

    _fields_ = [("turns", c_uint32), ("resamples", c_uint32), ("tries", c_uint32)]


def _find_library() -> str:
    env = os.environ.get("T2PO_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    # setuptools-rust names the cdylib after the extension: t2po/_t2po_control*.so
    found = sorted(glob.glob(os.path.join(here, "_t2po_control*.so")))
    found += sorted(glob.glob(os.path.join(here, "_t2po_control*.dylib")))
    found += sorted(glob.glob(os.path.join(here, "_t2po_control*.pyd")))
    if not found:
        raise ImportError(
            f"t2po: the compiled library _t2po_control*.so is missing from {here}; "
            "install the package with `pip install ./python` (it builds t2po-control), "
            "or point T2PO_LIBRARY at a libt2po_control.so"
        )
    return found[0]


def _load() -> ctypes.CDLL:
    path = _find_library()
    lib = ctypes.CDLL(path)
    lib.t2po_version.restype = c_uint32
    lib.t2po_version.argtypes = []
    got = lib.t2po_version()
    if got != ABI_VERSION:
        raise ImportError(
            f"t2po: {path} has T2PO_ABI_VERSION {got}, this binding was written for "
            f"{ABI_VERSION}; reinstall the package from the same source tree as the library"
        )
    return lib


lib = _load()

_st = c_uint32  # t2po_status
_P = POINTER


def _sig(name, argtypes, restype=_st):
    fn = getattr(lib, name)
    fn.argtypes = argtypes
    fn.restype = restype
    return fn


_sig("t2po_status_message", [c_uint32], c_char_p)
for _name in (
    "seq",
    "tds",
    "config",
    "token_stats",
    "step",
    "seq_info",
    "tds_verdict",
    "tds_counters",
):
    _sig(f"t2po_{_name}_size", [], c_size_t)
    _sig(f"t2po_{_name}_align", [], c_size_t)
_sig("t2po_config_default", [c_uint32, _P(ConfigStruct)])
_sig("t2po_config_validate", [_P(ConfigStruct)])
_sig("t2po_config_explain", [_P(ConfigStruct), c_char_p, c_size_t])
for _kind, _elem in (("f32", c_float), ("bf16", c_uint16), ("f16", c_uint16)):
    _sig(f"t2po_token_stats_{_kind}", [c_void_p, c_size_t, c_uint32, _P(TokenStatsStruct)])
    _sig(f"t2po_seq_observe_{_kind}", [c_void_p, c_void_p, c_size_t, _P(StepStruct)])
    _sig(
        f"t2po_seq_observe_batch_{_kind}",
        [c_void_p, c_size_t, c_void_p, c_size_t, c_size_t, c_void_p],
    )
    _sig(f"t2po_step_apply_{_kind}", [_P(StepStruct), c_void_p, c_size_t])
_sig("t2po_seq_init", [c_void_p, _P(ConfigStruct)])
_sig("t2po_seq_reset", [c_void_p])
_sig("t2po_seq_begin_generation", [c_void_p, c_uint32])
_sig("t2po_seq_observe_stats", [c_void_p, _P(TokenStatsStruct), _P(StepStruct)])
_sig("t2po_seq_accept", [c_void_p, c_uint32])
_sig("t2po_seq_accept_prompt", [c_void_p, c_void_p, c_size_t])
_sig("t2po_seq_accept_event", [c_void_p, c_uint32, _P(c_uint32)])
_sig("t2po_seq_turn_signal", [c_void_p, _P(c_float)])
_sig("t2po_seq_inspect", [c_void_p, _P(SeqInfoStruct)])
_sig("t2po_tds_init", [c_void_p, _P(ConfigStruct)])
_sig("t2po_tds_begin_episode", [c_void_p])
_sig("t2po_tds_decide", [c_void_p, c_float, _P(VerdictStruct)])
_sig("t2po_tds_commit", [c_void_p])
_sig("t2po_tds_get_counters", [c_void_p, _P(CountersStruct)])

for _name, _struct in (
    ("config", ConfigStruct),
    ("token_stats", TokenStatsStruct),
    ("step", StepStruct),
    ("seq_info", SeqInfoStruct),
    ("tds_verdict", VerdictStruct),
    ("tds_counters", CountersStruct),
):
    _size = getattr(lib, f"t2po_{_name}_size")()
    _align = getattr(lib, f"t2po_{_name}_align")()
    if (_size, _align) != (ctypes.sizeof(_struct), ctypes.alignment(_struct)):
        raise ImportError(
            f"t2po: t2po_{_name} is {_size} bytes aligned to {_align} in the library but "
            f"{ctypes.sizeof(_struct)}/{ctypes.alignment(_struct)} in this binding"
        )

SEQ_SIZE = lib.t2po_seq_size()
SEQ_ALIGN = lib.t2po_seq_align()
TDS_SIZE = lib.t2po_tds_size()
TDS_ALIGN = lib.t2po_tds_align()


def message(status: int) -> str:
    """``t2po_status_message``."""
    return lib.t2po_status_message(status).decode("utf-8", "replace")
