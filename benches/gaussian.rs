//! Gaussian field throughput, CPU and GPU in one run: forward, and forward + backward, in f32 and
//! f64, at (N Gaussians, B points) = (1000, 500), (10000, 500) and (10000, 100000). Throughput is
//! pair evaluations (N * B) per iteration.
//!
//! - CPU (`cpu/gaussian/...`, rayon on every core): the two small sizes in full; the largest
//!   (1e9 pairs, tens of seconds per iteration here) is sampled as 10000 x 2000 points, named
//!   `10000x100000-sampled-2000` (pairs/s is what compares).
//! - GPU (`gpu/gaussian/...`): device-resident kernels timed with CUDA events (points and
//!   dLoss/df already uploaded; `forward_resident` / `backward_resident`), plus
//!   `gpu/gaussian/api_forward_backward/f32/1000x500`: the whole trait round trip (upload,
//!   kernels, download, synchronisation) in wall time.
//!
//! The SUMMARY lines give medians of event-timed single runs, pairs/s, and FLOP/s against the
//! device's FP32/FP64 peak with a counted 22 FLOP per forward pair and 55 per backward pair (an
//! FMA counts 2, the exponential 1).
//!
//! `PTXFLOW_GAUSS_ONLY=f32:10000x100000` (type and size) runs only that GPU case, so that a
//! profiler sees its kernels first: `ncu -k regex:'gaussian_(forward|backward)' -c 2 <bench>`.
//!
//! f32 also compares its two forward kernels in one process: `SUMMARY ... forward kernels` gives
//! the medians of 30 alternating event-timed runs of the subtract form (`gaussian_forward_f32`)
//! and the expanded solve (`gaussian_forward_fast_f32`, `ForwardKind`), forward alone and forward
//! plus backward; the criterion rows run the field's default (`PTXFLOW_GAUSS_FORWARD`). Likewise
//! `SUMMARY ... backward kernels`: the unit-form backward (`gaussian_backward_f32`), the
//! expanded one (`gaussian_backward_fast_f32`, `BackwardKind`; `PTXFLOW_GAUSS_BWD_FAST` names a
//! variant), the points-in-lanes one (`gaussian_backward_lanes_f32`; `PTXFLOW_GAUSS_BWD_LANES`
//! names a variant) and the tensor-core one (`gaussian_backward_tc_f32`; `PTXFLOW_GAUSS_BWD_TC`
//! names a variant), backward alone and forward plus backward (default `PTXFLOW_GAUSS_BACKWARD`),
//! and the default backward's plan.
//!
//! `PTXFLOW_GAUSS_COMPARE` times kernel variants against the built-in kernels in the same
//! process (see `compare`).
//!
//! `PTXFLOW_GAUSS_FAST_AB="-;t2;l1:w8"` (f32): variants of the expanded forward
//! (`forward_fast::variant` names, `-` the built-in kernel, `:w<N>` the plan's waves,
//! `PTXFLOW_GAUSS_FAST_WAVES`), each in its own field, timed in 31 alternating rounds of one
//! event-timed forward each (the first dropped; `PTXFLOW_GAUSS_FAST_AB_ROUNDS` rounds instead of 30); `SUMMARY ... fast forward variants` gives
//! median, min and max per variant, its plan, and how many values differ from the first
//! variant's (bits) with the largest relative difference.

mod common;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ptxflow::gaussian::generate::{convert, random_gaussians, sample_points, GaussianSpec};
use ptxflow::gaussian::gpu::{BackwardKind, ForwardKind};
use ptxflow::gaussian::{
    FieldOptions, GaussianField, GaussianFieldOps, GpuGaussianField, GpuReal, Real,
};
use ptxflow::rng::Rng;
use ptxflow::runtime::Gpu;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SIZES: [(usize, usize); 3] = [(1000, 500), (10000, 500), (10000, 100_000)];
/// Points the CPU evaluates of the largest size.
const CPU_SAMPLE_POINTS: usize = 2000;
const FORWARD_FLOP_PER_PAIR: f64 = 22.0;
const BACKWARD_FLOP_PER_PAIR: f64 = 55.0;

