//! rSVD-only A/B modes of the bench (`PTXFLOW_RSVD_TC_AB`, `PTXFLOW_RSVD_SMALL_AB`).

use crate::per_call;
use ptxflow::rnn::gpu::rsvd::GpuRsvd;
use ptxflow::rnn::testmat::timing_matrix;
use ptxflow::rnn::*;
use std::time::Instant;

/// `PTXFLOW_RSVD_TC_AB=1`: 4096^2 rank 32 (factor route) with the session 9 default (8-row f32
/// FMA GEMMs), the 3xTF32 tensor-core GEMMs with A through registers (`tc`) and with A through
/// the `cp.async` ring (`tca`, the default on sm_80+) in alternating rounds of 10 (40 runs
/// each), then each one's device times (products, the chain up to B^T's Gram) and the
/// tensor-core kernels' split-K targets.
pub fn rsvd_tc_ab(gpu: &std::sync::Arc<ptxflow::runtime::Gpu>) {
    use ptxflow::kernels::KernelId;
    let s = gpu.stream().clone();
    for id in [
        KernelId::RnnGemmNnR8,
        KernelId::RnnGemmTnR8,
        KernelId::RnnGemmNnTc,
        KernelId::RnnGemmTnTc,
        KernelId::RnnGemmNnTca,
        KernelId::RnnGemmTnTca,
    ] {
        if let Ok(r) = gpu.kernel_resources(id) {
            println!("SUMMARY gpu/rnn kernel {}: {r:?}", id.name());
        }
    }
    let n = 4096;
    let a = timing_matrix(3, n, n, 1e-3);
    let mut r = GpuRsvd::new(gpu.clone(), n, n, RsvdOptions::rank(32)).expect("rsvd");
    r.upload(&a).expect("upload");
    // The GEMM comparison keeps the host factor route of sessions 9 and 10 (the device small
    // step: PTXFLOW_RSVD_SMALL_AB).
    r.set_gram_route(false);
    let med = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        1e6 * v[v.len() / 2]
    };
    // Configurations: 0 the session 9 default (8-row f32 GEMMs), 1 3xTF32 with A through
    // registers, 2 3xTF32 with A through the cp.async ring (the default on sm_80+).
    const NAMES: [&str; 3] = [
        "8-row f32 GEMMs",
        "3xTF32 tensor-core GEMMs",
        "3xTF32 GEMMs, cp.async ring",
    ];
    let set = |r: &mut GpuRsvd, i: usize| match i {
        0 => r.set_gemm_rows(8).expect("rows"),
        1 => r.set_gemm_tensor().expect("tensor cores"),
        _ => r.set_gemm_tensor_ring().expect("tensor cores"),
    };
    let mut totals: [Vec<f64>; 3] = Default::default();
    let mut host: [Vec<ptxflow::rnn::gpu::rsvd::HostTimes>; 3] = Default::default();
    let mut svals: [Vec<f64>; 3] = Default::default();
    for _round in 0..4 {
        for i in 0..3 {
            set(&mut r, i);
            svals[i] = r.run_device().expect("rsvd");
            gpu.sync().expect("sync");
            for _ in 0..10 {
                let t = Instant::now();
                r.run_device().expect("rsvd");
                gpu.sync().expect("sync");
                totals[i].push(t.elapsed().as_secs_f64());
                host[i].push(r.host_times());
            }
        }
    }
    for i in 0..3 {
        let h = |f: fn(&ptxflow::rnn::gpu::rsvd::HostTimes) -> f64| {
            med(host[i].iter().map(f).collect())
        };
        println!(
            "SUMMARY gpu/rnn rSVD {n}x{n} {} (factor route, alternating, 40 runs): median {:.1} us; host medians: wait for B^T's Gram {:.1} us, eigenproblem {:.1} us, then blocked {:.1} us, small factors {:.1} us",
            NAMES[i],
            med(totals[i].clone()),
            h(|x| x.gram_wait_s),
            h(|x| x.eigen_s),
            h(|x| x.sync_wait_s),
            h(|x| x.factors_s),
        );
    }
    for i in 1..3 {
        let rel = svals[0]
            .iter()
            .zip(&svals[i])
            .map(|(x, y)| ((x - y) / x).abs())
            .fold(0.0f64, f64::max);
        println!("SUMMARY gpu/rnn rSVD {n}x{n} singular values, {} vs the 8-row f32 GEMMs: max relative difference {rel:.2e} (s_1 {:.6e}, s_32 {:.6e})", NAMES[i], svals[0][0], svals[0][31]);
    }
    for (i, name) in NAMES.iter().enumerate() {
        set(&mut r, i);
        let nn = per_call(&s, 50, || r.enqueue_product(false).expect("gemm"));
        let tn = per_call(&s, 50, || r.enqueue_product(true).expect("gemm"));
        let chain = per_call(&s, 20, || r.enqueue_until_gram().expect("chain"));
        println!(
            "SUMMARY gpu/rnn rSVD {n}x{n} {} device time: A Omega {:.1} us ({:.0} GB/s of A), A^T Y {:.1} us ({:.0} GB/s), chain up to B^T's Gram {:.1} us",
            name,
            1e6 * nn,
            (n * n * 4) as f64 / nn / 1e9,
            1e6 * tn,
            (n * n * 4) as f64 / tn / 1e9,
            1e6 * chain
        );
    }
    for (ring, bps) in [false, true].into_iter().flat_map(|ring| {
        (1..=ptxflow::rnn::gpu::rsvd::MAX_GEMM_BLOCKS_PER_SM).map(move |b| (ring, b))
    }) {
        if ring {
            r.set_gemm_tensor_ring().expect("tensor cores");
        } else {
            r.set_gemm_tensor().expect("tensor cores");
        }
        r.set_gemm_blocks_per_sm(bps).expect("plan");
        let nn = per_call(&s, 50, || r.enqueue_product(false).expect("gemm"));
        let tn = per_call(&s, 50, || r.enqueue_product(true).expect("gemm"));
        println!("SUMMARY gpu/rnn rSVD {n}x{n} 3xTF32 GEMMs{}, split-K target {bps} blocks/SM: A Omega {:.1} us, A^T Y {:.1} us", if ring { " (cp.async ring)" } else { "" }, 1e6 * nn, 1e6 * tn);
    }
    r.set_gemm_tensor_ring().expect("tensor cores");
}

