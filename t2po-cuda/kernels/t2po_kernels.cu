// t2po_kernels.cu: the CUDA entry points (compiled with NVRTC at run time; see src/gpu.rs).
// The logic lives in t2po_kernels.cuh, which the test suite also runs on the CPU.

// One launch per decode step for the whole batch: grid (splits, B), T2PO_BLOCK threads, dynamic
// shared memory for max(chunk, splits·J_CAP + J_CAP) floats.
extern "C" __global__ void __launch_bounds__(T2PO_BLOCK) t2po_control_step(
    void* logits, unsigned dtype, unsigned long long row_stride, unsigned vocab, unsigned j,
    t2po_partial* parts, float* cand, unsigned* cand_n, unsigned* done, t2po_seq* seqs,
    const int* prev_tokens, unsigned mode, t2po_token_stats* stats, t2po_step* steps) {
  extern __shared__ float t2po_vals[];
  __shared__ t2po_scratch sc;
  t2po_control_block(blockIdx.y, blockIdx.x, gridDim.x, logits, dtype, row_stride, vocab, j, t2po_vals, &sc,
                     parts, cand, cand_n, done, seqs, prev_tokens, mode, stats, steps);
}

// Accept of the tokens emitted at the last step (end of a generation): one thread per sequence.
extern "C" __global__ void t2po_accept_tokens(t2po_seq* seqs, const int* tokens, unsigned batch, unsigned* status) {
  unsigned b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  status[b] = tokens[b] >= 0 ? t2po_dev_accept(&seqs[b], (unsigned)tokens[b]) : 0u;
}
