//! The kernel logic run on the CPU: `kernels/t2po_kernels.cuh` compiled by the host C compiler
//! (build.rs) with the per-thread phases as loops over thread ids and the blocks of the grid
//! run one after another. Same algorithm, same operation order as on the GPU; used by the test
//! suite to check the kernels against t2po-control without a GPU, and by the GPU check to
//! compare the device with this reference.
#![allow(unsafe_code)]

use crate::{plan, Dtype, Mode, PlanError, StepOutput};
use t2po_control::{Sequence, Step, TokenStats};

extern "C" {
    fn t2po_host_exp_neg(d: f32) -> f32;
    fn t2po_host_f16_to_f32(h: u16) -> f32;
    fn t2po_host_accept(q: *mut Sequence, token: u32) -> u32;
    fn t2po_host_observe(q: *mut Sequence, st: *const TokenStats) -> Step;
    fn t2po_host_control_step(
        logits: *mut u8,
        dtype: u32,
        row_stride: u64,
        vocab: u32,
        j: u32,
        splits: u32,
        batch: u32,
        seqs: *mut Sequence,
        prev_tokens: *const i32,
        mode: u32,
        stats: *mut TokenStats,
        steps: *mut Step,
    ) -> u32;
}

/// The kernels' `e^d` for `d ∈ [−87, 0]`.
pub fn exp_neg(d: f32) -> f32 {
    // SAFETY: a pure function of a float.
    unsafe { t2po_host_exp_neg(d) }
}

/// The kernels' IEEE half → f32 conversion.
pub fn f16_to_f32(bits: u16) -> f32 {
    // SAFETY: a pure function of an integer.
    unsafe { t2po_host_f16_to_f32(bits) }
}

/// The kernels' accept on a sequence; returns a `t2po_status` value.
pub fn accept(seq: &mut Sequence, token: u32) -> u32 {
    // SAFETY: `seq` is a valid, exclusively borrowed `t2po_seq` (same layout as `Sequence`).
    unsafe { t2po_host_accept(seq, token) }
}

/// The kernels' observe of precomputed statistics.
pub fn observe(seq: &mut Sequence, stats: &TokenStats) -> Step {
    // SAFETY: valid exclusive `t2po_seq` and a valid `t2po_token_stats` for the call.
    unsafe { t2po_host_observe(seq, stats) }
}

/// One control step over `batch` rows of `logits` (raw bytes of `dtype`, row `b` at element
/// `b · row_stride`), exactly as the GPU grid runs it with `sms` multiprocessors' worth of
/// splits. `prev_tokens[b]` (−1: none) is accepted before row `b` is observed.
#[allow(clippy::too_many_arguments)]
pub fn control_step(
    logits: &mut [u8],
    dtype: Dtype,
    row_stride: usize,
    vocab: u32,
    top_j: u32,
    sms: u32,
    seqs: &mut [Sequence],
    prev_tokens: &[i32],
    mode: Mode,
) -> Result<StepOutput, PlanError> {
    let batch = seqs.len() as u32;
    let p = plan(batch, vocab, top_j, sms)?;
    let needed = (batch as usize - 1) * row_stride + vocab as usize;
    assert!(
        logits.len() >= needed * dtype.size()
            && prev_tokens.len() == seqs.len()
            && row_stride >= vocab as usize,
        "control_step: buffers smaller than batch × row_stride"
    );
    let mut stats = vec![TokenStats::default(); seqs.len()];
    let mut steps = vec![Step::default(); seqs.len()];
    // SAFETY: the buffers were size-checked above (logits covers every row, one stats/step per
    // sequence, one previous token per sequence); the C code touches nothing else.
    let rc = unsafe {
        t2po_host_control_step(
            logits.as_mut_ptr(),
            dtype as u32,
            row_stride as u64,
            vocab,
            top_j,
            p.splits,
            batch,
            seqs.as_mut_ptr(),
            prev_tokens.as_ptr(),
            mode.bits(),
            stats.as_mut_ptr(),
            steps.as_mut_ptr(),
        )
    };
    assert_eq!(rc, 0, "the plan fits the kernel limits");
    Ok(StepOutput { stats, steps })
}
