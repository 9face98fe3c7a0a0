//! `PTXFLOW_NDT_BATCH_AB=1 cargo bench --bench ndt`: the 256-hypothesis batch under several
//! kernel configurations in one process (`PTXFLOW_NDT_AB`, default: `base` = the f64 kernel,
//! `mixed` = `PTXFLOW_NDT_MIXED=1`): criterion rows `gpu/ndt/batch_ab/<name>/256` (then
//! `<name>_2`, alternating), and a SUMMARY line of wall medians of alternating runs with each
//! configuration's evaluations, converged count, and how many results differ from the first
//! configuration's (stop reason, or beyond 1 mm / 0.01 deg) and how many are not equal to it
//! bit for bit.

use super::{Data, HYPOTHESES};
use criterion::{Criterion, Throughput};
use ptxflow::ndt::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One configuration of the A/B: a name and the `PTXFLOW_NDT_*` switches set while its
/// pipeline loads its kernels.
struct Config {
    name: String,
    env: Vec<(String, String)>,
}

/// `PTXFLOW_NDT_AB="name=KEY=V,KEY=V;name2=..."` (keys without the `PTXFLOW_NDT_` prefix), or
/// base (`MIXED=0`) and mixed (`MIXED=1`).
fn configs() -> Vec<Config> {
    let spec =
        std::env::var("PTXFLOW_NDT_AB").unwrap_or_else(|_| "base=MIXED=0;mixed=MIXED=1".into());
    spec.split(';')
        .filter(|c| !c.is_empty())
        .map(|c| {
            let (name, rest) = c.split_once('=').unwrap_or((c, ""));
            let env = rest
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (format!("PTXFLOW_NDT_{k}"), v.to_string()))
                .collect();
            Config {
                name: name.to_string(),
                env,
            }
        })
        .collect()
}

/// A pipeline for the batch built under `cfg`'s switches, target uploaded.
fn pipeline(gpu: &Arc<ptxflow::runtime::Gpu>, d: &Data, cfg: &Config) -> GpuDerivativePipeline {
    let p = &d.velodyne;
    let cap = GpuCapacity {
        points: p.source.len(),
        voxels: p.map.len(),
        requests: HYPOTHESES,
    };
    for (k, v) in &cfg.env {
        std::env::set_var(k, v);
    }
    let mut pipe = GpuDerivativePipeline::new(gpu.clone(), cap, NeighbourSearch::Direct7, 0.55)
        .expect("pipeline");
    pipe.upload_target(&p.map).expect("target");
    for (k, _) in &cfg.env {
        std::env::remove_var(k);
    }
    pipe
}

fn batch(pipe: &mut GpuDerivativePipeline, d: &Data) -> BatchReport {
    pipe.upload_source(&d.velodyne.source).expect("source");
    align_hypotheses(pipe, 0, &d.hypotheses, &NdtParams::default().solver).expect("batch")
}

/// [`batch`] under `cfg`'s switches (those the solver reads per batch, such as
/// `PTXFLOW_NDT_PARALLEL_FEED_MIN`).
fn batch_with(pipe: &mut GpuDerivativePipeline, d: &Data, cfg: &Config) -> BatchReport {
    for (k, v) in &cfg.env {
        std::env::set_var(k, v);
    }
    let r = batch(pipe, d);
    for (k, _) in &cfg.env {
        std::env::remove_var(k);
    }
    r
}

/// The criterion rows and the SUMMARY line (see the module docs).
pub fn batch_ab(c: &mut Criterion, d: &Data, gpu: &Arc<ptxflow::runtime::Gpu>) {
    let configs = configs();
    let mut pipes: Vec<GpuDerivativePipeline> =
        configs.iter().map(|cfg| pipeline(gpu, d, cfg)).collect();
    let mut g = c.benchmark_group("gpu/ndt/batch_ab");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(1))
        .warm_up_time(Duration::from_millis(300));
    g.throughput(Throughput::Elements(HYPOTHESES as u64));
    for round in ["", "_2"] {
        for (pipe, cfg) in pipes.iter_mut().zip(&configs) {
            g.bench_function(format!("{}{round}/{HYPOTHESES}", cfg.name), |b| {
                b.iter(|| batch_with(pipe, d, cfg))
            });
        }
    }
    g.finish();
    let reps = 15;
    let mut times = vec![Vec::new(); pipes.len()];
    for _ in 0..reps {
        for (k, (pipe, cfg)) in pipes.iter_mut().zip(&configs).enumerate() {
            let t = Instant::now();
            std::hint::black_box(batch_with(pipe, d, cfg));
            times[k].push(t.elapsed().as_secs_f64());
        }
    }
    let reports: Vec<BatchReport> = pipes
        .iter_mut()
        .zip(&configs)
        .map(|(p, cfg)| batch_with(p, d, cfg))
        .collect();
    let base = &reports[0];
    let mut parts = Vec::new();
    for ((cfg, r), t) in configs.iter().zip(&reports).zip(&mut times) {
        t.sort_by(f64::total_cmp);
        let evaluations: usize = r.results.iter().map(|r| r.evaluations).sum();
        let converged = r.results.iter().filter(|r| r.stop.converged()).count();
        let differ = r
            .results
            .iter()
            .zip(&base.results)
            .filter(|(x, y)| {
                let (dt, dr) = pose_error(&x.t_target_source, &y.t_target_source);
                x.stop != y.stop || dt >= 1e-3 || dr >= 0.01
            })
            .count();
        // Results not equal bit for bit to the first configuration's (pose, stop, counts).
        let unequal = r
            .results
            .iter()
            .zip(&base.results)
            .filter(|(x, y)| x != y)
            .count();
        // Results with other iterations or evaluations, and the largest pose difference.
        let counts = r
            .results
            .iter()
            .zip(&base.results)
            .filter(|(x, y)| (x.iterations, x.evaluations) != (y.iterations, y.evaluations))
            .count();
        let (mt, mr) = r
            .results
            .iter()
            .zip(&base.results)
            .map(|(x, y)| pose_error(&x.t_target_source, &y.t_target_source))
            .fold((0.0f64, 0.0f64), |(a, b), (t, r)| (a.max(t), b.max(r)));
        let (bt, br) = pose_error(
            &r.best_result().expect("best").t_target_source,
            &base.best_result().expect("best").t_target_source,
        );
        parts.push(format!(
            "{} {:.3} ms (min {:.3}; {evaluations} evaluations, {converged} converged, {differ} differ from {}, {unequal} not bit-equal, {counts} other iterations/evaluations, largest pose difference {mt:.1e} m {mr:.1e} deg, best {bt:.1e} m {br:.1e} deg from its best)",
            cfg.name,
            t[t.len() / 2] * 1e3,
            t[0] * 1e3,
            configs[0].name
        ));
    }
    println!(
        "SUMMARY ndt batch A/B {HYPOTHESES} hypotheses ({}, medians of {reps} alternating runs): {}",
        gpu.facts().name,
        parts.join("; ")
    );
}
