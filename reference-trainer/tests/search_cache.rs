//! The trainer's Search QA index cache (`EnvPool::generated` for `EnvKind::Search`) goes through
//! the envs crate's validated, concurrent-safe `Bm25Index::open_or_build_cache`: runs that build
//! the same cache at once all get the complete index, and a cache left unfinished or damaged is
//! rebuilt rather than read. Its own test binary: it sets `T2PO_CACHE` for the process.

use reference_trainer::rollout::pool::{cache_dir, PoolSize};
use reference_trainer::rollout::{EnvKind, EnvPool, Split};
use std::path::{Path, PathBuf};
use t2po_envs::search_qa::retriever::{Bm25Index, COMPLETE_MARKER};

fn entries(folder: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(folder)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

const SIZE: PoolSize = PoolSize {
    products: 50,
    train_games: 2,
    held_out_games: 1,
    passages: 400,
    train_questions: 5,
    held_out_questions: 1,
};

fn tasks(pool: &EnvPool) -> (usize, usize) {
    (pool.num_tasks(Split::Train), pool.num_tasks(Split::Test))
}

#[test]
fn concurrent_runs_share_one_cached_index_and_a_broken_cache_is_rebuilt() {
    let cache = tempfile::tempdir().unwrap();
    std::env::set_var("T2PO_CACHE", cache.path());
    assert_eq!(cache_dir(), cache.path());
    let folder = cache.path().join("search-index-v2-seed11-passages400");

    // Four runs build the same cache at once (each into its own temporary folder).
    let pools: Vec<EnvPool> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| s.spawn(|| EnvPool::generated(EnvKind::Search, 11, SIZE)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
    });
    let want = tasks(&pools[0]);
    assert!(want.0 > 0 && want.1 > 0, "{want:?}");
    assert!(pools.iter().all(|p| tasks(p) == want));
    // One complete index and nothing else (no partial or broken folders left).
    assert_eq!(entries(cache.path()), vec![folder.clone()]);
    assert_eq!(Bm25Index::open(&folder).unwrap().len(), 400);
    drop(pools);

    // Unfinished (the completion marker missing): rebuilt, not read as an empty index.
    std::fs::remove_file(folder.join(COMPLETE_MARKER)).unwrap();
    assert_eq!(
        tasks(&EnvPool::generated(EnvKind::Search, 11, SIZE).unwrap()),
        want
    );
    assert_eq!(Bm25Index::open(&folder).unwrap().len(), 400);

    // Damaged segment files (tantivy's checksums fail): rebuilt.
    for f in entries(&folder) {
        if f.extension().is_some_and(|e| e == "idx" || e == "term") {
            let mut bytes = std::fs::read(&f).unwrap();
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0x5a;
            std::fs::write(&f, bytes).unwrap();
        }
    }
    assert!(Bm25Index::open(&folder).is_err());
    assert_eq!(
        tasks(&EnvPool::generated(EnvKind::Search, 11, SIZE).unwrap()),
        want
    );
    assert_eq!(Bm25Index::open(&folder).unwrap().len(), 400);
    assert_eq!(entries(cache.path()), vec![folder]);
}
