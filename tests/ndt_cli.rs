//! `ptxflow ndt --device ...`: `cpu` always works, `gpu` needs a GPU (a clear error without one),
//! `auto` takes the GPU when there is one and otherwise says so and uses the CPU.

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
    let gpu = run("gpu");
    if has_gpu {
        assert!(out.contains("\"device\":\"gpu\""), "{out}");
        assert!(
            gpu.status.success(),
            "{}",
            String::from_utf8_lossy(&gpu.stderr)
        );
    } else {
        assert!(
            out.contains("\"device\":\"cpu\"") && err.contains("aligning on the CPU"),
            "{out}\n{err}"
        );
        assert!(!gpu.status.success());
        assert!(
            String::from_utf8_lossy(&gpu.stderr).contains("no CUDA device"),
            "{}",
            String::from_utf8_lossy(&gpu.stderr)
        );
    }
}