fn problem(n: usize, b: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut rng = Rng::new(0x6A55);
    let gaussians = random_gaussians(&mut rng, n, &GaussianSpec::default());
    let points = sample_points(&mut rng, &gaussians, b, 1.5);
    let grad: Vec<f64> = (0..b).map(|_| rng.range(-1.0, 1.0)).collect();
    (gaussians, points, grad)
}

/// A badly conditioned set (kappa(L) ~ 1e2..1e4: diagonal rows scaled log-uniformly over 500x,
/// strong shear, as the tests' `badly_conditioned`): most Gaussians take the compensated
/// backward solve, so the SUMMARY shows what it costs.
fn badly_conditioned_problem(n: usize, b: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut rng = Rng::new(0x6A56);
    let spec = GaussianSpec {
        extent_m: 1.0,
        diag_m: (1.0, 1.0),
        shear: 2.0,
        weight: (-0.5, 1.5),
    };
    let mut gaussians = random_gaussians(&mut rng, n, &spec);
    for g in gaussians.chunks_exact_mut(10) {
        for row in [3..4, 4..6, 6..9] {
            let scale = rng.range((0.002f64).ln(), 0.0).exp();
            g[row].iter_mut().for_each(|v| *v *= scale);
        }
    }
    let points = sample_points(&mut rng, &gaussians, b, 1.3);
    let grad: Vec<f64> = (0..b).map(|_| rng.range(-1.0, 1.0)).collect();
    (gaussians, points, grad)
}

fn group<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    g.sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(300));
    g
}

fn cpu_type<T: Real>(c: &mut Criterion) {
    let mut g = group(c, "cpu/gaussian");
    for (n, b) in SIZES {
        let (sampled, label) = if b > 10_000 {
            (
                CPU_SAMPLE_POINTS,
                format!("{n}x{b}-sampled-{CPU_SAMPLE_POINTS}"),
            )
        } else {
            (b, format!("{n}x{b}"))
        };
        let (gaussians, points, grad) = problem(n, b);
        let (gaussians, points, grad) = (
            convert::<T>(&gaussians),
            convert::<T>(&points[..3 * sampled]),
            convert::<T>(&grad[..sampled]),
        );
        let mut field = GaussianField::<T>::with_gaussians(FieldOptions::default(), &gaussians)
            .expect("generated Gaussians are valid");
        g.throughput(Throughput::Elements((n * sampled) as u64));
        g.bench_function(
            BenchmarkId::new(format!("forward/{}", T::NAME), &label),
            |bench| {
                bench
                    .iter(|| black_box(field.forward(black_box(&points)).expect("valid points")[0]))
            },
        );
        g.bench_function(
            BenchmarkId::new(format!("forward_backward/{}", T::NAME), &label),
            |bench| {
                bench.iter(|| {
                    field.forward(black_box(&points)).expect("valid points");
                    black_box(
                        field
                            .backward(black_box(&grad))
                            .expect("valid gradient")
                            .gaussians[0],
                    )
                })
            },
        );
    }
    g.finish();
}

/// (FP32, FP64) lanes per SM by compute capability (datasheet figures; 2 FP64 lanes on parts
/// without full-rate FP64).
fn lanes_per_sm(cc: (i32, i32)) -> (f64, f64) {
    match cc {
        (7, _) => (64.0, 2.0),
        (8, 0) => (64.0, 32.0),
        (9, 0) => (128.0, 64.0),
        _ => (128.0, 2.0),
    }
}

