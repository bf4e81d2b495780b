//! `M_t` of the paper profile from logits rows against an f64 reference: the f64 two-pass
//! statistics of `t2po_fixtures` and the running min–max normalisation in f64.
//!
//! The rows are "cool" Gaussian rows, `N(0, σ²)` with a small `σ`: near-uniform, so the
//! entropy and confidence barely move from token to token and the running ranges are tiny
//! (~1e-4 nats), which magnifies any rounding of `H` and `C` by ~1e4. Rounded to f32 before
//! the normalisation (`Sequence::observe` with f32 `TokenStats`), `M_t` is off by ~1e-3; kept in
//! f64 (`Sequence::observe_row`), what is left is the kernel's own summation error, largely
//! common to rows of one shape.
//!
//! Tolerance: `|M_t − M_ref| ≤ 2e-4` absolute on `observe_row` over every row, and at least 10×
//! below the error of the f32-rounded path on the same rows (so the test shows the gain).

use t2po_control::{token_stats, Config, Sequence, ThinkStart};
use t2po_fixtures::{reference, Rng};

const TOL: f64 = 2e-4;

/// The f64 reference `M_t` over a stream of `(H, C)`: paper profile, running min–max.
fn reference_signals(cfg: &Config, hc: &[(f64, f64)]) -> Vec<f64> {
    let (mut h_lo, mut h_hi, mut c_lo, mut c_hi) = (
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
    );
    let eps = cfg.range_eps as f64;
    let norm = |x: f64, lo: f64, hi: f64| {
        if hi - lo < eps {
            0.0
        } else {
            ((x - lo) / (hi - lo)).clamp(0.0, 1.0)
        }
    };
    hc.iter()
        .map(|&(h, c)| {
            (h_lo, h_hi, c_lo, c_hi) = (h_lo.min(h), h_hi.max(h), c_lo.min(c), c_hi.max(c));
            let a = cfg.alpha as f64;
            a * norm(h, h_lo, h_hi) + (1.0 - a) * (1.0 - norm(c, c_lo, c_hi))
        })
        .collect()
}

#[test]
fn signal_on_cool_gaussian_rows_matches_the_f64_reference() {
    let cfg = Config::paper();
    let mut rng = Rng::new(0x51_6E_A1);
    for &(v, sigma) in &[(32_000usize, 0.1f64), (32_000, 0.3), (151_936, 0.1)] {
        let rows: Vec<Vec<f32>> = (0..48)
            .map(|_| (0..v).map(|_| (sigma * rng.normal()) as f32).collect())
            .collect();
        let hc: Vec<(f64, f64)> = rows
            .iter()
            .map(|row| {
                let wide: Vec<f64> = row.iter().map(|&x| x as f64).collect();
                let r = reference(&wide, cfg.top_j as usize);
                (r.entropy, r.confidence)
            })
            .collect();
        let want = reference_signals(&cfg, &hc);
        let h_range = hc.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max)
            - hc.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);

        let mut wide = Sequence::new(&cfg).unwrap();
        let mut narrow = Sequence::new(&cfg).unwrap();
        wide.begin_generation(ThinkStart::Outside);
        narrow.begin_generation(ThinkStart::Outside);
        let (mut err_wide, mut err_narrow) = (0f64, 0f64);
        for (row, &m_ref) in rows.iter().zip(&want) {
            let a = wide.observe_row(row.as_slice()).unwrap().signal as f64;
            let b = narrow
                .observe(&token_stats(row.as_slice(), cfg.top_j).unwrap())
                .unwrap()
                .signal as f64;
            wide.accept(7).unwrap();
            narrow.accept(7).unwrap();
            err_wide = err_wide.max((a - m_ref).abs());
            err_narrow = err_narrow.max((b - m_ref).abs());
        }
        println!(
            "V={v} sigma={sigma}: H range {h_range:.2e}; worst |M_t - ref|: f64 path {err_wide:.2e}, f32-rounded path {err_narrow:.2e}"
        );
        assert!(
            err_wide <= TOL,
            "V={v} σ={sigma}: f64 path off by {err_wide:e}"
        );
        assert!(
            err_wide * 10.0 <= err_narrow,
            "V={v} σ={sigma}: f64 path {err_wide:e} not 10× below the f32 path {err_narrow:e}"
        );
    }
}
