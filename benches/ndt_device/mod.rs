//! `PTXFLOW_NDT_DEVICE_AB="name=opts;name=opts;..."` (with `PTXFLOW_NDT_DEVICE_RUNS`, default
//! 60): the Velodyne alignment (no upload) on the evaluation server and on device-solver builds
//! with those build options (`kernels::ndt::solve` `OPT_*` bits, 188 the table's kernel, 0 session 9's),
//! alternating run by run in one process: wall medians, the kernel's own start-to-result and
//! solver-step medians, and every build's result against the first build's and the server's.
//! A build with the profile bit (`OPT_PROFILE`) also prints its cycle counters per phase
//! (medians over the runs, per occurrence; microseconds at the clock that the counters' sum
//! over the kernel's `%globaltimer` span implies). Profile builds' wall times include the
//! blocks' exit (the counters are copied on the kernel's stream).

use super::{gpu_pipeline, Data};
use ptxflow::kernels::ndt::solve::profile::*;
use ptxflow::ndt::*;
use std::time::Instant;

pub fn device_ab(d: &Data, gpu: &std::sync::Arc<ptxflow::runtime::Gpu>, spec: &str) {
    let p = &d.velodyne;
    let solver = NdtParams::default().solver;
    let builds: Vec<(String, u32)> = spec
        .split(';')
        .filter_map(|s| {
            let (n, o) = s.split_once('=')?;
            Some((n.trim().to_string(), o.trim().parse().ok()?))
        })
        .collect();
    let mut server = gpu_pipeline(gpu, p, p.source.len(), 1);
    server.set_server(true).expect("server switch");
    server
        .set_device_solve(false)
        .expect("device solver switch");
    server.upload_source(&p.source).expect("source");
    let mut pipes: Vec<GpuDerivativePipeline> = builds
        .iter()
        .map(|(_, o)| {
            let mut pipe = gpu_pipeline(gpu, p, p.source.len(), 1);
            pipe.set_server(true).expect("server switch");
            pipe.set_device_solve(true).expect("device solver switch");
            pipe.set_device_solve_opts(*o);
            pipe.upload_source(&p.source).expect("source");
            pipe
        })
        .collect();
    let want = align(&mut server, 0, &p.init, &solver).expect("align");
    let first: Vec<NdtResult> = pipes
        .iter_mut()
        .map(|pipe| align(pipe, 0, &p.init, &solver).expect("align"))
        .collect();
    let runs: usize = std::env::var("PTXFLOW_NDT_DEVICE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let n = pipes.len();
    let mut wall: Vec<Vec<f64>> = vec![Vec::new(); n + 1];
    let mut total: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut solve: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut profs: Vec<Vec<[u64; PROF_WORDS]>> = vec![Vec::new(); n];
    let mut fallbacks = vec![0usize; n];
    let mut changed = vec![0usize; n];
    for _ in 0..runs {
        let t = Instant::now();
        std::hint::black_box(align(&mut server, 0, &p.init, &solver).expect("align"));
        wall[n].push(t.elapsed().as_secs_f64() * 1e6);
        for (k, pipe) in pipes.iter_mut().enumerate() {
            let t = Instant::now();
            let r = align(pipe, 0, &p.init, &solver).expect("align");
            wall[k].push(t.elapsed().as_secs_f64() * 1e6);
            changed[k] += usize::from(r != first[k]);
            fallbacks[k] += usize::from(pipe.device_solve_fallback().is_some());
            if let Some(st) = pipe.device_solve_stats() {
                total[k].push(st.total_ns as f64 * 1e-3);
                solve[k].push(st.solve_ns as f64 * 1e-3);
            }
            if let Some(pr) = pipe.device_solve_profile() {
                profs[k].push(pr);
            }
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        if v.is_empty() {
            return f64::NAN;
        }
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "SUMMARY ndt device AB velodyne ({runs} alternating runs, {}): server {:.1} us",
        gpu.facts().name,
        median(&wall[n])
    );
    for (k, (name, o)) in builds.iter().enumerate() {
        let r = &first[k];
        let (dt, dr) = pose_error(&r.t_target_source, &want.t_target_source);
        let (bt, br) = pose_error(&r.t_target_source, &first[0].t_target_source);
        let st = pipes[k].device_solve_stats().unwrap_or_default();
        println!(
            "SUMMARY ndt device AB {name} (opts {o}): wall {:.1} us, kernel start to result \
             {:.1} us, solver steps {:.1} us; {:?}, iterations {}, evaluations {}, {} eigen \
             path steps; vs server: stop {:?}, pose {:.1e} m {:.1e} deg, equal {}; vs \
             {}: pose {:.1e} m {:.1e} deg, equal {}; {} fallbacks, {} runs changed",
            median(&wall[k]),
            median(&total[k]),
            median(&solve[k]),
            r.stop,
            r.iterations,
            r.evaluations,
            st.assists,
            want.stop,
            dt,
            dr,
            *r == want,
            builds[0].0,
            bt,
            br,
            *r == first[0],
            fallbacks[k],
            changed[k],
        );
        if profs[k].is_empty() {
            continue;
        }
        let med = |w: usize| median(&profs[k].iter().map(|p| p[w] as f64).collect::<Vec<_>>());
        let cycles: f64 = (0..P_TRIALS).map(med).sum();
        let ghz = cycles / (median(&total[k]) * 1e3);
        let (evals, newton, trials) = (med(P_EVALS), med(P_NEWTON), med(P_TRIALS));
        let names = [
            (P_SEEN, "release->seen", evals),
            (P_TERMS, "terms", evals),
            (P_POINTS, "points", evals),
            (P_COUNTED, "block reduce+count", evals),
            (P_ALL, "wait for all blocks", evals),
            (P_REDUCED, "stage+final reduce", evals),
            (P_FEED, "line-search feed", evals),
            (P_CHOL, "decode+cholesky", newton),
            (P_SOLVE, "solve/eigen", newton),
            (P_NEXT, "stop tests+dir+ls start", newton),
            (P_STORE, "state stores", evals),
            (P_SEND, "sincos+record+relay", evals),
        ];
        let parts: Vec<String> = names
            .iter()
            .map(|(w, what, per)| {
                let c = med(*w);
                format!(
                    "{what} {:.0} cyc = {:.2} us x {per:.0} = {:.1} us",
                    c / per.max(1.0),
                    c / per.max(1.0) / ghz / 1e3,
                    c / ghz / 1e3
                )
            })
            .collect();
        let spans = med(P_RELAY_N).max(1.0);
        println!(
            "SUMMARY ndt device profile {name}: {evals:.0} evaluations, {newton:.0} Newton \
             steps, {trials:.0} trial steps, counters {cycles:.0} cycles over {:.1} us = {ghz:.3} \
             GHz; {}; release -> a block sees it {:.2} us, -> a block has counted itself {:.2} us \
             (means over blocks and {spans:.0} evaluations, %globaltimer)",
            median(&total[k]),
            parts.join("; "),
            med(P_RELAY_NS) / spans / 1e3,
            med(P_COUNTED_NS) / spans / 1e3,
        );
    }
}
