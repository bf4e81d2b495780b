//! The kernel logic (kernels/t2po_kernels.cuh, compiled for the host) against t2po-control, in
//! the normal test suite, without a GPU:
//! - statistics of random and adversarial rows (f32/bf16/f16, many splits) within 1e-4 relative
//!   (+1e-5 absolute) of `token_stats`, and the same error status for bad rows;
//! - the TTI state machine on `t2po_seq` bit for bit equal to `Sequence` (same bytes, same steps);
//! - the fused step (accept previous token → observe → override) equal to t2po-control fed the
//!   kernel's statistics, with overridden rows exactly all −inf but the forced id;
//! - the struct sizes the kernels are compiled with equal the Rust ones;
//! - opening the device without a driver is a clean error; NVRTC compiles the kernels for
//!   sm_90 (ignored: it needs libnvrtc; `.ci/run` installs it and asks for it); the device step
//!   against the host kernel is an ignored test for the GPU machine.

use half::f16;
use proptest::prelude::*;
use t2po_control::{token_stats, Config, Sequence, Step, ThinkStart, TokenStats};
use t2po_cuda::{gpu, host, plan, Dtype, Mode};
use t2po_fixtures::rows::{families, fits_f16};
use t2po_fixtures::Rng;

fn close(got: f32, want: f32) -> bool {
    (got as f64 - want as f64).abs() <= 1e-4 * (want as f64).abs() + 1e-5
}

