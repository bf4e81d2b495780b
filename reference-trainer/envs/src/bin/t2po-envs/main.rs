//! `t2po-envs`: the commands a user runs on their own data (`--help` on each).
//!
//! - `t2po-envs index --corpus wiki-18.jsonl[.gz] --out FOLDER`: builds the on-disk BM25 index,
//!   with a progress bar, in a temporary folder renamed into place when complete.
//! - `t2po-envs serve --index FOLDER [--addr 127.0.0.1:8000] [limits…]`: the Search-R1 /
//!   verl-agent retrieval API over it, every client resource bounded, until Ctrl-C or SIGTERM.
//! - `t2po-envs search --index FOLDER QUERY…`: the top hits per query as JSON lines (queries from
//!   standard input, one a line, when none is given).
//! - `t2po-envs play webshop|alfworld|search [data paths…] [--task I] [--expert] [--prompt]`:
//!   one episode in the terminal, on generated data or the user's files (WebShop items files,
//!   ALFWorld game folders, Search QA questions with an index or a corpus).

mod play;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use t2po_envs::search_qa::corpus_file::CorpusFile;
use t2po_envs::search_qa::retriever::{Bm25Index, IndexBuilder, Retriever};
use t2po_envs::search_qa::server::{self, ServerLimits, ServerStats};

#[derive(Parser)]
#[command(
    name = "t2po-envs",
    version,
    about = "The T²PO environments on your own data: Search QA retrieval (index, serve, search) \
             and playing WebShop, ALFWorld or Search QA episodes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build a BM25 index from a wiki-18 jsonl or jsonl.gz corpus
    /// (`{"id": "0", "contents": "\"Title\"\ntext"}` per line).
    Index(IndexArgs),
    /// Serve an index with the Search-R1 / verl-agent retrieval API (POST /retrieve, GET /health).
    Serve(ServeArgs),
    /// Print the top hits of each query as JSON lines.
    Search(SearchArgs),
    /// Play one episode of an environment in the terminal (typed by hand, or --expert).
    Play {
        #[command(subcommand)]
        env: play::PlayCommand,
    },
}

#[derive(Args)]
struct IndexArgs {
    /// The corpus: jsonl, or gzip-compressed jsonl.
    #[arg(long)]
    corpus: PathBuf,
    /// The index folder to create (must not exist, or be empty).
    #[arg(long)]
    out: PathBuf,
    /// Indexing threads.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: u16,
    /// Indexing memory budget in MiB, for all threads together (at least 15 per thread).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(15..=1_048_576))]
    memory_mb: u32,
}

#[derive(Args)]
struct ServeArgs {
    /// The index folder.
    #[arg(long)]
    index: PathBuf,
    /// Address to listen on (port 0: any free port; the URL is printed).
    #[arg(long, default_value = "127.0.0.1:8000")]
    addr: String,
    /// Skip the full checksum read of the index at start (faster for a large, trusted index).
    #[arg(long)]
    no_verify: bool,
    /// topk used when a request sends null, 0 or none.
    #[arg(long, default_value_t = 3, value_parser = positive)]
    default_topk: usize,
    /// Largest topk a request may ask for.
    #[arg(long, default_value_t = 100, value_parser = positive)]
    max_topk: usize,
    /// Most queries in one request.
    #[arg(long, default_value_t = 4096, value_parser = positive)]
    max_queries: usize,
    /// Most hits (queries × topk) in one request.
    #[arg(long, default_value_t = 50_000, value_parser = positive)]
    max_results: usize,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = 2 << 20, value_parser = positive)]
    max_body_bytes: usize,
    /// MiB all requests together may hold at once (bodies, then rendered results).
    #[arg(long, default_value_t = 512, value_parser = positive)]
    max_buffered_mb: usize,
    /// Largest request head in bytes.
    #[arg(long, default_value_t = 16 << 10, value_parser = clap::value_parser!(u32).range(1024..=1 << 20))]
    max_header_bytes: u32,
    /// Seconds to send a request head (also the keep-alive idle timeout).
    #[arg(long, default_value_t = 10, value_parser = seconds)]
    header_timeout_s: u64,
    /// Seconds to send a request body.
    #[arg(long, default_value_t = 10, value_parser = seconds)]
    body_timeout_s: u64,
    /// Seconds a response write may stay blocked on a client that does not read.
    #[arg(long, default_value_t = 30, value_parser = seconds)]
    write_timeout_s: u64,
    /// Seconds for a request's searches, queueing included.
    #[arg(long, default_value_t = 120, value_parser = seconds)]
    request_timeout_s: u64,
    /// Most open connections.
    #[arg(long, default_value_t = 1024, value_parser = positive)]
    max_connections: usize,
    /// Search threads [default: the number of cores].
    #[arg(long, value_parser = positive)]
    search_threads: Option<usize>,
    /// I/O threads [default: the number of cores, at most 4].
    #[arg(long, value_parser = positive)]
    io_threads: Option<usize>,
    /// Requests that may wait for a search thread at once (503 beyond).
    #[arg(long, default_value_t = 256, value_parser = positive)]
    max_pending: usize,
    /// Queries per unit of search work.
    #[arg(long, default_value_t = 16, value_parser = positive)]
    chunk_queries: usize,
}