fn gpu_type<T: GpuReal>(c: &mut Criterion, gpu: &Arc<Gpu>, summary: &mut Vec<String>) {
    let stream = gpu.stream().clone();
    let facts = gpu.facts();
    let (l32, l64) = lanes_per_sm(facts.compute_capability);
    let lanes = if T::NAME == "f32" { l32 } else { l64 };
    let peak = f64::from(facts.sm_count) * lanes * 2.0 * f64::from(facts.clock_khz) * 1e3;
    let mut g = group(c, "gpu/gaussian");
    // PTXFLOW_GAUSS_ONLY=<type>:<n>x<b> runs one size of one type (for profiling with ncu).
    let only = std::env::var("PTXFLOW_GAUSS_ONLY").ok();
    if only.as_deref().is_some_and(|o| !o.starts_with(T::NAME)) {
        return;
    }
    for (n, b) in SIZES {
        if only
            .as_deref()
            .is_some_and(|o| !o.ends_with(&format!(":{n}x{b}")))
        {
            continue;
        }
        let (gaussians, points, grad) = problem(n, b);
        let (gaussians, points, grad) = (
            convert::<T>(&gaussians),
            convert::<T>(&points),
            convert::<T>(&grad),
        );
        let mut field =
            GpuGaussianField::<T>::new(gpu.clone(), FieldOptions::default()).expect("GPU field");
        field.set_gaussians(&gaussians).expect("valid Gaussians");
        field.forward(&points).expect("forward");
        field.backward(&grad).expect("backward");
        let label = format!("{n}x{b}");
        let pairs = (n * b) as f64;
        g.throughput(Throughput::Elements(pairs as u64));
        g.bench_function(
            BenchmarkId::new(format!("forward/{}", T::NAME), &label),
            |bench| {
                bench.iter_custom(|it| {
                    common::event_timed(&stream, it, || field.forward_resident().expect("forward"))
                })
            },
        );
        g.bench_function(
            BenchmarkId::new(format!("forward_backward/{}", T::NAME), &label),
            |bench| {
                bench.iter_custom(|it| {
                    common::event_timed(&stream, it, || {
                        field.forward_resident().expect("forward");
                        field.backward_resident().expect("backward")
                    })
                })
            },
        );
        let fwd = common::median_secs(&stream, 30, || field.forward_resident().expect("forward"));
        let both = common::median_secs(&stream, 30, || {
            field.forward_resident().expect("forward");
            field.backward_resident().expect("backward")
        });
        if T::FORWARD_FAST.is_some() {
            compare_forward_kernels(&mut field, &stream, &format!("{n}x{b}"), summary);
        }
        if T::FORWARD_FAST.is_some() {
            compare_fast_variants::<T>(gpu, (&gaussians, &points), &label, summary);
        }
        if T::BACKWARD_FAST.is_some() {
            compare_backward_kernels(&mut field, &stream, &format!("{n}x{b}"), summary);
        }
        compare::<T>(gpu, (&gaussians, &points, &grad), &label, summary);
        let flop_f = FORWARD_FLOP_PER_PAIR * pairs / fwd;
        let flop_fb = (FORWARD_FLOP_PER_PAIR + BACKWARD_FLOP_PER_PAIR) * pairs / both;
        let (fp, bp) = field.plans().expect("plans");
        summary.push(format!(
            "SUMMARY gpu/gaussian {} {n}x{b} on {}: forward {:.1} us ({:.3e} pairs/s, {:.1} TFLOP/s = {:.0}% of {} peak {:.1}); \
             forward+backward {:.1} us ({:.3e} pairs/s, {:.1} TFLOP/s = {:.0}% of peak); plans {fp:?} {bp:?}",
            T::NAME,
            facts.name,
            fwd * 1e6,
            pairs / fwd,
            flop_f / 1e12,
            100.0 * flop_f / peak,
            if T::NAME == "f32" { "FP32" } else { "FP64" },
            peak / 1e12,
            both * 1e6,
            pairs / both,
            flop_fb / 1e12,
            100.0 * flop_fb / peak
        ));
        if n == 1000 && b == 500 && T::NAME == "f32" {
            g.bench_function(
                BenchmarkId::new(format!("api_forward_backward/{}", T::NAME), &label),
                |bench| {
                    bench.iter(|| {
                        field.forward(black_box(&points)).expect("forward");
                        black_box(
                            field
                                .backward(black_box(&grad))
                                .expect("backward")
                                .gaussians[0],
                        )
                    })
                },
            );
            let mut wall: Vec<f64> = (0..101)
                .map(|_| {
                    let t = Instant::now();
                    field.forward(&points).expect("forward");
                    field.backward(&grad).expect("backward");
                    t.elapsed().as_secs_f64()
                })
                .collect();
            wall.sort_by(f64::total_cmp);
            summary.push(format!(
                "SUMMARY gpu/gaussian api f32 1000x500: forward+backward through the trait (upload, kernels, download, sync) median {:.1} us wall",
                wall[50] * 1e6
            ));
        }
    }
    g.finish();
    // PTXFLOW_GAUSS_BAD=1 runs this row with PTXFLOW_GAUSS_ONLY too.
    let bad = std::env::var("PTXFLOW_GAUSS_BAD").is_ok_and(|v| v == "1");
    if T::NAME == "f32" && (only.is_none() || bad) {
        let (n, b) = SIZES[2];
        let (gaussians, points, grad) = badly_conditioned_problem(n, b);
        let mut field =
            GpuGaussianField::<T>::new(gpu.clone(), FieldOptions::default()).expect("GPU field");
        field
            .set_gaussians(&convert::<T>(&gaussians))
            .expect("valid Gaussians");
        field.forward(&convert::<T>(&points)).expect("forward");
        field.backward(&convert::<T>(&grad)).expect("backward");
        let both = common::median_secs(&stream, 30, || {
            field.forward_resident().expect("forward");
            field.backward_resident().expect("backward")
        });
        summary.push(format!(
            "SUMMARY gpu/gaussian f32 {n}x{b} badly-conditioned (compensated backward solves): forward+backward {:.1} us",
            both * 1e6
        ));
        let label = format!("{n}x{b} badly-conditioned");
        compare_backward_kernels(&mut field, &stream, &label, summary);
    }
}

