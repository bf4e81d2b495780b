//! Retrieval for Search QA (spec §3.1–3.2): the [`Retriever`] trait, an embedded BM25 index
//! persisted on disk ([`Bm25Index`], tantivy), an HTTP client for the Search-R1 (`queries` list)
//! and verl-agent (single `query`) request shapes with timeouts, retries and linear backoff
//! ([`HttpRetriever`]), and a server that serves any retriever with the Search-R1 API
//! ([`RetrievalServer`]).
//!
//! BM25 here is tantivy's (k1 = 1.2, b = 0.75, its default tokenizer); the original default
//! retriever is e5 dense and its BM25 alternative is Pyserini's, so retrieval *quality* differs
//! while the corpus, request and response *formats* are the originals'.

use super::corpus::Passage;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tantivy::collector::TopDocs;
use tantivy::query::QueryParser;
use tantivy::schema::{Field, Schema, Value as _, STORED, STRING, TEXT};
use tantivy::{doc, Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument};

/// Why a retrieval failed.
#[derive(Debug, thiserror::Error)]
pub enum RetrievalError {
    /// The index could not be built, opened or searched.
    #[error("index error: {0}")]
    Index(#[from] tantivy::TantivyError),
    /// An I/O error on the index folder.
    #[error("index folder {path}: {source}")]
    Folder {
        /// The folder.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The server could not be reached or kept failing after all retries.
    #[error("retrieval server {url}: {message} (after {attempts} attempt(s))")]
    Http {
        /// The URL asked.
        url: String,
        /// What went wrong last.
        message: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The server answered with something that is not the expected JSON shape.
    #[error("retrieval server {url}: bad response: {message}")]
    BadResponse {
        /// The URL asked.
        url: String,
        /// What was wrong.
        message: String,
    },
}

/// One retrieved passage and its score.
#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    /// The passage.
    pub passage: Passage,
    /// The retriever's score (BM25 here).
    pub score: f32,
}

/// Something that returns the top-k passages for each query.
pub trait Retriever: Send + Sync {
    /// For each query, up to `topk` hits, best first.
    fn search(&self, queries: &[String], topk: usize) -> Result<Vec<Vec<Hit>>, RetrievalError>;
}

/// A BM25 index of a wiki-18-shaped corpus, persisted in a folder (tantivy).
pub struct Bm25Index {
    index: Index,
    reader: IndexReader,
    id: Field,
    contents: Field,
}

impl Bm25Index {
    fn schema() -> (Schema, Field, Field) {
        let mut sb = Schema::builder();
        let id = sb.add_text_field("id", STRING | STORED);
        let contents = sb.add_text_field("contents", TEXT | STORED);
        (sb.build(), id, contents)
    }

    /// Builds an index in `folder` (created; must be empty) from passages, with `threads` indexing
    /// threads and a total memory budget of `memory_mb` MiB (≥ 15 per thread).
    pub fn build(
        folder: &Path,
        passages: impl IntoIterator<Item = Passage>,
        threads: usize,
        memory_mb: usize,
    ) -> Result<Self, RetrievalError> {
        std::fs::create_dir_all(folder).map_err(|source| RetrievalError::Folder {
            path: folder.display().to_string(),
            source,
        })?;
        let (schema, id, contents) = Self::schema();
        let index = Index::create_in_dir(folder, schema)?;
        {
            let threads = threads.max(1);
            let mut writer: IndexWriter =
                index.writer_with_num_threads(threads, (memory_mb.max(15 * threads)) << 20)?;
            for p in passages {
                writer.add_document(doc!(id => p.id, contents => p.contents))?;
            }
            writer.commit()?;
            writer.wait_merging_threads()?;
        }
        Self::from_index(index, id, contents)
    }

    /// Opens an index built earlier by [`Bm25Index::build`].
    pub fn open(folder: &Path) -> Result<Self, RetrievalError> {
        let index = Index::open_in_dir(folder)?;
        let schema = index.schema();
        let id = schema.get_field("id")?;
        let contents = schema.get_field("contents")?;
        Self::from_index(index, id, contents)
    }

    fn from_index(index: Index, id: Field, contents: Field) -> Result<Self, RetrievalError> {
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        Ok(Self {
            index,
            reader,
            id,
            contents,
        })
    }

    /// Number of passages indexed.
    pub fn len(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// Whether the index holds no passage.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn search_one(&self, query: &str, topk: usize) -> Result<Vec<Hit>, RetrievalError> {
        let searcher = self.reader.searcher();
        let parser = QueryParser::for_index(&self.index, vec![self.contents]);
        // Lenient: questions carry punctuation (`?`, quotes) that is query syntax to tantivy.
        let (query, _ignored) = parser.parse_query_lenient(query);
        let top = searcher.search(&query, &TopDocs::with_limit(topk.max(1)).order_by_score())?;
        let mut hits = Vec::with_capacity(top.len());
        for (score, address) in top {
            let d: TantivyDocument = searcher.doc(address)?;
            let field = |f: Field| {
                d.get_first(f)
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_string()
            };
            hits.push(Hit {
                passage: Passage {
                    id: field(self.id),
                    contents: field(self.contents),
                },
                score,
            });
        }
        Ok(hits)
    }
}

impl Retriever for Bm25Index {
    fn search(&self, queries: &[String], topk: usize) -> Result<Vec<Vec<Hit>>, RetrievalError> {
        queries.iter().map(|q| self.search_one(q, topk)).collect()
    }
}

/// Which request shape a retrieval server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiShape {
    /// Search-R1: `{"queries": [..], "topk", "return_scores"}` → `{"result": [per query]}`.
    SearchR1,
    /// verl-agent: `{"query": str, "topk", "return_scores"}` → `{"result": [[..]]}`.
    VerlAgent,
}

/// A client of a Search-R1 or verl-agent retrieval server.
#[derive(Clone, Debug)]
pub struct HttpRetriever {
    /// `http://host:port/retrieve`.
    pub url: String,
    /// The request shape.
    pub shape: ApiShape,
    /// Per-request timeout (verl-agent: 60 s).
    pub timeout: Duration,
    /// Attempts in all (verl-agent: 10).
    pub attempts: u32,
    /// Backoff unit: attempt `n` waits `n × backoff` before the next (verl-agent: 1 s).
    pub backoff: Duration,
}

#[derive(Serialize)]
struct SearchR1Request<'a> {
    queries: &'a [String],
    topk: usize,
    return_scores: bool,
}

