//! The allocator setting the binaries (trainer, benches) run with, and the process's peak memory.

/// `mi_option_purge_delay` in mimalloc v3's `mi_option_t` (include/mimalloc.h; the sys crate
/// has no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// The purge delay the binaries run with unless `MIMALLOC_PURGE_DELAY` is set, in ms.
///
/// Freed memory stays mapped this long before mimalloc returns it to the OS. Candle allocates
/// every op's output afresh, and purging right away made every training step fault its pages
/// back in (measured on the default model: SFT 2.2 K → 3.5 K tok/s without purging). Never
/// purging (the setting before) kept every phase's freed memory for good: SmolLM2-135M's cold
/// start (SFT activations, the checkpoint's buffers) and its evaluation (KV caches, prefill
/// chunks) each reused little of the other's, and the process grew to 23 GB and was killed on
/// this 24 GB machine, where either phase alone peaks near 12 GB. With a delay, a phase's
/// memory goes back once it is done, and [`release_free_memory`] hands it back at once at the
/// trainer's phase boundaries.
pub const PURGE_DELAY_MS: std::ffi::c_long = 10_000;

/// Call first thing in `main` of a binary that uses mimalloc as its global allocator: sets the
/// purge delay to [`PURGE_DELAY_MS`] unless the user set `MIMALLOC_PURGE_DELAY`.
#[allow(unsafe_code)]
pub fn tune_allocator() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: `mi_option_set` only stores an integer in mimalloc's option table; any value
        // is valid for this option (ms; -1 = never purge) and it may be called at any time.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    }
}

/// Returns the memory freed so far to the OS now instead of after the purge delay
/// (`mi_collect(true)`: every arena's free slices are purged, the calling thread's empty pages
/// freed). The trainer calls it where a phase ends (the cold start, a rollout, an update, an
/// evaluation, a checkpoint), so the next phase starts from the memory it needs and not from
/// the last one's peak. Does nothing useful, and no harm, in a process that does not allocate
/// with mimalloc; with `MIMALLOC_PURGE_DELAY=-1` nothing is ever returned.
#[allow(unsafe_code)]
pub fn release_free_memory() {
    // SAFETY: `mi_collect` takes no pointers and may be called from any thread at any time.
    unsafe { libmimalloc_sys::mi_collect(true) };
}

/// The process's peak resident set size in bytes (`VmHWM` of `/proc/self/status`), where the
/// system reports it (Linux); `None` elsewhere.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    #[test]
    fn peak_rss_is_reported_on_linux() {
        // Written, so the pages are resident (a zeroed allocation may stay unmapped).
        let big: Vec<u8> = (0..32usize << 20).map(|i| i as u8).collect();
        std::hint::black_box(&big);
        let peak = super::peak_rss_bytes();
        if cfg!(target_os = "linux") {
            assert!(peak.unwrap() >= 32 << 20, "{peak:?}");
        }
    }
}
