//! LZ4 page compression and decompression throughput (GB/s of uncompressed input) on 4 KiB pages
//! of dickens, all-zero and random data. GPU (`gpu/lz4/...`, see lz4_gpu.rs): kernels alone,
//! the pinned ring host to host with and without overlap, and a SUMMARY against pinned PCIe
//! bandwidth. CPU (`cpu/lz4/...`): single-threaded, with lz4_flex's block functions on the same
//! pages beside ours, plus the rayon-parallel batch codec. Prints both ratios.

mod common;
#[path = "lz4_gpu.rs"]
mod lz4_gpu;
#[path = "lz4_host.rs"]
mod lz4_host;
#[path = "../tests/lz4_support/mod.rs"]
mod lz4_support;
#[path = "lz4_variants.rs"]
mod lz4_variants;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ptxflow::lz4::{decode_block_append, CpuPageCodec, PageCodec, PageEncoder, PageKind};
use ptxflow::rng::Rng;
use std::hint::black_box;
use std::time::Duration;

const PAGE_BYTES: usize = 4096;
const INPUT_BYTES: usize = 4 << 20;

fn inputs() -> Vec<(&'static str, Vec<u8>)> {
    let mut rng = Rng::new(1);
    let mut v = vec![
        ("zeros", vec![0u8; INPUT_BYTES]),
        (
            "random",
            (0..INPUT_BYTES).map(|_| rng.next_u64() as u8).collect(),
        ),
    ];
    if let Some(d) = lz4_support::corpus("dickens", Some(INPUT_BYTES)) {
        v.insert(0, ("dickens", d));
    }
    v
}

/// Our stored pages: (bytes, kind, original length) per page.
fn compress_all(enc: &mut PageEncoder, data: &[u8]) -> Vec<(Vec<u8>, PageKind, usize)> {
    data.chunks(PAGE_BYTES)
        .map(|p| {
            let mut out = Vec::with_capacity(PAGE_BYTES);
            let kind = enc.compress_page(p, &mut out).expect("pages are 4 KiB");
            (out, kind, p.len())
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("cpu");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    let mut enc = PageEncoder::new();
    for (name, data) in inputs() {
        group.throughput(Throughput::Bytes(data.len() as u64));
        let ours = compress_all(&mut enc, &data);
        let ours_bytes: usize = ours.iter().map(|p| p.0.len()).sum();
        let flex: Vec<Vec<u8>> = data
            .chunks(PAGE_BYTES)
            .map(lz4_flex::block::compress)
            .collect();
        let flex_bytes: usize = flex.iter().map(|b| b.len()).sum();
        let flex_stored: usize = flex
            .iter()
            .zip(data.chunks(PAGE_BYTES))
            .map(|(b, p)| b.len().min(p.len()))
            .sum();
        eprintln!(
            "lz4 ratio on {name} ({} B, 4 KiB pages): ours {:.3}, lz4_flex {:.3} ({:.3} with raw pages)",
            data.len(),
            data.len() as f64 / ours_bytes as f64,
            data.len() as f64 / flex_bytes as f64,
            data.len() as f64 / flex_stored as f64,
        );
        group.bench_function(BenchmarkId::new("lz4/compress", name), |b| {
            let mut out = Vec::with_capacity(PAGE_BYTES);
            b.iter(|| {
                for page in data.chunks(PAGE_BYTES) {
                    out.clear();
                    black_box(enc.compress_page(page, &mut out).expect("4 KiB page"));
                }
            })
        });
        group.bench_function(BenchmarkId::new("lz4/decompress", name), |b| {
            let mut out = Vec::with_capacity(PAGE_BYTES);
            b.iter(|| {
                for (stored, kind, len) in &ours {
                    out.clear();
                    match kind {
                        PageKind::Raw => out.extend_from_slice(stored),
                        PageKind::Compressed => {
                            decode_block_append(stored, &mut out, 0, *len).expect("valid block");
                        }
                    }
                    black_box(&out);
                }
            })
        });
        group.bench_function(BenchmarkId::new("lz4/compress_parallel", name), |b| {
            let mut codec = CpuPageCodec;
            b.iter(|| {
                black_box(
                    codec
                        .compress_pages(&data, PAGE_BYTES)
                        .expect("valid page size"),
                )
            })
        });
        group.bench_function(BenchmarkId::new("lz4_flex/compress", name), |b| {
            b.iter(|| {
                for page in data.chunks(PAGE_BYTES) {
                    black_box(lz4_flex::block::compress(page));
                }
            })
        });
        group.bench_function(BenchmarkId::new("lz4_flex/decompress", name), |b| {
            let mut out = vec![0u8; PAGE_BYTES];
            b.iter(|| {
                for block in &flex {
                    black_box(
                        lz4_flex::block::decompress_into(block, &mut out).expect("valid block"),
                    );
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, lz4_gpu::bench, bench);
criterion_main!(benches);
