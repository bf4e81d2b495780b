//! Search QA end to end: generated corpus → BM25 index on disk → environment → expert; the
//! HTTP retriever client and server against each other over 127.0.0.1 (both request shapes,
//! timeouts, retries, a server that is down); the episode rules.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use t2po_envs::search_qa::corpus::World;
use t2po_envs::search_qa::retriever::{
    ApiShape, Bm25Index, Hit, HttpRetriever, RetrievalError, RetrievalServer, Retriever,
    ServerLimits,
};
use t2po_envs::search_qa::{Flavor, SearchQaEnv};
use t2po_envs::{is_strict_format, run_expert_episode, Env, Projected};

fn index(world: &World, dir: &std::path::Path) -> Arc<Bm25Index> {
    Arc::new(Bm25Index::build(dir, world.passages.clone(), 1, 64).unwrap())
}

/// Runs the expert over every question, checking that every response is a strict-format,
/// valid full response and that each prompt names the question; returns EM per data source.
fn expert_em(env: &mut SearchQaEnv) -> BTreeMap<String, (f64, usize)> {
    let mut per: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    for i in 0..env.num_tasks() {
        let episode = run_expert_episode(env, i, i as u64, Some(4));
        for step in &episode.steps {
            assert!(
                step.action.valid,
                "expert response invalid: {}",
                step.response
            );
            assert!(
                is_strict_format(&step.response, &["search", "answer"]),
                "{}",
                step.response
            );
            assert!(step.prompt.as_deref().unwrap().contains(env.task()));
        }
        assert!(episode.done);
        let e = per.entry(episode.source.clone()).or_default();
        e.0 += episode.score;
        e.1 += 1;
    }
    per
}

#[test]
fn expert_solves_generated_questions_in_both_flavours() {
    let dir = tempfile::tempdir().unwrap();
    let world = World::generate(11, 3000);
    let idx = index(&world, dir.path());
    assert_eq!(idx.len(), 3000);
    let questions = world.questions(5, 40);
    for flavor in [Flavor::VerlAgent, Flavor::SearchR1] {
        let mut env = SearchQaEnv::new(questions.clone(), idx.clone()).unwrap();
        env.flavor = flavor;
        let per = expert_em(&mut env);
        let (mut single, mut multi) = ((0.0, 0), (0.0, 0));
        for (source, (em, n)) in &per {
            let bucket = if ["nq", "triviaqa", "popqa"].contains(&source.as_str()) {
                &mut single
            } else {
                &mut multi
            };
            bucket.0 += em;
            bucket.1 += n;
            println!("{flavor:?} {source}: EM {:.3} over {n}", em / *n as f64);
        }
        let (s, m) = (single.0 / single.1 as f64, multi.0 / multi.1 as f64);
        println!("{flavor:?}: single-hop EM {s:.3}, multi-hop EM {m:.3}");
        assert!(s >= 0.95 && m >= 0.9, "expert EM single {s}, multi {m}");
    }
}

#[test]
fn episode_rules() {
    let dir = tempfile::tempdir().unwrap();
    let world = World::generate(2, 200);
    let idx = index(&world, dir.path());
    let qs = world.questions(1, 2);
    let mut env = SearchQaEnv::new(qs.clone(), idx).unwrap();
    let search = |q: &str| Projected {
        action: format!("<search>{q}</search>"),
        valid: true,
    };
    env.reset(0);
    // Invalid action: empty observation, a turn used.
    let t = env.step(&Projected {
        action: String::new(),
        valid: false,
    });
    assert_eq!(
        (t.observation.text.as_str(), t.done, env.turns()),
        ("", false, 1)
    );
    let t = env.step(&search("anything"));
    assert!(t
        .observation
        .text
        .starts_with("<information>{\"result\": \""));
    env.step(&search("more"));
    // The 4th step's search is not executed: done, reward 0 without an answer.
    let t = env.step(&search("last"));
    assert_eq!(
        (t.observation.text.as_str(), t.done, t.reward),
        ("", true, 0.0)
    );
    assert!(!t.info.won);
    // An answer ends the episode with EM, matched against any alias.
    env.reset(0);
    let gold = qs[0].golden_answers.last().unwrap().to_uppercase();
    let t = env.step(&env.project(&format!("<think>x</think><answer> {gold} </answer>")));
    assert_eq!((t.done, t.reward, t.info.won), (true, 1.0, true));
    let t = env.step(&search("after the end"));
    assert!(t.done && t.reward == 0.0);
    env.reset(1);
    let t = env.step(&env.project("<answer>definitely wrong</answer>"));
    assert_eq!((t.done, t.reward), (true, 0.0));
    assert_eq!(t.info.source, qs[1].data_source);
}

