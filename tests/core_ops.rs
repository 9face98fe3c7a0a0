//! The core ops (`ptxflow::core_ops`: correct_add, reduce_sum) against the CPU reference: one test
//! body for both devices, awkward sizes, misaligned views, outputs poisoned before the launch.

mod common;

use ptxflow::core_ops::{CpuOps, GpuOps, VectorOps};
use ptxflow::rng::Rng;

const SIZES: [usize; 7] = [0, 1, 31, 32, 33, 1023, 10_000_003];

fn check_correct_add(ops: &mut dyn VectorOps, n: usize, seed: u64) {
    let mut rng = Rng::new(seed);
    let p = rng.vec_f32(n, -100.0, 100.0);
    let c = rng.vec_f32(n, -1.0, 1.0);
    let mut out = vec![f32::NAN; n];
    ops.correct_add(&p, &c, &mut out).unwrap();
    for i in 0..n {
        // f32 addition is exactly rounded on both devices: demand bit equality.
        assert_eq!(
            out[i].to_bits(),
            (p[i] + c[i]).to_bits(),
            "{} n={n} i={i}",
            ops.device()
        );
    }
}

fn check_reduce_sum(ops: &mut dyn VectorOps, n: usize, seed: u64) {
    let mut rng = Rng::new(seed);
    let x = rng.vec_f32(n, -1.0, 1.0);
    let got = ops.reduce_sum(&x).unwrap();
    // Reference: sequential f64 sum. Every f32 is exact in f64; the only error is f64 rounding
    // of partial sums, at most n * eps * sum|x| for any summation order.
    let reference: f64 = x.iter().map(|&v| f64::from(v)).sum();
    let abs: f64 = x.iter().map(|&v| f64::from(v).abs()).sum();
    let bound = (n as f64) * f64::EPSILON * abs + 1e-300;
    assert!(
        (got - reference).abs() <= bound,
        "{} n={n}: {got} vs {reference} (bound {bound})",
        ops.device()
    );
}

#[test]
fn cpu_correct_add_and_reduce_sum() {
    for (k, &n) in SIZES.iter().enumerate() {
        check_correct_add(&mut CpuOps, n, k as u64);
        check_reduce_sum(&mut CpuOps, n, 100 + k as u64);
    }
}

#[test]
fn gpu_correct_add_and_reduce_sum_match_cpu() {
    let Some(gpu) = common::gpu_or_skip("gpu_correct_add_and_reduce_sum_match_cpu") else {
        return;
    };
    let mut ops = GpuOps::new(gpu).unwrap();
    for (k, &n) in SIZES.iter().enumerate() {
        check_correct_add(&mut ops, n, k as u64);
        check_reduce_sum(&mut ops, n, 100 + k as u64);
    }
}

#[test]
fn gpu_misaligned_views_take_the_scalar_path() {
    let Some(gpu) = common::gpu_or_skip("gpu_misaligned_views_take_the_scalar_path") else {
        return;
    };
    let ops = GpuOps::new(gpu.clone()).unwrap();
    let stream = gpu.stream().clone();
    let n = 1027;
    let mut rng = Rng::new(7);
    let p = rng.vec_f32(n + 3, -5.0, 5.0);
    let c = rng.vec_f32(n + 3, -5.0, 5.0);
    let dp = stream.clone_htod(&p).unwrap();
    let dc = stream.clone_htod(&c).unwrap();
    let mut dout = stream.clone_htod(&vec![f32::NAN; n + 3]).unwrap();
    for shift in 1..4 {
        let (pv, cv) = (dp.slice(shift..shift + n), dc.slice(shift..shift + n));
        let mut ov = dout.slice_mut(shift..shift + n);
        ops.correct_add_device(&stream, &pv, &cv, &mut ov).unwrap();
        let out = stream.clone_dtoh(&dout).unwrap();
        for i in 0..n {
            assert_eq!(
                out[shift + i],
                p[shift + i] + c[shift + i],
                "shift {shift} i {i}"
            );
        }
        let mut total = stream.alloc_zeros::<f64>(1).unwrap();
        ops.reduce_sum_device(&stream, &pv, &mut total).unwrap();
        let got = stream.clone_dtoh(&total).unwrap()[0];
        let want: f64 = p[shift..shift + n].iter().map(|&v| f64::from(v)).sum();
        assert!((got - want).abs() < 1e-9, "shift {shift}: {got} vs {want}");
    }
}

#[test]
fn shape_mismatch_is_an_error_not_a_panic() {
    let mut out = vec![0.0f32; 3];
    let e = CpuOps
        .correct_add(&[1.0, 2.0, 3.0], &[1.0], &mut out)
        .unwrap_err();
    assert!(e.to_string().contains("shape mismatch"), "{e}");
    if let Some(gpu) = common::gpu_or_skip("shape_mismatch_is_an_error_not_a_panic (gpu part)") {
        let mut ops = GpuOps::new(gpu).unwrap();
        assert!(ops.correct_add(&[1.0, 2.0, 3.0], &[1.0], &mut out).is_err());
    }
}
