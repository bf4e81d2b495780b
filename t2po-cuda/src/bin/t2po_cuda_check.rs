//! The GPU check of t2po-cuda (run by `t2po-cuda/gpu_check.sh` on the GPU machine).
//!
//! 1. Opens device 0 and compiles the kernels with NVRTC for `sm_90` (prints driver/NVRTC facts;
//!    exits 2 with a message when there is no GPU).
//! 2. Correctness: for f32/bf16/f16 and B ∈ {1, 8, 64}, V = 151936, on fresh random rows and on
//!    adversarial rows (NaN, +inf, all −inf, and t2po-fixtures' edge-case families): outputs
//!    are poisoned first and must all be written; statistics within 1e-4 relative of
//!    t2po-control (bad rows: the same status); then a 64-step decode with control + override,
//!    whose decisions must equal t2po-control's fed the same statistics, and whose device state
//!    must equal the CPU's byte for byte.
//! 3. Speed: B ∈ {1, 8, 64, 256} × {f32, bf16}, CUDA events, median of 100 launches after
//!    warm-up, rotating 4+ input buffers; the device-to-device copy bandwidth gives the read-once
//!    floor B·V·bytes / read bandwidth; an empty launch gives the launch floor. Prints a table and
//!    writes `$OUT/t2po_cuda_speed.json` (and the PTX to `$OUT/t2po_kernels.ptx` for ptxas).
//!
//! Exit status: 0 all checks passed, 1 a check failed, 2 no GPU.

use cudarc::driver::{CudaSlice, DeviceRepr};
use half::bf16;
use std::time::Instant;
use t2po_control::{token_stats, Config, Sequence, Status, ThinkStart};
use t2po_cuda::gpu::{self, Gpu, GpuError, PrevTokens};
use t2po_cuda::{Dtype, Mode};
use t2po_fixtures::rows::families;
use t2po_fixtures::Rng;

const V: usize = 151_936;

fn close(got: f32, want: f32) -> bool {
    (got as f64 - want as f64).abs() <= 1e-4 * (want as f64).abs() + 1e-5
}

/// `b` rows of `V`: N(0, 3²) rows, or with `adversarial` a cycle of the error rows (NaN, +inf,
/// all −inf) and the shared edge-case families.
fn rows_for(b: usize, rng: &mut Rng, adversarial: bool) -> Vec<Vec<f32>> {
    let fams = if adversarial {
        families(V, rng)
    } else {
        Vec::new()
    };
    (0..b)
        .map(|i| {
            if !adversarial {
                return (0..V).map(|_| (3.0 * rng.normal()) as f32).collect();
            }
            let k = i % (fams.len() + 3);
            let mut r: Vec<f32> = (0..V).map(|_| (3.0 * rng.normal()) as f32).collect();
            match k {
                0 => r[V / 3] = f32::NAN,
                1 => r[5] = f32::INFINITY,
                2 => r.fill(f32::NEG_INFINITY),
                _ => r.clone_from(&fams[k - 3].1),
            }
            r
        })
        .collect()
}

/// A batch on the device in one of the two element types, and its rows widened to f32.
type Uploaded = (
    Option<CudaSlice<f32>>,
    Option<CudaSlice<u16>>,
    Vec<Vec<f32>>,
);

/// Converts rows to the device element type; returns the device buffer and the widened rows.
fn upload(g: &Gpu, rows: &[Vec<f32>], dtype: Dtype) -> Result<Uploaded, GpuError> {
    let flat: Vec<f32> = rows.iter().flatten().copied().collect();
    Ok(match dtype {
        Dtype::F32 => (Some(g.stream().clone_htod(&flat)?), None, rows.to_vec()),
        Dtype::Bf16 | Dtype::F16 => {
            let (bits, wide) = dtype.encode_half(&flat).expect("a 16-bit type");
            (
                None,
                Some(g.stream().clone_htod(&bits)?),
                wide.chunks(V).map(|c| c.to_vec()).collect(),
            )
        }
    })
}

fn launch_any(
    g: &mut Gpu,
    f: &mut Option<CudaSlice<f32>>,
    h: &mut Option<CudaSlice<u16>>,
    dtype: Dtype,
    prev: PrevTokens<'_>,
    mode: Mode,
) -> Result<(), GpuError> {
    match (f, h) {
        (Some(f), _) => g.launch(f, dtype, V, prev, mode),
        (_, Some(h)) => g.launch(h, dtype, V, prev, mode),
        _ => unreachable!("one buffer is present"),
    }
}

