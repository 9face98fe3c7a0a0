//! The NDT evaluation server (`ndt_derivatives_server`, `GpuDerivativePipeline::set_server`):
//! one persistent kernel per alignment, requests and answers through mapped host memory. Its
//! alignments must equal the launch-per-round path's exactly (same sums, so the same poses,
//! iterations and stop reasons) and the CPU's within 1 mm / 0.01°; its evaluations must equal
//! the ordinary round's bit for bit; timeouts on either side and a pipeline dropped in the
//! middle of an alignment must end in clear errors (or nothing at all), never a hang, and the
//! pipeline must give exact results afterwards. Skips without a GPU (fails with
//! `PTXFLOW_REQUIRE_GPU=1`); `PTXFLOW_SANITIZE=1` runs a thinned source for compute-sanitizer.

mod common;
mod ndt_support;

use ndt_support::*;
use ptxflow::ndt::*;
use ptxflow::runtime::Gpu;
use ptxflow::Error;
use std::sync::Arc;
use std::time::Duration;

/// The Velodyne scene, its source thinned to every 16th point under the sanitizer.
fn scene() -> Option<Scene> {
    Some(thinned(velodyne_scene(&pointclouds_dir()?)))
}

fn pipeline(
    gpu: &Arc<Gpu>,
    scene: &Scene,
    search: NeighbourSearch,
    server: bool,
) -> GpuDerivativePipeline {
    let mut p = source_pipeline(gpu, &scene.map, &scene.source, search);
    p.set_server(server).unwrap();
    // The host solver on the server (or launching per round), not the device solver.
    p.set_device_solve(false).unwrap();
    p
}

fn poses(n: usize) -> Vec<Pose6> {
    (0..n)
        .map(|k| {
            let t = k as f64;
            Pose6::new(
                0.05 * t,
                -0.03 * t,
                0.01 * t,
                0.002 * t,
                -0.001 * t,
                0.004 * t,
            )
        })
        .collect()
}

fn request(pose: Pose6) -> [LinearizeRequest; 1] {
    [LinearizeRequest { source: 0, pose }]
}

#[test]
fn server_alignments_equal_the_launch_path_and_the_cpu() {
    let Some(gpu) = common::gpu_or_skip("server_alignments_equal_the_launch_path_and_the_cpu")
    else {
        return;
    };
    let Some(scene) = scene() else { return };
    let params = NdtParams::default();
    let searches: &[NeighbourSearch] = if sanitizing() {
        &[NeighbourSearch::Direct7]
    } else {
        &[
            NeighbourSearch::Direct1,
            NeighbourSearch::Direct7,
            NeighbourSearch::Direct27,
            NeighbourSearch::Radius,
        ]
    };
    for &search in searches {
        let mut plain = pipeline(&gpu, &scene, search, false);
        let launched = align(&mut plain, 0, &scene.init, &params.solver).unwrap();
        let mut served = pipeline(&gpu, &scene, search, true);
        served.reset_counters();
        let s = align(&mut served, 0, &scene.init, &params.solver).unwrap();
        let c = served.counters();
        assert_eq!(
            c.launches, 1,
            "{search:?}: one launch for the whole alignment"
        );
        assert_eq!(c.requests as usize, s.evaluations, "{search:?}");
        assert!(
            !served.server_running(),
            "{search:?}: stopped after the alignment"
        );
        assert_eq!(
            s, launched,
            "{search:?}: server and launch-per-round results differ"
        );
        // Again on the same pipeline: a fresh server per alignment.
        let again = align(&mut served, 0, &scene.init, &params.solver).unwrap();
        assert_eq!(again, launched, "{search:?}: second served alignment");
        let mut cpu = CpuLinearizer::new(
            &scene.map,
            vec![&scene.source],
            search,
            params.outlier_ratio,
        )
        .unwrap();
        let cpu_r = align(&mut cpu, 0, &scene.init, &params.solver).unwrap();
        let (dt, dr) = pose_error(&s.t_target_source, &cpu_r.t_target_source);
        assert_same(&format!("{search:?}"), "server", "CPU", &s, &cpu_r);
        eprintln!(
            "{search:?}: {} evaluations, {:?}, server = launch path bit for bit, CPU within {dt:.2e} m {dr:.2e} deg",
            s.evaluations, s.stop
        );
    }
}