fn raw_post(url: &str, body: Value) -> (u16, Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut resp = agent.post(url).send_json(&body).unwrap();
    let status = resp.status().as_u16();
    let v: Value = resp.body_mut().read_json().unwrap_or(Value::Null);
    (status, v)
}

#[test]
fn http_client_and_server_over_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let world = World::generate(4, 300);
    let idx = index(&world, dir.path());
    let server =
        RetrievalServer::start(idx.clone(), "127.0.0.1:0", ServerLimits::default()).unwrap();
    let queries: Vec<String> = world.passages[..5]
        .iter()
        .map(|p| p.title().to_string())
        .collect();
    let direct = idx.search(&queries, 3).unwrap();
    for shape in [ApiShape::SearchR1, ApiShape::VerlAgent] {
        let client = HttpRetriever::new(server.url(), shape);
        let got = client.search(&queries, 3).unwrap();
        assert_eq!(got.len(), direct.len());
        for (g, d) in got.iter().zip(&direct) {
            let ids = |h: &[Hit]| h.iter().map(|x| x.passage.clone()).collect::<Vec<_>>();
            assert_eq!(ids(g), ids(d), "{shape:?}");
        }
    }
    // Raw Search-R1 shapes: with scores, without, topk null → the server default.
    let (s, v) = raw_post(
        &server.url(),
        json!({"queries": ["a", "b"], "topk": 2, "return_scores": true}),
    );
    assert_eq!(s, 200);
    assert_eq!(v["result"].as_array().unwrap().len(), 2);
    let first = &v["result"][0][0];
    assert!(first["score"].is_number() && first["document"]["contents"].is_string());
    assert!(first["document"]["title"].is_string() && first["document"]["text"].is_string());
    let (_, v) = raw_post(
        &server.url(),
        json!({"queries": [queries[0]], "topk": null, "return_scores": false}),
    );
    assert_eq!(v["result"][0].as_array().unwrap().len(), 3);
    assert!(
        v["result"][0][0]["contents"].is_string(),
        "without scores: the document itself"
    );
    // verl-agent single query: outer list of length 1.
    let (_, v) = raw_post(
        &server.url(),
        json!({"query": queries[0], "topk": 1, "return_scores": true}),
    );
    assert_eq!(v["result"].as_array().unwrap().len(), 1);
    assert_eq!(v["result"][0].as_array().unwrap().len(), 1);
    // Bad requests are 4xx, and the client does not retry them.
    let (s, _) = raw_post(&server.url(), json!({"nothing": 1}));
    assert_eq!(s, 422);
    let bad = HttpRetriever {
        url: server.url().replace("/retrieve", "/nope"),
        attempts: 5,
        // A retry would sleep this long first, so a quick answer proves there was none.
        backoff: Duration::from_secs(3),
        ..HttpRetriever::new("", ApiShape::SearchR1)
    };
    let start = Instant::now();
    match bad.search(&queries, 3) {
        Err(RetrievalError::Http { attempts, .. }) => assert_eq!(attempts, 1),
        other => panic!("expected an HTTP error, got {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[test]
fn server_down_and_timeouts() {
    // Nothing listens on this port: connection refused, retried with linear backoff.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let client = HttpRetriever {
        timeout: Duration::from_millis(500),
        attempts: 3,
        backoff: Duration::from_millis(20),
        ..HttpRetriever::new(
            format!("http://127.0.0.1:{port}/retrieve"),
            ApiShape::SearchR1,
        )
    };
    let start = Instant::now();
    match client.search(&["q".to_string()], 3) {
        Err(RetrievalError::Http { attempts, .. }) => assert_eq!(attempts, 3),
        other => panic!("expected an HTTP error, got {other:?}"),
    }
    // Backoff 20 ms × (1 + 2).
    assert!(start.elapsed() >= Duration::from_millis(60));

    // A slow server: every request takes 300 ms; a 100 ms client timeout fails each attempt.
    struct Slow;
    impl Retriever for Slow {
        fn search(&self, q: &[String], _k: usize) -> Result<Vec<Vec<Hit>>, RetrievalError> {
            std::thread::sleep(Duration::from_millis(300));
            Ok(vec![Vec::new(); q.len()])
        }
    }
    let slow =
        RetrievalServer::start(Arc::new(Slow), "127.0.0.1:0", ServerLimits::default()).unwrap();
    let client = HttpRetriever {
        timeout: Duration::from_millis(100),
        attempts: 2,
        backoff: Duration::from_millis(10),
        ..HttpRetriever::new(slow.url(), ApiShape::VerlAgent)
    };
    assert!(matches!(
        client.search(&["q".to_string()], 3),
        Err(RetrievalError::Http { attempts: 2, .. })
    ));

    // A flaky backend: the first two requests fail (HTTP 500), the third succeeds.
    struct Flaky(AtomicUsize);
    impl Retriever for Flaky {
        fn search(&self, q: &[String], _k: usize) -> Result<Vec<Vec<Hit>>, RetrievalError> {
            if self.0.fetch_add(1, Ordering::SeqCst) < 2 {
                return Err(RetrievalError::BadResponse {
                    url: "backend".into(),
                    message: "flaky".into(),
                });
            }
            Ok(vec![Vec::new(); q.len()])
        }
    }
    let flaky = RetrievalServer::start(
        Arc::new(Flaky(AtomicUsize::new(0))),
        "127.0.0.1:0",
        ServerLimits::default(),
    )
    .unwrap();
    let client = HttpRetriever {
        attempts: 5,
        backoff: Duration::from_millis(5),
        ..HttpRetriever::new(flaky.url(), ApiShape::SearchR1)
    };
    assert_eq!(
        client.search(&["q".to_string()], 3).unwrap(),
        vec![Vec::new()]
    );
}

#[test]
fn index_persists_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let world = World::generate(9, 120);
    let built = index(&world, dir.path());
    let q = vec![world.passages[7].title().to_string()];
    let before = built.search(&q, 3).unwrap();
    drop(built);
    let reopened = Bm25Index::open(dir.path()).unwrap();
    assert_eq!(reopened.search(&q, 3).unwrap(), before);
    assert_eq!(before[0][0].passage, world.passages[7]);
    assert!(Bm25Index::open(&dir.path().join("missing")).is_err());
}

