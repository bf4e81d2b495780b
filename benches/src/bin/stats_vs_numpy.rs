//! Times `token_stats` (top-20) on rows read from a raw little-endian f32 file and prints one
//! line per run: `rows=<n> vocab=<v> median_us=<t> entropy0=<H> confidence0=<C>`.
//! Driven by `benches/stats_vs_numpy.py`, which times numpy on the same rows in the same run.
//!
//! Usage: `stats_vs_numpy FILE VOCAB REPS`

use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, file, vocab, reps] = args.as_slice() else {
        return Err("usage: stats_vs_numpy FILE VOCAB REPS".into());
    };
    let vocab: usize = vocab.parse().map_err(|e| format!("VOCAB: {e}"))?;
    let reps: usize = reps.parse().map_err(|e| format!("REPS: {e}"))?;
    let bytes = std::fs::read(file).map_err(|e| format!("{file}: {e}"))?;
    if vocab == 0 || bytes.len() % (4 * vocab) != 0 {
        return Err(format!(
            "{file}: {} bytes is not a whole number of f32 rows of {vocab}",
            bytes.len()
        )
        .into());
    }
    let data: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let rows: Vec<&[f32]> = data.chunks_exact(vocab).collect();
    let first = t2po_control::token_stats(rows[0], 20)?;
    let mut times = Vec::with_capacity(reps);
    for r in 0..reps {
        let row = rows[r % rows.len()];
        let start = Instant::now();
        let s = t2po_control::token_stats(std::hint::black_box(row), 20)?;
        times.push(start.elapsed().as_secs_f64());
        std::hint::black_box(s);
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "rows={} vocab={vocab} median_us={:.3} entropy0={} confidence0={}",
        rows.len(),
        times[times.len() / 2] * 1e6,
        first.entropy,
        first.confidence
    );
    Ok(())
}