#[test]
fn server_evaluations_equal_the_ordinary_round_bit_for_bit() {
    let Some(gpu) = common::gpu_or_skip("server_evaluations_equal_the_ordinary_round_bit_for_bit")
    else {
        return;
    };
    let Some(scene) = scene() else { return };
    let mut plain = pipeline(&gpu, &scene, NeighbourSearch::Direct7, false);
    let mut served = pipeline(&gpu, &scene, NeighbourSearch::Direct7, true);
    let n = if sanitizing() { 3 } else { 12 };
    let wants: Vec<Linearization> = poses(n)
        .into_iter()
        .map(|p| plain.linearize(&request(p)).unwrap().remove(0))
        .collect();
    served.start_alignment(1).unwrap();
    assert!(served.server_running());
    served.reset_counters();
    for (k, p) in poses(n).into_iter().enumerate() {
        let got = served.linearize(&request(p)).unwrap();
        assert_eq!(got, vec![wants[k].clone()], "pose {k}");
        // The ordinary pipeline runs on the device's stream while the server holds its own
        // (not under compute-sanitizer, which may run kernels one at a time).
        if k == 1 && !sanitizing() {
            assert_eq!(plain.linearize(&request(p)).unwrap(), got, "interleaved");
        }
    }
    assert_eq!(served.counters().launches, 0, "no launch per evaluation");
    // A batch round stops the server and runs the ordinary way.
    let two = [request(poses(2)[1])[0], request(poses(3)[2])[0]];
    let got = served.linearize(&two).unwrap();
    assert!(!served.server_running());
    assert_eq!(got, plain.linearize(&two).unwrap());
    served.finish_alignment().unwrap();
}

#[test]
fn server_idle_timeout_and_host_timeout_are_clear_errors_and_lose_nothing() {
    let Some(gpu) = common::gpu_or_skip(
        "server_idle_timeout_and_host_timeout_are_clear_errors_and_lose_nothing",
    ) else {
        return;
    };
    let Some(scene) = scene() else { return };
    let mut plain = pipeline(&gpu, &scene, NeighbourSearch::Direct7, false);
    let mut served = pipeline(&gpu, &scene, NeighbourSearch::Direct7, true);
    let p = poses(3)[2];
    let want = plain.linearize(&request(p)).unwrap();

    // The kernel ends by itself when no request comes in time.
    served.set_server_timeouts(ServerTimeouts {
        idle: Duration::from_millis(1),
        ..server_timeouts()
    });
    served.start_alignment(1).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    match served.linearize(&request(p)) {
        Err(Error::Kernel {
            kernel,
            code,
            detail,
        }) => {
            assert_eq!(kernel, "ndt_derivatives_server");
            assert!(code == 2 || code == 4, "code {code}: {detail}");
        }
        other => panic!("expected the idle timeout, got {other:?}"),
    }
    assert!(!served.server_running());
    assert_eq!(
        served.linearize(&request(p)).unwrap(),
        want,
        "ordinary round after it"
    );

    // The host gives up at once with a zero answer timeout; the kernel still ends cleanly.
    served.set_server_timeouts(ServerTimeouts {
        answer: Duration::ZERO,
        ..server_timeouts()
    });
    served.start_alignment(1).unwrap();
    match served.linearize(&request(p)) {
        Err(Error::Kernel {
            kernel,
            code,
            detail,
        }) => {
            assert_eq!(kernel, "ndt_derivatives_server");
            assert_eq!(code, 5, "{detail}");
        }
        other => panic!("expected the host timeout, got {other:?}"),
    }
    assert!(!served.server_running());

    // A new server after both (counters cleared) answers exactly again.
    served.set_server_timeouts(server_timeouts());
    served.start_alignment(1).unwrap();
    assert_eq!(
        served.linearize(&request(p)).unwrap(),
        want,
        "served after the errors"
    );
    served.finish_alignment().unwrap();
    gpu.check_healthy().unwrap();
}

#[test]
fn dropping_a_pipeline_mid_alignment_stops_its_server() {
    let Some(gpu) = common::gpu_or_skip("dropping_a_pipeline_mid_alignment_stops_its_server")
    else {
        return;
    };
    let Some(scene) = scene() else { return };
    let p = poses(2)[1];
    let want = pipeline(&gpu, &scene, NeighbourSearch::Direct7, false)
        .linearize(&request(p))
        .unwrap();
    for _ in 0..2 {
        let mut served = pipeline(&gpu, &scene, NeighbourSearch::Direct7, true);
        served.start_alignment(1).unwrap();
        assert_eq!(served.linearize(&request(p)).unwrap(), want);
        drop(served);
    }
    // Other uses of a pipeline stop the server before touching its buffers.
    let mut served = pipeline(&gpu, &scene, NeighbourSearch::Direct7, true);
    served.start_alignment(1).unwrap();
    served.upload_source(&scene.source).unwrap();
    assert!(!served.server_running());
    assert_eq!(served.linearize(&request(p)).unwrap(), want);
    gpu.check_healthy().unwrap();
}
