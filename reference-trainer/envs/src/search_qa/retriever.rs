//! Retrieval for Search QA (spec §3.1–3.2): the [`Retriever`] trait, an embedded BM25 index
//! persisted on disk ([`Bm25Index`], tantivy), an HTTP client for the Search-R1 (`queries` list)
//! and verl-agent (single `query`) request shapes with timeouts, retries and linear backoff
//! ([`HttpRetriever`]). The server that serves any retriever with that API is
//! [`RetrievalServer`] (in [`super::server`], re-exported here).
//!
//! BM25 here is tantivy's (k1 = 1.2, b = 0.75, its default tokenizer); the original default
//! retriever is e5 dense and its BM25 alternative is Pyserini's, so retrieval *quality* differs
//! while the corpus, request and response *formats* are the originals'. Queries are plain text,
//! as in the original: the analyzer's terms of the query, any of which may match (no query
//! syntax), at most [`MAX_QUERY_TERMS`] of them.
//!
//! An index folder is complete only once it holds [`COMPLETE_MARKER`]: [`Bm25Index::build`] and
//! [`IndexBuilder`] build in a temporary folder beside the target and rename it into place when
//! done, so an interrupted build leaves no index; [`Bm25Index::open`] checks the marker, the
//! passage count and every segment file's checksum, and names the folder in its error.

pub use super::server::{RetrievalServer, ServerLimits};

use super::corpus::Passage;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, Schema, Value as _, STORED, STRING, TEXT};
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{doc, Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

/// The file that marks an index folder as completely built (JSON: `{"format", "passages"}`).
pub const COMPLETE_MARKER: &str = "t2po-index.json";

/// The most query terms searched; later ones are ignored (the e5 retriever's query length, 256).
pub const MAX_QUERY_TERMS: usize = 256;

/// The index layout [`COMPLETE_MARKER`] records (this schema: `id` string, `contents` text).
const INDEX_FORMAT: u32 = 1;

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
    /// The index library failed on this folder's index (unreadable or inconsistent files).
    #[error("index folder {path}: {source}")]
    Open {
        /// The folder.
        path: String,
        /// What tantivy reported.
        source: tantivy::TantivyError,
    },
    /// The folder does not hold a completely built index.
    #[error("index folder {path}: not a complete index ({reason}); build it again")]
    Incomplete {
        /// The folder.
        path: String,
        /// What is missing.
        reason: String,
    },
    /// The folder's index files are damaged.
    #[error("index folder {path}: corrupt index ({reason}); build it again")]
    Corrupt {
        /// The folder.
        path: String,
        /// What failed to check out.
        reason: String,
    },
    /// A build's target folder already holds something.
    #[error("index folder {path} exists and is not empty; remove it or choose another")]
    NotEmpty {
        /// The folder.
        path: String,
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
    reader: IndexReader,
    analyzer: TextAnalyzer,
    id: Field,
    contents: Field,
}

#[derive(Serialize, Deserialize)]
struct Marker {
    format: u32,
    passages: u64,
}

fn folder_error(path: &Path) -> impl FnOnce(std::io::Error) -> RetrievalError + '_ {
    move |source| RetrievalError::Folder {
        path: path.display().to_string(),
        source,
    }
}

/// Writes `bytes` to `path` through a temporary file beside it, synced, then renamed.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// Syncs a folder, so a rename inside it is durable (a no-op where folders cannot be opened).
fn sync_folder(path: &Path) {
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.sync_all();
    }
}

/// Builds an index into a temporary folder beside `target`, then renames it into place.
/// Dropped without [`IndexBuilder::finish`] (an error, a panic), it removes the temporary folder;
/// killed, it leaves only a `.NAME.partial-*` folder, never a `target` that opens.
pub struct IndexBuilder {
    target: PathBuf,
    partial: PathBuf,
    writer: Option<IndexWriter>,
    id: Field,
    contents: Field,
    added: u64,
}

