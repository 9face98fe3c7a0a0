//! `PTXFLOW_NDT_BATCH_AB=1 cargo bench --bench ndt`: the 256-hypothesis batch on the f64
//! kernel (`base`, the default) and on the mixed-precision kernel (`mixed`,
//! `GpuDerivativePipeline::set_mixed`) in one process: criterion rows
//! `gpu/ndt/batch_ab/{base,mixed}/256` (then `_2` of each, alternating), and a SUMMARY line of
//! wall medians of alternating runs with each path's evaluations, converged count and how far
//! its best pose lies from the other's.

use super::{Data, HYPOTHESES};
use criterion::{Criterion, Throughput};
use ptxflow::ndt::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A pipeline for the batch with the mixed kernel on or off, target uploaded.
fn pipeline(gpu: &Arc<ptxflow::runtime::Gpu>, d: &Data, mixed: bool) -> GpuDerivativePipeline {
    let p = &d.velodyne;
    let cap = GpuCapacity {
        points: p.source.len(),
        voxels: p.map.len(),
        requests: HYPOTHESES,
    };
    let mut pipe = GpuDerivativePipeline::new(gpu.clone(), cap, NeighbourSearch::Direct7, 0.55)
        .expect("pipeline");
    pipe.set_mixed(mixed);
    pipe.upload_target(&p.map).expect("target");
    assert_eq!(pipe.uses_mixed(), mixed, "mixed kernel loaded as asked");
    pipe
}

fn batch(pipe: &mut GpuDerivativePipeline, d: &Data) -> BatchReport {
    pipe.upload_source(&d.velodyne.source).expect("source");
    align_hypotheses(pipe, 0, &d.hypotheses, &NdtParams::default().solver).expect("batch")
}

/// The criterion rows and the SUMMARY line (see the module docs).
pub fn batch_ab(c: &mut Criterion, d: &Data, gpu: &Arc<ptxflow::runtime::Gpu>) {
    let mut pipes = [false, true].map(|m| pipeline(gpu, d, m));
    let mut g = c.benchmark_group("gpu/ndt/batch_ab");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    g.throughput(Throughput::Elements(HYPOTHESES as u64));
    for round in ["", "_2"] {
        for (pipe, name) in pipes.iter_mut().zip(["base", "mixed"]) {
            g.bench_function(format!("{name}{round}/{HYPOTHESES}"), |b| {
                b.iter(|| batch(pipe, d))
            });
        }
    }
    g.finish();
    let reps = 15;
    let mut times = [Vec::new(), Vec::new()];
    for _ in 0..reps {
        for (k, pipe) in pipes.iter_mut().enumerate() {
            let t = Instant::now();
            std::hint::black_box(batch(pipe, d));
            times[k].push(t.elapsed().as_secs_f64());
        }
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let reports = pipes.each_mut().map(|p| batch(p, d));
    let describe = |r: &BatchReport| {
        let evaluations: usize = r.results.iter().map(|r| r.evaluations).sum();
        let converged = r.results.iter().filter(|r| r.stop.converged()).count();
        format!("{evaluations} evaluations, {converged} converged")
    };
    let (a, b) = (&reports[0], &reports[1]);
    let differ = a
        .results
        .iter()
        .zip(&b.results)
        .filter(|(x, y)| {
            let (dt, dr) = pose_error(&x.t_target_source, &y.t_target_source);
            x.stop != y.stop || dt >= 1e-3 || dr >= 0.01
        })
        .count();
    let (bt, br) = pose_error(
        &a.best_result().expect("best").t_target_source,
        &b.best_result().expect("best").t_target_source,
    );
    println!(
        "SUMMARY ndt batch A/B {HYPOTHESES} hypotheses ({}, {reps} alternating runs): base (f64) {:.3} ms ({}); mixed {:.3} ms ({}); {differ} of {HYPOTHESES} results beyond 1 mm / 0.01 deg or with another stop; best poses {bt:.2e} m {br:.2e} deg apart",
        gpu.facts().name,
        med(&mut times[0]) * 1e3,
        describe(a),
        med(&mut times[1]) * 1e3,
        describe(b),
    );
}
