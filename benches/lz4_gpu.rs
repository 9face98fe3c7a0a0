//! GPU half of benches/lz4.rs: `lz4_compress` / `lz4_decompress` alone on device-resident pages
//! (CUDA events), the pinned ring host-to-host with and without overlap, the batch codec from
//! and to ordinary host memory, pinned host-to-device bandwidth in the same run, and the ratio
//! beside lz4_flex's on the same pages. Inputs (4 KiB pages): dickens tiled to 64 MiB (pages are
//! independent, so tiling repeats real pages), 64 MiB of zeros, 64 MiB of random bytes.

use super::common;
use criterion::{BenchmarkId, Criterion, Throughput};
use ptxflow::lz4::gpu::layout::{decompress_entries, info_words, page_lengths, read_compress_info};
use ptxflow::lz4::gpu::{GpuOptions, GpuPageCodec, HashJob, HostTuning, Lz4Kernels};
use ptxflow::lz4::{
    files, CodecPath, CompressedPages, CpuPageCodec, FrameOptions, PageCodec, PageEntry,
};
use ptxflow::rng::Rng;
use ptxflow::runtime::{CudaSlice, CudaStream, Gpu, PinnedBuffer, PinnedKind};
use std::sync::Arc;
use std::time::Duration;

const PAGE_BYTES: usize = 4096;
const GPU_INPUT_BYTES: usize = 256 << 20;
/// Bytes the pinned ring holds (GpuOptions::default: 4 slots of 16 MiB).
const RING_BYTES: usize = 64 << 20;
const PASSES: usize = 16;

fn gpu_inputs() -> Vec<(&'static str, Vec<u8>)> {
    let mut rng = Rng::new(2);
    let mut v = vec![
        ("zeros", vec![0u8; GPU_INPUT_BYTES]),
        (
            "random",
            (0..GPU_INPUT_BYTES).map(|_| rng.next_u64() as u8).collect(),
        ),
    ];
    if let Some(d) = super::lz4_support::corpus("dickens", None) {
        let tiled: Vec<u8> = d.iter().copied().cycle().take(GPU_INPUT_BYTES).collect();
        v.insert(0, ("dickens", tiled));
    }
    // PTXFLOW_LZ4_INPUTS=dickens,zeros keeps only those inputs (short GPU batches).
    if let Ok(keep) = std::env::var("PTXFLOW_LZ4_INPUTS") {
        v.retain(|(n, _)| keep.split(',').any(|k| k == *n));
    }
    v
}

/// Median wall seconds of `reps` runs of `f` after one warm-up (host to host round trips).
fn wall(reps: usize, f: impl FnMut()) -> f64 {
    common::wall_median_secs(reps, f)
}

/// Device buffers of one input, compressed once on the device (for the decompress kernel).
struct Resident {
    input: CudaSlice<u8>,
    scratch: CudaSlice<u8>,
    packed: CudaSlice<u8>,
    /// The stored pages of the first compress launch: timed compress launches rewrite `packed`
    /// in another page order, so the decompress kernel reads this copy.
    dpacked: CudaSlice<u8>,
    info: CudaSlice<u32>,
    entries: CudaSlice<u32>,
    output: CudaSlice<u8>,
    status: CudaSlice<u32>,
    pages: Vec<PageEntry>,
}

fn resident(k: &Lz4Kernels, s: &Arc<CudaStream>, data: &[u8]) -> Resident {
    let n = data.len().div_ceil(PAGE_BYTES);
    let g = k.compress_geometry(PAGE_BYTES, n);
    let mut r = Resident {
        input: s.clone_htod(data).expect("upload"),
        scratch: s
            .alloc_zeros(g.warps() as usize * PAGE_BYTES)
            .expect("alloc"),
        packed: s.alloc_zeros(n * PAGE_BYTES).expect("alloc"),
        dpacked: s.alloc_zeros(n * PAGE_BYTES).expect("alloc"),
        info: s.alloc_zeros(info_words(n)).expect("alloc"),
        entries: s.alloc_zeros(4 * n).expect("alloc"),
        output: s.alloc_zeros(n * PAGE_BYTES).expect("alloc"),
        status: s.alloc_zeros(n).expect("alloc"),
        pages: Vec::new(),
    };
    compress(k, s, &mut r, data.len());
    let info = s.clone_dtoh(&r.info).expect("download");
    let lens: Vec<usize> = page_lengths(data.len(), PAGE_BYTES).collect();
    r.pages = read_compress_info(&info, &lens).expect("consistent kernel output");
    let words = decompress_entries(&r.pages, PAGE_BYTES).expect("entries");
    s.memcpy_htod(&words, &mut r.entries).expect("upload");
    s.memcpy_dtod(&r.packed, &mut r.dpacked).expect("copy");
    verify(k, s, &mut r, data);
    r
}

