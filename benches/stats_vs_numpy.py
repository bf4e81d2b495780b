#!/usr/bin/env python3
"""Token statistics (entropy + top-20 confidence) of one logits row: t2po-control vs numpy.

Both run in this one script on the same rows, interleaved over several rounds, and the table
shows medians and the ratio numpy / t2po. numpy's peer is the usual way: log-softmax for the
entropy, np.partition for the top-20. The first row's statistics are compared as a check.

Run from the repository root:  python3 benches/stats_vs_numpy.py
(needs numpy; builds the Rust side with `cargo build --release -p t2po-benches`).
"""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROUNDS = 3
ROWS = 16
REPS_RUST = 2000
REPS_NUMPY = 200
TOP_J = 20


def numpy_stats(row, j=TOP_J):
    m = row.max()
    z = row - m
    lse = np.log(np.exp(z).sum())
    logp = z - lse
    entropy = -(np.exp(logp) * logp).sum()
    top = np.partition(logp, -j)[-j:]
    return float(entropy), float(-top.mean())


def time_numpy(rows, reps):
    times = []
    for r in range(reps):
        row = rows[r % len(rows)]
        t0 = time.perf_counter()
        numpy_stats(row)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e6


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "t2po-benches",
                    "--bin", "stats_vs_numpy"], cwd=root, check=True)
    exe = os.path.join(root, "target", "release", "stats_vs_numpy")
    rng = np.random.default_rng(0)
    print(f"numpy {np.__version__}; rows of N(0, 2) logits with 5 strong candidates; "
          f"{ROUNDS} interleaved rounds, medians")
    print(f"{'vocab':>8} {'t2po us':>9} {'numpy us':>9} {'numpy/t2po':>11}  check")
    for vocab in (32000, 128256, 151936):
        rows = (2.0 * rng.standard_normal((ROWS, vocab))).astype(np.float32)
        for r in rows:
            r[rng.integers(0, vocab, 5)] = 12.0 - np.arange(5)
        with tempfile.NamedTemporaryFile(suffix=".f32", delete=False) as f:
            f.write(rows.astype("<f4").tobytes())
            path = f.name
        ours, theirs = [], []
        try:
            for _ in range(ROUNDS):
                out = subprocess.run([exe, path, str(vocab), str(REPS_RUST)], check=True,
                                     capture_output=True, text=True).stdout
                fields = dict(kv.split("=") for kv in out.split())
                ours.append(float(fields["median_us"]))
                theirs.append(time_numpy(rows, REPS_NUMPY))
        finally:
            os.unlink(path)
        h, c = numpy_stats(rows[0])
        ok = (abs(float(fields["entropy0"]) - h) <= 1e-4 * max(1.0, abs(h))
              and abs(float(fields["confidence0"]) - c) <= 1e-4 * max(1.0, abs(c)))
        t, n = float(np.median(ours)), float(np.median(theirs))
        print(f"{vocab:>8} {t:>9.1f} {n:>9.1f} {n / t:>10.1f}x  {'agree' if ok else 'DIFFER'}")
        if not ok:
            print(f"  t2po H={fields['entropy0']} C={fields['confidence0']}; numpy H={h} C={c}",
                  file=sys.stderr)
            sys.exit(1)


if __name__ == "__main__":
    main()
