//! Shared inputs for the t2po benchmarks: deterministic logits rows shaped like a language
//! model's (Gaussian background, a few strong candidates).

/// Deterministic `batch × vocab` logits (row-major), seeded.
pub fn logits(batch: usize, vocab: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 40) as f32 / (1u64 << 24) as f32
    };
    let mut out = Vec::with_capacity(batch * vocab);
    for _ in 0..batch * vocab {
        let n = (next() + next() + next() + next()) * 1.732 - 3.464;
        out.push(2.0 * n);
    }
    for b in 0..batch {
        for k in 0..5 {
            let i = (next() * vocab as f32) as usize % vocab;
            out[b * vocab + i] = 12.0 - k as f32;
        }
    }
    out
}
