//! The trainer's allocator setting (`tune_allocator`, `release_free_memory`) in a process that
//! allocates with mimalloc, as the binaries do: freed memory stays mapped through the purge
//! delay (a training step reuses it without faulting pages back in) and goes back to the OS at
//! once where the trainer says a phase ended. Its own test binary: it reads this process's
//! resident set, so no other test may allocate alongside it.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The resident set now (`VmRSS`), in MiB.
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb / 1024.0
}

#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "reads /proc/self/status")]
fn freed_memory_is_kept_through_a_phase_and_returned_at_its_end() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        eprintln!("MIMALLOC_PURGE_DELAY is set: this test checks the trainer's own setting");
        return;
    }
    reference_trainer::tune_allocator();
    let base = rss_mib();
    // 1 GiB in 256 KiB blocks (a layer's activations, not one huge block), every page written.
    let blocks: Vec<Vec<u8>> = (0..4096).map(|i| vec![i as u8 | 1; 256 << 10]).collect();
    std::hint::black_box(&blocks);
    let full = rss_mib();
    drop(blocks);
    let held = rss_mib();
    reference_trainer::release_free_memory();
    let after = rss_mib();
    eprintln!(
        "RSS MiB: base {base:.0}, 1 GiB live {full:.0}, freed {held:.0}, released {after:.0}"
    );
    assert!(
        full - base > 900.0,
        "the blocks are resident: {base:.0} → {full:.0}"
    );
    assert!(
        held - base > 900.0,
        "freed memory stays mapped within the purge delay: {base:.0} → {held:.0}"
    );
    assert!(
        after - base < 100.0,
        "release_free_memory returns it: {base:.0} → {after:.0}"
    );
}
