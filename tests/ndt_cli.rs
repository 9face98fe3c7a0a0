//! `ptxflow ndt --device ...`: `cpu` always works, `gpu` needs a GPU (a clear error without one),
//! `auto` picks the device its cost model expects to finish first and says why (a single
//! Velodyne pair: the CPU, done before a GPU context would exist).

mod common;
mod ndt_support;

use ndt_support::*;
use std::process::Command;

#[test]
fn ndt_device_choice() {
    let Some(dir) = pointclouds_dir() else { return };
    let (t, s) = (dir.join("251370668.pcd"), dir.join("251371071.pcd"));
    let run = |device: &str| {
        Command::new(env!("CARGO_BIN_EXE_ptxflow"))
            .args([
                "ndt",
                "--json",
                "--device",
                device,
                "--target",
                t.to_str().unwrap(),
                "--source",
                s.to_str().unwrap(),
            ])
            .output()
            .expect("run ptxflow")
    };
    let has_gpu = ptxflow::runtime::Gpu::open_default().is_ok();
    let cpu = run("cpu");
    assert!(
        cpu.status.success(),
        "{}",
        String::from_utf8_lossy(&cpu.stderr)
    );
    assert!(String::from_utf8_lossy(&cpu.stdout).contains("\"device\":\"cpu\""));
    let auto = run("auto");
    let (out, err) = (
        String::from_utf8_lossy(&auto.stdout),
        String::from_utf8_lossy(&auto.stderr),
    );
    assert!(auto.status.success(), "{err}");
    assert!(out.contains("\"converged\":true"), "{out}");
    assert!(out.contains("\"device_reason\":\"auto: "), "{out}");
    // One small pair: the CPU finishes before the GPU has started, so auto never opens it.
    assert!(out.contains("\"device\":\"cpu\""), "{out}\n{err}");
    let gpu = run("gpu");
    if has_gpu {
        let o = String::from_utf8_lossy(&gpu.stdout);
        assert!(
            gpu.status.success(),
            "{}",
            String::from_utf8_lossy(&gpu.stderr)
        );
        assert!(o.contains("\"device\":\"gpu\""), "{o}");
        assert!(o.contains("\"context_ms\":"), "{o}");
    } else {
        assert!(!gpu.status.success());
        assert!(
            String::from_utf8_lossy(&gpu.stderr).contains("no CUDA device"),
            "{}",
            String::from_utf8_lossy(&gpu.stderr)
        );
    }
}
