//! Randomized SVD on the GPU: error against the optimal rank-k error (full CPU SVD or a known
//! spectrum), orthonormality, every GEMM variant and split-K plan.

use crate::common;
use crate::sanitize;
use ptxflow::rng::Rng;
use ptxflow::rnn::gpu::rsvd::{GpuRsvd, GEMM_BLOCKS_PER_SM, MAX_GEMM_BLOCKS_PER_SM};
use ptxflow::rnn::rsvd::rsvd_cpu;
use ptxflow::rnn::testmat::*;
use ptxflow::rnn::*;

fn rsvd_case(
    gpu: &std::sync::Arc<ptxflow::runtime::Gpu>,
    m: usize,
    n: usize,
    spec: Spectrum,
    seed: u64,
) {
    let k = 32;
    let a = matrix_with_spectrum(&mut Rng::new(seed), m, n, spec);
    let opt = optimal_error(&a, m, n, k).unwrap();
    let reference =
        reconstruction_error(&a, &rsvd_cpu(&a, m, n, &RsvdOptions::rank(k)).unwrap()).unwrap();
    let mut r = GpuRsvd::new(gpu.clone(), m, n, RsvdOptions::rank(k)).unwrap();
    // Both routes of the small step: B^T factored first, and V straight from B^T's Gram.
    for gram_route in [false, true] {
        r.set_gram_route(gram_route);
        r.set_gemm_rows(4).unwrap();
        let lr = r.decompose(&a).unwrap();
        rsvd_check(&a, m, n, k, spec, &lr, opt, reference, gram_route);
        // The 8 x 6 GEMM kernels sum in the same order: the same bits with the same split, and
        // the optimal error with their own default split.
        r.set_gemm_rows(8).unwrap();
        let lr8 = r.decompose(&a).unwrap();
        rsvd_check(&a, m, n, k, spec, &lr8, opt, reference, gram_route);
        r.set_gemm_blocks_per_sm(GEMM_BLOCKS_PER_SM).unwrap();
        let lr8 = r.decompose(&a).unwrap();
        same_factors(&lr, &lr8, &format!("{spec:?}, 8-row GEMMs"));
        // The CholQR kernel that skips an already orthonormal final pass.
        r.set_gemm_rows(8).unwrap();
        r.set_orth_skip(true);
        let lrs = r.decompose(&a).unwrap();
        r.set_orth_skip(false);
        rsvd_check(&a, m, n, k, spec, &lrs, opt, reference, gram_route);
        // The 3xTF32 tensor-core GEMMs (sm_80 and later), deterministic run to run.
        if tensor_cores(gpu) {
            r.set_gemm_tensor().unwrap();
            let lrt = r.decompose(&a).unwrap();
            rsvd_check(&a, m, n, k, spec, &lrt, opt, reference, gram_route);
            let again = r.decompose(&a).unwrap();
            same_factors(&lrt, &again, &format!("{spec:?}, tensor-core GEMMs twice"));
            // A through the cp.async ring: the same products in the same order.
            r.set_gemm_tensor_ring().unwrap();
            let ring = r.decompose(&a).unwrap();
            same_factors(
                &lrt,
                &ring,
                &format!("{spec:?}, tensor-core GEMMs, cp.async ring"),
            );
            r.set_gemm_rows(8).unwrap();
        }
    }
    assert!(r.set_gemm_rows(5).is_err());
    // The small step on the device (rnn_small_eig) with the default GEMMs: the optimal error
    // (the host's factor route takes over when its status is not OK), and the kernel against
    // its CPU mirror bit for bit on the same Gram.
    let mut d = GpuRsvd::new(gpu.clone(), m, n, RsvdOptions::rank(k)).unwrap();
    d.set_small_on_device(true);
    let lrd = d.decompose(&a).unwrap();
    let rep = d.small_report().unwrap();
    eprintln!("rSVD {m}x{n} {spec:?} device small step: {rep:?}");
    rsvd_check(&a, m, n, k, spec, &lrd, opt, reference, true);
    let (g, dev) = d.small_step_device().unwrap();
    let l = RsvdOptions::rank(k).width(m, n);
    let cpu = ptxflow::rnn::jacobi::small_step(&g, l, k);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert!(
        dev.status == cpu.status
            && dev.sweeps == cpu.sweeps
            && dev.rounds == cpu.rounds
            && dev.defect.to_bits() == cpu.defect.to_bits()
            && bits(&dev.s) == bits(&cpu.s)
            && bits(&dev.zk) == bits(&cpu.zk)
            && bits(&dev.xk) == bits(&cpu.xk),
        "{spec:?}: rnn_small_eig differs from its CPU mirror: {:?} vs {:?}",
        (dev.status, dev.sweeps, dev.defect, &dev.s),
        (cpu.status, cpu.sweeps, cpu.defect, &cpu.s)
    );
}

