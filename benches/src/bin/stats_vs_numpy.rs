//! Times `token_stats` (top-20) on rows read from a raw little-endian f32 file and prints one
//! line per run: `rows=<n> vocab=<v> median_us=<t> entropy0=<H> confidence0=<C>`.
//! Driven by `benches/stats_vs_numpy.py`, which times numpy on the same rows in the same run.
//!
//! Usage: `stats_vs_numpy FILE VOCAB REPS`
//!
//! The rows live where numpy keeps its own: numpy (≥ 1.16, on Linux) advises the kernel to back
//! every allocation of 4 MiB or more with transparent huge pages (`madvise(MADV_HUGEPAGE)`), so
//! the script's 16 rows (9.7 MB at V = 151 936) sit in 2 MiB pages on its side. A plain `Vec`
//! here would sit in 4 KiB pages, one per 1024 entries of a row, and on a virtual machine every
//! one of them costs a nested page walk when the row streams in from L3 (measured on an Intel
//! Xeon VM: 34.6 → 30.2 µs for the same kernel). So the rows go into an anonymous mapping,
//! 2 MiB aligned, with the same advice; `T2PO_BENCH_THP=0` keeps them in a plain `Vec` instead.
//! The output line says which (`thp=advised`, `thp=refused` when the kernel said no, `thp=off`).

use memmap2::{Advice, MmapMut};
use std::time::Instant;

/// 2 MiB, the size of a transparent huge page on x86-64.
const HUGE_PAGE: usize = 2 << 20;

/// Room for `len` f32 starting on a 2 MiB boundary, advised for transparent huge pages: the map,
/// the byte offset of the aligned start, and whether the advice was taken.
fn huge_page_rows(len: usize) -> std::io::Result<(MmapMut, usize, bool)> {
    let bytes = 4 * len;
    let map = MmapMut::map_anon(bytes + HUGE_PAGE)?;
    let start = map.as_ptr() as usize;
    let offset = start.next_multiple_of(HUGE_PAGE) - start;
    let advised = map.advise(Advice::HugePage).is_ok();
    Ok((map, offset, advised))
}

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
    let values = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let len = bytes.len() / 4;
    let thp = std::env::var("T2PO_BENCH_THP").map_or(true, |v| v != "0");
    let (mut plain, mut map) = (Vec::new(), None);
    let (data, placement): (&[f32], &str) = if thp {
        let (m, offset, advised) = huge_page_rows(len).map_err(|e| format!("mmap: {e}"))?;
        let m = map.insert(m);
        let data: &mut [f32] = bytemuck::cast_slice_mut(&mut m[offset..offset + 4 * len]);
        for (d, v) in data.iter_mut().zip(values) {
            *d = v;
        }
        (data, if advised { "advised" } else { "refused" })
    } else {
        plain.extend(values);
        (&plain, "off")
    };
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
        "rows={} vocab={vocab} median_us={:.3} entropy0={} confidence0={} thp={placement}",
        rows.len(),
        times[times.len() / 2] * 1e6,
        first.entropy,
        first.confidence
    );
    Ok(())
}
