//! Fuzzes the C ABI, every exported function: arbitrary config integers, arbitrary bytes as
//! logits, arbitrary call order on shared state, NULL, misaligned and short buffers, message
//! buffers of any capacity. Checks: no crash (ASan), every status is a known value, outputs are
//! untouched on failure, forced tokens come from the queue, sizes and alignments as Rust's,
//! messages NUL-terminated inside their buffer.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use std::ptr;
use t2po_control::ffi::SeqInfo;
use t2po_control::ffi::*;
use t2po_control::{Config, Sequence, Status, Step, Tds, TdsCounters, TokenStats, Verdict};

#[path = "common.rs"]
mod common;
use common::{f32s, u16s, RawConfig};

#[derive(Arbitrary, Debug)]
enum Op {
    Init {
        seq: u8,
        config: RawConfig,
    },
    InitDefault {
        seq: u8,
        profile: u32,
    },
    Reset {
        seq: u8,
    },
    Begin {
        seq: u8,
        start: u32,
    },
    Observe {
        seq: u8,
        kind: u8,
        bytes: Vec<u8>,
        null_out: bool,
    },
    ObserveStats {
        seq: u8,
        words: [u32; 6],
    },
    Accept {
        seq: u8,
        token: u32,
    },
    AcceptForced {
        seq: u8,
    },
    TurnSignal {
        seq: u8,
    },
    Inspect {
        seq: u8,
    },
    Apply {
        forced: i32,
        kind: u8,
        bytes: Vec<u8>,
    },
    Batch {
        kind: u8,
        batch: u8,
        vocab: u16,
        extra: u8,
        bytes: Vec<u8>,
    },
    Stats {
        kind: u8,
        top_j: u32,
        bytes: Vec<u8>,
    },
    TdsInit {
        config: RawConfig,
    },
    TdsDecide {
        phi: u32,
    },
    TdsCommit,
    TdsBegin,
    Validate {
        config: RawConfig,
    },
    AcceptPrompt {
        seq: u8,
        tokens: Vec<u32>,
        null: bool,
        extra_len: u8,
    },
    AcceptEvent {
        seq: u8,
        token: u32,
        forced: bool,
        null_out: bool,
    },
    TdsCounters {
        null_out: bool,
    },
    Explain {
        config: RawConfig,
        cap: u16,
        null_buf: bool,
    },
    Message {
        status: u32,
    },
    /// A state or output pointer one byte off its alignment.
    Misaligned {
        call: u8,
    },
}

const SEQS: usize = 4;

fn known(status: Status) -> bool {
    Status::ALL.contains(&status)
}

/// A NUL-terminated message from the library, read inside `cap` bytes.
fn message_in(buf: &[u8]) -> &str {
    let end = buf
        .iter()
        .position(|&b| b == 0)
        .expect("message not NUL-terminated inside its buffer");
    std::str::from_utf8(&buf[..end]).expect("message not UTF-8")
}

/// Field by field through Debug (a state may hold NaN, which `==` never equals; padding bytes
/// are not compared).
fn states_equal(a: &Sequence, b: &Sequence) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

fn sizes_are_rust_sizes() {
    use std::mem::{align_of, size_of};
    assert_eq!(t2po_version(), t2po_control::ffi::ABI_VERSION);
    for (size, align, rs, ra) in [
        (
            t2po_seq_size(),
            t2po_seq_align(),
            size_of::<Sequence>(),
            align_of::<Sequence>(),
        ),
        (
            t2po_tds_size(),
            t2po_tds_align(),
            size_of::<Tds>(),
            align_of::<Tds>(),
        ),
        (
            t2po_config_size(),
            t2po_config_align(),
            size_of::<Config>(),
            align_of::<Config>(),
        ),
        (
            t2po_token_stats_size(),
            t2po_token_stats_align(),
            size_of::<TokenStats>(),
            align_of::<TokenStats>(),
        ),
        (
            t2po_step_size(),
            t2po_step_align(),
            size_of::<Step>(),
            align_of::<Step>(),
        ),
        (
            t2po_seq_info_size(),
            t2po_seq_info_align(),
            size_of::<SeqInfo>(),
            align_of::<SeqInfo>(),
        ),
        (
            t2po_tds_verdict_size(),
            t2po_tds_verdict_align(),
            size_of::<Verdict>(),
            align_of::<Verdict>(),
        ),
        (
            t2po_tds_counters_size(),
            t2po_tds_counters_align(),
            size_of::<TdsCounters>(),
            align_of::<TdsCounters>(),
        ),
    ] {
        assert_eq!((size, align), (rs, ra));
    }
}

