//! The embedded default on the real environments: the tokenizer trained on the environments'
//! text derives its control tokens, the random default model rolls out on WebShop, ALFWorld and
//! Search QA through the whole loop, and the same seed gives the same records bit for bit,
//! whether the decode weights are packed per generation or once per rollout.

use candle_core::Device;
use reference_trainer::defaults;
use reference_trainer::rollout::{
    rollout, ControlSwitches, EnvKind, EnvPool, EpisodeSpec, PackedQwen3, RolloutConfig,
    SamplingParams, Split,
};

#[test]
fn the_default_rolls_out_on_every_environment_deterministically() {
    let cache = tempfile::tempdir().unwrap();
    std::env::set_var("T2PO_CACHE", cache.path());
    let tok = defaults::tokenizer(7).unwrap();
    let c = tok.control_tokens().unwrap();
    // Built tokenizer: `<action>` is one special token, so the queue is three ids.
    assert_eq!(c.forced_queue.len(), 3);
    assert_eq!(tok.decode(&c.forced_queue).unwrap(), "</think>\n<action>");
    assert!(tok.vocab_size() <= defaults::VOCAB);
    // Cached: a second call loads the same tokenizer.
    let again = defaults::tokenizer(7).unwrap();
    assert_eq!(again.to_json().unwrap(), tok.to_json().unwrap());

    let model = defaults::model(&tok, 7, &Device::Cpu).unwrap();
    assert!(
        (900_000..1_200_000).contains(&model.num_parameters()),
        "{}",
        model.num_parameters()
    );
    // Its config names the turn end as Qwen3's config.json does (bos <|endoftext|>, eos
    // <|im_end|>), and a saved folder keeps it.
    let dir = tempfile::tempdir().unwrap();
    reference_trainer::model::checkpoint::save(&model, dir.path(), usize::MAX).unwrap();
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("config.json")).unwrap())
            .unwrap();
    assert_eq!(saved["eos_token_id"], serde_json::json!(c.im_end));
    assert_eq!(saved["bos_token_id"], serde_json::json!(c.endoftext));
    for env in EnvKind::ALL {
        let mut size = defaults::pool_size(env).unwrap();
        size.products = 200;
        size.train_games = 8;
        size.held_out_games = 4;
        size.passages = 300;
        size.train_questions = 4;
        size.held_out_questions = 1;
        let pool = EnvPool::generated(env, 7, size).unwrap();
        let run = |packed: bool| {
            let cfg = RolloutConfig {
                control: ControlSwitches::default()
                    .control_config_for(&c, env.response_tags())
                    .unwrap(),
                mark_void: true,
                sampling: SamplingParams::default(),
                max_response_tokens: 12,
                max_prompt_tokens: 768,
                history_length: pool.history_length(),
                max_turns: 2,
                seed: 11,
            };
            let mut envs: Vec<_> = (0..3).map(|_| pool.make(Split::Test)).collect();
            let specs: Vec<_> = (0..3)
                .map(|i| EpisodeSpec {
                    task: i % 2,
                    group: i % 2,
                })
                .collect();
            // Bare, the model packs its decode weights per generation; `PackedQwen3` packs
            // them once for the rollout: the same weights, the same records.
            let (records, stats) = if packed {
                let policy = PackedQwen3::new(&model).unwrap();
                rollout(&policy, &tok, &mut envs, &specs, &cfg, |_, _| {}).unwrap()
            } else {
                rollout(&model, &tok, &mut envs, &specs, &cfg, |_, _| {}).unwrap()
            };
            assert!(stats.decoded_tokens > 0);
            for r in &records {
                assert!(r.num_turns() >= 1 && r.num_turns() <= 2);
                for t in &r.turns {
                    assert!(!t.prompt_ids.is_empty() && t.prompt_ids.len() <= 768);
                    assert_eq!(
                        t.generation.response_ids.len(),
                        t.generation.log_probs.len()
                    );
                    assert!(t
                        .generation
                        .log_probs
                        .iter()
                        .all(|p| p.is_finite() && *p <= 0.0));
                }
            }
            serde_json::to_string(&records).unwrap()
        };
        let bare = run(false);
        assert_eq!(
            bare,
            run(false),
            "{env:?}: the same seed must give the same rollout"
        );
        assert_eq!(
            bare,
            run(true),
            "{env:?}: weights packed once decode what weights packed per generation decode"
        );
    }
}