#[derive(Args)]
struct SearchArgs {
    /// The index folder.
    #[arg(long)]
    index: PathBuf,
    /// Hits per query.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    topk: u32,
    /// Queries; read from standard input, one a line, when none is given.
    queries: Vec<String>,
}

/// A count from 1 to 10⁹ (the upper bound catches typos).
fn positive(s: &str) -> Result<usize, String> {
    let n: usize = s
        .parse()
        .map_err(|_| format!("{s:?} is not a whole number"))?;
    if (1..=1_000_000_000).contains(&n) {
        Ok(n)
    } else {
        Err(format!("{n} is out of range 1..=1000000000"))
    }
}

/// Seconds, 1 to 86400.
fn seconds(s: &str) -> Result<u64, String> {
    let n: u64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a whole number of seconds"))?;
    if (1..=86_400).contains(&n) {
        Ok(n)
    } else {
        Err(format!("{n} is out of range 1..=86400 seconds"))
    }
}

/// Whether an error chain ends in a closed pipe (`t2po-envs search … | head`).
fn broken_pipe(e: &anyhow::Error) -> bool {
    let pipe = Some(std::io::ErrorKind::BrokenPipe);
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().map(std::io::Error::kind) == pipe
            || c.downcast_ref::<serde_json::Error>()
                .and_then(serde_json::Error::io_error_kind)
                == pipe
    })
}

/// The error chain joined by `: ` (as `{:#}`), leaving out a cause whose text the message
/// before it already ends with: the library's errors show their source in their own message
/// (`…/game.tw-pddl: cannot read: No such file…`) and also expose it as `source()`.
fn report(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.ends_with(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Index(a) => index(a),
        Command::Serve(a) => serve(a),
        Command::Search(a) => search(a),
        Command::Play { env } => play::play(env),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", report(&e));
            ExitCode::FAILURE
        }
    }
}

fn index(a: IndexArgs) -> Result<()> {
    let corpus = CorpusFile::open(&a.corpus)?;
    let progress = corpus.progress();
    let bar = ProgressBar::new(corpus.size());
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta}) {msg}",
        )
        .context("progress bar template")?,
    );
    let started = Instant::now();
    let mut builder = IndexBuilder::new(&a.out, a.threads.into(), a.memory_mb as usize)?;
    for passage in corpus {
        builder.add(passage?)?;
        if builder.added() % 4096 == 0 {
            bar.set_position(progress.load(Ordering::Relaxed));
            bar.set_message(format!("{} passages", builder.added()));
        }
    }
    bar.set_position(progress.load(Ordering::Relaxed));
    bar.set_message(format!("{} passages; merging…", builder.added()));
    let n = builder.added();
    let index = builder.finish()?;
    bar.finish_and_clear();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "indexed {n} passages from {} into {} in {:.1} s",
        a.corpus.display(),
        a.out.display(),
        started.elapsed().as_secs_f64()
    )?;
    debug_assert_eq!(index.len(), n);
    Ok(())
}

