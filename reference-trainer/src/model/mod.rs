//! The policy model: Qwen3 (and the Llama and Qwen2 families, as flags of the same model) in
//! candle with Hugging Face weight names ([`qwen3`]), its
//! differentiable ops ([`ops`], composed: the reference) and their fused kernels ([`fused`]), the batched decode cache ([`kv_cache`]) and checkpoints in the
//! Hugging Face layout ([`checkpoint`]); the rollout's allocation-free f32 CPU decode step
//! ([`decode`]).

pub mod checkpoint;
pub mod decode;
pub mod fused;
pub mod kv_cache;
pub mod ops;
pub mod qwen3;

pub use decode::{DecodeState, Decoder};
pub use kv_cache::KvCache;
pub use qwen3::{Arch, PrefilledPrompt, Qwen3, Qwen3Config, TokenLogProbs};

/// The code path the model's kernels take on `device`: on the CPU, the widest SIMD target of
/// the multiversioned kernels (decode, fused ops, sampler, token statistics) this CPU supports.
///
/// A run is bit-for-bit reproducible where its kernels take the same path; another path sums
/// in another order, and one flipped draw makes the rest of the run a different sample (the
/// main job measured 0.317 held-out success after the cold start on an AVX-512 CPU where an
/// AVX2-only one gives 0.314, same build and seed). Runs print it and write it to
/// `results.md` so a figure that does not reproduce can be told apart from a change.
pub fn kernel_path(device: &candle_core::Device) -> &'static str {
    if device.is_cuda() {
        return "CUDA";
    }
    #[cfg(target_arch = "x86_64")]
    {
        let avx2_fma = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
        if avx2_fma && is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl") {
            "x86_64 AVX-512"
        } else if avx2_fma {
            "x86_64 AVX2+FMA"
        } else {
            "x86_64 without AVX2"
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        "aarch64"
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        "portable"
    }
}

#[cfg(test)]
mod tests {
    use super::kernel_path;

    #[test]
    fn kernel_path_names_the_widest_target_this_cpu_takes() {
        let path = kernel_path(&candle_core::Device::Cpu);
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let avx2_fma = has!("avx2") && has!("fma");
            let expected = match (avx2_fma, has!("avx512f") && has!("avx512vl")) {
                (true, true) => "x86_64 AVX-512",
                (true, false) => "x86_64 AVX2+FMA",
                (false, _) => "x86_64 without AVX2",
            };
            assert_eq!(path, expected);
        }
        #[cfg(not(target_arch = "x86_64"))]
        assert!(!path.is_empty());
    }
}
