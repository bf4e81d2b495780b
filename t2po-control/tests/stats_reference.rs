//! Token statistics against an f64 two-pass reference (spec §1), on random, one-hot, uniform,
//! huge-magnitude and partly −inf rows, for f32, bf16 and f16 rows and several vocab sizes.
//!
//! Tolerance (the contract of `token_stats`): for every statistic
//! `|got − ref| ≤ 1e-5 · |ref| + 1e-7` — relative 1e-5, with an absolute floor of 1e-7 nats
//! for values at 0 (a one-hot row's entropy), where a relative bound means nothing.
//! bf16/f16 rows are compared with the reference of their widened (exact) f32 values.

use half::{bf16, f16};
use proptest::prelude::*;
use t2po_control::{token_stats, Logit, TokenStats};

const REL: f64 = 1e-5;
const ABS: f64 = 1e-7;

/// f64 two-pass reference: (entropy, confidence, max, lse, top_count).
fn reference(row: &[f64], j: usize) -> (f64, f64, f64, f64, usize) {
    let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let s: f64 = row.iter().map(|&x| (x - m).exp()).sum();
    let lse = m + s.ln();
    // log p relative to the max, so huge magnitudes do not cancel in f64.
    let h: f64 = row
        .iter()
        .filter(|x| x.is_finite())
        .map(|&x| {
            let lp = (x - m) - s.ln();
            -lp.exp() * lp
        })
        .sum();
    let mut fin: Vec<f64> = row.iter().cloned().filter(|x| x.is_finite()).collect();
    fin.sort_by(|a, b| b.partial_cmp(a).unwrap());
    let k = j.min(fin.len());
    let c = s.ln() - fin[..k].iter().map(|&x| x - m).sum::<f64>() / k as f64;
    (h, c, m, lse, k)
}

fn close(got: f32, want: f64) -> bool {
    (got as f64 - want).abs() <= REL * want.abs() + ABS
}

fn check<T: Logit>(row: &[T], j: u32, what: &str) -> f64 {
    let wide: Vec<f64> = row.iter().map(|x| x.to_f32() as f64).collect();
    let (h, c, m, lse, k) = reference(&wide, j as usize);
    let got: TokenStats = token_stats(row, j).unwrap_or_else(|e| panic!("{what}: {e}"));
    let ok = close(got.entropy, h)
        && close(got.confidence, c)
        && got.max_logit as f64 == m
        && close(got.log_sum_exp, lse)
        && got.top_count as usize == k
        && got.vocab as usize == row.len();
    assert!(
        ok,
        "{what} (V={}, j={j}): got {got:?}, want H={h} C={c} max={m} lse={lse} k={k}",
        row.len()
    );
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

/// Deterministic rows of each family (xorshift; no dependence on proptest's RNG).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        (0..12).map(|_| self.next()).sum::<f64>() - 6.0
    }
}

fn families(v: usize, rng: &mut Rng) -> Vec<(&'static str, Vec<f32>)> {
    let random: Vec<f32> = (0..v).map(|_| (3.0 * rng.normal()) as f32).collect();
    let mut one_hot = vec![-10.0f32; v];
    one_hot[v / 3] = 25.0;
    let uniform = vec![1.25f32; v];
    let huge: Vec<f32> = (0..v).map(|_| (1e4 + 30.0 * rng.normal()) as f32).collect();
    let huge_neg: Vec<f32> = (0..v).map(|_| (-3e4 + 5.0 * rng.normal()) as f32).collect();
    let partly_masked: Vec<f32> = (0..v)
        .map(|i| {
            if i % 3 == 0 {
                (2.0 * rng.normal()) as f32
            } else {
                f32::NEG_INFINITY
            }
        })
        .collect();
    let mut few_finite = vec![f32::NEG_INFINITY; v];
    for i in (0..v).step_by((v / 5).max(1)).take(5) {
        few_finite[i] = i as f32 * 0.01;
    }
    let peaked: Vec<f32> = (0..v)
        .map(|i| {
            if i == v / 2 {
                18.0
            } else {
                rng.normal() as f32
            }
        })
        .collect();
    vec![
        ("random", random),
        ("one-hot", one_hot),
        ("uniform", uniform),
        ("huge magnitude", huge),
        ("huge negative", huge_neg),
        ("partly -inf", partly_masked),
        ("fewer than j finite", few_finite),
        ("peaked", peaked),
    ]
}

#[test]
fn f32_bf16_f16_rows_match_the_f64_reference() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut worst = 0f64;
    for &v in &[1usize, 7, 64, 1000, 1025, 32_000, 151_936] {
        for (name, row) in families(v, &mut rng) {
            for &j in &[1u32, 20, 64] {
                worst = worst.max(check(&row, j, name));
                let b: Vec<bf16> = row.iter().map(|&x| bf16::from_f32(x)).collect();
                worst = worst.max(check(&b, j, name));
                // f16 cannot hold the huge-magnitude families.
                if !name.starts_with("huge") {
                    let h: Vec<f16> = row.iter().map(|&x| f16::from_f32(x)).collect();
                    worst = worst.max(check(&h, j, name));
                }
            }
        }
    }
    println!("worst relative error over all families: {worst:.3e}");
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
        prop_assert!(close(b.log_sum_exp, a.log_sum_exp as f64 + shift as f64));
        prop_assert_eq!(a.top_count, b.top_count);
    }

    /// Permuting the vocabulary changes no statistic (beyond summation-order rounding).
    #[test]
    fn permutation_invariance(row in prop::collection::vec(-30.0f32..30.0, 2..3000),
                              seed in any::<u64>(), j in 1u32..=64) {
        let mut perm = row.clone();
        let mut rng = Rng(seed | 1);
        for i in (1..perm.len()).rev() {
            let k = (rng.next() * (i + 1) as f64) as usize;
            perm.swap(i, k.min(i));
        }
        let a = token_stats(&row, j).unwrap();
        let b = token_stats(&perm, j).unwrap();
        prop_assert!(close(b.entropy, a.entropy as f64), "{} vs {}", a.entropy, b.entropy);
        prop_assert!(close(b.confidence, a.confidence as f64));
        prop_assert_eq!(a.max_logit, b.max_logit);
        prop_assert!(close(b.log_sum_exp, a.log_sum_exp as f64));
        prop_assert_eq!(a.top_count, b.top_count);
    }
}
