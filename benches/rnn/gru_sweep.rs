//! `PTXFLOW_GRU_SWEEP=1`: the default GRU kernels' device time per call against the step count,
//! and the T=10 rollout replayed from a CUDA graph against eager launches.

use crate::per_call;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use ptxflow::rnn::gpu::gru::{GpuGru, GruLaunch};
use ptxflow::rnn::*;
use ptxflow::runtime::Gpu;
use std::sync::Arc;

/// `PTXFLOW_GRU_SWEEP=1`: device time per call of the default kernel for `members` at T = 1 ..
/// 10 (B = 32), the step counts alternating in 7 rounds of 100 back-to-back calls (medians): the
/// intercept is what a rollout costs besides its steps (launch, prologue, tail).
pub fn steps_sweep(
    gpu: &Arc<Gpu>,
    members: &[GruWeights],
    xs: &cudarc::driver::CudaSlice<f32>,
    h0: &cudarc::driver::CudaSlice<f32>,
) {
    let s = gpu.stream().clone();
    let mut gg = GpuGru::new(gpu.clone(), members, 10, 32, GruLaunch::default()).expect("gru");
    let ts = [1usize, 2, 3, 4, 6, 8, 10];
    let mut rounds: Vec<Vec<f64>> = vec![Vec::new(); ts.len()];
    for _ in 0..7 {
        for (&t, r) in ts.iter().zip(rounds.iter_mut()) {
            let shape = RolloutShape {
                steps: t,
                batch: 32,
            };
            r.push(
                1e6 * per_call(&s, 100, || {
                    gg.rollout_device(&s, &xs.slice(..), &h0.slice(..), shape, None)
                        .expect("rollout")
                }),
            );
            gg.check(&s).expect("barriers");
        }
    }
    // The T=10 rollout replayed from a CUDA graph (one captured launch) alternating with
    // eager launches: the share of the launch path in the per-call time.
    let shape = RolloutShape {
        steps: 10,
        batch: 32,
    };
    s.synchronize().expect("sync");
    s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .expect("begin capture");
    let enq = gg.rollout_device(&s, &xs.slice(..), &h0.slice(..), shape, None);
    let graph = s.end_capture(CUgraphInstantiate_flags(0));
    enq.expect("rollout");
    let graph = graph.expect("end capture").expect("a graph");
    let mut pair = [Vec::new(), Vec::new()];
    for _ in 0..7 {
        pair[0].push(
            1e6 * per_call(&s, 100, || {
                gg.rollout_device(&s, &xs.slice(..), &h0.slice(..), shape, None)
                    .expect("rollout")
            }),
        );
        gg.check(&s).expect("barriers");
        pair[1].push(1e6 * per_call(&s, 100, || graph.launch().expect("graph")));
        gg.check(&s).expect("barriers");
    }
    let [mut eager, mut replay] = pair;
    eager.sort_by(f64::total_cmp);
    replay.sort_by(f64::total_cmp);
    println!(
        "SUMMARY gpu/rnn gru graph E={} {}: T=10 us per call, eager {:.2} (min {:.2}), CUDA graph replay {:.2} (min {:.2}) (medians of 7 alternating rounds of 100 calls)",
        members.len(),
        gg.kernel_name(),
        eager[3],
        eager[0],
        replay[3],
        replay[0]
    );
    let med: Vec<String> = ts
        .iter()
        .zip(rounds)
        .map(|(t, mut r)| {
            r.sort_by(f64::total_cmp);
            format!("T={t} {:.2}", r[r.len() / 2])
        })
        .collect();
    println!(
        "SUMMARY gpu/rnn gru sweep E={} {} ({} blocks): us per call (median of 7 alternating rounds of 100 calls): {}",
        members.len(),
        gg.kernel_name(),
        gg.blocks(),
        med.join(", ")
    );
}