fn limits(a: &ServeArgs) -> ServerLimits {
    let d = ServerLimits::default();
    ServerLimits {
        default_topk: a.default_topk,
        max_topk: a.max_topk,
        max_queries: a.max_queries,
        max_results: a.max_results,
        max_body_bytes: a.max_body_bytes,
        max_buffered_bytes: a.max_buffered_mb.saturating_mul(1 << 20),
        max_header_bytes: a.max_header_bytes as usize,
        max_headers: d.max_headers,
        header_timeout: Duration::from_secs(a.header_timeout_s),
        body_timeout: Duration::from_secs(a.body_timeout_s),
        write_timeout: Duration::from_secs(a.write_timeout_s),
        request_timeout: Duration::from_secs(a.request_timeout_s),
        max_connections: a.max_connections,
        search_threads: a.search_threads.unwrap_or(d.search_threads),
        io_threads: a.io_threads.unwrap_or(d.io_threads),
        max_pending: a.max_pending,
        chunk_queries: a.chunk_queries,
    }
}

fn open(folder: &std::path::Path, verify: bool) -> Result<Bm25Index> {
    Ok(if verify {
        Bm25Index::open(folder)?
    } else {
        Bm25Index::open_unverified(folder)?
    })
}

fn serve(a: ServeArgs) -> Result<()> {
    let limits = limits(&a);
    limits.validate()?;
    let index = open(&a.index, !a.no_verify)?;
    let passages = index.len();
    let runtime = server::runtime(&limits).context("start the server runtime")?;
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(&a.addr))
        .with_context(|| format!("bind {}", a.addr))?;
    let addr = listener.local_addr().context("the bound address")?;
    let mut out = std::io::stdout().lock();
    // A closed stdout must not stop the server: the line is for whoever is watching.
    let _ = writeln!(
        out,
        "serving {passages} passages from {} on http://{addr}/retrieve (GET /health)",
        a.index.display()
    )
    .and_then(|()| out.flush());
    drop(out);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let stats = Arc::new(ServerStats::default());
    runtime.block_on(async {
        let server = server::serve(listener, Arc::new(index), limits, stats, stopped);
        tokio::pin!(server);
        tokio::select! {
            () = &mut server => {}
            () = shutdown_signal() => {
                let _ = stop.send(true);
                server.await;
            }
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(2));
    Ok(())
}

/// Ctrl-C, or SIGTERM where there is one.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn search(a: SearchArgs) -> Result<()> {
    let index = Bm25Index::open(&a.index)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let topk = a.topk as usize;
    if a.queries.is_empty() {
        // Streamed, so a long query file needs no memory and `| head` stops it early.
        for line in std::io::stdin().lock().lines() {
            let q = line.context("read queries from standard input")?;
            print_hits(&mut out, &index, &q, topk)?;
        }
    } else {
        for q in &a.queries {
            print_hits(&mut out, &index, q, topk)?;
        }
    }
    out.flush()?;
    Ok(())
}

fn print_hits(out: &mut impl Write, index: &Bm25Index, q: &str, topk: usize) -> Result<()> {
    let hits = index.search(&[q.to_string()], topk)?;
    let hits: Vec<_> = hits
        .into_iter()
        .next()
        .unwrap_or_default()
        .into_iter()
        .map(|h| {
            serde_json::json!({
                "id": h.passage.id,
                "score": h.score,
                "title": h.passage.title(),
            })
        })
        .collect();
    serde_json::to_writer(&mut *out, &serde_json::json!({"query": q, "hits": hits}))?;
    out.write_all(b"\n")?;
    Ok(())
}