#[test]
fn generated_splits_and_expert_wording() {
    let dir = tempfile::tempdir().unwrap();
    let world = World::generate(6, 400);
    let idx = index(&world, dir.path());
    let splits = SearchQaEnv::generated_splits(&world, idx, 5, 3, 2).unwrap();
    // Train: the NQ and HotpotQA roles (Search-R1's training mix); held out: all seven.
    assert_eq!(splits.train.num_tasks(), 10);
    assert!(splits
        .train
        .questions()
        .iter()
        .all(|q| q.id.starts_with("train_")
            && (q.data_source == "nq" || q.data_source == "hotpotqa")));
    assert_eq!(splits.held_out.num_tasks(), 21);
    assert_eq!(
        (splits.train.max_turns(), splits.train.name()),
        (4, "search_qa")
    );
    let mut env = splits.held_out.clone();
    for i in 0..env.num_tasks() {
        let a = run_expert_episode(&mut env, i, 1, None);
        let b = run_expert_episode(&mut env, i, 2, None);
        let actions =
            |e: &t2po_envs::Episode| e.steps.iter().map(|s| s.action.clone()).collect::<Vec<_>>();
        assert_eq!(
            actions(&a),
            actions(&b),
            "the seed changes only the wording"
        );
        assert!(a.steps[0].response.starts_with("<think>"));
        // The memory shows each search with the results it returned (verl-agent's
        // SearchMemory), not with the observation before it.
        let c = run_expert_episode(&mut env, i, 1, Some(4));
        let query = &c.steps[0].action.action;
        let results = &c.steps[1].observation.text;
        assert!(results.starts_with("<information>"));
        assert!(
            c.steps[1]
                .prompt
                .as_deref()
                .unwrap()
                .contains(&format!("Step 1:{query} {results}\n")),
            "{:?}",
            c.steps[1].prompt
        );
        // The forced queue's newline after </think>, and the query between spaces as the
        // Search-R1 / verl-agent prompts write it.
        assert!(
            a.steps[0].response.contains("</think>\n<search> ")
                && a.steps[0].response.ends_with(" </search>"),
            "{}",
            a.steps[0].response
        );
    }
}