fn tensor_cores(gpu: &ptxflow::runtime::Gpu) -> bool {
    gpu.facts().compute_capability.0 >= 8
}

fn same_factors(a: &ptxflow::rnn::LowRank, b: &ptxflow::rnn::LowRank, what: &str) {
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert!(
        bits(a.s()) == bits(b.s()) && bits(a.u()) == bits(b.u()) && bits(a.vt()) == bits(b.vt()),
        "{what}: factors differ"
    );
}

#[allow(clippy::too_many_arguments)] // one case's inputs and its two yardsticks
fn rsvd_check(
    a: &[f32],
    m: usize,
    n: usize,
    k: usize,
    spec: Spectrum,
    lr: &ptxflow::rnn::LowRank,
    opt: f64,
    reference: f64,
    gram_route: bool,
) {
    let a = a.to_vec();
    let e = reconstruction_error(&a, lr).unwrap();
    // The factors are f32: their rounding alone costs about eps32 sqrt(k) ||A||_F.
    let floor = 4.0 * f64::from(f32::EPSILON) * (k as f64).sqrt() * frobenius(&a);
    let (ou, ov) = (
        column_orthonormality(lr.u(), m, k),
        row_orthonormality(lr.vt(), k, n),
    );
    eprintln!("rSVD {m}x{n} {spec:?} (Gram route {gram_route}): gpu {:.5} x optimal ({e:.3e} vs {opt:.3e}; f64 reference {:.5} x); |U^T U - I| {ou:.1e}, |V^T V - I| {ov:.1e}", e / opt, reference / opt);
    assert!(
        e <= 1.01 * opt + floor,
        "{spec:?}: error {e} vs optimal {opt} (+{floor})"
    );
    assert!(ou < 1e-5 && ov < 1e-5, "{spec:?}: orthonormality {ou} {ov}");
    let s_ok = lr.s().windows(2).all(|w| w[0] >= w[1]) && lr.s().iter().all(|&s| s >= 0.0);
    assert!(
        s_ok,
        "singular values must be non-negative and descending: {:?}",
        lr.s()
    );
}

pub fn gpu_rsvd_reaches_the_optimal_error() {
    let Some(gpu) = common::gpu_or_skip("gpu_rsvd_reaches_the_optimal_error") else {
        return;
    };
    if sanitize() {
        rsvd_case(&gpu, 256, 200, Spectrum::Exponential { rate: 0.85 }, 1);
        rsvd_case(&gpu, 300, 130, Spectrum::LowRank { rank: 10 }, 2);
        return;
    }
    rsvd_case(&gpu, 1024, 1024, Spectrum::Exponential { rate: 0.85 }, 1);
    rsvd_case(&gpu, 1024, 1024, Spectrum::Harmonic, 2);
    rsvd_case(&gpu, 1024, 1024, Spectrum::Flat, 3);
    rsvd_case(&gpu, 1000, 700, Spectrum::Exponential { rate: 0.9 }, 4);
    rsvd_case(&gpu, 700, 1000, Spectrum::LowRank { rank: 10 }, 5);
}