/// Medians of 30 alternating event-timed runs of each f32 forward kernel (forward, and forward +
/// backward); leaves the field on its default kernel.
fn compare_forward_kernels<T: GpuReal>(
    field: &mut GpuGaussianField<T>,
    stream: &Arc<ptxflow::runtime::CudaStream>,
    label: &str,
    summary: &mut Vec<String>,
) {
    let kinds = [ForwardKind::Subtract, ForwardKind::Expanded];
    let mut times = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
    for round in 0..31 {
        for (k, kind) in kinds.iter().enumerate() {
            field.set_forward_kind(*kind);
            let f = common::event_timed(stream, 1, || field.forward_resident().expect("forward"));
            let fb = common::event_timed(stream, 1, || {
                field.forward_resident().expect("forward");
                field.backward_resident().expect("backward")
            });
            // Round 0 loads the kernels.
            if round > 0 {
                times[k][0].push(f.as_secs_f64());
                times[k][1].push(fb.as_secs_f64());
            }
        }
    }
    field.set_forward_kind(ForwardKind::from_env());
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2] * 1e6
    };
    let [[mut sf, mut sfb], [mut ef, mut efb]] = times;
    summary.push(format!(
        "SUMMARY gpu/gaussian f32 {label} forward kernels (30 alternating runs): subtract {:.1} us, expanded {:.1} us; forward+backward subtract {:.1} us, expanded {:.1} us",
        med(&mut sf),
        med(&mut ef),
        med(&mut sfb),
        med(&mut efb)
    ));
}

