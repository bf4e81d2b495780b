//! "A decode step allocates nothing after warm-up", counted: a global allocator that counts
//! every allocation (on every thread) wraps the system one; after a few warm-up steps, each
//! further step of the rollout's loop (the model's direct decode step, the control kernel's
//! observe + sampling + accept in `Sampler::step`, and dropping a finished row) must not
//! allocate. The loop runs on the rayon pool as `rollout::episode` runs it.
//!
//! One test in this binary, so no other test allocates while it counts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use candle_core::{DType, Device};
use rand::SeedableRng;
use rand_chacha::ChaCha12Rng;
use reference_trainer::model::{Qwen3, Qwen3Config};
use reference_trainer::rollout::{CandleDecode, Policy, QwenCache, Sampler, SamplingParams};
use t2po_control::{Config, Sequence, ThinkStart};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call forwards to `System` with the caller's arguments unchanged; the counter
// is an atomic and allocates nothing.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which `System` shares.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: `ptr` came from this allocator (so from `System`) with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator (so from `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn decode_steps_allocate_nothing_after_warm_up() {
    let (batch, vocab, warm, steps) = (32usize, 512usize, 3usize, 200usize);
    let cfg = Qwen3Config::small(vocab, 64, 128, 2, 4, 2, 16, 256);
    let model = Qwen3::random(cfg, 3, DType::F32, &Device::Cpu).unwrap();
    let prompts: Vec<Vec<u32>> = (0..batch)
        .map(|b| {
            (0..5 + b % 7)
                .map(|t| ((b * 37 + t * 11) % vocab) as u32)
                .collect()
        })
        .collect();
    let mut control = Config::paper();
    control.think_open = 1;
    control.think_close = 2;
    control.queue_len = 1;
    control.queue[0] = 2;
    control.min_len = 4;
    control.max_think = 10;
    let mut seqs = vec![Sequence::new(&control).unwrap(); batch];
    for s in &mut seqs {
        s.reset();
        s.begin_generation(ThinkStart::Inside);
    }
    let mut rngs: Vec<ChaCha12Rng> = (0..batch as u64).map(ChaCha12Rng::seed_from_u64).collect();
    let mut sampler = Sampler::new(SamplingParams::default()).unwrap();
    let mut logits = Vec::new();
    let mut cache = Policy::prefill(&model, &prompts, warm + steps, &mut logits).unwrap();
    match &mut cache {
        // The row split's join is part of what must not allocate.
        QwenCache::Direct(s) => s.set_threads(2),
        other => panic!("{other:?}"),
    }
    let mut draws = Vec::with_capacity(batch);
    let mut tokens = Vec::with_capacity(batch);
    let mut keep = Vec::with_capacity(batch);
    let mut forced = 0;
    let counted = rayon::scope(|_| {
        for step in 0..warm + steps {
            if step == warm {
                COUNTING.store(true, Ordering::SeqCst);
            }
            sampler
                .step(&mut seqs, &mut rngs, &logits, vocab, &mut draws)
                .unwrap();
            forced += draws.iter().filter(|d| d.forced).count();
            tokens.clear();
            tokens.extend(draws.iter().map(|d| d.token));
            // Every 8th step the last row finishes and leaves the batch.
            if step % 50 == 7 && tokens.len() > 2 {
                keep.clear();
                keep.extend(0..tokens.len() - 1);
                Policy::retain(&model, &mut cache, &keep).unwrap();
                seqs.truncate(keep.len());
                rngs.truncate(keep.len());
                tokens.truncate(keep.len());
            }
            Policy::decode(&model, &mut cache, &tokens, &mut logits).unwrap();
        }
        COUNTING.store(false, Ordering::SeqCst);
        ALLOCATIONS.load(Ordering::SeqCst)
    });
    // The kernel ran (TTI's L_max = 10 forced tokens), and rows left the batch.
    assert!(forced > 0);
    assert!(seqs.len() < batch);
    assert_eq!(
        counted, 0,
        "{counted} allocations in {steps} decode steps after warm-up"
    );
    // The counter sees allocations: the candle path allocates tensors every step.
    let reference = CandleDecode(&model);
    let mut cache = reference.prefill(&prompts, 4, &mut logits).unwrap();
    let tokens = vec![3u32; batch];
    reference.decode(&mut cache, &tokens, &mut logits).unwrap();
    ALLOCATIONS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    reference.decode(&mut cache, &tokens, &mut logits).unwrap();
    COUNTING.store(false, Ordering::SeqCst);
    assert!(ALLOCATIONS.load(Ordering::SeqCst) > 0);
}
