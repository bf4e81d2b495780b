//! Token statistics against an f64 two-pass reference (spec §1), on random, one-hot, uniform,
//! huge-magnitude and partly −inf rows, for f32, bf16 and f16 rows and several vocab sizes.
//!
//! Tolerance (the contract of `token_stats`, written once in `t2po_fixtures::reference`): for
//! the entropy and confidence `|got − ref| ≤ 1e-5 · |ref| + 1e-7` — relative 1e-5, with an
//! absolute floor of 1e-7 nats for values at 0 (a one-hot row's entropy), where a relative bound
//! means nothing — and for the log-sum-exp `+ 1e-6` absolute (the f32 sum's relative error
//! becomes an absolute one in `m + ln s`; rows shifted to lse ≈ 0 below show it).
//! bf16/f16 rows are compared with the reference of their widened (exact) f32 values.

use half::{bf16, f16};
use proptest::prelude::*;
use t2po_control::{mass_chunks, token_stats, token_stats_mass, Logit, TokenStats, MASS_CHUNK};
use t2po_fixtures::rows::{families, fits_f16};
use t2po_fixtures::{reference, Reference, Rng};

use t2po_fixtures::{chunk_masses, close, close_lse, close_mass};

fn check<T: Logit>(row: &[T], j: u32, what: &str) -> f64 {
    let wide: Vec<f64> = row.iter().map(|x| x.to_f32() as f64).collect();
    let Reference {
        entropy: h,
        confidence: c,
        max: m,
        log_sum_exp: lse,
        top_count: k,
    } = reference(&wide, j as usize);
    let got: TokenStats = token_stats(row, j).unwrap_or_else(|e| panic!("{what}: {e}"));
    let ok = close(got.entropy, h)
        && close(got.confidence, c)
        && got.max_logit as f64 == m
        && close_lse(got.log_sum_exp, lse)
        && got.top_count as usize == k
        && got.vocab as usize == row.len();
    assert!(
        ok,
        "{what} (V={}, j={j}): got {got:?}, want H={h} C={c} max={m} lse={lse} k={k}",
        row.len()
    );
    check_mass(row, j, &wide, m, &got, what);
    // Worst relative error seen on values away from 0, for the report below.
    [
        (got.entropy, h),
        (got.confidence, c),
        (got.log_sum_exp, lse),
    ]
    .iter()
    .filter(|&&(_, w)| w.abs() > 1e-2)
    .map(|&(g, w)| (g as f64 - w).abs() / w.abs())
    .fold(0.0, f64::max)
}

/// `token_stats_mass`: the same statistics bit for bit, and each chunk's mass
/// `Σ e^(x − max)` within `1e-5` relative of the f64 sum plus `1e-7` of the row's total mass
/// (≥ 1: the max entry's own term), the scale at which a sampler compares them.
fn check_mass<T: Logit>(row: &[T], j: u32, wide: &[f64], m: f64, got: &TokenStats, what: &str) {
    let mut mass = vec![f64::NAN; mass_chunks(row.len())];
    let with = token_stats_mass(row, j, &mut mass).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(
        &with, got,
        "{what}: token_stats_mass changed the statistics"
    );
    let want = chunk_masses(wide, m, MASS_CHUNK);
    let total: f64 = want.iter().sum();
    for (k, (&g, &w)) in mass.iter().zip(&want).enumerate() {
        assert!(
            close_mass(g, w, total),
            "{what} (V={}, j={j}): chunk {k} mass {g}, want {w} (total {total})",
            row.len()
        );
    }
}

#[test]
fn a_mass_slice_of_the_wrong_length_is_an_error() {
    let row = vec![0.5f32; 4097];
    assert_eq!(mass_chunks(4097), 3);
    for n in [0usize, 2, 4] {
        let mut mass = vec![0.0; n];
        let e = token_stats_mass(&row, 20, &mut mass).unwrap_err();
        assert!(e.to_string().contains("mass"), "{e}");
    }
}

#[test]
fn f32_bf16_f16_rows_match_the_f64_reference() {
    let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15);
    let mut worst = 0f64;
    for &v in &[1usize, 7, 64, 1000, 1025, 2049, 4096, 32_000, 151_936] {
        for (name, row) in families(v, &mut rng) {
            for &j in &[1u32, 20, 64] {
                worst = worst.max(check(&row, j, name));
                let b: Vec<bf16> = row.iter().map(|&x| bf16::from_f32(x)).collect();
                worst = worst.max(check(&b, j, name));
                if fits_f16(name) {
                    let h: Vec<f16> = row.iter().map(|&x| f16::from_f32(x)).collect();
                    worst = worst.max(check(&h, j, name));
                }
            }
        }
    }
    println!("worst relative error over all families: {worst:.3e}");
}