/// Decompresses on the device and checks every page against the input.
fn verify(k: &Lz4Kernels, s: &Arc<CudaStream>, r: &mut Resident, data: &[u8]) {
    s.memset_zeros(&mut r.output).expect("memset");
    decompress(k, s, r);
    let status = s.clone_dtoh(&r.status).expect("download");
    assert!(
        status.iter().all(|&c| c & 0xFF == 0),
        "device round trip failed"
    );
    let out = s.clone_dtoh(&r.output).expect("download");
    assert!(out[..data.len()] == *data, "device round trip differs");
}

fn compress(k: &Lz4Kernels, s: &Arc<CudaStream>, r: &mut Resident, len: usize) {
    let input = r.input.slice(..);
    k.compress(
        s,
        &input,
        len,
        PAGE_BYTES,
        &mut r.scratch,
        &mut r.packed.slice_mut(..),
        &mut r.info.slice_mut(..),
    )
    .expect("launch");
}

fn decompress(k: &Lz4Kernels, s: &Arc<CudaStream>, r: &mut Resident) {
    let n = r.pages.len();
    k.decompress(
        s,
        &r.dpacked.slice(..),
        &r.entries.slice(..),
        n,
        PAGE_BYTES,
        &mut r.output.slice_mut(..),
        &mut r.status.slice_mut(..),
    )
    .expect("launch");
}

/// Pinned host-to-device bandwidth (GB/s): median of event-timed 64 MiB copies.
fn pinned_h2d_gbs(gpu: &Arc<Gpu>, s: &Arc<CudaStream>) -> f64 {
    let host = PinnedBuffer::<u8>::new(gpu, RING_BYTES, PinnedKind::Upload).expect("pinned");
    let mut dev = s.alloc_zeros::<u8>(RING_BYTES).expect("alloc");
    let view = host.as_slice().expect("pinned view");
    let secs = common::median_secs(s, 10, || s.memcpy_htod(view, &mut dev).expect("copy"));
    RING_BYTES as f64 / secs / 1e9
}

/// Host read bandwidth (GB/s) of a cuMemHostAlloc'd download buffer and of ordinary memory.
fn host_read_gbs(gpu: &Arc<Gpu>) -> (f64, f64) {
    let mut pinned =
        PinnedBuffer::<u8>::new(gpu, RING_BYTES, PinnedKind::Download).expect("pinned");
    let plain = vec![1u8; RING_BYTES];
    let rate = |bytes: &[u8]| {
        let t = std::time::Instant::now();
        let sum: u64 = bytes.chunks(8).map(|c| c[0] as u64).sum();
        std::hint::black_box(sum);
        RING_BYTES as f64 / t.elapsed().as_secs_f64() / 1e9
    };
    let p = rate(pinned.as_mut_slice().expect("pinned view"));
    (p, rate(&plain))
}

/// Host copy bandwidth with every core (GB/s): ordinary to ordinary memory and ordinary to
/// pinned, 64 MiB; and how fast the driver registers (pins) ordinary memory: 256 MiB through
/// cuMemHostRegister + cuMemHostUnregister (GB/s), the alternative to staging copies.
fn host_copy_gbs(gpu: &Arc<Gpu>) -> (f64, f64, f64) {
    use ptxflow::lz4::par::par_copy;
    let src = vec![3u8; RING_BYTES];
    let mut dst = vec![0u8; RING_BYTES];
    let mut pinned =
        PinnedBuffer::<u8>::new(gpu, RING_BYTES, PinnedKind::Download).expect("pinned");
    let plain = wall(5, || par_copy(&mut dst, &src));
    let view = pinned.as_mut_slice().expect("pinned view");
    let to_pinned = wall(5, || par_copy(view, &src));
    let mut big = vec![1u8; GPU_INPUT_BYTES];
    gpu.ctx().bind_to_thread().expect("bind");
    let reg = wall(3, || {
        // SAFETY: `big` is a live allocation of GPU_INPUT_BYTES bytes, unregistered right after.
        unsafe {
            cudarc::driver::sys::cuMemHostRegister_v2(big.as_mut_ptr().cast(), big.len(), 0)
                .result()
                .expect("register");
            cudarc::driver::sys::cuMemHostUnregister(big.as_mut_ptr().cast())
                .result()
                .expect("unregister");
        }
    });
    let gbs = |bytes: usize, s: f64| bytes as f64 / s / 1e9;
    (
        gbs(RING_BYTES, plain),
        gbs(RING_BYTES, to_pinned),
        gbs(GPU_INPUT_BYTES, reg),
    )
}