/// `T2PO_CHECK_QUICK=1` (used under compute-sanitizer): small batches, no speed run.
fn quick() -> bool {
    std::env::var_os("T2PO_CHECK_QUICK").is_some()
}

fn check_stats(failures: &mut Vec<String>) -> Result<(), GpuError> {
    let mut rng = Rng::new(0xC0FFEE);
    for dtype in [Dtype::F32, Dtype::Bf16, Dtype::F16] {
        let sizes: &[usize] = if quick() { &[1, 8] } else { &[1, 8, 64] };
        for &b in sizes {
            for adversarial in [false, true] {
                let seqs = vec![Sequence::new(&Config::paper()).unwrap(); b];
                let mut g = Gpu::open(&seqs, V as u32, 20, "sm_90")?;
                let rows = rows_for(b, &mut rng, adversarial && dtype != Dtype::F16);
                let (mut f, mut h, wide) = upload(&g, &rows, dtype)?;
                launch_any(
                    &mut g,
                    &mut f,
                    &mut h,
                    dtype,
                    PrevTokens::None,
                    Mode {
                        control: false,
                        override_logits: false,
                    },
                )?;
                let out = g.results()?;
                for (i, w) in wide.iter().enumerate() {
                    let got = out.stats[i];
                    let status = out.steps[i].status;
                    match token_stats(w.as_slice(), 20) {
                        Ok(want) => {
                            let ok = status == 0
                                && close(got.entropy, want.entropy)
                                && close(got.confidence, want.confidence)
                                && got.max_logit == want.max_logit
                                && close(got.log_sum_exp, want.log_sum_exp)
                                && got.top_count == want.top_count;
                            if !ok {
                                failures.push(format!("stats {dtype:?} B={b} row {i}: {got:?} vs {want:?} (status {status})"));
                            }
                        }
                        Err(e) => {
                            if status != Status::from(e) as u32 {
                                failures.push(format!(
                                    "status {dtype:?} B={b} row {i}: {status} vs {:?}",
                                    Status::from(e)
                                ));
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

fn check_control(failures: &mut Vec<String>) -> Result<(), GpuError> {
    const B: usize = 8;
    let mut cfg = Config::paper();
    cfg.min_len = 4;
    cfg.max_think = 40;
    let mut cpu: Vec<Sequence> = (0..B).map(|_| Sequence::new(&cfg).unwrap()).collect();
    for s in cpu.iter_mut() {
        s.begin_generation(ThinkStart::Inside);
    }
    let mut g = Gpu::open(&cpu, V as u32, cfg.top_j, "sm_90")?;
    let mut rng = Rng::new(7);
    let mut prev = vec![-1i32; B];
    for t in 0..64usize {
        let rows: Vec<Vec<f32>> = (0..B)
            .map(|b| {
                let peak = if t > 10 + 3 * b {
                    14.0
                } else {
                    6.0 + 8.0 * rng.next_f64() as f32
                };
                let mut r: Vec<f32> = (0..V).map(|_| rng.normal() as f32).collect();
                r[(t * 31 + b) % 150_000] = peak;
                r
            })
            .collect();
        let (mut f, mut h, _) = upload(&g, &rows, Dtype::F32)?;
        launch_any(
            &mut g,
            &mut f,
            &mut h,
            Dtype::F32,
            PrevTokens::Host(&prev),
            Mode {
                control: true,
                override_logits: true,
            },
        )?;
        let out = g.results()?;
        let overridden = g.stream().clone_dtoh(f.as_ref().unwrap())?;
        for b in 0..B {
            if prev[b] >= 0 {
                cpu[b].accept(prev[b] as u32).unwrap();
            }
            let want = cpu[b].observe(&out.stats[b]).unwrap();
            if out.steps[b] != want {
                failures.push(format!(
                    "decision t={t} b={b}: {:?} vs {want:?}",
                    out.steps[b]
                ));
            }
            let row = &overridden[b * V..(b + 1) * V];
            match want.forced() {
                Some(tok) => {
                    if !row.iter().enumerate().all(|(i, &x)| {
                        if i == tok as usize {
                            x == 0.0
                        } else {
                            x == f32::NEG_INFINITY
                        }
                    }) {
                        failures.push(format!("override t={t} b={b}"));
                    }
                    prev[b] = tok as i32;
                }
                None => prev[b] = 20 + (t as i32 % 50),
            }
        }
    }
    let dev = g.download()?;
    if dev != cpu {
        failures.push("device-resident state differs from the CPU's after 64 steps".into());
    }
    Ok(())
}

#[derive(Debug)]
struct Row {
    dtype: &'static str,
    b: usize,
    median_us: f64,
    floor_us: f64,
}

fn median_us<F: FnMut() -> Result<(), GpuError>>(
    g: &Gpu,
    mut f: F,
    n: usize,
) -> Result<f64, GpuError> {
    for _ in 0..10 {
        f()?;
    }
    g.stream().synchronize()?;
    let mut ts = Vec::with_capacity(n);
    for _ in 0..n {
        let start = g
            .stream()
            .record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))?;
        f()?;
        let end = g
            .stream()
            .record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))?;
        end.synchronize()?;
        ts.push(start.elapsed_ms(&end)? as f64 * 1e3);
    }
    ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Ok(ts[n / 2])
}

fn copy_bandwidth(g: &Gpu) -> Result<f64, GpuError> {
    let n = 512 * 1024 * 1024 / 4; // 2 GiB of f32 in two buffers
    let a = g.stream().alloc_zeros::<f32>(n)?;
    let mut b = g.stream().alloc_zeros::<f32>(n)?;
    let us = median_us(g, || Ok(g.stream().memcpy_dtod(&a, &mut b)?), 20)?;
    Ok(2.0 * n as f64 * 4.0 / (us * 1e-6) / 1e9) // GB/s read + write
}

fn speed(rows: &mut Vec<Row>, launch_floor_us: &mut f64) -> Result<f64, GpuError> {
    let seqs = vec![Sequence::new(&Config::paper()).unwrap(); 1];
    let g0 = Gpu::open(&seqs, V as u32, 20, "sm_90")?;
    let bw = copy_bandwidth(&g0)?;
    // An empty launch: the accept kernel over one sequence with no token.
    let mut g1 = Gpu::open(&seqs, V as u32, 20, "sm_90")?;
    *launch_floor_us = median_us(&g0, || g1.accept(&[-1]).map(|_| ()), 50)?;
    for (dtype, name) in [(Dtype::F32, "f32"), (Dtype::Bf16, "bf16")] {
        for &b in &[1usize, 8, 64, 256] {
            let seqs: Vec<Sequence> = (0..b)
                .map(|_| {
                    let mut s = Sequence::new(&Config::paper()).unwrap();
                    s.begin_generation(ThinkStart::Outside);
                    s
                })
                .collect();
            let mut g = Gpu::open(&seqs, V as u32, 20, "sm_90")?;
            let bytes = b * V * dtype.size();
            let nbuf = (2_000_000_000 / bytes).clamp(4, 8);
            let mut rng = Rng::new(b as u64 + 1);
            let host: Vec<f32> = (0..b * V).map(|_| (3.0 * rng.normal()) as f32).collect();
            let us = match dtype {
                Dtype::F32 => {
                    let mut bufs: Vec<CudaSlice<f32>> = (0..nbuf)
                        .map(|_| g.stream().clone_htod(&host))
                        .collect::<Result<_, _>>()?;
                    time_rotating(&mut g, &mut bufs, dtype)?
                }
                _ => {
                    let bits: Vec<u16> =
                        host.iter().map(|&x| bf16::from_f32(x).to_bits()).collect();
                    let mut bufs: Vec<CudaSlice<u16>> = (0..nbuf)
                        .map(|_| g.stream().clone_htod(&bits))
                        .collect::<Result<_, _>>()?;
                    time_rotating(&mut g, &mut bufs, dtype)?
                }
            };
            rows.push(Row {
                dtype: name,
                b,
                median_us: us,
                floor_us: bytes as f64 / (bw / 2.0 * 1e9) * 1e6,
            });
        }
    }
    Ok(bw)
}

fn time_rotating<T: DeviceRepr>(
    g: &mut Gpu,
    bufs: &mut [CudaSlice<T>],
    dtype: Dtype,
) -> Result<f64, GpuError> {
    let n = bufs.len();
    let mut i = 0;
    let mode = Mode {
        control: true,
        override_logits: false,
    };
    // The full step as an engine runs it: the sampled tokens are already on the device, so the
    // events bracket the launch alone. The first launch has nothing to accept.
    let tokens = g.stream().clone_htod(&vec![100i32; g.batch()])?;
    g.launch(&mut bufs[0], dtype, V, PrevTokens::None, mode)?;
    for _ in 0..10 {
        g.launch(
            &mut bufs[i % n],
            dtype,
            V,
            PrevTokens::Device(&tokens),
            mode,
        )?;
        i += 1;
    }
    g.stream().synchronize()?;
    let mut ts = Vec::new();
    for _ in 0..100 {
        let start = g
            .stream()
            .record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))?;
        g.launch(
            &mut bufs[i % n],
            dtype,
            V,
            PrevTokens::Device(&tokens),
            mode,
        )?;
        let end = g
            .stream()
            .record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))?;
        end.synchronize()?;
        ts.push(start.elapsed_ms(&end)? as f64 * 1e3);
        i += 1;
    }
    ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Ok(ts[ts.len() / 2])
}