/// Every split-K plan the bench compares, on a 4096 x 1024 matrix (32 row tiles, so the plans
/// differ) of rank 256 with sigma_i = 0.9^i: its optimal rank-32 error is known exactly, so no
/// full SVD is needed.
pub fn gpu_rsvd_split_plans_reach_the_optimal_error() {
    let Some(gpu) = common::gpu_or_skip("gpu_rsvd_split_plans_reach_the_optimal_error") else {
        return;
    };
    let (m, n, r, k) = if sanitize() {
        (512, 256, 64, 32)
    } else {
        (4096, 1024, 256, 32)
    };
    let mut rng = Rng::new(11);
    let sigma = Spectrum::Exponential { rate: 0.9 }.values(r);
    let u = nalgebra::DMatrix::from_fn(m, r, |_, _| rng.normal())
        .qr()
        .q();
    let v = nalgebra::DMatrix::from_fn(n, r, |_, _| rng.normal())
        .qr()
        .q();
    let a64 = u
        * nalgebra::DMatrix::from_diagonal(&nalgebra::DVector::from_vec(sigma.clone()))
        * v.transpose();
    let a: Vec<f32> = (0..m * n).map(|i| a64[(i / n, i % n)] as f32).collect();
    let opt = sigma[k..].iter().map(|s| s * s).sum::<f64>().sqrt();
    let floor = 4.0 * f64::from(f32::EPSILON) * (k as f64).sqrt() * frobenius(&a);
    let mut rs = GpuRsvd::new(gpu.clone(), m, n, RsvdOptions::rank(k)).unwrap();
    assert!(
        rs.set_gemm_blocks_per_sm(0).is_err()
            && rs
                .set_gemm_blocks_per_sm(MAX_GEMM_BLOCKS_PER_SM + 1)
                .is_err()
    );
    for (bps, gram_route) in (1..=MAX_GEMM_BLOCKS_PER_SM).flat_map(|b| [(b, false), (b, true)]) {
        rs.set_gram_route(gram_route);
        rs.set_gemm_rows(8).unwrap();
        rs.set_gemm_blocks_per_sm(bps).unwrap();
        let lr8 = rs.decompose(&a).unwrap();
        rs.set_gemm_rows(4).unwrap();
        rs.set_gemm_blocks_per_sm(bps).unwrap();
        let lr = rs.decompose(&a).unwrap();
        same_factors(&lr, &lr8, &format!("plan {bps}, 8-row GEMMs"));
        if tensor_cores(&gpu) {
            rs.set_gemm_tensor().unwrap();
            rs.set_gemm_blocks_per_sm(bps).unwrap();
            let lrt = rs.decompose(&a).unwrap();
            rs.set_gemm_tensor_ring().unwrap();
            rs.set_gemm_blocks_per_sm(bps).unwrap();
            let ring = rs.decompose(&a).unwrap();
            same_factors(&lrt, &ring, &format!("plan {bps}, cp.async ring"));
            let et = reconstruction_error(&a, &lrt).unwrap();
            let (tu, tv) = (
                column_orthonormality(lrt.u(), m, k),
                row_orthonormality(lrt.vt(), k, n),
            );
            eprintln!("rSVD {m}x{n} plan {bps}, Gram route {gram_route}, tensor-core GEMMs: {:.5} x optimal; |U^T U - I| {tu:.1e}, |V^T V - I| {tv:.1e}", et / opt);
            assert!(
                et <= 1.01 * opt + floor && tu < 1e-5 && tv < 1e-5,
                "plan {bps}, tensor-core GEMMs: error {et} vs optimal {opt}, orthonormality {tu} {tv}"
            );
            rs.set_gemm_rows(4).unwrap();
            rs.set_gemm_blocks_per_sm(bps).unwrap();
        }
        rs.set_orth_skip(true);
        let lrs = rs.decompose(&a).unwrap();
        rs.set_orth_skip(false);
        let es = reconstruction_error(&a, &lrs).unwrap();
        let (us, vs) = (
            column_orthonormality(lrs.u(), m, k),
            row_orthonormality(lrs.vt(), k, n),
        );
        eprintln!("rSVD {m}x{n} plan {bps}, Gram route {gram_route}, CholQR skip: {:.5} x optimal; |U^T U - I| {us:.1e}, |V^T V - I| {vs:.1e}", es / opt);
        assert!(
            es <= 1.01 * opt + floor && us < 1e-5 && vs < 1e-5,
            "plan {bps}, CholQR skip: error {es} vs optimal {opt}, orthonormality {us} {vs}"
        );
        let e = reconstruction_error(&a, &lr).unwrap();
        let (ou, ov) = (
            column_orthonormality(lr.u(), m, k),
            row_orthonormality(lr.vt(), k, n),
        );
        eprintln!("rSVD {m}x{n} plan {bps} blocks/SM, Gram route {gram_route}: {:.5} x optimal; |U^T U - I| {ou:.1e}, |V^T V - I| {ov:.1e}", e / opt);
        assert!(
            e <= 1.01 * opt + floor,
            "plan {bps}: error {e} vs optimal {opt} (+{floor})"
        );
        assert!(
            ou < 1e-5 && ov < 1e-5,
            "plan {bps}: orthonormality {ou} {ov}"
        );
    }
}