#[derive(Serialize)]
struct VerlRequest<'a> {
    query: &'a str,
    topk: usize,
    return_scores: bool,
}

#[derive(Deserialize)]
struct ResultEnvelope {
    result: Vec<Vec<Value>>,
}

impl HttpRetriever {
    /// A client with verl-agent's defaults (60 s timeout, 10 attempts, 1 s linear backoff).
    pub fn new(url: impl Into<String>, shape: ApiShape) -> Self {
        Self {
            url: url.into(),
            shape,
            timeout: Duration::from_secs(60),
            attempts: 10,
            backoff: Duration::from_secs(1),
        }
    }

    fn post(&self, body: &Value) -> Result<ResultEnvelope, RetrievalError> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(self.timeout))
            .http_status_as_error(false)
            .build()
            .into();
        let attempts = self.attempts.max(1);
        let mut last = String::new();
        for attempt in 1..=attempts {
            match agent.post(&self.url).send_json(body) {
                Ok(mut resp) => {
                    let status = resp.status().as_u16();
                    if status >= 500 {
                        last = format!("HTTP {status}");
                    } else if status != 200 {
                        // A client error will not change on retry.
                        return Err(RetrievalError::Http {
                            url: self.url.clone(),
                            message: format!("HTTP {status}"),
                            attempts: attempt,
                        });
                    } else {
                        return resp.body_mut().read_json::<ResultEnvelope>().map_err(|e| {
                            RetrievalError::BadResponse {
                                url: self.url.clone(),
                                message: e.to_string(),
                            }
                        });
                    }
                }
                Err(e) => last = e.to_string(),
            }
            if attempt < attempts {
                std::thread::sleep(self.backoff * attempt);
            }
        }
        Err(RetrievalError::Http {
            url: self.url.clone(),
            message: last,
            attempts,
        })
    }

    fn parse_hits(&self, items: Vec<Value>) -> Result<Vec<Hit>, RetrievalError> {
        items
            .into_iter()
            .map(|item| {
                // With scores: {"document": {...}, "score": f}; without: the document itself.
                let (document, score) = match item.get("document") {
                    Some(d) => (
                        d.clone(),
                        item.get("score").and_then(Value::as_f64).unwrap_or(0.0),
                    ),
                    None => (item, 0.0),
                };
                let contents = document
                    .get("contents")
                    .and_then(Value::as_str)
                    .ok_or_else(|| RetrievalError::BadResponse {
                        url: self.url.clone(),
                        message: "a document without \"contents\"".into(),
                    })?
                    .to_string();
                let id = match document.get("id") {
                    Some(Value::String(s)) => s.clone(),
                    Some(v) => v.to_string(),
                    None => String::new(),
                };
                Ok(Hit {
                    passage: Passage { id, contents },
                    score: score as f32,
                })
            })
            .collect()
    }
}

