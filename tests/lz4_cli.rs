//! The `ptxflow lz4` command against the `lz4` tool (Debian package `lz4`): files we write are
//! restored exactly by `lz4 -d`, and we read what `lz4` writes (default, 64 KiB blocks, linked
//! blocks, block checksums, content size, legacy). Skips with a note when `lz4` is not installed.

mod lz4_support;

use ptxflow::rng::Rng;
use std::path::{Path, PathBuf};
use std::process::Command;

fn ptxflow(args: &[&Path]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ptxflow"));
    cmd.arg("lz4");
    for a in args {
        cmd.arg(a);
    }
    cmd.output().expect("running the ptxflow binary")
}

fn lz4_available() -> bool {
    match Command::new("lz4").arg("--version").output() {
        Ok(o) if o.status.success() => true,
        _ => {
            eprintln!("skipping: the `lz4` command is not installed (apt-get install -y lz4)");
            false
        }
    }
}

/// A temporary folder per test, removed when the test ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("ptxflow-lz4-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ok(out: &std::process::Output, what: &str) -> String {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Inputs: a corpus prefix with a short tail, text, random, zeros, tiny and empty files.
fn inputs() -> Vec<(&'static str, Vec<u8>)> {
    let mut rng = Rng::new(77);
    let mut v = vec![
        ("empty", Vec::new()),
        ("tiny", b"hello".to_vec()),
        ("thirteen", vec![b'z'; 13]),
        (
            "random",
            (0..50_000).map(|_| rng.next_u64() as u8).collect(),
        ),
        ("zeros", vec![0; 3 * 4096 + 17]),
    ];
    if let Some(d) = lz4_support::corpus("dickens", Some((1 << 20) + 4097)) {
        v.push(("dickens", d));
    }
    if let Some(d) = lz4_support::corpus("ooffice", Some(300_001)) {
        v.push(("ooffice", d));
    }
    v
}

#[test]
fn lz4_tool_restores_our_frames_and_we_restore_ours() {
    if !lz4_available() {
        return;
    }
    let dir = Scratch::new("ours");
    let scratch = |n: &str| dir.path(n);
    for (name, data) in inputs() {
        let raw = scratch(name);
        std::fs::write(&raw, &data).unwrap();
        for kib in ["1", "4", "64"] {
            let packed = scratch(&format!("{name}.{kib}.lz4"));
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_ptxflow"));
            cmd.args(["lz4", "compress"])
                .arg(&raw)
                .arg(&packed)
                .args(["--page-kib", kib]);
            if kib == "1" {
                cmd.arg("--block-checksum");
            }
            let report = ok(&cmd.output().unwrap(), "ptxflow lz4 compress");
            assert!(
                report.contains("ratio") && report.contains("GB/s"),
                "{report}"
            );
            let by_lz4 = scratch(&format!("{name}.{kib}.lz4out"));
            let out = Command::new("lz4")
                .args(["-d", "-f", "-q"])
                .arg(&packed)
                .arg(&by_lz4)
                .output()
                .unwrap();
            ok(&out, "lz4 -d");
            assert!(
                std::fs::read(&by_lz4).unwrap() == data,
                "{name} @ {kib} KiB: lz4 -d differs"
            );
            let by_us = scratch(&format!("{name}.{kib}.out"));
            let out = ptxflow(&[Path::new("decompress"), &packed, &by_us]);
            ok(&out, "ptxflow lz4 decompress");
            assert!(
                std::fs::read(&by_us).unwrap() == data,
                "{name} @ {kib} KiB: ours differs"
            );
        }
    }
}

#[test]
fn we_restore_frames_written_by_the_lz4_tool() {
    if !lz4_available() {
        return;
    }
    let dir = Scratch::new("tool");
    let scratch = |n: &str| dir.path(n);
    for (name, data) in inputs() {
        let raw = scratch(&format!("{name}.src"));
        std::fs::write(&raw, &data).unwrap();
        for opts in [
            &[][..],
            &["-B4", "--content-size"],
            &["-B4", "-BD"],
            &["-BX", "-B5"],
            &["-l"],
            &["-9"],
        ] {
            let packed = scratch(&format!("{name}.tool.lz4"));
            let out = Command::new("lz4")
                .args(opts)
                .args(["-f", "-q"])
                .arg(&raw)
                .arg(&packed)
                .output()
                .unwrap();
            ok(&out, "lz4 compress");
            let back = scratch(&format!("{name}.tool.out"));
            ok(
                &ptxflow(&[Path::new("decompress"), &packed, &back]),
                "ptxflow lz4 decompress",
            );
            assert!(
                std::fs::read(&back).unwrap() == data,
                "{name} with lz4 {opts:?}"
            );
        }
    }
}

#[test]
fn bad_arguments_and_corrupt_files_fail_cleanly() {
    let dir = Scratch::new("bad");
    let scratch = |n: &str| dir.path(n);
    let raw = scratch("bad.src");
    std::fs::write(&raw, b"some bytes some bytes some bytes some bytes").unwrap();
    let packed = scratch("bad.lz4");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ptxflow"));
    cmd.args(["lz4", "compress"])
        .arg(&raw)
        .arg(&packed)
        .args(["--page-kib", "65"]);
    let out = cmd.output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("multiple of 1024"));
    ok(
        &ptxflow(&[Path::new("compress"), &raw, &packed]),
        "compress",
    );
    let mut bytes = std::fs::read(&packed).unwrap();
    let n = bytes.len();
    bytes[n - 2] ^= 1;
    std::fs::write(&packed, &bytes).unwrap();
    let out = ptxflow(&[Path::new("decompress"), &packed, &scratch("bad.out")]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("checksum"),
        "{out:?}"
    );
    assert!(
        !scratch("bad.out").exists(),
        "a failed decode leaves no output file"
    );
    let out = ptxflow(&[
        Path::new("decompress"),
        &scratch("missing.lz4"),
        &scratch("x"),
    ]);
    assert!(!out.status.success());
}