impl IndexBuilder {
    /// Starts a build of `target` (which must not exist or be an empty folder), with `threads`
    /// indexing threads and a total memory budget of `memory_mb` MiB (≥ 15 per thread).
    pub fn new(target: &Path, threads: usize, memory_mb: usize) -> Result<Self, RetrievalError> {
        match std::fs::read_dir(target) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    return Err(RetrievalError::NotEmpty {
                        path: target.display().to_string(),
                    });
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(folder_error(target)(e)),
        }
        let name = target
            .file_name()
            .ok_or_else(|| {
                folder_error(target)(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the index folder needs a name",
                ))
            })?
            .to_string_lossy()
            .into_owned();
        let parent = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent).map_err(folder_error(&parent))?;
        // A name unique to this builder: the process id, a per-process counter (threads of one
        // process share the id and may read the same clock) and the clock (a recycled pid after a
        // crash); a folder that exists anyway is skipped, never shared.
        static BUILDERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let partial = loop {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let n = BUILDERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let partial = parent.join(format!(
                ".{name}.partial-{}-{n}-{nanos}",
                std::process::id()
            ));
            match std::fs::create_dir(&partial) {
                Ok(()) => break partial,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(folder_error(&partial)(e)),
            }
        };
        let (schema, id, contents) = Bm25Index::schema();
        let open = |partial: &Path| -> Result<IndexWriter, RetrievalError> {
            let index = Index::create_in_dir(partial, schema)?;
            let threads = threads.max(1);
            Ok(index.writer_with_num_threads(threads, (memory_mb.max(15 * threads)) << 20)?)
        };
        match open(&partial) {
            Ok(writer) => Ok(Self {
                target: target.to_path_buf(),
                partial,
                writer: Some(writer),
                id,
                contents,
                added: 0,
            }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&partial);
                Err(e)
            }
        }
    }

    /// Adds one passage.
    pub fn add(&mut self, p: Passage) -> Result<(), RetrievalError> {
        if let Some(w) = &self.writer {
            w.add_document(doc!(self.id => p.id, self.contents => p.contents))?;
            self.added += 1;
        }
        Ok(())
    }

    /// Passages added so far.
    pub fn added(&self) -> u64 {
        self.added
    }

    /// Commits, merges, marks the folder complete and renames it to the target; opens it.
    pub fn finish(mut self) -> Result<Bm25Index, RetrievalError> {
        if let Some(mut w) = self.writer.take() {
            w.commit()?;
            w.wait_merging_threads()?;
        }
        let marker = serde_json::to_vec(&Marker {
            format: INDEX_FORMAT,
            passages: self.added,
        })
        .map_err(|e| RetrievalError::Index(tantivy::TantivyError::InternalError(e.to_string())))?;
        write_atomically(&self.partial.join(COMPLETE_MARKER), &marker)
            .map_err(folder_error(&self.partial))?;
        sync_folder(&self.partial);
        // An empty target folder (a test's tempdir) is replaced; anything else was refused in new.
        match std::fs::remove_dir(&self.target) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(folder_error(&self.target)(e)),
        }
        std::fs::rename(&self.partial, &self.target).map_err(folder_error(&self.target))?;
        if let Some(parent) = self.target.parent() {
            sync_folder(parent);
        }
        Bm25Index::open_unverified(&self.target)
    }
}

impl Drop for IndexBuilder {
    fn drop(&mut self) {
        // Still there only when finish did not rename it.
        if self.partial.exists() {
            drop(self.writer.take());
            let _ = std::fs::remove_dir_all(&self.partial);
        }
    }
}

impl Bm25Index {
    fn schema() -> (Schema, Field, Field) {
        let mut sb = Schema::builder();
        let id = sb.add_text_field("id", STRING | STORED);
        let contents = sb.add_text_field("contents", TEXT | STORED);
        (sb.build(), id, contents)
    }

    /// Builds an index in `folder` (which must not exist or be an empty folder) from passages,
    /// with `threads` indexing threads and a total memory budget of `memory_mb` MiB (≥ 15 per
    /// thread); see [`IndexBuilder`] for how an interrupted build is kept from leaving an index.
    pub fn build(
        folder: &Path,
        passages: impl IntoIterator<Item = Passage>,
        threads: usize,
        memory_mb: usize,
    ) -> Result<Self, RetrievalError> {
        let mut builder = IndexBuilder::new(folder, threads, memory_mb)?;
        for p in passages {
            builder.add(p)?;
        }
        builder.finish()
    }