/// `PTXFLOW_GAUSS_FAST_AB` (see the module docs): expanded-forward variants in alternating
/// rounds, one field each.
fn compare_fast_variants<T: GpuReal>(
    gpu: &Arc<Gpu>,
    (gaussians, points): (&[T], &[T]),
    label: &str,
    summary: &mut Vec<String>,
) {
    let Ok(spec) = std::env::var("PTXFLOW_GAUSS_FAST_AB") else {
        return;
    };
    let stream = gpu.stream().clone();
    let mut names = Vec::new();
    let mut fields = Vec::new();
    let mut values: Vec<Vec<T>> = Vec::new();
    for item in spec.split(';').filter(|s| !s.is_empty()) {
        let (name, waves) = match item.split_once(":w") {
            Some((n, w)) => (n, Some(w)),
            None => (item, None),
        };
        assert!(
            name == "-"
                || ptxflow::kernels::gaussian::forward_fast::variant_options(name).is_some(),
            "PTXFLOW_GAUSS_FAST_AB: no variant {name}"
        );
        for (var, v) in [
            ("PTXFLOW_GAUSS_FAST", (name != "-").then_some(name)),
            ("PTXFLOW_GAUSS_FAST_WAVES", waves),
        ] {
            match v {
                Some(v) => std::env::set_var(var, v),
                None => std::env::remove_var(var),
            }
        }
        let mut field =
            GpuGaussianField::<T>::new(gpu.clone(), FieldOptions::default()).expect("GPU field");
        field.set_forward_kind(ForwardKind::Expanded);
        field.set_gaussians(gaussians).expect("valid Gaussians");
        values.push(field.forward(points).expect("forward").to_vec());
        names.push(item.to_string());
        fields.push(field);
    }
    std::env::remove_var("PTXFLOW_GAUSS_FAST");
    std::env::remove_var("PTXFLOW_GAUSS_FAST_WAVES");
    let rounds: usize = std::env::var("PTXFLOW_GAUSS_FAST_AB_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let mut times = vec![Vec::new(); fields.len()];
    for round in 0..=rounds {
        for (k, field) in fields.iter_mut().enumerate() {
            let f = common::event_timed(&stream, 1, || field.forward_resident().expect("forward"));
            if round > 0 {
                times[k].push(f.as_secs_f64() * 1e6);
            }
        }
    }
    for (k, name) in names.iter().enumerate() {
        let t = &mut times[k];
        t.sort_by(f64::total_cmp);
        let (differ, worst) =
            values[k]
                .iter()
                .zip(&values[0])
                .fold((0usize, 0.0f64), |(n, w), (a, b)| {
                    let (a, b) = (a.to_f64(), b.to_f64());
                    if a.to_bits() == b.to_bits() {
                        (n, w)
                    } else {
                        (n + 1, w.max((a - b).abs() / b.abs().max(1e-30)))
                    }
                });
        let (fp, _) = fields[k].plans().expect("plans");
        summary.push(format!(
            "SUMMARY gpu/gaussian {} {label} fast forward variants ({rounds} alternating runs) {name}: median {:.1} us, min {:.1}, max {:.1}; {differ} values differ from {} (max rel {worst:.1e}); plan {fp:?}",
            T::NAME,
            t[t.len() / 2],
            t[0],
            t[t.len() - 1],
            names[0]
        ));
    }
}

/// Medians of 30 alternating event-timed runs of each f32 backward kernel (backward alone, and
/// forward + backward with the field's forward); leaves the field on its default kernel.
fn compare_backward_kernels<T: GpuReal>(
    field: &mut GpuGaussianField<T>,
    stream: &Arc<ptxflow::runtime::CudaStream>,
    label: &str,
    summary: &mut Vec<String>,
) {
    let kinds = [
        BackwardKind::Unit,
        BackwardKind::Expanded,
        BackwardKind::Lanes,
        BackwardKind::Tc,
    ];
    let mut times: [[Vec<f64>; 2]; 4] = Default::default();
    for round in 0..31 {
        for (k, kind) in kinds.iter().enumerate() {
            field.set_backward_kind(*kind);
            let bw =
                common::event_timed(stream, 1, || field.backward_resident().expect("backward"));
            let fb = common::event_timed(stream, 1, || {
                field.forward_resident().expect("forward");
                field.backward_resident().expect("backward")
            });
            // Round 0 loads the kernels.
            if round > 0 {
                times[k][0].push(bw.as_secs_f64());
                times[k][1].push(fb.as_secs_f64());
            }
        }
    }
    field.set_backward_kind(BackwardKind::from_env());
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2] * 1e6
    };
    let [[mut ub, mut ufb], [mut eb, mut efb], [mut lb, mut lfb], [mut tb, mut tfb]] = times;
    let variant = std::env::var("PTXFLOW_GAUSS_BWD_FAST").unwrap_or_else(|_| "built-in".into());
    let lanes = std::env::var("PTXFLOW_GAUSS_BWD_LANES").unwrap_or_else(|_| "built-in".into());
    let tc = std::env::var("PTXFLOW_GAUSS_BWD_TC").unwrap_or_else(|_| "default".into());
    let (_, plan) = field.plans().expect("plans");
    summary.push(format!(
        "SUMMARY gpu/gaussian f32 {label} backward kernels (30 alternating runs; expanded {variant}, lanes {lanes}, tc {tc}): backward unit {:.1} us, expanded {:.1} us, lanes {:.1} us, tc {:.1} us; forward+backward unit {:.1} us, expanded {:.1} us, lanes {:.1} us, tc {:.1} us; default backward plan {plan:?}",
        med(&mut ub),
        med(&mut eb),
        med(&mut lb),
        med(&mut tb),
        med(&mut ufb),
        med(&mut efb),
        med(&mut lfb),
        med(&mut tfb)
    ));
}

