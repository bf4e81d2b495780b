//! Fuzzes `token_stats` with arbitrary bytes as f32/bf16/f16 rows against an f64 two-pass
//! reference: errors exactly when the row is empty, holds NaN or +inf, or has no finite entry;
//! otherwise within the documented tolerance from t2po-fixtures (1e-5 relative + 1e-7 absolute;
//! 1e-6 absolute for the log-sum-exp); `token_stats_mass` gives the same result, with chunk
//! masses that add up to `e^(lse − max)`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use t2po_control::{
    mass_chunks, token_stats, token_stats_mass, Error, Logit, RowError, MASS_CHUNK,
};
use t2po_fixtures::{chunk_masses, close, close_lse, close_mass, reference};

#[path = "common.rs"]
#[allow(dead_code)]
mod common;

fn check<T: Logit>(row: &[T], j: u32) {
    let wide: Vec<f64> = row.iter().map(|x| x.to_f32() as f64).collect();
    let got = token_stats(row, j);
    // With per-chunk masses: the same result, and each chunk's mass within 1e-5 relative of
    // its f64 `Σ e^(x − max)` plus 1e-7 of the row's total (the test suite's bound).
    let mut mass = vec![0.0; mass_chunks(row.len())];
    let with = token_stats_mass(row, j, &mut mass);
    assert_eq!(got, with, "token_stats_mass differs from token_stats");
    if let Ok(s) = with {
        let want = chunk_masses(&wide, s.max_logit as f64, MASS_CHUNK);
        let total: f64 = want.iter().sum();
        for (k, (&g, &w)) in mass.iter().zip(&want).enumerate() {
            assert!(
                close_mass(g, w, total),
                "chunk {k}: mass {g}, want {w} (total {total})"
            );
        }
    }
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
    let r = reference(&wide, j as usize);
    let s = match got {
        Err(Error::Row(RowError::Range)) => {
            // Only when a statistic really is beyond f32.
            assert!(
                r.confidence.abs() > f32::MAX as f64 * 0.999,
                "range error for C = {}",
                r.confidence
            );
            return;
        }
        other => other.expect("a valid row"),
    };
    assert!(
        close(s.entropy, r.entropy),
        "entropy {} vs {}",
        s.entropy,
        r.entropy
    );
    assert!(
        close(s.confidence, r.confidence),
        "confidence {} vs {}",
        s.confidence,
        r.confidence
    );
    assert!(
        close_lse(s.log_sum_exp, r.log_sum_exp),
        "lse {} vs {}",
        s.log_sum_exp,
        r.log_sum_exp
    );
    assert_eq!(s.max_logit as f64, r.max);
    assert_eq!(s.top_count as usize, r.top_count);
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