fn bytes_f32(xs: &[f32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bytes_u16(xs: &[u16]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Stats of `rows` (each of `vocab`) through the host-compiled kernel, statistics only.
fn kernel_stats(
    rows: &[Vec<f32>],
    vocab: usize,
    dtype: Dtype,
    j: u32,
    sms: u32,
) -> (Vec<TokenStats>, Vec<Step>, Vec<Vec<f32>>) {
    let flat: Vec<f32> = rows.iter().flatten().copied().collect();
    let (mut raw, widened): (Vec<u8>, Vec<Vec<f32>>) = match dtype {
        Dtype::F32 => (bytes_f32(&flat), rows.to_vec()),
        Dtype::Bf16 | Dtype::F16 => {
            let (h, w) = dtype.encode_half(&flat).expect("a 16-bit type");
            (bytes_u16(&h), w.chunks(vocab).map(|c| c.to_vec()).collect())
        }
    };
    let mut seqs = vec![Sequence::new(&Config::paper()).unwrap(); rows.len()];
    let prev = vec![-1; rows.len()];
    let mode = Mode {
        control: false,
        override_logits: false,
    };
    let out = host::control_step(
        &mut raw,
        dtype,
        vocab,
        vocab as u32,
        j,
        sms,
        &mut seqs,
        &prev,
        mode,
    )
    .unwrap();
    (out.stats, out.steps, widened)
}

#[test]
fn exp_and_half_conversion_match() {
    let mut worst = 0f64;
    let mut d = -87.0f32;
    while d <= 0.0 {
        let got = host::exp_neg(d) as f64;
        let want = (d as f64).exp();
        worst = worst.max(((got - want) / want).abs());
        d += 0.0007;
    }
    assert!(worst < 6e-7, "exp_neg worst relative error {worst}");
    for bits in 0..=u16::MAX {
        let (got, want) = (host::f16_to_f32(bits), f16::from_bits(bits).to_f32());
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "f16 {bits:#06x}: {got} vs {want}"
        );
    }
}

#[test]
fn statistics_match_token_stats_across_splits_and_types() {
    let mut rng = Rng::new(0x51DE_CAFE);
    for &v in &[1usize, 7, 300, 8193, 32_000, 151_936] {
        for (name, row) in families(v, &mut rng) {
            for dtype in [Dtype::F32, Dtype::Bf16, Dtype::F16] {
                if dtype == Dtype::F16 && !fits_f16(name) {
                    continue; // beyond f16
                }
                for &(j, sms) in &[(20u32, 132u32), (1, 1), (64, 16)] {
                    let rows = vec![row.clone(), row.iter().rev().copied().collect()];
                    let (stats, steps, widened) = kernel_stats(&rows, v, dtype, j, sms);
                    for (b, w) in widened.iter().enumerate() {
                        let want = token_stats(w.as_slice(), j).unwrap();
                        let got = stats[b];
                        assert_eq!(steps[b].status, 0, "{name} {dtype:?} V={v}");
                        let ok = close(got.entropy, want.entropy)
                            && close(got.confidence, want.confidence)
                            && got.max_logit == want.max_logit
                            && close(got.log_sum_exp, want.log_sum_exp)
                            && got.top_count == want.top_count
                            && got.vocab == want.vocab;
                        assert!(
                            ok,
                            "{name} {dtype:?} V={v} j={j} sms={sms}: {got:?} vs {want:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn bad_rows_get_the_same_status() {
    let v = 20_000;
    let mut nan = vec![0.5f32; v];
    nan[12_345] = f32::NAN;
    let mut inf = vec![0.5f32; v];
    inf[3] = f32::INFINITY;
    let masked = vec![f32::NEG_INFINITY; v];
    for (row, want) in [(nan, 31u32), (inf, 32), (masked, 33)] {
        let (_, steps, _) = kernel_stats(std::slice::from_ref(&row), v, Dtype::F32, 20, 132);
        assert_eq!(steps[0].status, want);
        let cpu = token_stats(row.as_slice(), 20).unwrap_err();
        assert_eq!(t2po_control::Status::from(cpu) as u32, want);
    }
}

fn stats_of(h: f32, c: f32) -> TokenStats {
    TokenStats {
        entropy: h,
        confidence: c,
        max_logit: 1.0,
        log_sum_exp: 2.0,
        vocab: 151_936,
        top_count: 20,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    /// The device state machine evolves the `t2po_seq` bytes exactly as `Sequence` does.
    #[test]
    fn state_machine_is_bit_identical(released in any::<bool>(), trigger in 0u32..3,
                                      min_len in 0u32..20, max_think in 1u32..80,
                                      start in 0u32..3,
                                      ops in prop::collection::vec((0.0f32..8.0, 0.0f32..16.0, 0u32..12, any::<bool>()), 1..300)) {
        let mut cfg = if released { Config::released() } else { Config::paper() };
        // Window mean, patience or peak-cut.
        cfg.trigger = t2po_control::Trigger::from_u32(trigger).unwrap() as u32;
        if trigger == t2po_control::Trigger::Patience as u32 { cfg.patience = 5; cfg.patience_tol = 0.05; }
        cfg.min_len = min_len.min(max_think);
        cfg.max_think = max_think;
        cfg.think_open = 3;
        cfg.think_close = 4;
        cfg.queue = [4, 8, 9, 0, 0, 0, 0, 0];
        cfg.queue_len = 3;
        let mut cpu = Sequence::new(&cfg).unwrap();
        cpu.begin_generation(ThinkStart::from_u32(start).unwrap());
        let mut dev = cpu;
        for (h, c, token, flat) in ops {
            // Flat stretches make the triggers fire.
            let st = if flat { stats_of(2.0, 5.0) } else { stats_of(h, c) };
            let a = cpu.observe(&st);
            let b = host::observe(&mut dev, &st);
            match a {
                Ok(step) => prop_assert_eq!(step, b),
                Err(e) => prop_assert_eq!(t2po_control::Status::from(e) as u32, b.status),
            }
            prop_assert_eq!(cpu, dev);
            let tok = match a { Ok(s) if s.forced_token >= 0 => s.forced_token as u32, _ => token };
            let ra = cpu.accept(tok);
            let rb = host::accept(&mut dev, tok);
            prop_assert_eq!(ra.map_or_else(|e| t2po_control::Status::from(e) as u32, |_| 0), rb);
            prop_assert_eq!(cpu, dev);
        }
    }
}

#[test]
fn fused_step_matches_the_cpu_controller() {
    const V: usize = 4096;
    const B: usize = 3;
    let mut cfg = Config::paper();
    cfg.think_open = 3;
    cfg.think_close = 4;
    cfg.queue = [4, 10, 11, 0, 0, 0, 0, 0];
    cfg.queue_len = 3;
    cfg.min_len = 4;
    cfg.max_think = 60;
    let mut cpu: Vec<Sequence> = (0..B).map(|_| Sequence::new(&cfg).unwrap()).collect();
    for s in cpu.iter_mut() {
        s.begin_generation(ThinkStart::Inside);
    }
    let mut dev = cpu.clone();
    let mut rng = Rng::new(99);
    let mut prev = vec![-1i32; B];
    let mut forced_rows = 0;
    for t in 0..80 {
        let rows: Vec<Vec<f32>> = (0..B)
            .map(|b| {
                let settle = t > 20 + 10 * b;
                (0..V)
                    .map(|i| {
                        if i == (t * 7 + b) % V {
                            if settle {
                                14.0
                            } else {
                                6.0 + 8.0 * rng.next_f64() as f32
                            }
                        } else {
                            rng.normal() as f32
                        }
                    })
                    .collect()
            })
            .collect();
        let flat: Vec<f32> = rows.iter().flatten().copied().collect();
        let mut raw = bytes_f32(&flat);
        let mode = Mode {
            control: true,
            override_logits: true,
        };
        let out = host::control_step(
            &mut raw,
            Dtype::F32,
            V,
            V as u32,
            cfg.top_j,
            132,
            &mut dev,
            &prev,
            mode,
        )
        .unwrap();
        let overridden: Vec<f32> = raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        for b in 0..B {
            if prev[b] >= 0 {
                cpu[b].accept(prev[b] as u32).unwrap();
            }
            let want_stats = token_stats(rows[b].as_slice(), cfg.top_j).unwrap();
            let got = out.stats[b];
            assert!(
                close(got.entropy, want_stats.entropy)
                    && close(got.confidence, want_stats.confidence),
                "t={t} b={b}"
            );
            // Decisions: the CPU controller fed the kernel's statistics takes the same step.
            let want = cpu[b].observe(&got).unwrap();
            assert_eq!(out.steps[b], want, "t={t} b={b}");
            let row = &overridden[b * V..(b + 1) * V];
            match want.forced() {
                Some(tok) => {
                    forced_rows += 1;
                    assert!(row.iter().enumerate().all(|(i, &x)| if i == tok as usize {
                        x == 0.0
                    } else {
                        x == f32::NEG_INFINITY
                    }));
                    prev[b] = tok as i32;
                }
                None => {
                    assert_eq!(row, rows[b].as_slice(), "an unforced row is untouched");
                    prev[b] = 20 + (t as i32 % 50);
                }
            }
        }
        assert_eq!(
            cpu, dev,
            "t={t}: the device-resident state equals the CPU's"
        );
    }
    assert_eq!(
        forced_rows,
        3 * B,
        "every sequence fired once and forced its queue"
    );
    for s in &dev {
        assert!(s.turn_signal().is_ok());
    }
}

#[test]
fn launch_plans_fit_the_kernel() {
    for &(b, v, j) in &[
        (1u32, 151_936u32, 20u32),
        (8, 151_936, 64),
        (256, 151_936, 20),
        (64, 32_000, 1),
        (1, 1, 1),
    ] {
        let p = plan(b, v, j, 132).unwrap();
        assert!(
            p.chunk <= t2po_cuda::MAX_CHUNK
                && p.splits * t2po_cuda::J_CAP + t2po_cuda::J_CAP <= t2po_cuda::MAX_CHUNK
        );
        assert!(p.chunk as u64 * p.splits as u64 >= v as u64);
    }
    assert!(plan(1, 151_936, 0, 132).is_err());
    assert!(plan(0, 10, 20, 132).is_err());
    assert!(plan(1, 2_000_000, 20, 132).is_err());
}

#[test]
fn struct_layouts_agree_with_the_kernels() {
    let c = host::sizes();
    assert_eq!(
        c.rust(),
        c,
        "t2po_types.h as compiled by the host C compiler vs the Rust structs: regenerate the \
         header (T2PO_BLESS=1 cargo test -p t2po-control --test header) or fix the kernels"
    );
    // The partials buffer is sized from this: three floats and two counters.
    assert_eq!(c.partial, 20);
}

#[test]
fn host_step_refuses_short_buffers_with_an_error() {
    let cfg = Config::paper();
    let mut seqs = vec![Sequence::new(&cfg).unwrap(); 2];
    let mode = Mode {
        control: true,
        override_logits: false,
    };
    let mut short = vec![0u8; 4 * 100];
    assert_eq!(
        host::control_step(
            &mut short,
            Dtype::F32,
            64,
            64,
            4,
            4,
            &mut seqs,
            &[-1, -1],
            mode
        ),
        Err(host::HostError::Size {
            what: "logits bytes",
            got: 400,
            expected: 4 * 128
        })
    );
    let mut raw = vec![0u8; 4 * 128];
    assert_eq!(
        host::control_step(
            &mut raw,
            Dtype::F32,
            32,
            64,
            4,
            4,
            &mut seqs,
            &[-1, -1],
            mode
        ),
        Err(host::HostError::Size {
            what: "row_stride",
            got: 32,
            expected: 64
        })
    );
    assert_eq!(
        host::control_step(&mut raw, Dtype::F32, 64, 64, 4, 4, &mut seqs, &[-1], mode),
        Err(host::HostError::Size {
            what: "prev_tokens",
            got: 1,
            expected: 2
        })
    );
    assert!(matches!(
        host::control_step(
            &mut raw,
            Dtype::F32,
            64,
            64,
            0,
            4,
            &mut seqs,
            &[-1, -1],
            mode
        ),
        Err(host::HostError::Plan(_))
    ));
}

/// Without a CUDA driver, opening the device is a typed [`gpu::GpuError::NoGpu`] naming the
/// missing library (never a panic); with one, it opens.
#[test]
fn opening_the_device_is_a_clean_error_without_a_driver() {
    let cfg = Config::paper();
    let seqs = vec![Sequence::new(&cfg).unwrap(); 2];
    match gpu::open_context() {
        Ok(_) => {}
        Err(gpu::GpuError::NoGpu(why)) => {
            assert!(!why.is_empty());
            assert!(matches!(
                gpu::Gpu::open(&seqs, 151_936, 20, "sm_90"),
                Err(gpu::GpuError::NoGpu(_))
            ));
        }
        Err(e) => panic!("opening a GPU: expected Ok or NoGpu, got {e}"),
    }
}

#[test]
#[ignore = "needs GPU: bash t2po-cuda/gpu_check.sh"]
fn device_step_matches_the_host_kernel() {
    if let Err(e) = gpu::open_context() {
        panic!("this test needs a GPU: {e}");
    }
    // A GPU is present: one small step must agree with the host-compiled kernel.
    let cfg = Config::paper();
    let mut seqs = vec![Sequence::new(&cfg).unwrap(); 2];
    for s in seqs.iter_mut() {
        s.begin_generation(ThinkStart::Inside);
    }
    let mut g = gpu::Gpu::open(&seqs, 151_936, 20, "sm_90").expect("open the GPU controller");
    let mut rng = Rng::new(5);
    let host_rows: Vec<f32> = (0..2 * 151_936).map(|_| rng.normal() as f32).collect();
    let mut dev_rows = g.stream().clone_htod(&host_rows).unwrap();
    g.launch(
        &mut dev_rows,
        Dtype::F32,
        151_936,
        gpu::PrevTokens::None,
        Mode {
            control: true,
            override_logits: false,
        },
    )
    .unwrap();
    let out = g.results().unwrap();
    let mut raw = bytes_f32(&host_rows);
    let want = host::control_step(
        &mut raw,
        Dtype::F32,
        151_936,
        151_936,
        20,
        132,
        &mut seqs,
        &[-1, -1],
        Mode {
            control: true,
            override_logits: false,
        },
    )
    .unwrap();
    for b in 0..2 {
        assert!(close(out.stats[b].entropy, want.stats[b].entropy));
        assert!(close(out.stats[b].confidence, want.stats[b].confidence));
        assert_eq!(out.steps[b], want.steps[b]);
    }
}

/// NVRTC compiles the kernels for sm_90. Ignored unless asked for (`--ignored`): it needs
/// libnvrtc, and when asked for, a library that does not load is a failure, not a skip.
#[test]
#[ignore = "needs libnvrtc: pip install --target ~/.cache/t2po-nvrtc nvidia-cuda-nvrtc==13.0.88; then LD_LIBRARY_PATH=~/.cache/t2po-nvrtc/nvidia/cu13/lib cargo test -p t2po-cuda --test differential -- --ignored nvrtc"]
fn nvrtc_compiles_the_kernels() {
    match gpu::compile("sm_90") {
        Ok(ptx) => {
            let src = ptx.to_src();
            assert!(
                src.contains(".entry t2po_control_step")
                    && src.contains(".entry t2po_accept_tokens")
            );
            eprintln!(
                "NVRTC compiled the kernels for sm_90: {} bytes of PTX",
                src.len()
            );
            if let Some(path) = std::env::var_os("T2PO_PTX_OUT") {
                std::fs::write(path, &src).expect("write the PTX");
            }
        }
        Err(gpu::GpuError::NoNvrtc) => panic!(
            "libnvrtc is not loadable (LD_LIBRARY_PATH={:?}): pip install nvidia-cuda-nvrtc==13.0.88 \
             and put its lib folder on LD_LIBRARY_PATH",
            std::env::var_os("LD_LIBRARY_PATH")
        ),
        Err(e) => panic!("NVRTC rejected the kernels: {e}"),
    }
}
