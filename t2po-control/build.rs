//! Probes whether this toolchain's `core::arch::x86_64::_mm_prefetch` is a safe function (it is
//! from stdarch's change that made the x86 prefetch intrinsics safe; on the declared minimum Rust,
//! 1.89, it is `unsafe`). Where it is safe, `cfg(t2po_safe_prefetch)` turns on the statistics
//! kernel's `PREFETCHT0` look-ahead; elsewhere the kernel keeps its demand-load touch, and the
//! crate's only `unsafe` stays in its FFI.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(t2po_safe_prefetch)");
    println!("cargo::rustc-check-cfg=cfg(t2po_static_simd)");
    // A build whose baseline already has AVX2 or AVX-512F (`-C target-cpu=native` on such a
    // CPU): `multiversion`'s fallback clone then matches the vector arms of `match_target!`
    // without carrying `#[target_feature]`, where calling the hand-written kernels would need
    // `unsafe` (Rust does not count the build's features for that). Such a build takes the
    // portable paths (which the compiler vectorises for the baseline) and says so.
    let features = std::env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
    if features.split(',').any(|f| f == "avx2" || f == "avx512f") {
        println!("cargo::rustc-cfg=t2po_static_simd");
        println!(
            "cargo::warning=t2po-control: this build's baseline has AVX2/AVX-512F (e.g. -C \
             target-cpu=native), so the runtime-dispatched AVX2/AVX-512 kernels are off and the \
             portable paths run; build without it for those kernels"
        );
    }
    println!("cargo::rerun-if-changed=build.rs");
    // Fails to compile where the call needs `unsafe` (error E0133) and on targets without
    // `core::arch::x86_64`, so the cfg is set only where the safe call exists.
    let probe = r#"
        #[target_feature(enable = "sse")]
        pub fn probe(line: &[f32]) {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                line.as_ptr().cast::<i8>(),
            )
        }
    "#;
    if autocfg::new().probe_raw(probe).is_ok() {
        println!("cargo::rustc-cfg=t2po_safe_prefetch");
    }
}