/// JSON's number, or `null` for a figure the run could not measure (JSON has no NaN).
fn json_num(x: f64, decimals: usize) -> String {
    if x.is_finite() {
        format!("{x:.decimals$}")
    } else {
        "null".into()
    }
}

/// Prints the speed table and writes it to `OUT/t2po_cuda_speed.json`.
fn report_speed(out_dir: &str, bw: f64, launch_floor: f64, rows: &[Row]) {
    println!("\ncopy bandwidth {bw:.0} GB/s (read + write); empty launch {launch_floor:.1} us");
    println!("| dtype | B | t2po step (us) | read-once floor (us) | ratio |");
    println!("|---|---|---|---|---|");
    let mut items = Vec::new();
    for r in rows {
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.2} |",
            r.dtype,
            r.b,
            r.median_us,
            r.floor_us,
            r.median_us / r.floor_us
        );
        items.push(format!(
            "{{\"dtype\":\"{}\",\"B\":{},\"median_us\":{},\"floor_us\":{}}}",
            r.dtype,
            r.b,
            json_num(r.median_us, 3),
            json_num(r.floor_us, 3)
        ));
    }
    let _ = std::fs::write(
        format!("{out_dir}/t2po_cuda_speed.json"),
        format!(
            "{{\"copy_bw_gbs\":{},\"launch_us\":{},\"rows\":[{}]}}",
            json_num(bw, 1),
            json_num(launch_floor, 2),
            items.join(",")
        ),
    );
}

