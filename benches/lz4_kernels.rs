//! The LZ4 page kernels' builds against each other (issue 17): `lz4_compress` and
//! `lz4_decompress` alone on device-resident pages of dickens (4 KiB pages, tiled to 256 MiB as
//! in `gpu/lz4/*_kernel/dickens`), every variant in the same process, rounds alternating between
//! them, medians of event-timed launches in GB/s of uncompressed bytes. Each variant's output is
//! checked first: stored pages equal the default build's byte for byte, decoded pages equal the
//! input.
//!
//! `PTXFLOW_LZ4_AB`: `;`-separated decompress specs as `PTXFLOW_LZ4_DECOMPRESS` takes them
//! (`base` for the defaults, `warp` for session 7's one-warp kernel), e.g. `warp;base;onestep,grid`,
//! or compress specs as `PTXFLOW_LZ4_COMPRESS` takes them after `c:` (with the default
//! decompress build), e.g. `c:reread;c:masks`; ratios are against the first. `PTXFLOW_LZ4_AB_ROUNDS` (default 15) rounds of
//! `PTXFLOW_LZ4_AB_LAUNCHES` (default 3) launches per variant. `PTXFLOW_LZ4_AB_INPUT` names another
//! corpus file than dickens (tiled the same way).

mod common;
#[path = "../tests/lz4_support/mod.rs"]
mod lz4_support;

use criterion::{criterion_group, criterion_main, Criterion};
use ptxflow::lz4::gpu::kernels::KernelVariants;
use ptxflow::lz4::gpu::layout::{decompress_entries, info_words, page_lengths, read_compress_info};
use ptxflow::lz4::gpu::Lz4Kernels;
use ptxflow::runtime::{CudaSlice, CudaStream};
use std::sync::Arc;

const PAGE_BYTES: usize = 4096;
const INPUT_BYTES: usize = 256 << 20;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

/// Device buffers shared by every variant.
struct Bufs {
    input: CudaSlice<u8>,
    scratch: CudaSlice<u8>,
    packed: CudaSlice<u8>,
    info: CudaSlice<u32>,
    entries: CudaSlice<u32>,
    output: CudaSlice<u8>,
    status: CudaSlice<u32>,
    n_pages: usize,
}

fn compress(k: &Lz4Kernels, s: &Arc<CudaStream>, b: &mut Bufs) {
    k.compress(
        s,
        &b.input.slice(..),
        INPUT_BYTES,
        PAGE_BYTES,
        &mut b.scratch,
        &mut b.packed.slice_mut(..),
        &mut b.info.slice_mut(..),
    )
    .expect("compress launch");
}