/// `PTXFLOW_GAUSS_COMPARE="<label>=<fwd>/<bwd>;..."` (names of `forward::variant` and
/// `backward::variant`, `-` for the built-in kernel, e.g. `s7=e0/batch-e0`): every labelled pair
/// of kernels gets its own field (plans from its own occupancy), and they are timed in turns
/// with the built-in pair in this process: 5 rounds, each a median of 10 event-timed runs of the
/// forward and of forward+backward per pair; a SUMMARY line per pair gives the median round.
fn compare<T: GpuReal>(
    gpu: &Arc<Gpu>,
    (gaussians, points, grad): (&[T], &[T], &[T]),
    label: &str,
    summary: &mut Vec<String>,
) {
    let Ok(spec) = std::env::var("PTXFLOW_GAUSS_COMPARE") else {
        return;
    };
    let opt = |s: &str| (s != "-").then(|| s.to_string());
    let mut configs = vec![("built-in".to_string(), None, None)];
    for item in spec.split(';').filter(|s| !s.is_empty()) {
        let (name, kernels) = item.split_once('=').expect("<label>=<fwd>/<bwd>");
        let (f, b) = kernels.split_once('/').expect("<fwd>/<bwd>");
        configs.push((name.to_string(), opt(f), opt(b)));
    }
    let select = |f: &Option<String>, b: &Option<String>| {
        for (var, v) in [("PTXFLOW_GAUSS_FWD", f), ("PTXFLOW_GAUSS_BWD", b)] {
            match v {
                Some(v) => std::env::set_var(var, v),
                None => std::env::remove_var(var),
            }
        }
    };
    let stream = gpu.stream().clone();
    let mut fields = Vec::new();
    for (_, f, b) in &configs {
        select(f, b);
        let mut field =
            GpuGaussianField::<T>::new(gpu.clone(), FieldOptions::default()).expect("GPU field");
        field.set_gaussians(gaussians).expect("valid Gaussians");
        field.forward(points).expect("forward");
        field.backward(grad).expect("backward");
        fields.push(field);
    }
    let mut times = vec![(Vec::new(), Vec::new()); configs.len()];
    for _ in 0..5 {
        for (k, (_, f, b)) in configs.iter().enumerate() {
            select(f, b);
            let field = &mut fields[k];
            let fwd =
                common::median_secs(&stream, 10, || field.forward_resident().expect("forward"));
            let both = common::median_secs(&stream, 10, || {
                field.forward_resident().expect("forward");
                field.backward_resident().expect("backward")
            });
            times[k].0.push(fwd);
            times[k].1.push(both);
        }
    }
    select(&None, &None);
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let base = {
        let (f, b) = &mut times[0];
        (median(f), median(b))
    };
    for (k, (name, f, b)) in configs.iter().enumerate() {
        let (fv, bv) = &mut times[k];
        let (lo, hi) = (bv[0], bv[bv.len() - 1]);
        let (fm, bm) = (median(fv), median(bv));
        let plans = fields[k].plans().expect("plans");
        summary.push(format!(
            "SUMMARY gpu/gaussian compare {} {label} {name} (fwd {}, bwd {}): forward {:.1} us ({:.3}x built-in); forward+backward {:.1} us (rounds {:.1}..{:.1}; {:.3}x built-in); backward {:.1} us; plans {:?} {:?}",
            T::NAME,
            f.as_deref().unwrap_or("built-in"),
            b.as_deref().unwrap_or("built-in"),
            fm * 1e6,
            fm / base.0,
            bm * 1e6,
            lo * 1e6,
            hi * 1e6,
            bm / base.1,
            (bm - fm) * 1e6,
            plans.0,
            plans.1
        ));
    }
}

fn benches(c: &mut Criterion) {
    let mut summary = Vec::new();
    if let Some(gpu) = common::gpu_or_skip() {
        gpu_type::<f32>(c, &gpu, &mut summary);
        gpu_type::<f64>(c, &gpu, &mut summary);
    }
    cpu_type::<f32>(c);
    cpu_type::<f64>(c);
    for line in summary {
        println!("{line}");
    }
}

criterion_group!(gaussian, benches);
criterion_main!(gaussian);
