//! The on-disk index as a user's files: a build that does not finish leaves no index, opening
//! checks completeness and every checksum, and random damage to segment files is reported as an
//! error naming the folder, never a panic.

use std::path::{Path, PathBuf};
use t2po_envs::rng::Rng;
use t2po_envs::search_qa::corpus::World;
use t2po_envs::search_qa::retriever::{
    Bm25Index, IndexBuilder, RetrievalError, Retriever, COMPLETE_MARKER,
};

fn files(folder: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(folder)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

fn copy_folder(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for f in files(from) {
        std::fs::copy(&f, to.join(f.file_name().unwrap())).unwrap();
    }
}

#[test]
fn an_unfinished_build_leaves_no_index() {
    let dir = tempfile::tempdir().unwrap();
    let world = World::generate(1, 300);
    let target = dir.path().join("idx");
    let mut b = IndexBuilder::new(&target, 1, 32).unwrap();
    for p in world.passages.iter().take(100).cloned() {
        b.add(p).unwrap();
    }
    assert_eq!(b.added(), 100);
    drop(b);
    assert!(!target.exists());
    assert!(files(dir.path()).is_empty(), "the partial folder was left");
    assert!(matches!(
        Bm25Index::open(&target),
        Err(RetrievalError::Incomplete { .. })
    ));

    // A folder of index files without the marker (what an interrupted in-place build left).
    let idx = Bm25Index::build(&target, world.passages.clone(), 1, 32).unwrap();
    assert_eq!(idx.len(), 300);
    drop(idx);
    std::fs::remove_file(target.join(COMPLETE_MARKER)).unwrap();
    match Bm25Index::open(&target) {
        Err(e @ RetrievalError::Incomplete { .. }) => {
            let m = e.to_string();
            assert!(
                m.contains(&target.display().to_string()) && m.contains(COMPLETE_MARKER),
                "{m}"
            );
        }
        other => panic!("expected Incomplete, got {:?}", other.err()),
    }
    // A non-empty target is refused, and left as it was.
    let before = files(&target);
    assert!(matches!(
        Bm25Index::build(&target, world.passages.clone(), 1, 32),
        Err(RetrievalError::NotEmpty { .. })
    ));
    assert_eq!(files(&target), before);
}

#[test]
fn random_damage_to_segment_files_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let world = World::generate(5, 400);
    let good = dir.path().join("good");
    let idx = Bm25Index::build(&good, world.passages.clone(), 1, 32).unwrap();
    let probe = vec![world.passages[17].title().to_string()];
    let expected = idx.search(&probe, 3).unwrap();
    drop(idx);
    assert_eq!(
        Bm25Index::open(&good).unwrap().search(&probe, 3).unwrap(),
        expected
    );
    // Segment files: everything but tantivy's meta files and the marker.
    let segments: Vec<PathBuf> = files(&good)
        .into_iter()
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            !name.ends_with(".json") && !name.starts_with('.')
        })
        .collect();
    assert!(segments.len() >= 4, "{segments:?}");
    let mut rng = Rng::new(2026);
    let (mut errors, mut valid) = (0, 0);
    for trial in 0..60 {
        let folder = dir.path().join(format!("t{trial}"));
        copy_folder(&good, &folder);
        let victim = folder.join(segments[rng.below(segments.len())].file_name().unwrap());
        let mut bytes = std::fs::read(&victim).unwrap();
        // One to three bytes changed (never to themselves).
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(bytes.len());
            bytes[at] ^= 1 + rng.below(255) as u8;
        }
        std::fs::write(&victim, &bytes).unwrap();
        let opened = std::panic::catch_unwind(|| Bm25Index::open(&folder));
        match opened {
            Err(_) => panic!("opening panicked after damage to {}", victim.display()),
            Ok(Err(e)) => {
                errors += 1;
                let m = e.to_string();
                assert!(m.contains(&folder.display().to_string()), "{m}");
            }
            Ok(Ok(idx)) => {
                // Only acceptable as a valid index: the same answers as before the damage.
                valid += 1;
                assert_eq!(
                    idx.search(&probe, 3).unwrap(),
                    expected,
                    "{}",
                    victim.display()
                );
            }
        }
        std::fs::remove_dir_all(&folder).unwrap();
    }
    println!("60 damaged copies: {errors} refused, {valid} opened and answered as the original");
    assert!(errors > 0);
}

/// The cache helper: a missing, unfinished or damaged cached index is rebuilt (never read), and
/// concurrent builders of one cache folder all end up with the same complete index.
#[test]
fn a_cached_index_is_rebuilt_when_broken_and_shared_by_concurrent_builders() {
    let dir = tempfile::tempdir().unwrap();
    let world = World::generate(2, 200);
    let folder = dir.path().join("cache").join("idx");
    let builds = std::sync::atomic::AtomicUsize::new(0);
    let open = || {
        Bm25Index::open_or_build_cache(
            &folder,
            |b| {
                builds.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                for p in world.passages.iter().cloned() {
                    b.add(p)?;
                }
                Ok::<(), RetrievalError>(())
            },
            1,
            32,
        )
    };
    assert_eq!(open().unwrap().len(), 200);
    assert_eq!(builds.load(std::sync::atomic::Ordering::SeqCst), 1);
    // Complete: opened, not rebuilt.
    assert_eq!(open().unwrap().len(), 200);
    assert_eq!(builds.load(std::sync::atomic::Ordering::SeqCst), 1);
    // Unfinished (no marker): rebuilt.
    std::fs::remove_file(folder.join(COMPLETE_MARKER)).unwrap();
    assert_eq!(open().unwrap().len(), 200);
    assert_eq!(builds.load(std::sync::atomic::Ordering::SeqCst), 2);
    // Damaged segment files: rebuilt, and the result searches.
    for f in files(&folder) {
        if f.extension().is_some_and(|e| e == "idx" || e == "term") {
            let mut bytes = std::fs::read(&f).unwrap();
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0x5a;
            std::fs::write(&f, bytes).unwrap();
        }
    }
    let idx = open().unwrap();
    assert_eq!(builds.load(std::sync::atomic::Ordering::SeqCst), 3);
    let q = world.passages[5].title().to_string();
    assert!(!idx.search(&[q], 3).unwrap()[0].is_empty());
    drop(idx);
    // Four builders at once on a fresh folder.
    std::fs::remove_dir_all(&folder).unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4).map(|_| s.spawn(open)).collect();
        for h in handles {
            assert_eq!(h.join().unwrap().unwrap().len(), 200);
        }
    });
    // A failing fill leaves no index behind.
    std::fs::remove_dir_all(&folder).unwrap();
    let err = Bm25Index::open_or_build_cache(
        &folder,
        |b| {
            b.add(world.passages[0].clone())?;
            Err(RetrievalError::NotEmpty {
                path: "fill failed".into(),
            })
        },
        1,
        32,
    );
    assert!(err.is_err() && !folder.exists());
    assert_eq!(open().unwrap().len(), 200);
    // Nothing left beside the cache but the index itself.
    let left: Vec<_> = files(folder.parent().unwrap());
    assert_eq!(left, vec![folder.clone()], "{left:?}");
}
