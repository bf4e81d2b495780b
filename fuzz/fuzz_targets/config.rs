//! Fuzzes config validation through the C ABI: every field set to raw integers and float bit
//! patterns (not reduced to a range, so every bound is reached from both sides, with NaN,
//! infinities and subnormals), checked by `t2po_config_validate`, `t2po_config_explain` and
//! `t2po_seq_init`/`t2po_tds_init`. Checks: the three agree with `Config::validate`; an
//! explained error starts with the name of a config field (`queue[i]` for queue entries); a
//! message is NUL-terminated inside any capacity and never written past it.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use t2po_control::ffi::*;
use t2po_control::{Config, Sequence, Status, Tds};

const FIELDS: [&str; 27] = [
    "top_j",
    "alpha",
    "entropy_norm",
    "entropy_term",
    "confidence_norm",
    "confidence_term",
    "range_eps",
    "tti_enabled",
    "trigger",
    "window",
    "epsilon",
    "patience",
    "patience_tol",
    "min_len",
    "max_think",
    "think_open",
    "think_close",
    "queue_len",
    "queue",
    "tds_enabled",
    "turn_mean",
    "phi_floor",
    "phi_skip",
    "tds_rule",
    "eta",
    "max_resamples",
    "keep",
];

#[derive(Arbitrary, Debug)]
struct Input {
    released: bool,
    edits: Vec<(u8, u32)>,
    cap: u16,
}

fn set(c: &mut Config, field: u8, v: u32) {
    let f = f32::from_bits(v);
    match field % 28 {
        0 => c.top_j = v,
        1 => c.alpha = f,
        2 => c.entropy_norm = v,
        3 => c.entropy_term = v,
        4 => c.confidence_norm = v,
        5 => c.confidence_term = v,
        6 => c.range_eps = f,
        7 => c.tti_enabled = v,
        8 => c.trigger = v,
        9 => c.window = v,
        10 => c.epsilon = f,
        11 => c.patience = v,
        12 => c.patience_tol = f,
        13 => c.min_len = v,
        14 => c.max_think = v,
        15 => c.think_open = v,
        16 => c.think_close = v,
        17 => c.queue_len = v,
        18 => c.queue[(v % 8) as usize] = v >> 3,
        19 => c.queue[(v % 8) as usize] = v,
        20 => c.tds_enabled = v,
        21 => c.turn_mean = v,
        22 => c.phi_floor = f,
        23 => c.phi_skip = v,
        24 => c.tds_rule = v,
        25 => c.eta = f,
        26 => c.max_resamples = v,
        _ => c.keep = v,
    }
}

fuzz_target!(|input: Input| {
    let mut c = if input.released {
        Config::released()
    } else {
        Config::paper()
    };
    for &(field, v) in input.edits.iter().take(12) {
        set(&mut c, field, v);
    }
    let want = c.validate();
    let status = unsafe { t2po_config_validate(&c) };
    assert_eq!(status == Status::Ok, want.is_ok(), "{want:?} vs {status:?}");
    if let Err(e) = &want {
        assert_eq!(status, Status::from(*e));
    }

    let cap = input.cap as usize % 512;
    let mut buf = vec![0xEEu8; cap + 16];
    let explained = unsafe { t2po_config_explain(&c, buf.as_mut_ptr().cast(), cap) };
    assert!(
        buf[cap..].iter().all(|&b| b == 0xEE),
        "wrote past cap {cap}"
    );
    if cap == 0 {
        assert_eq!(explained, Status::BadSize);
    } else {
        assert_eq!(explained, status);
        let end = buf[..cap]
            .iter()
            .position(|&b| b == 0)
            .expect("message not NUL-terminated inside its buffer");
        let text = std::str::from_utf8(&buf[..end]).expect("message not UTF-8");
        if cap >= 256 {
            match &want {
                Ok(()) => assert_eq!(text, "ok"),
                Err(e) => {
                    assert_eq!(text, e.to_string());
                    let named = FIELDS.iter().any(|f| {
                        text.strip_prefix(f)
                            .is_some_and(|rest| rest.starts_with([' ', '[']))
                    });
                    assert!(named, "message does not start with a field name: {text}");
                }
            }
        }
    }

    // The states refuse exactly the configs validation refuses.
    let mut seq = Sequence::new(&Config::paper()).unwrap();
    assert_eq!(unsafe { t2po_seq_init(&mut seq, &c) }, status);
    let mut tds = Tds::new(&Config::paper()).unwrap();
    assert_eq!(unsafe { t2po_tds_init(&mut tds, &c) }, status);
});
