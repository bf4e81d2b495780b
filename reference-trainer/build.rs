//! Probes whether `core::arch::x86_64::_mm_prefetch` is a safe function on this toolchain when
//! called from a closure inside an `#[target_feature(enable = "avx2")]` function — the decode
//! matmul's look-ahead into the next weight panel (`model::decode::matmul_impl`, whose AVX2 and
//! AVX-512 versions `multiversion` compiles with those attributes). It is from stdarch's change
//! that made the x86 prefetch intrinsics safe; on the declared minimum Rust, 1.89, it is `unsafe`.
//! Where it is safe, `cfg(t2po_safe_prefetch)` turns the look-ahead on; elsewhere the matmul runs
//! without it, and the crate keeps `unsafe` out of everything but its FFI.
//!
//! A build whose baseline already has AVX2 (`-C target-cpu=native` on such a CPU) leaves it off:
//! `multiversion`'s fallback version then matches the AVX2 arm without carrying the attribute,
//! where the call would need `unsafe`.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(t2po_safe_prefetch)");
    println!("cargo::rerun-if-changed=build.rs");
    let baseline_avx2 = std::env::var("CARGO_CFG_TARGET_FEATURE")
        .map(|f| f.split(',').any(|f| f == "avx2"))
        .unwrap_or(false);
    let probe = r#"
        #[target_feature(enable = "avx2")]
        pub fn probe(line: &[f32]) {
            let hint = || core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T1 }>(
                line.as_ptr().cast::<i8>(),
            );
            hint()
        }
    "#;
    if !baseline_avx2 && autocfg::new().probe_raw(probe).is_ok() {
        println!("cargo::rustc-cfg=t2po_safe_prefetch");
    }
}
