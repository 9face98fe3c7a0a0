//! Randomized SVD rows (1024 and 4096 square, rank 32; A on the device, one sync inside for the
//! small SVD): criterion rows, routes and GEMM shapes alternating, device times of the pieces,
//! CholQR phases and the split-K targets.

use crate::{common, per_call, Group};
use criterion::{BenchmarkId, Throughput};
use ptxflow::rnn::gpu::rsvd::GpuRsvd;
use ptxflow::rnn::testmat::timing_matrix;
use ptxflow::rnn::*;
use ptxflow::runtime::Gpu;
use std::sync::Arc;
use std::time::Instant;

/// One size for the summary: n, total ms, A Omega us, A^T Y us, CholQR 2 passes and 1 pass us.
pub type RsvdRow = (usize, f64, f64, f64, f64, f64);

/// The rSVD rows (`gpu/rnn/rsvd_*`).
pub fn rows(g: &mut Group<'_>, gpu: &Arc<Gpu>) -> Vec<RsvdRow> {
    let s = gpu.stream().clone();
    // Randomized SVD (A on the device; one sync inside for the small SVD).
    let mut rsvd_ms = Vec::new();
    // PTXFLOW_RSVD_SIZES="4096" picks sizes (default both).
    let sizes: Vec<usize> = std::env::var("PTXFLOW_RSVD_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1024, 4096]);
    for n in sizes {
        let a = timing_matrix(3, n, n, 1e-3);
        let mut r = GpuRsvd::new(gpu.clone(), n, n, RsvdOptions::rank(32)).expect("rsvd");
        r.upload(&a).expect("upload");
        g.throughput(Throughput::Bytes((6 * n * n * 4) as u64));
        g.bench_function(BenchmarkId::new("rsvd_rank32", n), |b| {
            b.iter_custom(|it| {
                let t = Instant::now();
                for _ in 0..it {
                    r.run_device().expect("rsvd");
                }
                gpu.sync().expect("sync");
                t.elapsed()
            })
        });
        // The previous default path (factor route, 4-row GEMMs) beside the default (factor
        // route, 8-row GEMMs).
        r.set_gram_route(false);
        r.set_gemm_rows(4).expect("rows");
        g.bench_function(BenchmarkId::new("rsvd_rank32_factor_route_r4", n), |b| {
            b.iter_custom(|it| {
                let t = Instant::now();
                for _ in 0..it {
                    r.run_device().expect("rsvd");
                }
                gpu.sync().expect("sync");
                t.elapsed()
            })
        });
        let med = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            1e6 * v[v.len() / 2]
        };
        // (route, GEMM rows per thread) pairs, alternating in rounds (medians of each one's runs).
        let configs = [
            (false, 4u32, false),
            (true, 4, false),
            (false, 8, false),
            (true, 8, false),
            (true, 8, true),
        ];
        let mut per_route: [(Vec<f64>, Vec<ptxflow::rnn::gpu::rsvd::HostTimes>); 5] =
            Default::default();
        for _round in 0..4 {
            for (i, &(gram_route, rows, skip)) in configs.iter().enumerate() {
                r.set_gram_route(gram_route);
                r.set_gemm_rows(rows).expect("rows");
                r.set_orth_skip(skip);
                r.run_device().expect("rsvd");
                gpu.sync().expect("sync");
                for _ in 0..10 {
                    let t = Instant::now();
                    r.run_device().expect("rsvd");
                    gpu.sync().expect("sync");
                    per_route[i].0.push(t.elapsed().as_secs_f64());
                    per_route[i].1.push(r.host_times());
                }
            }
        }
        for (i, (totals, host)) in per_route.iter().enumerate() {
            let h = |f: fn(&ptxflow::rnn::gpu::rsvd::HostTimes) -> f64| {
                med(host.iter().map(f).collect())
            };
            let (min, max) = totals
                .iter()
                .fold((f64::MAX, 0.0f64), |(a, b), &t| (a.min(t), b.max(t)));
            let (gram_route, rows, skip) = configs[i];
            println!(
            "SUMMARY gpu/rnn rSVD {n}x{n} {} route, {rows}-row GEMMs{} (alternating, 40 runs): median {:.1} us (min {:.1}, max {:.1}); host medians: wait for B^T's Gram {:.1} us, eigenproblem {:.1} us, {} {:.1} us, {} {:.1} us",
            if gram_route { "Gram" } else { "factor" },
            if skip { ", CholQR skip" } else { "" },
            med(totals.clone()),
            1e6 * min,
            1e6 * max,
            h(|x| x.gram_wait_s),
            h(|x| x.eigen_s),
            if gram_route { "V factor + check" } else { "then blocked" },
            h(|x| x.sync_wait_s),
            if gram_route { "fallback" } else { "small factors" },
            h(|x| x.factors_s),
        );
        }
        r.set_orth_skip(false);
        r.set_gram_route(false);
        r.set_gemm_rows(4).expect("rows");
        let mut host = Vec::new();
        let total = common::wall_median_secs(15, || {
            r.run_device().expect("rsvd");
            gpu.sync().expect("sync");
            host.push(r.host_times());
        });
        let host_us = [
            med(host.iter().map(|h| h.gram_wait_s).collect()),
            med(host.iter().map(|h| h.eigen_s).collect()),
            med(host.iter().map(|h| h.sync_wait_s).collect()),
            med(host.iter().map(|h| h.factors_s).collect()),
        ];
        let nn = per_call(&s, 50, || r.enqueue_product(false).expect("gemm"));
        let tn = per_call(&s, 50, || r.enqueue_product(true).expect("gemm"));
        let orth = per_call(&s, 50, || r.enqueue_orth(2).expect("orth"));
        let orth1 = per_call(&s, 50, || r.enqueue_orth(1).expect("orth"));
        // The skipping kernel on an already orthonormal basis: pass 2 is checked and skipped.
        r.set_orth_skip(true);
        let orth_skip = per_call(&s, 50, || r.enqueue_orth(2).expect("orth"));
        r.set_orth_skip(false);
        println!("SUMMARY gpu/rnn rSVD {n}x{n} CholQR 2 passes {:.1} us, with rnn_orth_skip on an orthonormal basis {:.1} us", 1e6 * orth, 1e6 * orth_skip);
        // Device time of the work before the host step, and of the pieces after it.
        r.set_gemm_rows(4).expect("rows");
        let chain = per_call(&s, 20, || r.enqueue_until_gram().expect("chain"));
        r.set_gemm_rows(8).expect("rows");
        let chain8 = per_call(&s, 20, || r.enqueue_until_gram().expect("chain"));
        let nn8 = per_call(&s, 50, || r.enqueue_product(false).expect("gemm"));
        let tn8 = per_call(&s, 50, || r.enqueue_product(true).expect("gemm"));
        r.set_gemm_rows(4).expect("rows");
        let gram_only = per_call(&s, 50, || r.enqueue_gram().expect("gram"));
        let apply = per_call(&s, 50, || r.enqueue_apply().expect("apply"));
        println!(
        "SUMMARY gpu/rnn rSVD {n}x{n} device time: products and CholQR up to B^T's Gram {:.1} us with the 4-row GEMMs, {:.1} us with the 8-row GEMMs (A Omega {:.1} us, A^T Y {:.1} us) (event-timed, back-to-back), Gram-only launch {:.1} us, apply {:.1} us",
        1e6 * chain,
        1e6 * chain8,
        1e6 * nn8,
        1e6 * tn8,
        1e6 * gram_only,
        1e6 * apply
    );
        rsvd_ms.push((n, 1e3 * total, 1e6 * nn, 1e6 * tn, 1e6 * orth, 1e6 * orth1));
        // CholQR phases of block 0 (clock stamps, 2 passes), in us at the nominal clock.
        let stamps = r.orth_stamps(2).expect("stamps");
        let mhz = f64::from(gpu.facts().clock_khz) / 1e3;
        let names = ["A", "barrier", "B", "barrier", "C", "D"];
        let phases: Vec<String> = (1..stamps.len())
            .map(|i| {
                format!(
                    "p{} {} {:.1}",
                    (i - 1) / 6,
                    names[(i - 1) % 6],
                    (stamps[i].wrapping_sub(stamps[i - 1])) as f64 / mhz
                )
            })
            .collect();
        let [gram_wait_us, eigen_us, sync_us, factors_us] = host_us;
        println!("SUMMARY gpu/rnn rSVD {n}x{n} factor route, 4-row GEMMs, host (median): wait for B^T's Gram {gram_wait_us:.1} us, small eigenproblem {eigen_us:.1} us (overlaps the final CholQR), then blocked {sync_us:.1} us, small factors {factors_us:.1} us; CholQR 2-pass phases of block 0 (us at {mhz:.0} MHz): {}", phases.join(", "));
        // The split-K plan's other targets (blocks per SM), the default last, for both GEMM
        // thread shapes.
        for (rows, bps) in [4u32, 8].into_iter().flat_map(|rows| {
            (1..=ptxflow::rnn::gpu::rsvd::MAX_GEMM_BLOCKS_PER_SM)
                .chain([ptxflow::rnn::gpu::rsvd::GEMM_BLOCKS_PER_SM])
                .map(move |b| (rows, b))
        }) {
            r.set_gemm_rows(rows).expect("rows");
            r.set_gemm_blocks_per_sm(bps).expect("plan");
            let total = common::wall_median_secs(15, || {
                r.run_device().expect("rsvd");
                gpu.sync().expect("sync");
            });
            let nn = per_call(&s, 50, || r.enqueue_product(false).expect("gemm"));
            let tn = per_call(&s, 50, || r.enqueue_product(true).expect("gemm"));
            println!("SUMMARY gpu/rnn rSVD {n}x{n} {rows}-row GEMMs, split-K target {bps} blocks/SM: {:.3} ms, A Omega {:.1} us, A^T Y {:.1} us", 1e3 * total, 1e6 * nn, 1e6 * tn);
        }
        // Back to the defaults.
        r.set_gram_route(false);
        r.set_gemm_rows(8).expect("rows");
    }
    rsvd_ms
}

/// The rSVD SUMMARY lines on the device `name`.
pub fn print(rsvd_ms: &[RsvdRow], name: &str) {
    for (n, total, nn, tn, orth, orth1) in rsvd_ms {
        let gbs = |us: f64| (*n * *n * 4) as f64 / (us * 1e-6) / 1e9;
        println!(
            "SUMMARY gpu/rnn on {name}: rSVD {n}x{n} rank 32 (p 10, q 2), factor route + 4-row GEMMs: {total:.3} ms incl. small SVD on the CPU (target < 1 ms at 4096); \
             4-row GEMMs: A Omega {nn:.1} us ({:.0} GB/s of A), A^T Y {tn:.1} us ({:.0} GB/s), CholQR 2 passes {orth:.1} us, 1 pass {orth1:.1} us; copy yardstick ~2900 GB/s",
            gbs(*nn),
            gbs(*tn)
        );
    }
}