    /// Opens the index cached in `folder`, or builds it there (`fill` adds the passages to the
    /// builder) when the folder is missing, incomplete (an interrupted build) or damaged
    /// (checksums, passage count): `folder` is a cache this crate owns, so a broken index in it
    /// is moved aside and removed, never read. Concurrent callers (two trainers, two `play`s) do
    /// not collide: each builds into its own temporary folder, and one that finds the folder
    /// completed by another opens that one. An error from `fill` ends the build, leaving no
    /// index. Not for a user's index folder — use [`Bm25Index::open`], which only reports.
    pub fn open_or_build_cache<E: From<RetrievalError>>(
        folder: &Path,
        fill: impl FnOnce(&mut IndexBuilder) -> Result<(), E>,
        threads: usize,
        memory_mb: usize,
    ) -> Result<Self, E> {
        match Self::open(folder) {
            Ok(index) => return Ok(index),
            Err(
                RetrievalError::Incomplete { .. }
                | RetrievalError::Corrupt { .. }
                | RetrievalError::Open { .. },
            ) => {}
            Err(e) => return Err(e.into()),
        }
        if folder.exists() {
            let name = folder
                .file_name()
                .map_or_else(Default::default, |n| n.to_string_lossy());
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let aside =
                folder.with_file_name(format!(".{name}.broken-{}-{nanos}", std::process::id()));
            match std::fs::rename(folder, &aside) {
                Ok(()) => {
                    let _ = std::fs::remove_dir_all(&aside);
                }
                // Another caller moved it first.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(folder_error(folder)(e).into()),
            }
        }
        let mut builder = match IndexBuilder::new(folder, threads, memory_mb) {
            Ok(b) => b,
            // Another caller finished first: its complete index is the one to use.
            Err(e) => return Self::open(folder).map_err(|_| e.into()),
        };
        fill(&mut builder)?;
        match builder.finish() {
            Ok(index) => Ok(index),
            Err(e) => Self::open(folder).map_err(|_| e.into()),
        }
    }

    /// Opens an index built by [`Bm25Index::build`] or [`IndexBuilder`], after checking that it
    /// is complete, holds the passages its marker counts, and that every segment file's checksum
    /// matches (this reads the whole index once).
    pub fn open(folder: &Path) -> Result<Self, RetrievalError> {
        Self::open_checked(folder, true)
    }

    /// Opens an index like [`Bm25Index::open`] but without reading every file for its checksum
    /// (for a large index that was just built or verified).
    pub fn open_unverified(folder: &Path) -> Result<Self, RetrievalError> {
        Self::open_checked(folder, false)
    }

    fn open_checked(folder: &Path, checksums: bool) -> Result<Self, RetrievalError> {
        let path = || folder.display().to_string();
        let opening = |source| RetrievalError::Open {
            path: path(),
            source,
        };
        let corrupt = |reason: String| RetrievalError::Corrupt {
            path: path(),
            reason,
        };
        let marker = match std::fs::read(folder.join(COMPLETE_MARKER)) {
            Ok(bytes) => serde_json::from_slice::<Marker>(&bytes)
                .map_err(|e| corrupt(format!("{COMPLETE_MARKER}: {e}")))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(RetrievalError::Incomplete {
                    path: path(),
                    reason: if folder.is_dir() {
                        format!("no {COMPLETE_MARKER}")
                    } else {
                        "no such folder".into()
                    },
                })
            }
            Err(e) => return Err(folder_error(folder)(e)),
        };
        if marker.format != INDEX_FORMAT {
            return Err(RetrievalError::Incomplete {
                path: path(),
                reason: format!(
                    "index format {} where {INDEX_FORMAT} is expected",
                    marker.format
                ),
            });
        }
        let index = Index::open_in_dir(folder).map_err(opening)?;
        if checksums {
            let mut damaged: Vec<String> = index
                .validate_checksum()
                .map_err(opening)?
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            if !damaged.is_empty() {
                damaged.sort();
                return Err(corrupt(format!(
                    "checksum mismatch in {}",
                    damaged.join(", ")
                )));
            }
        }
        let schema = index.schema();
        let id = schema.get_field("id").map_err(opening)?;
        let contents = schema.get_field("contents").map_err(opening)?;
        let analyzer = index.tokenizer_for_field(contents).map_err(opening)?;
        let reader: IndexReader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(opening)?;
        let found = reader.searcher().num_docs();
        if found != marker.passages {
            return Err(corrupt(format!(
                "{found} passages where {COMPLETE_MARKER} counts {}",
                marker.passages
            )));
        }
        Ok(Self {
            reader,
            analyzer,
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

    /// The query as the original treats it: its words, any of which may match. Built from the
    /// field's analyzer (the one the passages were indexed with), so tantivy query syntax
    /// (`-w`, `+w`, `f:v`, quotes, parentheses, `*`) is just text.
    fn query(&self, text: &str) -> Option<BooleanQuery> {
        let mut analyzer = self.analyzer.clone();
        let mut tokens = analyzer.token_stream(text);
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        while clauses.len() < MAX_QUERY_TERMS && tokens.advance() {
            let term = Term::from_field_text(self.contents, &tokens.token().text);
            clauses.push((
                Occur::Should,
                Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs)),
            ));
        }
        (!clauses.is_empty()).then(|| BooleanQuery::new(clauses))
    }

