//! The command line runs on any machine: `info`, `emit` and `demo` succeed with or without a GPU.

use std::process::Command;

fn ptxflow(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ptxflow"))
        .args(args)
        .output()
        .expect("run ptxflow")
}

#[test]
fn info_runs_and_lists_kernels() {
    let o = ptxflow(&["info"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for &id in ptxflow::kernels::ALL_KERNELS {
        assert!(
            text.contains(id.name()),
            "info does not list {}:\n{text}",
            id.name()
        );
    }
}

#[test]
fn emit_writes_every_kernel_and_rejects_unknown_targets() {
    let dir = std::env::temp_dir().join(format!("ptxflow-emit-{}", std::process::id()));
    let o = ptxflow(&["emit", "--out", dir.to_str().unwrap(), "--target", "sm_90"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for &id in ptxflow::kernels::ALL_KERNELS {
        let ptx = std::fs::read_to_string(dir.join(format!("{}.ptx", id.name()))).unwrap();
        assert!(ptx.contains(".target sm_90"), "{}", id.name());
    }
    let bad = ptxflow(&["emit", "--out", dir.to_str().unwrap(), "--target", "sm_61"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown target"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn demo_runs_and_agrees() {
    let o = ptxflow(&["demo"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(text.contains("0 of 10000003 elements differ"), "{text}");
}
