//! CPU Gaussian field throughput: forward, and forward + backward, in f32 and f64, at
//! (N Gaussians, B points) = (1000, 500) and (10000, 500). Throughput is pair evaluations (N * B)
//! per iteration. The GPU-scale 10000 x 100000 case is left to the GPU benches (about 1e9 pairs,
//! tens of seconds per iteration on this CPU).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ptxflow::gaussian::generate::{convert, random_gaussians, sample_points, GaussianSpec};
use ptxflow::gaussian::{FieldOptions, GaussianField, GaussianFieldOps, Real};
use ptxflow::rng::Rng;
use std::hint::black_box;
use std::time::Duration;

const SIZES: [(usize, usize); 2] = [(1000, 500), (10000, 500)];

fn problem(n: usize, b: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut rng = Rng::new(0x6A55);
    let gaussians = random_gaussians(&mut rng, n, &GaussianSpec::default());
    let points = sample_points(&mut rng, &gaussians, b, 1.5);
    let grad: Vec<f64> = (0..b).map(|_| rng.range(-1.0, 1.0)).collect();
    (gaussians, points, grad)
}

fn bench_type<T: Real>(c: &mut Criterion) {
    let mut group = c.benchmark_group("cpu/gaussian");
    group.sample_size(10).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500));
    for (n, b) in SIZES {
        let (gaussians, points, grad) = problem(n, b);
        let (gaussians, points, grad) = (convert::<T>(&gaussians), convert::<T>(&points), convert::<T>(&grad));
        let mut field = GaussianField::<T>::with_gaussians(FieldOptions::default(), &gaussians)
            .expect("generated Gaussians are valid");
        group.throughput(Throughput::Elements((n * b) as u64));
        let size = format!("{n}x{b}");
        group.bench_function(BenchmarkId::new(format!("forward/{}", T::NAME), &size), |bench| {
            bench.iter(|| black_box(field.forward(black_box(&points)).expect("valid points")[0]))
        });
        group.bench_function(BenchmarkId::new(format!("forward_backward/{}", T::NAME), &size), |bench| {
            bench.iter(|| {
                field.forward(black_box(&points)).expect("valid points");
                black_box(field.backward(black_box(&grad)).expect("valid gradient").gaussians[0])
            })
        });
    }
    group.finish();
}

fn benches(c: &mut Criterion) {
    bench_type::<f32>(c);
    bench_type::<f64>(c);
}

criterion_group!(gaussian, benches);
criterion_main!(gaussian);