/// Decodes `packed` (stored pages described by `entries`).
fn decompress(k: &Lz4Kernels, s: &Arc<CudaStream>, b: &mut Bufs, packed: &CudaSlice<u8>) {
    k.decompress(
        s,
        &packed.slice(..),
        &b.entries.slice(..),
        b.n_pages,
        PAGE_BYTES,
        &mut b.output.slice_mut(..),
        &mut b.status.slice_mut(..),
    )
    .expect("decompress launch");
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn bench(_c: &mut Criterion) {
    let Some(gpu) = common::gpu_or_skip() else {
        return;
    };
    let input = std::env::var("PTXFLOW_LZ4_AB_INPUT").unwrap_or_else(|_| "dickens".to_string());
    let Some(d) = lz4_support::corpus(&input, None) else {
        return;
    };
    let data: Vec<u8> = d.iter().copied().cycle().take(INPUT_BYTES).collect();
    let specs = std::env::var("PTXFLOW_LZ4_AB").unwrap_or_else(|_| "warp;base".to_string());
    let variants: Vec<(String, Lz4Kernels)> = specs
        .split(';')
        .map(|spec| {
            let v = if spec == "base" {
                KernelVariants::default()
            } else if let Some(c) = spec.strip_prefix("c:") {
                KernelVariants {
                    compress: KernelVariants::parse_compress(c).expect("compress spec"),
                    ..KernelVariants::default()
                }
            } else {
                KernelVariants::parse_decompress(spec).expect("variant spec")
            };
            let k = Lz4Kernels::with_variants(gpu.clone(), v).expect("kernels");
            (spec.to_string(), k)
        })
        .collect();
    let s = gpu.stream().clone();
    let base = &variants[0].1;
    let n = INPUT_BYTES.div_ceil(PAGE_BYTES);
    // Compress builds differ in registers, so in grid size: scratch for the largest grid.
    let scratch_warps = variants
        .iter()
        .map(|(_, k)| k.compress_geometry(PAGE_BYTES, n).warps() as usize)
        .max()
        .unwrap_or(1);
    let mut b = Bufs {
        input: s.clone_htod(&data).expect("upload"),
        scratch: s.alloc_zeros(scratch_warps * PAGE_BYTES).expect("alloc"),
        packed: s.alloc_zeros(n * PAGE_BYTES).expect("alloc"),
        info: s.alloc_zeros(info_words(n)).expect("alloc"),
        entries: s.alloc_zeros(4 * n).expect("alloc"),
        output: s.alloc_zeros(n * PAGE_BYTES).expect("alloc"),
        status: s.alloc_zeros(n).expect("alloc"),
        n_pages: n,
    };
    compress(base, &s, &mut b);
    let info = s.clone_dtoh(&b.info).expect("download");
    let lens: Vec<usize> = page_lengths(INPUT_BYTES, PAGE_BYTES).collect();
    let pages = read_compress_info(&info, &lens).expect("consistent kernel output");
    let words = decompress_entries(&pages, PAGE_BYTES).expect("entries");
    s.memcpy_htod(&words, &mut b.entries).expect("upload");
    // The stored pages of this first launch, decoded by every timed decompress launch.
    let mut dpacked: CudaSlice<u8> = s.alloc_zeros(n * PAGE_BYTES).expect("alloc");
    s.memcpy_dtod(&b.packed, &mut dpacked).expect("copy");
    let stored: usize = pages.iter().map(|p| p.stored_bytes).sum();
    let want_packed = s.clone_dtoh(&dpacked).expect("download");
    // Decoding first for every variant, then encoding (a profiler taking the first launches of
    // each kernel then sees the first compress launch and each variant's decompress launch).
    for (name, k) in &variants {
        s.memset_zeros(&mut b.output).expect("memset");
        decompress(k, &s, &mut b, &dpacked);
        let status = s.clone_dtoh(&b.status).expect("download");
        assert!(
            status.iter().all(|&c| c & 0xFF == 0),
            "{name}: round trip status"
        );
        let out = s.clone_dtoh(&b.output).expect("download");
        assert!(out == data, "{name}: round trip differs");
        let dg = k.decompress_geometry(PAGE_BYTES, n);
        let (regs, local) = k.decompress_resources(PAGE_BYTES).expect("attributes");
        eprintln!(
            "lz4_kernels {name}: decoded pages equal the input (ratio {:.3}); decompress grid {} x {} warps, \
             {} B shared per block, {regs} registers, {local} B local memory per thread",
            INPUT_BYTES as f64 / stored as f64,
            dg.blocks,
            dg.warps_per_block,
            dg.shared_bytes,
        );
    }
    for (name, k) in &variants {
        compress(k, &s, &mut b);
        let info = s.clone_dtoh(&b.info).expect("download");
        let got = read_compress_info(&info, &lens).expect("consistent kernel output");
        let got_packed = s.clone_dtoh(&b.packed).expect("download");
        if k.variants().compress.small {
            // An experiment with a smaller table than the spec's: other (valid) bytes.
            let got_stored: usize = got.iter().map(|p| p.stored_bytes).sum();
            eprintln!(
                "lz4_kernels {name}: experiment (other bytes than the spec's), ratio {:.4} against {:.4}",
                INPUT_BYTES as f64 / got_stored as f64,
                INPUT_BYTES as f64 / stored as f64,
            );
        }
        for (p, q) in pages
            .iter()
            .zip(&got)
            .filter(|_| !k.variants().compress.small)
        {
            assert_eq!(
                p.stored_bytes, q.stored_bytes,
                "{name}: stored size differs"
            );
            assert!(
                want_packed[p.offset..p.offset + p.stored_bytes]
                    == got_packed[q.offset..q.offset + q.stored_bytes],
                "{name}: stored page differs"
            );
        }
        let cg = k.compress_geometry(PAGE_BYTES, n);
        eprintln!(
            "lz4_kernels {name}: stored pages equal the first launch's; compress grid {} x {} \
             warps, {} B shared per block, {} registers",
            cg.blocks,
            cg.warps_per_block,
            cg.shared_bytes,
            k.compress_regs(),
        );
    }
    let rounds = env_usize("PTXFLOW_LZ4_AB_ROUNDS", 15);
    let launches = env_usize("PTXFLOW_LZ4_AB_LAUNCHES", 3);
    let mut ctimes = vec![Vec::new(); variants.len()];
    let mut dtimes = vec![Vec::new(); variants.len()];
    for _ in 0..rounds {
        for (i, (_, k)) in variants.iter().enumerate() {
            let t = common::event_timed(&s, launches as u64, || compress(k, &s, &mut b));
            ctimes[i].push(t.as_secs_f64() / launches as f64);
            let t =
                common::event_timed(&s, launches as u64, || decompress(k, &s, &mut b, &dpacked));
            dtimes[i].push(t.as_secs_f64() / launches as f64);
        }
    }
    let gbs = |secs: f64| INPUT_BYTES as f64 / secs / 1e9;
    let (c0, d0) = (median(&mut ctimes[0]), median(&mut dtimes[0]));
    for (i, (name, _)) in variants.iter().enumerate() {
        let (c, d) = (median(&mut ctimes[i]), median(&mut dtimes[i]));
        let (dmin, dmax) = (dtimes[i][0], dtimes[i][dtimes[i].len() - 1]);
        println!(
            "SUMMARY lz4_kernels {name} on {}: compress kernel {:.1} GB/s ({:.3}x {}), \
             decompress kernel {:.1} GB/s ({:.3}x {}; rounds {:.1}..{:.1} GB/s); \
             medians of {rounds} alternating rounds of {launches} launches, 256 MiB {input}, 4 KiB pages",
            gpu.facts().name,
            gbs(c),
            c0 / c,
            variants[0].0,
            gbs(d),
            d0 / d,
            variants[0].0,
            gbs(dmax),
            gbs(dmin),
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