/// lz4_flex's stored bytes on the same pages (raw when its block is not smaller).
fn flex_stored(data: &[u8]) -> usize {
    data.chunks(PAGE_BYTES)
        .map(|p| lz4_flex::block::compress(p).len().min(p.len()))
        .sum()
}

pub fn bench(c: &mut Criterion) {
    let Some(gpu) = common::gpu_or_skip() else {
        return;
    };
    let s = gpu.stream().clone();
    // PTXFLOW_LZ4_HUGE=1: huge-page outputs (par::set_huge_outputs) for every row.
    if let Ok(v) = std::env::var("PTXFLOW_LZ4_HUGE") {
        ptxflow::lz4::par::set_huge_outputs(v == "1");
    }
    if std::env::var("PTXFLOW_LZ4_NCU").is_ok_and(|v| v == "1") {
        let k = Lz4Kernels::new(gpu.clone()).expect("kernels");
        if let Some((_, d)) = gpu_inputs().into_iter().find(|(n, _)| *n == "dickens") {
            resident(&k, &s, &d);
        }
        return;
    }
    if let Ok(specs) = std::env::var("PTXFLOW_LZ4_VARIANTS") {
        // Design variants only (one short GPU run compares them; see lz4_variants.rs), after
        // the host-side measurements when PTXFLOW_LZ4_HOSTBENCH=1 (see lz4_host.rs).
        if let Some((_, d)) = gpu_inputs().into_iter().find(|(n, _)| *n == "dickens") {
            if std::env::var("PTXFLOW_LZ4_HOSTBENCH").is_ok_and(|v| v == "1") {
                let mut codec =
                    GpuPageCodec::new(gpu.clone(), GpuOptions::default()).expect("GPU codec");
                super::lz4_host::run(&gpu, &mut codec, &d[..RING_BYTES]);
            }
            super::lz4_variants::run(&gpu, &specs, &d, &d[..RING_BYTES]);
        }
        return;
    }
    let mut codec = GpuPageCodec::new(gpu.clone(), GpuOptions::default()).expect("GPU codec");
    let k = Lz4Kernels::new(gpu.clone()).expect("kernels");
    let h2d = pinned_h2d_gbs(&gpu, &s);
    let (read_pinned, read_plain) = host_read_gbs(&gpu);
    let (copy_plain, copy_pinned, register) = host_copy_gbs(&gpu);
    let mut summary = Vec::new();
    let mut g = c.benchmark_group("gpu/lz4");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(300));
    for (name, data) in gpu_inputs() {
        let bytes = data.len();
        let mut r = resident(&k, &s, &data);
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_function(BenchmarkId::new("compress_kernel", name), |b| {
            b.iter_custom(|it| common::event_timed(&s, it, || compress(&k, &s, &mut r, bytes)))
        });
        g.bench_function(BenchmarkId::new("decompress_kernel", name), |b| {
            b.iter_custom(|it| common::event_timed(&s, it, || decompress(&k, &s, &mut r)))
        });
        let passes = PASSES;
        let ring_input = &data[..RING_BYTES.min(bytes)];
        g.throughput(Throughput::Bytes((ring_input.len() * passes) as u64));
        for overlap in [true, false] {
            let id = if overlap {
                "pinned_pipeline_overlap"
            } else {
                "pinned_pipeline_serial"
            };
            g.bench_function(BenchmarkId::new(id, name), |b| {
                b.iter_custom(|it| {
                    let secs: f64 = (0..it)
                        .map(|_| {
                            codec
                                .time_pinned_pipeline(ring_input, PAGE_BYTES, passes, overlap)
                                .expect("pipeline")
                        })
                        .sum();
                    Duration::from_secs_f64(secs)
                })
            });
        }
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_function(BenchmarkId::new("compress_pages", name), |b| {
            b.iter(|| {
                std::hint::black_box(codec.compress_pages(&data, PAGE_BYTES).expect("compress"))
            })
        });
        // The codec from and to ordinary (pageable) memory, buffers reused: what a library caller
        // of `compress_into` / `decompress_pages` gets; the CPU codec beside it.
        let mut pages = CompressedPages {
            page_bytes: PAGE_BYTES,
            data: Vec::new(),
            pages: Vec::new(),
            path: CodecPath::Gpu,
        };
        codec
            .compress_into(&data, PAGE_BYTES, &mut pages)
            .expect("compress");
        let mut back = Vec::with_capacity(bytes);
        codec
            .decompress_pages(&pages, &mut back)
            .expect("decompress");
        assert!(back == data, "{name}: GPU round trip from memory differs");
        let cpu_pages = CpuPageCodec.compress_pages(&data, PAGE_BYTES).expect("cpu");
        g.bench_function(BenchmarkId::new("memory_compress_gpu", name), |b| {
            b.iter(|| {
                codec
                    .compress_into(&data, PAGE_BYTES, &mut pages)
                    .expect("compress")
            })
        });
        g.bench_function(BenchmarkId::new("memory_decompress_gpu", name), |b| {
            b.iter(|| {
                back.clear();
                codec
                    .decompress_pages(&pages, &mut back)
                    .expect("decompress")
            })
        });
        g.bench_function(BenchmarkId::new("memory_compress_cpu", name), |b| {
            b.iter(|| {
                std::hint::black_box(CpuPageCodec.compress_pages(&data, PAGE_BYTES).expect("cpu"))
            })
        });
        g.bench_function(BenchmarkId::new("memory_decompress_cpu", name), |b| {
            b.iter(|| {
                back.clear();
                CpuPageCodec
                    .decompress_pages(&cpu_pages, &mut back)
                    .expect("cpu")
            })
        });
        let mem_c = wall(5, || {
            codec
                .compress_into(&data, PAGE_BYTES, &mut pages)
                .expect("compress")
        });
        let mem_cph = codec.compress_phases().expect("phases");
        let mem_d = wall(5, || {
            back.clear();
            codec
                .decompress_pages(&pages, &mut back)
                .expect("decompress")
        });
        let mem_dph = codec.decompress_phases().expect("phases");
        // The other side of the register-ahead choice (HostTuning::register_ahead), same run.
        let tuning = codec.host_tuning();
        let alt_tuning = HostTuning {
            register_ahead: if tuning.register_ahead > 0 { 0 } else { 3 },
            ..tuning
        };
        codec.set_host_tuning(alt_tuning);
        let alt_c = wall(5, || {
            codec
                .compress_into(&data, PAGE_BYTES, &mut pages)
                .expect("compress")
        });
        let alt_cph = codec.compress_phases().expect("phases");
        let alt_d = wall(5, || {
            back.clear();
            codec
                .decompress_pages(&pages, &mut back)
                .expect("decompress")
        });
        let alt_dph = codec.decompress_phases().expect("phases");
        assert!(
            back == data,
            "{name}: GPU round trip ({alt_tuning:?}) differs"
        );
        codec.set_host_tuning(tuning);
        let cold_c = {
            let t = std::time::Instant::now();
            std::hint::black_box(codec.compress_pages(&data, PAGE_BYTES).expect("compress"));
            t.elapsed().as_secs_f64()
        };
        let cold_d = {
            let mut fresh = Vec::new();
            let t = std::time::Instant::now();
            codec
                .decompress_pages(&pages, &mut fresh)
                .expect("decompress");
            let secs = t.elapsed().as_secs_f64();
            assert!(
                fresh == data,
                "{name}: GPU round trip into a fresh Vec differs"
            );
            secs
        };
        let cpu_c = wall(3, || {
            std::hint::black_box(CpuPageCodec.compress_pages(&data, PAGE_BYTES).expect("cpu"));
        });
        let cpu_d = wall(3, || {
            back.clear();
            CpuPageCodec
                .decompress_pages(&cpu_pages, &mut back)
                .expect("cpu")
        });
        assert!(back == data, "{name}: CPU round trip differs");

        // File to file through the command line's code path (lz4::files), input in the page
        // cache, output to a temporary file; GPU and CPU in the same run.
        let dir = std::env::temp_dir().join(format!("ptxflow-bench-lz4-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let (src, packed, restored) = (dir.join("in"), dir.join("in.lz4"), dir.join("out"));
        std::fs::write(&src, &data).expect("write input");
        let options = FrameOptions {
            page_bytes: PAGE_BYTES,
            content_size: Some(bytes as u64),
            block_checksum: false,
        };
        let create = |p: &std::path::Path| std::fs::File::create(p).expect("create output");
        let mut gpu_c = || {
            files::compress_file_gpu(
                &mut codec,
                &src,
                &create(&packed),
                &packed,
                options,
                Some(&mut HashJob::start(&src)),
            )
            .expect("gpu file compress")
        };
        gpu_c();
        let gpu_d = |codec: &mut GpuPageCodec| {
            files::decompress_file_gpu(codec, &packed, &create(&restored), &restored)
                .expect("gpu file decompress")
        };
        gpu_d(&mut codec);
        assert!(
            std::fs::read(&restored).expect("read back") == data,
            "{name}: file round trip"
        );
        let file_cpu_c = || {
            files::compress_file_cpu(&src, &create(&packed), &packed, options, &mut |_| {})
                .expect("cpu file compress")
        };
        let file_cpu_d = || {
            files::decompress_file_cpu(&packed, &create(&restored), &restored, &mut |_| {})
                .expect("cpu file decompress")
        };
        g.bench_function(BenchmarkId::new("file_compress_gpu", name), |b| {
            b.iter(|| {
                files::compress_file_gpu(
                    &mut codec,
                    &src,
                    &create(&packed),
                    &packed,
                    options,
                    Some(&mut HashJob::start(&src)),
                )
                .expect("gpu file compress")
            })
        });
        g.bench_function(BenchmarkId::new("file_decompress_gpu", name), |b| {
            b.iter(|| gpu_d(&mut codec))
        });
        g.bench_function(BenchmarkId::new("file_compress_cpu", name), |b| {
            b.iter(file_cpu_c)
        });
        file_cpu_c();
        g.bench_function(BenchmarkId::new("file_decompress_cpu", name), |b| {
            b.iter(file_cpu_d)
        });
        let file_cc = wall(3, || {
            file_cpu_c();
        });
        let file_cd = wall(3, || {
            file_cpu_d();
        });
        let file_gc = wall(5, || {
            files::compress_file_gpu(
                &mut codec,
                &src,
                &create(&packed),
                &packed,
                options,
                Some(&mut HashJob::start(&src)),
            )
            .expect("gpu file compress");
        });
        let file_cph = codec.compress_phases().expect("phases");
        let file_gd = wall(5, || {
            gpu_d(&mut codec);
        });
        let file_dph = codec.decompress_phases().expect("phases");
        let cat = wall(3, || {
            std::fs::copy(&src, &restored).expect("copy");
        });
        let _ = std::fs::remove_dir_all(&dir);

        // Summary figures from medians in this same process.
        let ck = common::median_secs(&s, 10, || compress(&k, &s, &mut r, bytes));
        let dk = common::median_secs(&s, 10, || decompress(&k, &s, &mut r));
        let mut pipe = |overlap| {
            let mut v: Vec<f64> = (0..5)
                .map(|_| {
                    codec
                        .time_pinned_pipeline(ring_input, PAGE_BYTES, passes, overlap)
                        .expect("pipeline")
                })
                .collect();
            v.sort_by(f64::total_cmp);
            (ring_input.len() * passes) as f64 / v[2] / 1e9
        };
        let (e2e, serial) = (pipe(true), pipe(false));
        verify(&k, &s, &mut r, &data);
        let pages = codec.compress_pages(&data, PAGE_BYTES).expect("compress");
        assert_eq!(
            pages.path,
            ptxflow::lz4::CodecPath::Gpu,
            "{:?}",
            codec.fallback_reason()
        );
        let ours: usize = r.pages.iter().map(|p| p.stored_bytes).sum();
        let (ratio, flex) = (
            bytes as f64 / ours as f64,
            bytes as f64 / flex_stored(&data) as f64,
        );
        eprintln!("lz4 GPU {name}: stored {ours} B (ratio {ratio:.3}), lz4_flex ratio {flex:.3}; batch codec {} B", pages.stored_bytes());
        summary.push(format!(
            "{name}: compress kernel {:.1} GB/s, decompress kernel {:.1} GB/s, ratio {ratio:.3} vs lz4_flex {flex:.3} ({:+.1}%), \
             pinned e2e {e2e:.1} GB/s = {:.0}% of pinned PCIe (serial {serial:.1} GB/s)",
            bytes as f64 / ck / 1e9,
            bytes as f64 / dk / 1e9,
            100.0 * (ratio / flex - 1.0),
            100.0 * e2e / h2d,
        ));
        let gbs = |secs: f64| bytes as f64 / secs / 1e9;
        summary.push(format!(
            "{name}: file to file (256 MiB, page cache, lz4::files as the CLI runs it): GPU compress {:.2} GB/s = {:.0}% of the pinned ring, \
             GPU decompress {:.2} GB/s; CPU compress {:.2} GB/s, decompress {:.2} GB/s; std::fs::copy of the input {:.2} GB/s (GPU compress takes {:.2}x its time)",
            gbs(file_gc),
            100.0 * gbs(file_gc) / e2e,
            gbs(file_gd),
            gbs(file_cc),
            gbs(file_cd),
            gbs(cat),
            file_gc / cat,
        ));
        summary.push(format!(
            "{name}: from ordinary memory (256 MiB, buffers reused): GPU compress {:.1} GB/s = {:.0}% of the pinned ring, \
             GPU decompress {:.1} GB/s = {:.0}% of the pinned ring; first compress_pages into a fresh Vec {:.1} GB/s, \
             first decompress_pages into a fresh Vec {:.1} GB/s (huge-page outputs {}); CPU ({} threads) compress {:.2} GB/s, decompress {:.2} GB/s",
            gbs(mem_c),
            100.0 * gbs(mem_c) / e2e,
            gbs(mem_d),
            100.0 * gbs(mem_d) / e2e,
            gbs(cold_c),
            gbs(cold_d),
            ptxflow::lz4::par::huge_outputs(),
            rayon::current_num_threads(),
            gbs(cpu_c),
            gbs(cpu_d),
        ));
        summary.push(format!(
            "{name}: from ordinary memory with register_ahead {} instead: GPU compress {:.1} GB/s = {:.0}% of the pinned ring, \
             GPU decompress {:.1} GB/s = {:.0}%; compress [{alt_cph}]; decompress [{alt_dph}]",
            alt_tuning.register_ahead,
            gbs(alt_c),
            100.0 * gbs(alt_c) / e2e,
            gbs(alt_d),
            100.0 * gbs(alt_d) / e2e,
        ));
        summary.push(format!(
            "{name}: host time by phase of one run (ring of {} x {} MiB, {:?}, streaming-store copies (into, out of the slots) {:?}): \
             memory compress [{mem_cph}]; memory decompress [{mem_dph}]; file compress [{file_cph}]; file decompress [{file_dph}]",
            GpuOptions::default().slots,
            GpuOptions::default().batch_bytes >> 20,
            codec.host_tuning(),
            ptxflow::lz4::par::streaming_stores(),
        ));
    }
    g.finish();
    println!(
        "SUMMARY gpu/lz4 on {} ({} SMs), 4 KiB pages, 256 MiB inputs (kernels), 16 passes over 64 MiB (pipeline); \
         pinned H2D {h2d:.1} GB/s; host reads (one core, every 8th byte) of cuMemHostAlloc memory {read_pinned:.1} GB/s, of ordinary memory {read_plain:.1} GB/s; \
         parallel copies ({} threads) ordinary->ordinary {copy_plain:.1} GB/s, ordinary->pinned {copy_pinned:.1} GB/s; \
         cuMemHostRegister+Unregister of 256 MiB {register:.1} GB/s",
        gpu.facts().name,
        gpu.facts().sm_count,
        rayon::current_num_threads(),
    );
    for line in summary {
        println!("SUMMARY gpu/lz4 {line}");
    }
}
