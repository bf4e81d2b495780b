//! The f64 two-pass reference of one row's token statistics (spec §1) and the tolerance that
//! `t2po_control::token_stats` promises against it: `|got − ref| ≤ 1e-5·|ref| + 1e-7` for the
//! entropy and the confidence — relative 1e-5, with an absolute floor of 1e-7 nats for values at
//! 0 (a one-hot row's entropy), where a relative bound means nothing — and
//! `≤ 1e-5·|ref| + 1e-6` for the log-sum-exp: `lse = m + ln s` carries the relative error of the
//! f32 sum `s` as an absolute error, whatever `m` is, so a row whose lse is near 0 needs the
//! wider floor ([`close_lse`]). Each chunk's mass from `token_stats_mass` is within `1e-5`
//! relative plus `1e-7` of the row's total mass of [`chunk_masses`] ([`close_mass`]).

/// Relative tolerance of every statistic.
pub const REL: f64 = 1e-5;
/// Absolute floor of the tolerance of the entropy and the confidence, in nats.
pub const ABS: f64 = 1e-7;
/// Absolute floor of the tolerance of the log-sum-exp, in nats.
pub const ABS_LSE: f64 = 1e-6;

/// Reference statistics of one row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reference {
    /// `H = −Σ p ln p`.
    pub entropy: f64,
    /// `C = −(1/k) Σ_{i≤k} ln p_(i)`.
    pub confidence: f64,
    /// The largest entry.
    pub max: f64,
    /// `ln Σ e^x`.
    pub log_sum_exp: f64,
    /// `k = min(j, finite entries)`.
    pub top_count: usize,
}

/// Two passes in f64 over a row with at least one finite entry and no NaN or `+inf`: the max,
/// then `s = Σ e^(x−m)`; `ln p` is taken relative to the max so huge magnitudes do not cancel.
pub fn reference(row: &[f64], j: usize) -> Reference {
    let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let s: f64 = row.iter().map(|&x| (x - m).exp()).sum();
    let ln_s = s.ln();
    let entropy: f64 = row
        .iter()
        .filter(|x| x.is_finite())
        .map(|&x| {
            let lp = (x - m) - ln_s;
            -lp.exp() * lp
        })
        .sum();
    let mut fin: Vec<f64> = row.iter().cloned().filter(|x| x.is_finite()).collect();
    fin.sort_by(|a, b| b.total_cmp(a));
    let k = j.min(fin.len());
    let confidence = ln_s - fin[..k].iter().map(|&x| x - m).sum::<f64>() / k as f64;
    Reference {
        entropy,
        confidence,
        max: m,
        log_sum_exp: m + ln_s,
        top_count: k,
    }
}

/// Whether an entropy or confidence `got` is within the contract's tolerance of `want`.
pub fn close(got: f32, want: f64) -> bool {
    (got as f64 - want).abs() <= REL * want.abs() + ABS
}

/// Whether a log-sum-exp `got` is within the contract's tolerance of `want`.
pub fn close_lse(got: f32, want: f64) -> bool {
    (got as f64 - want).abs() <= REL * want.abs() + ABS_LSE
}

/// Absolute floor of the tolerance of a chunk's mass, as a share of the row's total mass.
pub const ABS_MASS: f64 = 1e-7;

/// The f64 mass `Σ e^(x − max)` of each `chunk`-entry chunk of `row` (what
/// `t2po_control::token_stats_mass` writes), for a row whose largest entry is `max`.
pub fn chunk_masses(row: &[f64], max: f64, chunk: usize) -> Vec<f64> {
    row.chunks(chunk)
        .map(|c| c.iter().map(|&x| (x - max).exp()).sum())
        .collect()
}

/// Whether a chunk's mass `got` is within the contract of `want`: `1e-5` relative plus
/// [`ABS_MASS`] of the row's `total` mass (≥ 1, the max entry's own term; the scale a sampler
/// compares masses at, where a chunk far below the max holds nothing it could draw).
pub fn close_mass(got: f64, want: f64, total: f64) -> bool {
    (got - want).abs() <= REL * want + ABS_MASS * total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_by_hand() {
        // Two equal logits and a masked one: H = C(j=1) = ln 2.
        let r = reference(&[1.0, 1.0, f64::NEG_INFINITY], 1);
        assert!((r.entropy - 2f64.ln()).abs() < 1e-15);
        assert!((r.confidence - 2f64.ln()).abs() < 1e-15);
        assert_eq!((r.max, r.top_count), (1.0, 1));
        assert!((r.log_sum_exp - (1.0 + 2f64.ln())).abs() < 1e-15);
        // j beyond the finite count averages the finite entries.
        assert_eq!(reference(&[0.0, f64::NEG_INFINITY], 20).top_count, 1);
        assert!(close(1.0, 1.0 + 0.9e-5) && !close(1.0, 1.0 + 1.2e-5));
        assert!(close(0.0, 0.9e-7) && !close(0.0, 1.2e-7));
        assert!(close_lse(0.0, 0.9e-6) && !close_lse(0.0, 1.2e-6));
    }
}
