//! Compiles `tests/c/abi_test.c` against `include/t2po.h` and the static library with
//! `-fsanitize=address,undefined` and runs it: a C engine's decode loop and every error path.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn c_program_passes_under_asan_and_ubsan() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // `cargo test` links tests against the rlib only, so build the staticlib explicitly (same
    // target dir, debug profile): the test binary lives in <target>/<profile>/deps.
    let exe = std::env::current_exe().expect("test binary path");
    let target_dir = exe
        .ancestors()
        .nth(3)
        .expect("target dir above <profile>/deps");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let built = Command::new(&cargo)
        .args([
            "build",
            "--quiet",
            "--lib",
            "-p",
            "t2po-control",
            "--target-dir",
        ])
        .arg(target_dir)
        .current_dir(&crate_dir)
        .status()
        .expect("run cargo build for the staticlib");
    assert!(built.success(), "cargo build of the staticlib failed");
    let lib = target_dir.join("debug/libt2po_control.a");
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let bin = out_dir.join("t2po_abi_test");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g", "-O1"])
        .args(["-fsanitize=address,undefined", "-fno-sanitize-recover=all"])
        .arg("-I")
        .arg(crate_dir.join("include"))
        .arg(crate_dir.join("tests/c/abi_test.c"))
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&bin)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}`: {e}"));
    assert!(status.success(), "compiling tests/c/abi_test.c failed");
    let output = Command::new(&bin)
        .env("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1")
        .env("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        .output()
        .expect("run the C test");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    print!("{stdout}");
    assert!(
        output.status.success() && stdout.contains("checks passed"),
        "C ABI test failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
}
