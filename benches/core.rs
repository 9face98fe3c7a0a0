//! Foundation kernels: element-wise correction and f32 -> f64 sum, GPU (device-resident, CUDA
//! events) and CPU (all cores) in one run, plus a device-to-device copy as the bandwidth yardstick.
//! Prints a summary: correct_add GB/s as a fraction of copy GB/s, and the sum of 1e8 values
//! against the time of reading them once at copy bandwidth.

mod common;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ptxflow::core_ops::{CpuOps, GpuOps, VectorOps};
use ptxflow::rng::Rng;
use std::time::Duration;

const N_ADD: usize = 1 << 26; // 64 Mi f32 = 256 MiB per array, far beyond L2
const N_SUM: usize = 100_000_000;

fn gpu(c: &mut Criterion) {
    let Some(gpu) = common::gpu_or_skip() else {
        return;
    };
    let stream = gpu.stream().clone();
    let ops = GpuOps::new(gpu.clone()).expect("GpuOps");
    let mut rng = Rng::new(1);
    let host = rng.vec_f32(N_SUM, -1.0, 1.0);
    let a = stream.clone_htod(&host[..N_ADD]).expect("upload");
    let b = stream
        .clone_htod(&rng.vec_f32(N_ADD, -1.0, 1.0))
        .expect("upload");
    let mut out = stream.alloc_zeros::<f32>(N_ADD).expect("alloc");
    let x = stream.clone_htod(&host).expect("upload");
    let mut total = stream.alloc_zeros::<f64>(1).expect("alloc");
    let (av, bv) = (a.slice(0..N_ADD), b.slice(0..N_ADD));

    let mut g = c.benchmark_group("gpu/core");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Bytes((8 * N_ADD) as u64));
    g.bench_function(BenchmarkId::new("copy_dtod", N_ADD), |bch| {
        bch.iter_custom(|it| {
            common::event_timed(&stream, it, || {
                stream.memcpy_dtod(&a, &mut out).expect("copy")
            })
        })
    });
    g.throughput(Throughput::Bytes((12 * N_ADD) as u64));
    g.bench_function(BenchmarkId::new("correct_add", N_ADD), |bch| {
        bch.iter_custom(|it| {
            common::event_timed(&stream, it, || {
                ops.correct_add_device(&stream, &av, &bv, &mut out.slice_mut(0..N_ADD))
                    .expect("launch")
            })
        })
    });
    g.throughput(Throughput::Bytes((4 * N_SUM) as u64));
    g.bench_function(BenchmarkId::new("reduce_sum", N_SUM), |bch| {
        bch.iter_custom(|it| {
            common::event_timed(&stream, it, || {
                ops.reduce_sum_device(&stream, &x.slice(0..N_SUM), &mut total)
                    .expect("launch")
            })
        })
    });
    g.finish();

    // Summary from medians of event-timed single runs in this same process.
    let copy = common::median_secs(&stream, 30, || {
        stream.memcpy_dtod(&a, &mut out).expect("copy")
    });
    let add = common::median_secs(&stream, 30, || {
        ops.correct_add_device(&stream, &av, &bv, &mut out.slice_mut(0..N_ADD))
            .expect("launch")
    });
    let sum = common::median_secs(&stream, 30, || {
        ops.reduce_sum_device(&stream, &x.slice(0..N_SUM), &mut total)
            .expect("launch")
    });
    let copy_gbs = 8.0 * N_ADD as f64 / copy / 1e9;
    let add_gbs = 12.0 * N_ADD as f64 / add / 1e9;
    let read_once = 4.0 * N_SUM as f64 / (copy_gbs * 1e9);
    println!(
        "SUMMARY gpu/core on {}: copy {:.0} GB/s; correct_add {:.0} GB/s = {:.1}% of copy; \
         reduce_sum 1e8: {:.3} ms = {:.2}x the read-once time {:.3} ms ({:.0} GB/s); peak DRAM {:.0} GB/s",
        gpu.facts().name,
        copy_gbs,
        add_gbs,
        100.0 * add_gbs / copy_gbs,
        sum * 1e3,
        sum / read_once,
        read_once * 1e3,
        4.0 * N_SUM as f64 / sum / 1e9,
        gpu.facts().peak_dram_gbs()
    );
}

fn cpu(c: &mut Criterion) {
    let mut rng = Rng::new(2);
    let n = N_ADD / 4;
    let p = rng.vec_f32(n, -1.0, 1.0);
    let q = rng.vec_f32(n, -1.0, 1.0);
    let mut out = vec![0.0f32; n];
    let mut g = c.benchmark_group("cpu/core");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Bytes((12 * n) as u64));
    g.bench_function(BenchmarkId::new("correct_add", n), |b| {
        b.iter(|| CpuOps.correct_add(&p, &q, &mut out).expect("cpu"))
    });
    g.throughput(Throughput::Bytes((4 * n) as u64));
    g.bench_function(BenchmarkId::new("reduce_sum", n), |b| {
        b.iter(|| CpuOps.reduce_sum(&p).expect("cpu"))
    });
    g.finish();
}

criterion_group!(benches, gpu, cpu);
criterion_main!(benches);
