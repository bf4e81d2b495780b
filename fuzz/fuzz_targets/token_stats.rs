//! Fuzzes `token_stats` with arbitrary bytes as f32/bf16/f16 rows against an f64 two-pass
//! reference: errors exactly when the row is empty, holds NaN or +inf, or has no finite entry;
//! otherwise within the documented tolerance (1e-5 relative + 1e-6 absolute).
#![no_main]

use libfuzzer_sys::fuzz_target;
use t2po_control::{token_stats, Error, Logit, RowError};

#[path = "common.rs"]
#[allow(dead_code)]
mod common;

fn check<T: Logit>(row: &[T], j: u32) {
    let wide: Vec<f64> = row.iter().map(|x| x.to_f32() as f64).collect();
    let got = token_stats(row, j);
    if row.is_empty() {
        assert_eq!(got, Err(Error::Row(RowError::Empty)));
        return;
    }
    if let Some(i) = wide.iter().position(|x| x.is_nan() || *x == f64::INFINITY) {
        match got {
            Err(Error::Row(RowError::NaN { index }))
            | Err(Error::Row(RowError::PosInf { index })) => {
                assert_eq!(index, i, "first bad index")
            }
            other => panic!("bad row accepted: {other:?}"),
        }
        return;
    }
    if wide.iter().all(|x| *x == f64::NEG_INFINITY) {
        assert!(matches!(got, Err(Error::Row(RowError::NoFinite { .. }))));
        return;
    }
    let s = match got {
        Err(Error::Row(RowError::Range)) => {
            // Only when a statistic really is beyond f32 (checked below against the reference).
            let c = reference_confidence(&wide, j as usize);
            assert!(c.abs() > f32::MAX as f64 * 0.999, "range error for C = {c}");
            return;
        }
        other => other.expect("a valid row"),
    };
    let m = wide.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = wide.iter().map(|&x| (x - m).exp()).sum();
    let lse = m + sum.ln();
    // log p relative to the max, so huge magnitudes do not cancel in f64 either.
    let ln_sum = sum.ln();
    let h: f64 = wide
        .iter()
        .filter(|x| x.is_finite())
        .map(|&x| {
            let lp = (x - m) - ln_sum;
            -lp.exp() * lp
        })
        .sum();
    let mut fin: Vec<f64> = wide.iter().cloned().filter(|x| x.is_finite()).collect();
    fin.sort_by(|a, b| b.partial_cmp(a).unwrap());
    let k = (j as usize).min(fin.len());
    let c = ln_sum - fin[..k].iter().map(|&x| x - m).sum::<f64>() / k as f64;
    let close = |g: f32, w: f64| (g as f64 - w).abs() <= 1e-5 * w.abs() + 1e-6;
    assert!(close(s.entropy, h), "entropy {} vs {h}", s.entropy);
    assert!(close(s.confidence, c), "confidence {} vs {c}", s.confidence);
    assert!(close(s.log_sum_exp, lse), "lse {} vs {lse}", s.log_sum_exp);
    assert_eq!(s.max_logit as f64, m);
    assert_eq!(s.top_count as usize, k);
}

fn reference_confidence(wide: &[f64], j: usize) -> f64 {
    let m = wide.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let ln_sum = wide.iter().map(|&x| (x - m).exp()).sum::<f64>().ln();
    let mut fin: Vec<f64> = wide.iter().cloned().filter(|x| x.is_finite()).collect();
    fin.sort_by(|a, b| b.partial_cmp(a).unwrap());
    let k = j.min(fin.len());
    ln_sum - fin[..k].iter().map(|&x| x - m).sum::<f64>() / k as f64
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let j = 1 + (data[0] as u32 % 64);
    let body = &data[2..];
    match data[1] % 3 {
        0 => check(&common::f32s(body), j),
        1 => check(
            &common::u16s(body)
                .into_iter()
                .map(half_bf16)
                .collect::<Vec<_>>(),
            j,
        ),
        _ => check(
            &common::u16s(body)
                .into_iter()
                .map(half_f16)
                .collect::<Vec<_>>(),
            j,
        ),
    }
});

fn half_bf16(bits: u16) -> half::bf16 {
    half::bf16::from_bits(bits)
}

fn half_f16(bits: u16) -> half::f16 {
    half::f16::from_bits(bits)
}