fuzz_target!(|ops: Vec<Op>| {
    sizes_are_rust_sizes();
    // Caller-owned state, deliberately not initialised until an Init op.
    let mut states: Vec<Sequence> = (0..SEQS)
        .map(|_| Sequence::new(&Config::paper()).unwrap())
        .collect();
    for s in states.iter_mut() {
        // Scribble over the state so "not initialised" paths are reached too.
        // SAFETY: Sequence is plain data; any bit pattern is a valid value.
        unsafe {
            ptr::write_bytes(
                s as *mut Sequence as *mut u8,
                0xA5,
                std::mem::size_of::<Sequence>(),
            )
        };
    }
    let mut queues: Vec<Vec<u32>> = vec![Vec::new(); SEQS];
    let mut last: [Step; SEQS] = [Step::default(); SEQS];
    let mut tds: Tds = Tds::new(&Config::paper()).unwrap();
    for op in ops.into_iter().take(256) {
        match op {
            Op::Init { seq, config } => {
                let i = seq as usize % SEQS;
                let cfg = config.build();
                let st = unsafe { t2po_seq_init(&mut states[i], &cfg) };
                assert!(known(st));
                assert_eq!(st == Status::Ok, cfg.validate().is_ok());
                if st == Status::Ok {
                    queues[i] = cfg.queue().to_vec();
                }
            }
            Op::InitDefault { seq, profile } => {
                let i = seq as usize % SEQS;
                let mut cfg = Config::paper();
                let st = unsafe { t2po_config_default(profile % 4, &mut cfg) };
                assert!(known(st));
                if st == Status::Ok {
                    assert_eq!(unsafe { t2po_seq_init(&mut states[i], &cfg) }, Status::Ok);
                    queues[i] = cfg.queue().to_vec();
                }
            }
            Op::Reset { seq } => {
                assert!(known(unsafe {
                    t2po_seq_reset(&mut states[seq as usize % SEQS])
                }));
            }
            Op::Begin { seq, start } => {
                assert!(known(unsafe {
                    t2po_seq_begin_generation(&mut states[seq as usize % SEQS], start % 4)
                }));
            }
            Op::Observe {
                seq,
                kind,
                bytes,
                null_out,
            } => {
                let i = seq as usize % SEQS;
                let sentinel = Step {
                    forced_token: -7,
                    event: 99,
                    signal: 1.5,
                    position: 77,
                    status: 99,
                };
                let mut out = sentinel;
                let out_ptr = if null_out {
                    ptr::null_mut()
                } else {
                    &mut out as *mut Step
                };
                let st = match kind % 3 {
                    0 => {
                        let row = f32s(&bytes);
                        unsafe {
                            t2po_seq_observe_f32(&mut states[i], row.as_ptr(), row.len(), out_ptr)
                        }
                    }
                    1 => {
                        let row = u16s(&bytes);
                        unsafe {
                            t2po_seq_observe_bf16(&mut states[i], row.as_ptr(), row.len(), out_ptr)
                        }
                    }
                    _ => {
                        let row = u16s(&bytes);
                        unsafe {
                            t2po_seq_observe_f16(&mut states[i], row.as_ptr(), row.len(), out_ptr)
                        }
                    }
                };
                assert!(known(st));
                if st == Status::Ok {
                    assert!(
                        out.forced_token == -1 || queues[i].contains(&(out.forced_token as u32))
                    );
                    last[i] = out;
                } else {
                    assert_eq!(out, sentinel, "output written on failure ({st:?})");
                }
            }
            Op::ObserveStats { seq, words } => {
                let i = seq as usize % SEQS;
                let stats = TokenStats {
                    entropy: f32::from_bits(words[0]),
                    confidence: f32::from_bits(words[1]),
                    max_logit: f32::from_bits(words[2]),
                    log_sum_exp: f32::from_bits(words[3]),
                    vocab: words[4],
                    top_count: words[5],
                };
                let mut out = Step::default();
                let st = unsafe { t2po_seq_observe_stats(&mut states[i], &stats, &mut out) };
                assert!(known(st));
                if st == Status::Ok {
                    last[i] = out;
                }
            }
            Op::Accept { seq, token } => {
                assert!(known(unsafe {
                    t2po_seq_accept(&mut states[seq as usize % SEQS], token)
                }));
            }
            Op::AcceptForced { seq } => {
                let i = seq as usize % SEQS;
                let token = last[i].forced_token.max(0) as u32;
                assert!(known(unsafe { t2po_seq_accept(&mut states[i], token) }));
            }
            Op::TurnSignal { seq } => {
                let mut phi = -99.0f32;
                let st =
                    unsafe { t2po_seq_turn_signal(&mut states[seq as usize % SEQS], &mut phi) };
                assert!(known(st));
                if st == Status::Ok {
                    assert!(phi.is_finite());
                } else {
                    assert_eq!(phi, -99.0);
                }
            }
            Op::Inspect { seq } => {
                let mut info = SeqInfo::default();
                assert!(known(unsafe {
                    t2po_seq_inspect(&mut states[seq as usize % SEQS], &mut info)
                }));
            }
            Op::Apply {
                forced,
                kind,
                bytes,
            } => {
                let step = Step {
                    forced_token: forced % 64,
                    ..Step::default()
                };
                let st = match kind % 3 {
                    0 => {
                        let mut row = f32s(&bytes);
                        unsafe { t2po_step_apply_f32(&step, row.as_mut_ptr(), row.len()) }
                    }
                    1 => {
                        let mut row = u16s(&bytes);
                        unsafe { t2po_step_apply_bf16(&step, row.as_mut_ptr(), row.len()) }
                    }
                    _ => {
                        let mut row = u16s(&bytes);
                        unsafe { t2po_step_apply_f16(&step, row.as_mut_ptr(), row.len()) }
                    }
                };
                assert!(known(st));
            }
            Op::Batch {
                kind,
                batch,
                vocab,
                extra,
                bytes,
            } => {
                let b = batch as usize % (SEQS + 1);
                let vocab = vocab as usize % 64;
                let stride = vocab + extra as usize % 4;
                let mut steps = [Step::default(); SEQS];
                let st = if kind % 3 == 0 {
                    let logits = f32s(&bytes);
                    let len_ok = b == 0 || logits.len() >= (b - 1) * stride + vocab;
                    if !len_ok {
                        continue; // the ABI cannot detect a short buffer; that is the caller's contract
                    }
                    unsafe {
                        t2po_seq_observe_batch_f32(
                            states.as_mut_ptr(),
                            b,
                            logits.as_ptr(),
                            vocab,
                            stride,
                            steps.as_mut_ptr(),
                        )
                    }
                } else {
                    let logits = u16s(&bytes);
                    let len_ok = b == 0 || logits.len() >= (b - 1) * stride + vocab;
                    if !len_ok {
                        continue;
                    }
                    let f = if kind % 3 == 1 {
                        t2po_seq_observe_batch_bf16
                    } else {
                        t2po_seq_observe_batch_f16
                    };
                    unsafe {
                        f(
                            states.as_mut_ptr(),
                            b,
                            logits.as_ptr(),
                            vocab,
                            stride,
                            steps.as_mut_ptr(),
                        )
                    }
                };
                assert!(known(st));
                if st == Status::Ok || st == Status::BatchRows {
                    for (i, s) in steps.iter().enumerate().take(b) {
                        assert!(Status::ALL.iter().any(|x| *x as u32 == s.status));
                        if s.status == 0 {
                            last[i] = *s;
                        }
                    }
                }
            }
            Op::Stats { kind, top_j, bytes } => {
                let mut out = TokenStats::default();
                let st = match kind % 3 {
                    0 => {
                        let row = f32s(&bytes);
                        unsafe {
                            t2po_token_stats_f32(row.as_ptr(), row.len(), top_j % 70, &mut out)
                        }
                    }
                    1 => {
                        let row = u16s(&bytes);
                        unsafe {
                            t2po_token_stats_bf16(row.as_ptr(), row.len(), top_j % 70, &mut out)
                        }
                    }
                    _ => {
                        let row = u16s(&bytes);
                        unsafe {
                            t2po_token_stats_f16(row.as_ptr(), row.len(), top_j % 70, &mut out)
                        }
                    }
                };
                assert!(known(st));
                if st == Status::Ok {
                    assert!(out.entropy.is_finite() && out.entropy >= 0.0);
                } else {
                    assert_eq!(out, TokenStats::default());
                }
            }
            Op::TdsInit { config } => {
                let cfg = config.build();
                let st = unsafe { t2po_tds_init(&mut tds, &cfg) };
                assert!(known(st));
            }
            Op::TdsDecide { phi } => {
                let mut v = Verdict::default();
                assert!(known(unsafe {
                    t2po_tds_decide(&mut tds, f32::from_bits(phi), &mut v)
                }));
            }
            Op::TdsCommit => assert!(known(unsafe { t2po_tds_commit(&mut tds) })),
            Op::TdsBegin => assert!(known(unsafe { t2po_tds_begin_episode(&mut tds) })),
            Op::Validate { config } => {
                let cfg = config.build();
                let st = unsafe { t2po_config_validate(&cfg) };
                assert!(known(st));
                assert_eq!(st == Status::Ok, cfg.validate().is_ok());
            }
            Op::AcceptPrompt {
                seq,
                tokens,
                null,
                extra_len,
            } => {
                let i = seq as usize % SEQS;
                let before = states[i];
                let tokens: Vec<u32> = tokens.into_iter().take(64).collect();
                let (p, n) = if null {
                    (ptr::null(), tokens.len() + extra_len as usize % 2)
                } else {
                    (tokens.as_ptr(), tokens.len())
                };
                let st = unsafe { t2po_seq_accept_prompt(&mut states[i], p, n) };
                assert!(known(st));
                if null && n > 0 {
                    // The state is checked first: an uninitialised one says so.
                    assert!(
                        st == Status::NullPointer || st == Status::NotInitialized,
                        "{st:?}"
                    );
                }
                if st != Status::Ok && st != Status::NullPointer && st != Status::NotInitialized {
                    // A refused prompt may have taken some tokens (it stops at the bad one)
                    // but never breaks the state: it can still be inspected.
                    let mut info = SeqInfo::default();
                    assert!(known(unsafe {
                        t2po_seq_inspect(&mut states[i], &mut info)
                    }));
                } else if st == Status::NullPointer {
                    assert!(
                        states_equal(&before, &states[i]),
                        "refused NULL prompt changed the state"
                    );
                }
            }
            Op::AcceptEvent {
                seq,
                token,
                forced,
                null_out,
            } => {
                let i = seq as usize % SEQS;
                let token = if forced {
                    last[i].forced_token.max(0) as u32
                } else {
                    token
                };
                let mut event = 77u32;
                let out = if null_out {
                    ptr::null_mut()
                } else {
                    &mut event as *mut u32
                };
                let st = unsafe { t2po_seq_accept_event(&mut states[i], token, out) };
                assert!(known(st));
                if null_out {
                    assert_eq!(st, Status::NullPointer);
                } else if st == Status::Ok {
                    assert!(event == 0 || event == t2po_control::Event::ModelClosed as u32);
                } else {
                    assert_eq!(event, 77, "event written on failure");
                }
            }
            Op::TdsCounters { null_out } => {
                let mut c = TdsCounters::default();
                let out = if null_out {
                    ptr::null_mut()
                } else {
                    &mut c as *mut TdsCounters
                };
                let st = unsafe { t2po_tds_get_counters(&mut tds, out) };
                assert!(known(st));
                if null_out {
                    assert!(
                        st == Status::NullPointer || st == Status::NotInitialized,
                        "{st:?}"
                    );
                }
            }
            Op::Explain {
                config,
                cap,
                null_buf,
            } => {
                let cfg = config.build();
                let cap = cap as usize % 300;
                let mut buf = vec![0xEEu8; cap + 8];
                let p = if null_buf {
                    ptr::null_mut()
                } else {
                    buf.as_mut_ptr().cast()
                };
                let st = unsafe { t2po_config_explain(&cfg, p, cap) };
                assert!(known(st));
                assert!(buf[cap..].iter().all(|&b| b == 0xEE), "wrote past cap");
                if null_buf {
                    assert_eq!(st, Status::NullPointer);
                } else if cap == 0 {
                    assert_eq!(st, Status::BadSize);
                } else {
                    assert_eq!(
                        st,
                        unsafe { t2po_config_validate(&cfg) },
                        "explain and validate disagree"
                    );
                    let text = message_in(&buf[..cap]);
                    if cap > 300 - 1 && st == Status::Ok {
                        assert_eq!(text, "ok");
                    }
                }
            }
            Op::Message { status } => {
                let p = t2po_status_message(status);
                assert!(!p.is_null());
                // SAFETY: the library returns a static NUL-terminated string.
                let text = unsafe { std::ffi::CStr::from_ptr(p) };
                assert!(!text.to_bytes().is_empty());
            }
            Op::Misaligned { call } => {
                // Room for a state one byte past an aligned address.
                let mut raw = vec![0u8; std::mem::size_of::<Sequence>() + 64];
                let base = raw.as_mut_ptr();
                let off = base.align_offset(64) + 1;
                // SAFETY: `off` < 65 and the buffer has 64 spare bytes past a state's size.
                let p = unsafe { base.add(off) };
                let cfg = Config::paper();
                let st = match call % 8 {
                    0 => unsafe { t2po_seq_init(p.cast(), &cfg) },
                    1 => unsafe { t2po_seq_reset(p.cast()) },
                    2 => unsafe { t2po_seq_begin_generation(p.cast(), 0) },
                    3 => unsafe { t2po_seq_accept(p.cast(), 1) },
                    4 => unsafe { t2po_tds_init(p.cast(), &cfg) },
                    5 => unsafe { t2po_config_default(0, p.cast()) },
                    6 => unsafe { t2po_seq_turn_signal(&mut states[0], p.cast()) },
                    _ => unsafe { t2po_tds_get_counters(&mut tds, p.cast()) },
                };
                assert!(known(st));
                if call % 8 == 6 {
                    // The state may be refused first (not initialised, out of order).
                    assert_ne!(st, Status::Ok);
                } else {
                    assert_eq!(st, Status::Misaligned, "call {}", call % 8);
                }
            }
        }
        // NULL state pointers are always refused.
        assert_eq!(
            unsafe { t2po_seq_accept(ptr::null_mut(), 1) },
            Status::NullPointer
        );
    }
});
