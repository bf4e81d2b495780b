#!/usr/bin/env python3
"""Token statistics (entropy + top-20 confidence) of one logits row: t2po-control vs numpy.

Both run in this one script on the same rows, interleaved over several rounds, and the table
shows medians and the ratio numpy / t2po. numpy's peer is the usual way: log-softmax for the
entropy, np.partition for the top-20. The first row's statistics are compared as a check.

Run from the repository root:  python3 benches/stats_vs_numpy.py
It builds the Rust side with `cargo build --release -p t2po-benches`. Without numpy it makes a
virtual environment in $HOME/.cache/t2po-numpy-venv (or $T2PO_NUMPY_VENV), installs numpy there
(`python3 -m venv … && …/bin/pip install numpy`, ~20 MB from PyPI) and runs itself with it.
OPENBLAS_CORETYPE, if set, is removed for this run only (numpy's exp, sum and partition do not
go through BLAS, but a forced core type must not skew the peer). With T2PO_BASELINE_EXE set to
another build of the stats_vs_numpy binary, that build is timed in the same rounds too (a
before/after column).
Memory: numpy advises transparent huge pages for arrays of 4 MiB or more, so its rows sit in
2 MiB pages; the Rust binary puts its copy of the rows in 2 MiB pages the same way (the `thp`
field it prints: advised / refused / off; T2PO_BENCH_THP=0 keeps them in a plain Vec).
"""
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

try:
    import numpy as np
except ImportError:
    venv = os.environ.get("T2PO_NUMPY_VENV") or os.path.join(
        os.path.expanduser("~"), ".cache", "t2po-numpy-venv")
    py = os.path.join(venv, "bin", "python")
    # The venv's python is a symlink to this same interpreter: compare prefixes, not paths.
    if os.path.realpath(sys.prefix) == os.path.realpath(venv):
        sys.exit(f"numpy is missing even in {venv}: {py} -m pip install numpy")
    if not os.path.exists(py):
        print(f"numpy not found: creating {venv} and installing numpy", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "numpy"], check=True)
    os.execv(py, [py] + sys.argv)

if os.environ.pop("OPENBLAS_CORETYPE", None) is not None:
    print("note: OPENBLAS_CORETYPE was set; unset for this benchmark", file=sys.stderr)

ROUNDS = int(os.environ.get("T2PO_BENCH_ROUNDS", "3"))
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


def run_rust(exe, path, vocab):
    out = subprocess.run([exe, path, str(vocab), str(REPS_RUST)], check=True,
                         capture_output=True, text=True).stdout
    return dict(kv.split("=") for kv in out.split())


def main():
    root = ROOT
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "t2po-benches",
                    "--bin", "stats_vs_numpy"], cwd=root, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    exe = os.path.join(target, "release", "stats_vs_numpy")
    baseline = os.environ.get("T2PO_BASELINE_EXE")
    rng = np.random.default_rng(0)
    print(f"numpy {np.__version__}; rows of N(0, 2) logits with 5 strong candidates; "
          f"{ROUNDS} interleaved rounds, medians")
    extra = f" {'baseline us':>11} {'numpy/base':>11}" if baseline else ""
    print(f"{'vocab':>8} {'t2po us':>9} {'numpy us':>9} {'numpy/t2po':>11}{extra}  check")
    for vocab in (32000, 128256, 151936):
        rows = (2.0 * rng.standard_normal((ROWS, vocab))).astype(np.float32)
        for r in rows:
            r[rng.integers(0, vocab, 5)] = 12.0 - np.arange(5)
        with tempfile.NamedTemporaryFile(suffix=".f32", delete=False) as f:
            f.write(rows.astype("<f4").tobytes())
            path = f.name
        ours, theirs, base = [], [], []
        try:
            for _ in range(ROUNDS):
                fields = run_rust(exe, path, vocab)
                ours.append(float(fields["median_us"]))
                theirs.append(time_numpy(rows, REPS_NUMPY))
                if baseline:
                    base.append(float(run_rust(baseline, path, vocab)["median_us"]))
        finally:
            os.unlink(path)
        h, c = numpy_stats(rows[0])
        ok = (abs(float(fields["entropy0"]) - h) <= 1e-4 * max(1.0, abs(h))
              and abs(float(fields["confidence0"]) - c) <= 1e-4 * max(1.0, abs(c)))
        t, n = float(np.median(ours)), float(np.median(theirs))
        extra = ""
        if baseline:
            b = float(np.median(base))
            extra = f" {b:>11.1f} {n / b:>10.1f}x"
        print(f"{vocab:>8} {t:>9.1f} {n:>9.1f} {n / t:>10.1f}x{extra}  "
              f"{'agree' if ok else 'DIFFER'}  (t2po rows: thp={fields.get('thp', '?')})")
        if not ok:
            print(f"  t2po H={fields['entropy0']} C={fields['confidence0']}; numpy H={h} C={c}",
                  file=sys.stderr)
            sys.exit(1)


if __name__ == "__main__":
    main()