fn main() {
    let out_dir = std::env::var("OUT").unwrap_or_else(|_| ".".into());
    let ctx = match gpu::open_context() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("t2po-cuda check: {e}; nothing to check here");
            std::process::exit(2);
        }
    };
    println!("device: {}", ctx.name().unwrap_or_default());
    let t = Instant::now();
    match gpu::compile("sm_90") {
        Ok(ptx) => {
            println!(
                "NVRTC compile for sm_90: {:.0} ms, {} bytes of PTX",
                t.elapsed().as_secs_f64() * 1e3,
                ptx.to_src().len()
            );
            let _ = std::fs::write(format!("{out_dir}/t2po_kernels.ptx"), ptx.to_src());
        }
        Err(e) => {
            eprintln!("FAIL: {e}");
            std::process::exit(1);
        }
    }
    let mut failures = Vec::new();
    if let Err(e) = check_stats(&mut failures) {
        failures.push(format!("statistics check aborted: {e}"));
    }
    if let Err(e) = check_control(&mut failures) {
        failures.push(format!("control check aborted: {e}"));
    }
    // The quick run (under compute-sanitizer) times nothing and leaves the speed run's table and
    // JSON alone: the sanitizer runs come after the full run in gpu_check.sh.
    if !quick() {
        let mut rows = Vec::new();
        let mut launch_floor = f64::NAN;
        let bw = speed(&mut rows, &mut launch_floor).unwrap_or_else(|e| {
            failures.push(format!("speed run aborted: {e}"));
            f64::NAN
        });
        report_speed(&out_dir, bw, launch_floor, &rows);
    }
    if failures.is_empty() {
        println!("\nall checks passed");
    } else {
        for f in failures.iter().take(40) {
            println!("FAIL: {f}");
        }
        println!("\n{} check(s) failed", failures.len());
        std::process::exit(1);
    }
}