/// Rows masked with finite values far below the rest (`f32::MIN`, `−1e30`, `−1e9`, `−1e5`,
/// `−200`, `−100`, the ways callers mask without `−inf`), alone or mixed with `−inf`, sparse,
/// dense and in a block: the AVX-512 pass runs such chunks without its range mask first and
/// redoes those whose sums come out non-finite, so both outcomes are covered here.
#[test]
fn rows_masked_with_finite_values_match_the_f64_reference() {
    let mut rng = Rng::new(0x5EED_0FF1);
    let masks = [
        f32::MIN,
        -1e30,
        -1e9,
        -1e5,
        -200.0,
        -100.0,
        f32::NEG_INFINITY,
    ];
    let mut worst = 0f64;
    for &v in &[1000usize, 5000, 151_936] {
        for (mi, &mask) in masks.iter().enumerate() {
            let other = masks[(mi + 3) % masks.len()];
            for layout in 0..3 {
                let row: Vec<f32> = (0..v)
                    .map(|i| {
                        let masked = match layout {
                            0 => i % 97 == 5,                        // sparse
                            1 => i % 3 != 0,                         // dense
                            _ => (v / 3..v / 3 + 3000).contains(&i), // one block
                        };
                        match (masked, i % 2) {
                            (true, 0) => mask,
                            (true, _) => other,
                            (false, _) => (2.0 * rng.normal()) as f32,
                        }
                    })
                    .collect();
                for &j in &[1u32, 20] {
                    let what = format!("masked with {mask:e}/{other:e}, layout {layout}");
                    worst = worst.max(check(&row, j, &what));
                }
            }
        }
    }
    println!("worst relative error on finitely masked rows: {worst:.3e}");
}

/// Rows shifted so that their log-sum-exp is ≈ 0: the entropy and confidence keep the 1e-7
/// floor, the lse keeps its 1e-6 one, and the lse's absolute error stays below 1e-6 (seen
/// ≈ 3e-7, which the 1e-7 floor would not cover).
#[test]
fn rows_with_log_sum_exp_near_zero() {
    let mut rng = Rng::new(7);
    let mut worst = 0f64;
    for _ in 0..20_000 {
        let n = 2 + rng.below(40);
        let raw: Vec<f64> = (0..n).map(|_| -3.0 * rng.next_f64()).collect();
        let shift = reference(&raw, 1).log_sum_exp;
        let row: Vec<f32> = raw.iter().map(|&x| (x - shift) as f32).collect();
        let j = 1 + rng.below(20) as u32;
        check(&row, j, "lse near 0");
        let wide: Vec<f64> = row.iter().map(|&x| x as f64).collect();
        let want = reference(&wide, j as usize).log_sum_exp;
        let got = token_stats(&row, j).unwrap().log_sum_exp as f64;
        assert!(want.abs() < 1e-6, "the shift puts lse at 0: {want}");
        worst = worst.max((got - want).abs());
    }
    println!("worst lse absolute error near 0: {worst:.3e}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    /// Arbitrary finite/−inf rows: within tolerance of the reference.
    #[test]
    fn arbitrary_rows(row in prop::collection::vec(
        prop_oneof![8 => -60.0f32..60.0, 1 => Just(f32::NEG_INFINITY)], 1..3000),
        j in 1u32..=64) {
        prop_assume!(row.iter().any(|x| x.is_finite()));
        check(&row, j, "arbitrary");
    }

    /// Rows of a few distinct values (ties everywhere: at the top-j threshold, at the floor the
    /// first chunk's lane maxima set, across chunk boundaries), with masked entries, over one
    /// to three chunks: the top-j values and their count as the reference has them.
    #[test]
    fn tied_rows(row in prop::collection::vec(
        prop_oneof![12 => (0i32..6).prop_map(|v| v as f32), 1 => Just(f32::NEG_INFINITY)],
        1..6000),
        j in 1u32..=64) {
        prop_assume!(row.iter().any(|x| x.is_finite()));
        check(&row, j, "tied");
    }

    /// Adding a constant to every logit changes no statistic (max and lse shift by it).
    /// Values on a 1/256 grid so `x + c` is exact in f32.
    #[test]
    fn shift_invariance(grid in prop::collection::vec(-5120i32..5120, 1..2000),
                        shift in -2000i32..2000, j in 1u32..=64) {
        let row: Vec<f32> = grid.iter().map(|&g| g as f32 / 256.0).collect();
        let moved: Vec<f32> = row.iter().map(|&x| x + shift as f32).collect();
        let a = token_stats(&row, j).unwrap();
        let b = token_stats(&moved, j).unwrap();
        prop_assert_eq!(a.entropy, b.entropy);
        prop_assert!(close(b.confidence, a.confidence as f64));
        prop_assert_eq!(b.max_logit, a.max_logit + shift as f32);
        prop_assert!(close_lse(b.log_sum_exp, a.log_sum_exp as f64 + shift as f64));
        prop_assert_eq!(a.top_count, b.top_count);
    }

    /// Permuting the vocabulary changes no statistic (beyond summation-order rounding).
    #[test]
    fn permutation_invariance(row in prop::collection::vec(-30.0f32..30.0, 2..3000),
                              seed in any::<u64>(), j in 1u32..=64) {
        let mut perm = row.clone();
        let mut rng = Rng::new(seed | 1);
        for i in (1..perm.len()).rev() {
            let k = (rng.next_f64() * (i + 1) as f64) as usize;
            perm.swap(i, k.min(i));
        }
        let a = token_stats(&row, j).unwrap();
        let b = token_stats(&perm, j).unwrap();
        prop_assert!(close(b.entropy, a.entropy as f64), "{} vs {}", a.entropy, b.entropy);
        prop_assert!(close(b.confidence, a.confidence as f64));
        prop_assert_eq!(a.max_logit, b.max_logit);
        prop_assert!(close_lse(b.log_sum_exp, a.log_sum_exp as f64));
        prop_assert_eq!(a.top_count, b.top_count);
    }
}