impl Retriever for HttpRetriever {
    fn search(&self, queries: &[String], topk: usize) -> Result<Vec<Vec<Hit>>, RetrievalError> {
        match self.shape {
            ApiShape::SearchR1 => {
                let body = serde_json::to_value(SearchR1Request {
                    queries,
                    topk,
                    return_scores: true,
                })
                .expect("serialisable");
                let env = self.post(&body)?;
                if env.result.len() != queries.len() {
                    return Err(RetrievalError::BadResponse {
                        url: self.url.clone(),
                        message: format!(
                            "{} results for {} queries",
                            env.result.len(),
                            queries.len()
                        ),
                    });
                }
                env.result.into_iter().map(|r| self.parse_hits(r)).collect()
            }
            ApiShape::VerlAgent => queries
                .iter()
                .map(|q| {
                    let body = serde_json::to_value(VerlRequest {
                        query: q,
                        topk,
                        return_scores: true,
                    })
                    .expect("serialisable");
                    let env = self.post(&body)?;
                    let first = env.result.into_iter().next().unwrap_or_default();
                    self.parse_hits(first)
                })
                .collect(),
        }
    }
}

/// A running Search-R1-compatible retrieval server; stops when dropped.
pub struct RetrievalServer {
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
    port: u16,
}

impl RetrievalServer {
    /// Serves `retriever` on `addr` (e.g. `127.0.0.1:8000`, or port 0 for any free port):
    /// `POST /retrieve` with either request shape; `topk` null or 0 means `default_topk`.
    pub fn start(
        retriever: Arc<dyn Retriever>,
        addr: &str,
        default_topk: usize,
    ) -> anyhow::Result<Self> {
        let server = Arc::new(
            tiny_http::Server::http(addr).map_err(|e| anyhow::anyhow!("bind {addr}: {e}"))?,
        );
        let port = server
            .server_addr()
            .to_ip()
            .map(|a| a.port())
            .ok_or_else(|| anyhow::anyhow!("{addr} is not an IP address"))?;
        let s = Arc::clone(&server);
        let thread = std::thread::spawn(move || {
            for mut request in s.incoming_requests() {
                let (status, body) = handle(&mut request, retriever.as_ref(), default_topk);
                let header = tiny_http::Header::from_bytes("Content-Type", "application/json")
                    .expect("static header");
                let response = tiny_http::Response::from_string(body)
                    .with_status_code(status)
                    .with_header(header);
                let _ = request.respond(response);
            }
        });
        Ok(Self {
            server,
            thread: Some(thread),
            port,
        })
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:{port}/retrieve`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/retrieve", self.port)
    }
}

impl Drop for RetrievalServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The document dict of a BM25 backend with stored documents: title, text, contents (and id).
fn document_json(p: &Passage) -> Value {
    json!({"id": p.id, "title": p.title(), "text": p.text(), "contents": p.contents})
}

fn handle(
    request: &mut tiny_http::Request,
    retriever: &dyn Retriever,
    default_topk: usize,
) -> (u16, String) {
    if request.url() != "/retrieve" {
        return (404, json!({"detail": "Not Found"}).to_string());
    }
    if *request.method() != tiny_http::Method::Post {
        return (405, json!({"detail": "Method Not Allowed"}).to_string());
    }
    let mut raw = String::new();
    if let Err(e) = request.as_reader().read_to_string(&mut raw) {
        return (
            400,
            json!({"detail": format!("unreadable body: {e}")}).to_string(),
        );
    }
    let body: Value = match serde_json::from_str(&raw) {
        Ok(v) => v,
        Err(e) => {
            return (
                422,
                json!({"detail": format!("body is not JSON: {e}")}).to_string(),
            )
        }
    };
    let topk = match body.get("topk").and_then(Value::as_u64) {
        Some(0) | None => default_topk,
        Some(k) => k as usize,
    };
    let with_scores = body
        .get("return_scores")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let (queries, single) = match (body.get("queries"), body.get("query")) {
        (Some(Value::Array(qs)), _) => {
            let qs: Option<Vec<String>> = qs.iter().map(|q| q.as_str().map(String::from)).collect();
            match qs {
                Some(qs) => (qs, false),
                None => return (422, json!({"detail": "queries must be strings"}).to_string()),
            }
        }
        (_, Some(Value::String(q))) => (vec![q.clone()], true),
        _ => {
            return (
                422,
                json!({"detail": "expected \"queries\": [str] (Search-R1) or \"query\": str (verl-agent)"})
                    .to_string(),
            )
        }
    };
    match retriever.search(&queries, topk) {
        Ok(results) => {
            let result: Vec<Value> = results
                .iter()
                .map(|hits| {
                    Value::Array(
                        hits.iter()
                            .map(|h| {
                                if with_scores {
                                    json!({"document": document_json(&h.passage), "score": h.score})
                                } else {
                                    document_json(&h.passage)
                                }
                            })
                            .collect(),
                    )
                })
                .collect();
            debug_assert!(!single || result.len() == 1);
            (200, json!({ "result": result }).to_string())
        }
        Err(e) => (500, json!({"detail": e.to_string()}).to_string()),
    }
}
