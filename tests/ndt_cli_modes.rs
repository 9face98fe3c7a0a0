//! `ptxflow ndt` with many sources, `--chain` and `--hypotheses` (CPU path, no GPU needed), the
//! `timing` object of `--json`, and on a GPU the sequence mode against the single-pair result.

mod common;
mod ndt_support;

use ndt_support::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn ptxflow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ptxflow"))
        .args(args)
        .output()
        .expect("run ptxflow")
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "ptxflow failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The numbers of `"key":[[..]]` (a 4×4 matrix) in a JSON line.
fn matrix(line: &str, key: &str) -> [f64; 16] {
    let at = line
        .find(&format!("\"{key}\":[["))
        .unwrap_or_else(|| panic!("no {key} in {line}"));
    let rest = &line[at + key.len() + 3..];
    let end = rest.find("]]").expect("matrix end");
    let v: Vec<f64> = rest[..end + 1]
        .split(['[', ']', ','])
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().expect("number"))
        .collect();
    v.try_into().expect("16 numbers")
}

/// The unsigned integer after `"key":`.
fn field(line: &str, key: &str) -> usize {
    let at = line.find(&format!("\"{key}\":")).expect("field") + key.len() + 3;
    line[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .expect("integer")
}

/// Translation (m) and rotation (deg) between two row-major 4×4 poses.
fn difference(a: &[f64; 16], b: &[f64; 16]) -> (f64, f64) {
    let dt = ((a[3] - b[3]).powi(2) + (a[7] - b[7]).powi(2) + (a[11] - b[11]).powi(2)).sqrt();
    // trace(Ra^T Rb) = 1 + 2 cos θ
    let mut tr = 0.0;
    for r in 0..3 {
        for c in 0..3 {
            tr += a[4 * r + c] * b[4 * r + c];
        }
    }
    let cos = ((tr - 1.0) / 2.0).clamp(-1.0, 1.0);
    (dt, cos.acos().to_degrees())
}

/// A directory with `n` links to (or copies of) `file`.
fn sequence_dir(name: &str, file: &Path, n: usize) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ptxflow-ndt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..n {
        let p = dir.join(format!("scan{i:03}.pcd"));
        #[cfg(unix)]
        std::os::unix::fs::symlink(file, &p).unwrap();
        #[cfg(not(unix))]
        std::fs::copy(file, &p).unwrap();
    }
    // Not a cloud: ignored.
    std::fs::write(dir.join("notes.txt"), "x").unwrap();
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Every source of a sequence (unchained and chained) lands on the single-pair result, one JSON
/// line per source in order, then a summary; the single pair reports where its time went.
fn sequence_matches_single(device: &str, n: usize, tol_m: f64, tol_deg: f64) {
    let Some(dir) = pointclouds_dir() else { return };
    let (t, src) = (dir.join("251370668.pcd"), dir.join("251371071.pcd"));
    let one = ok(&ptxflow(&[
        "ndt",
        "--json",
        "--device",
        device,
        "--target",
        s(&t),
        "--source",
        s(&src),
    ]));
    assert!(one.contains("\"timing\":{\"read_ms\":"), "{one}");
    assert!(one.contains("\"align_ms\":") && one.contains("\"device_reason\":"));
    let reference = matrix(&one, "t_target_source");
    let seq = sequence_dir(&format!("seq-{device}"), &src, n);
    for chain in [false, true] {
        let mut args = vec![
            "ndt",
            "--json",
            "--device",
            device,
            "--target",
            s(&t),
            "--source",
            s(&seq),
        ];
        if chain {
            args.push("--chain");
        }
        let out = ok(&ptxflow(&args));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), n + 1, "{out}");
        for (i, l) in lines[..n].iter().enumerate() {
            assert_eq!(field(l, "index"), i);
            assert!(l.contains(&format!("scan{i:03}.pcd")), "{l}");
            assert!(l.contains("\"converged\":true"), "{l}");
            let (dt, dr) = difference(&matrix(l, "t_target_source"), &reference);
            assert!(
                dt <= tol_m && dr <= tol_deg,
                "source {i} (chain {chain}): {dt} m, {dr} deg from the single pair"
            );
        }
        let summary = lines[n];
        assert!(summary.starts_with("{\"summary\":"), "{summary}");
        assert_eq!(field(summary, "alignments"), n);
        assert_eq!(field(summary, "converged_sources"), n);
        assert!(
            summary.contains(&format!("\"device\":\"{device}\"")),
            "{summary}"
        );
    }
    let _ = std::fs::remove_dir_all(&seq);
}

#[test]
fn cpu_sequence_matches_single_pair() {
    sequence_matches_single("cpu", 3, 1e-3, 0.01);
}

#[test]
fn gpu_sequence_matches_single_pair() {
    if common::gpu_or_skip("gpu_sequence_matches_single_pair").is_none() {
        return;
    }
    sequence_matches_single("gpu", 200, 1e-3, 0.01);
}

#[test]
fn hypotheses_report_every_result_and_the_best() {
    let Some(dir) = pointclouds_dir() else { return };
    let (t, src) = (dir.join("251370668.pcd"), dir.join("251371071.pcd"));
    let args = [
        "ndt",
        "--device",
        "cpu",
        "--target",
        s(&t),
        "--source",
        s(&src),
        "--hypotheses",
        "3",
        "--spread",
        "0.3,3",
        "--seed",
        "7",
    ];
    let mut json = args.to_vec();
    json.push("--json");
    let out = ok(&ptxflow(&json));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let l = lines[0];
    assert!(l.contains("\"hypotheses\":[{\"init\":["), "{l}");
    assert_eq!(l.matches("\"init\":").count(), 3, "{l}");
    assert!(field(l, "best") < 3);
    assert!(l.contains("\"converged\":true"), "{l}");
    // The first hypothesis is the initial guess itself (identity).
    assert!(l.contains("\"init\":[0,0,0,0,0,0]"), "{l}");
    let text = ok(&ptxflow(&args));
    assert!(text.contains("best of 3 hypotheses"), "{text}");
    assert!(text.contains("device: cpu (--device cpu)"), "{text}");
}

#[test]
fn bad_sequence_arguments_are_clear_errors() {
    let Some(dir) = pointclouds_dir() else { return };
    let t = dir.join("bun0.pcd");
    let empty = std::env::temp_dir().join(format!("ptxflow-ndt-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&["--source", s(&empty)], "holds no .pcd or .ply"),
        (
            &["--source", s(&t), "--hypotheses", "0"],
            "--hypotheses must lie in",
        ),
        (&["--source", s(&t), "--spread", "1"], "--spread needs"),
        (&["--source", s(&t), "--device", "tpu"], "cpu, gpu or auto"),
    ];
    for (extra, msg) in cases {
        let mut args = vec!["ndt", "--target", s(&t)];
        args.extend_from_slice(extra);
        let o = ptxflow(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(err.contains(msg), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&empty);
}