/// `PTXFLOW_RSVD_SMALL_AB=1`: 4096^2 rank 32 with the default GEMMs and the small step on the
/// host (factor route, Gram route) and on the device (`rnn_small_eig`) in alternating rounds of
/// 10 (40 runs each); then the device's report, S against the host factor route's, and device
/// times of the pieces after B^T's Gram.
pub fn rsvd_small_ab(gpu: &std::sync::Arc<ptxflow::runtime::Gpu>) {
    use ptxflow::kernels::KernelId;
    let s = gpu.stream().clone();
    for id in [
        KernelId::RnnSmallEig,
        KernelId::RnnOrth,
        KernelId::RnnApplySmall,
    ] {
        if let Ok(r) = gpu.kernel_resources(id) {
            println!("SUMMARY gpu/rnn kernel {}: {r:?}", id.name());
        }
    }
    let n = 4096;
    let a = timing_matrix(3, n, n, 1e-3);
    let mut r = GpuRsvd::new(gpu.clone(), n, n, RsvdOptions::rank(32)).expect("rsvd");
    r.upload(&a).expect("upload");
    let med = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        1e6 * v[v.len() / 2]
    };
    const NAMES: [&str; 3] = [
        "small step on the host, factor route",
        "small step on the host, Gram route",
        "small step on the device",
    ];
    // set_gram_route chooses a host route (and turns the device step off): it goes first.
    let set = |r: &mut GpuRsvd, i: usize| {
        r.set_gram_route(i == 1);
        r.set_small_on_device(i == 2);
    };
    let mut totals: [Vec<f64>; 3] = Default::default();
    let mut host: [Vec<ptxflow::rnn::gpu::rsvd::HostTimes>; 3] = Default::default();
    let mut svals: [Vec<f64>; 3] = Default::default();
    for _round in 0..4 {
        for i in 0..3 {
            set(&mut r, i);
            svals[i] = r.run_device().expect("rsvd");
            gpu.sync().expect("sync");
            for _ in 0..10 {
                let t = Instant::now();
                r.run_device().expect("rsvd");
                gpu.sync().expect("sync");
                totals[i].push(t.elapsed().as_secs_f64());
                host[i].push(r.host_times());
            }
        }
    }
    for i in 0..3 {
        let h = |f: fn(&ptxflow::rnn::gpu::rsvd::HostTimes) -> f64| {
            med(host[i].iter().map(f).collect())
        };
        let (lo, hi) = totals[i]
            .iter()
            .fold((f64::MAX, 0.0f64), |(a, b), &t| (a.min(t), b.max(t)));
        println!(
            "SUMMARY gpu/rnn rSVD {n}x{n} {} (alternating, 40 runs): median {:.1} us (min {:.1}, max {:.1}); host medians: {:.1} / {:.1} / {:.1} / {:.1} us",
            NAMES[i],
            med(totals[i].clone()),
            1e6 * lo,
            1e6 * hi,
            h(|x| x.gram_wait_s),
            h(|x| x.eigen_s),
            h(|x| x.sync_wait_s),
            h(|x| x.factors_s),
        );
    }
    set(&mut r, 2);
    r.run_device().expect("rsvd");
    let rep = r.small_report().expect("report");
    for i in 1..3 {
        let rel = svals[0]
            .iter()
            .zip(&svals[i])
            .map(|(x, y)| ((x - y) / x).abs())
            .fold(0.0f64, f64::max);
        println!("SUMMARY gpu/rnn rSVD {n}x{n} singular values, {} vs the host factor route: max relative difference {rel:.2e} (s_1 {:.6e}, s_32 {:.6e})", NAMES[i], svals[0][0], svals[0][31]);
    }
    let small = per_call(&s, 50, || r.enqueue_small_eig().expect("small"));
    // Rounds per sweep: l rounded up to even, minus one.
    let l = RsvdOptions::rank(32).width(n, n) as u32;
    let per_sweep = l + (l & 1) - 1;
    let apply = per_call(&s, 50, || r.enqueue_apply().expect("apply"));
    let gram = per_call(&s, 50, || r.enqueue_gram().expect("gram"));
    let chain = per_call(&s, 20, || r.enqueue_until_gram().expect("chain"));
    println!(
        "SUMMARY gpu/rnn rSVD {n}x{n} device small step: status {}, {} sweeps, {} rounds with rotations, check {:.2e}; device time rnn_small_eig {:.1} us ({:.2} us per round of the sweeps), apply {:.1} us, Gram-only launch {:.1} us, chain up to B^T's Gram {:.1} us",
        rep.status,
        rep.sweeps,
        rep.rounds,
        rep.defect,
        1e6 * small,
        1e6 * small / f64::from((rep.sweeps * per_sweep).max(1)),
        1e6 * apply,
        1e6 * gram,
        1e6 * chain
    );
    // CholQR: one and two passes of the range basis, and block 0's phases (clock stamps).
    let orth1 = per_call(&s, 50, || r.enqueue_orth(1).expect("orth"));
    let orth2 = per_call(&s, 50, || r.enqueue_orth(2).expect("orth"));
    let stamps = r.orth_stamps(2).expect("stamps");
    let mhz = f64::from(gpu.facts().clock_khz) / 1e3;
    let names = ["A", "barrier", "B", "barrier", "C", "D"];
    let phases: Vec<String> = (1..stamps.len())
        .map(|i| {
            let us = (stamps[i].wrapping_sub(stamps[i - 1])) as f64 / mhz;
            format!("p{} {} {us:.1}", (i - 1) / 6, names[(i - 1) % 6])
        })
        .collect();
    println!(
        "SUMMARY gpu/rnn rSVD {n}x{n} CholQR 1 pass {:.1} us, 2 passes {:.1} us; phases of block 0 (us at {mhz:.0} MHz): {}",
        1e6 * orth1,
        1e6 * orth2,
        phases.join(", ")
    );
    set(&mut r, 0);
}