    fn search_one(&self, query: &str, topk: usize) -> Result<Vec<Hit>, RetrievalError> {
        let Some(query) = self.query(query) else {
            return Ok(Vec::new());
        };
        let searcher = self.reader.searcher();
        // The collector reserves room for `topk` hits up front: never more than there are.
        let limit = topk.clamp(
            1,
            searcher.num_docs().max(1).try_into().unwrap_or(usize::MAX),
        );
        let top = searcher.search(&query, &TopDocs::with_limit(limit).order_by_score())?;
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
    /// The largest response body read, in bytes (256 MiB); a bigger one is a
    /// [`RetrievalError::BadResponse`] that says so.
    pub max_response_bytes: u64,
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

/// `": <detail>"` from a FastAPI-style error body (`{"detail": …}`), read up to 64 KiB; empty
/// when there is none.
fn server_detail(resp: &mut ureq::http::Response<ureq::Body>) -> String {
    let Ok(bytes) = resp.body_mut().with_config().limit(64 << 10).read_to_vec() else {
        return String::new();
    };
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(v) => match v.get("detail") {
            Some(Value::String(d)) => format!(": {d}"),
            Some(d) => format!(": {d}"),
            None => String::new(),
        },
        Err(_) => String::new(),
    }
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
            max_response_bytes: 256 << 20,
        }
    }

    fn too_big(&self) -> RetrievalError {
        RetrievalError::BadResponse {
            url: self.url.clone(),
            message: format!(
                "the response is larger than max_response_bytes = {} bytes; ask for fewer \
                 queries or a smaller topk per request, or raise the limit",
                self.max_response_bytes
            ),
        }
    }

    fn read_envelope(
        &self,
        resp: &mut ureq::http::Response<ureq::Body>,
    ) -> Result<ResultEnvelope, RetrievalError> {
        let limit = self.max_response_bytes;
        if resp.body().content_length().is_some_and(|n| n > limit) {
            return Err(self.too_big());
        }
        let bytes = match resp.body_mut().with_config().limit(limit).read_to_vec() {
            Ok(b) => b,
            Err(ureq::Error::BodyExceedsLimit(_)) => return Err(self.too_big()),
            Err(e) => {
                return Err(RetrievalError::BadResponse {
                    url: self.url.clone(),
                    message: e.to_string(),
                })
            }
        };
        serde_json::from_slice(&bytes).map_err(|e| RetrievalError::BadResponse {
            url: self.url.clone(),
            message: e.to_string(),
        })
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
                        last = format!("HTTP {status}{}", server_detail(&mut resp));
                    } else if status != 200 {
                        // A client error will not change on retry.
                        return Err(RetrievalError::Http {
                            url: self.url.clone(),
                            message: format!("HTTP {status}{}", server_detail(&mut resp)),
                            attempts: attempt,
                        });
                    } else {
                        return self.read_envelope(&mut resp);
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
