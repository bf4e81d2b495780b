//! The pieces added for callers outside Rust (engine bindings), on the Rust API: the bulk prompt
//! accept, the TTI-armed flag, the dropped-queue state, negative forced tokens, TDS counters,
//! and Φ from a corrupted accumulator. `tests/c/abi_test.c` checks the same through the C ABI.

use proptest::prelude::*;
use t2po_control::{
    Config, Error, Event, Sequence, Step, Tds, TdsCounters, ThinkStart, TokenStats,
};

const OPEN: u32 = 50;
const CLOSE: u32 = 51;

fn config() -> Config {
    let mut c = Config::paper();
    c.think_open = OPEN;
    c.think_close = CLOSE;
    c.queue = [CLOSE, 60, 61, 0, 0, 0, 0, 0];
    c.queue_len = 3;
    c.min_len = 0;
    c.max_think = 1;
    c
}

fn stats() -> TokenStats {
    TokenStats {
        entropy: 1.0,
        confidence: 2.0,
        max_logit: 0.0,
        log_sum_exp: 1.0,
        vocab: 100,
        top_count: 20,
    }
}

proptest! {
    /// One bulk call leaves exactly the state that token-by-token accepts leave.
    #[test]
    fn accept_prompt_equals_one_accept_per_token(
        tokens in prop::collection::vec(prop_oneof![Just(OPEN), Just(CLOSE), 0u32..100], 0..40),
    ) {
        let mut bulk = Sequence::new(&config()).unwrap();
        let mut single = bulk;
        bulk.accept_prompt(&tokens).unwrap();
        for &t in &tokens {
            single.accept(t).unwrap();
        }
        prop_assert_eq!(bulk, single);
        let inside = tokens.iter().rev().find(|&&t| t == OPEN || t == CLOSE) == Some(&OPEN);
        prop_assert_eq!(bulk.prompt_inside_think(), inside);
        bulk.begin_generation(ThinkStart::FromPrompt);
        prop_assert_eq!(bulk.tti_armed(), inside);
    }
}

#[test]
fn accept_prompt_during_a_generation_changes_nothing() {
    let mut seq = Sequence::new(&config()).unwrap();
    seq.begin_generation(ThinkStart::Outside);
    let before = seq;
    assert!(matches!(seq.accept_prompt(&[OPEN]), Err(Error::Order(_))));
    assert_eq!(seq, before);
    assert!(!seq.tti_armed(), "outside think: TTI off");
}

#[test]
fn armed_until_the_firing() {
    let mut cfg = config();
    cfg.max_think = 3;
    let mut seq = Sequence::new(&cfg).unwrap();
    assert!(!seq.tti_armed(), "not generating");
    seq.begin_generation(ThinkStart::Inside);
    assert!(seq.tti_armed());
    let mut fired = false;
    while !fired {
        let step = seq.observe(&stats()).unwrap();
        fired = step.event != Event::None as u32;
        seq.accept(7).unwrap();
        assert_eq!(seq.tti_armed(), !fired);
    }
    cfg.tti_enabled = 0;
    let mut off = Sequence::new(&cfg).unwrap();
    off.begin_generation(ThinkStart::Inside);
    assert!(off.inside_think() && !off.tti_armed());
}

#[test]
fn queue_dropped_only_when_the_model_closes_on_the_firing_step() {
    let mut seq = Sequence::new(&config()).unwrap();
    seq.begin_generation(ThinkStart::Inside);
    assert_eq!(seq.observe(&stats()).unwrap().event, Event::Budget as u32);
    assert!(!seq.queue_dropped());
    seq.accept(CLOSE).unwrap();
    assert!(seq.queue_dropped() && !seq.forcing());

    // The queue served in full.
    seq.begin_generation(ThinkStart::Inside);
    seq.observe(&stats()).unwrap();
    seq.accept(7).unwrap();
    while seq.forcing() {
        let tok = seq.observe(&stats()).unwrap().forced().unwrap();
        seq.accept(tok).unwrap();
        assert!(!seq.queue_dropped());
    }
    assert_eq!(seq.fired().map(|f| f.1), Some(Event::Budget));
}

#[test]
fn negative_forced_tokens_other_than_minus_one_are_errors() {
    let mut row = [1.0f32, 2.0];
    for bad in [-2, -100, i32::MIN] {
        let step = Step {
            forced_token: bad,
            ..Step::default()
        };
        assert_eq!(step.apply(&mut row), Err(Error::BadForcedToken(bad)));
    }
    assert_eq!(row, [1.0, 2.0]);
    assert_eq!(Step::default().apply(&mut row), Ok(false));
}

#[test]
fn tds_counters_follow_the_turns() {
    let mut tds = Tds::new(&Config::paper()).unwrap();
    let c = |tds: &Tds| tds.counters();
    assert_eq!(c(&tds), TdsCounters::default());
    tds.decide(0.5).unwrap();
    tds.commit().unwrap();
    assert_eq!(tds.decide(0.55).unwrap().resample, 1);
    assert_eq!(
        c(&tds),
        TdsCounters {
            turns: 1,
            resamples: 0,
            tries: 1
        }
    );
    assert_eq!(tds.decide(0.9).unwrap().resample, 0);
    tds.commit().unwrap();
    assert_eq!(
        c(&tds),
        TdsCounters {
            turns: 2,
            resamples: 1,
            tries: 0
        }
    );
    assert_eq!((tds.turns(), tds.resamples(), tds.tries()), (2, 1, 0));
}
