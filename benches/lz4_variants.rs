//! Design variants of the GPU codec's host side, compared in one run (`PTXFLOW_LZ4_VARIANTS`):
//! ring depth and slot size, streaming-store copies, eager or exact downloads, copy threads, each
//! timed from ordinary memory (256 MiB of dickens pages, buffers reused) against the pinned ring
//! of the default codec measured in the same run, with each variant's host time by phase.
//!
//! Spec: comma-separated
//! `SLOTSxMIB[:nt|:plain|:ntin|:ntout][:eager|:lazy][:tTHREADS][:cCHUNK_KIB][:rPIECES][:aLEAD][:gTHREADS][:pPREFETCH][:w][:sPARTS][:file]`
//! (`a`: register the caller's memory LEAD batches ahead on threads of their own, `g` of them,
//! see `HostTuning::register_ahead`; `p`: software prefetch distance in bytes of the copy loop, `w`:
//! its AVX2 form, see `par::CopyLoop`; `s`: each compress batch in PARTS parts, see
//! `HostTuning::compress_parts`),
//! e.g. `4x16:plain:eager` (the design of session 4) or `8x8:nt:lazy:t8`.

use super::common;
use ptxflow::lz4::gpu::{GpuOptions, GpuPageCodec, HashJob, HostTuning};
use ptxflow::lz4::par;
use ptxflow::lz4::{files, CodecPath, CompressedPages, FrameOptions, PageCodec};
use ptxflow::runtime::Gpu;
use std::sync::Arc;

const PAGE_BYTES: usize = 4096;

struct Variant {
    options: GpuOptions,
    streaming: (bool, bool),
    eager: bool,
    threads: Option<usize>,
    register: usize,
    ahead: usize,
    reg_threads: usize,
    chunk_kib: Option<usize>,
    copy_loop: par::CopyLoop,
    parts: usize,
    file: bool,
}

fn parse(spec: &str) -> Option<Variant> {
    let mut parts = spec.split(':');
    let (s, m) = parts.next()?.split_once('x')?;
    let mut v = Variant {
        options: GpuOptions {
            batch_bytes: m.parse::<usize>().ok()? << 20,
            slots: s.parse().ok()?,
        },
        streaming: par::streaming_stores(),
        eager: HostTuning::default().eager_download,
        threads: None,
        register: HostTuning::default().register_pieces,
        ahead: HostTuning::default().register_ahead,
        reg_threads: HostTuning::default().register_threads,
        chunk_kib: None,
        copy_loop: par::copy_loop(),
        parts: HostTuning::default().compress_parts,
        file: false,
    };
    for p in parts {
        match p {
            "nt" => v.streaming = (true, true),
            "plain" => v.streaming = (false, false),
            "ntin" => v.streaming = (true, false),
            "ntout" => v.streaming = (false, true),
            "eager" => v.eager = true,
            "lazy" => v.eager = false,
            "file" => v.file = true,
            "w" => v.copy_loop.wide = true,
            p if p.starts_with('p') => v.copy_loop.prefetch = p[1..].parse().ok()?,
            t if t.starts_with('t') => v.threads = t[1..].parse().ok(),
            r if r.starts_with('r') => v.register = r[1..].parse().ok()?,
            a if a.starts_with('a') => v.ahead = a[1..].parse().ok()?,
            g if g.starts_with('g') => v.reg_threads = g[1..].parse().ok()?,
            c if c.starts_with('c') => v.chunk_kib = c[1..].parse().ok(),
            s if s.starts_with('s') => v.parts = s[1..].parse().ok()?,
            _ => return None,
        }
    }
    Some(v)
}

/// GB/s of cuMemHostRegister + cuMemHostUnregister of 256 MiB split over `threads` threads
/// (each registers its own 64 KiB-aligned part), median of 3.
fn register_gbs(gpu: &Arc<Gpu>, threads: usize) -> f64 {
    let len = 256usize << 20;
    let mut big = vec![1u8; len + (64 << 10)];
    let off = big.as_ptr().align_offset(64 << 10);
    let region = &mut big[off..off + len];
    let part = len / threads;
    let secs = common::wall_median_secs(3, || {
        std::thread::scope(|s| {
            for piece in region.chunks_mut(part) {
                let ctx = gpu.ctx().clone();
                s.spawn(move || {
                    ctx.bind_to_thread().expect("bind");
                    // SAFETY: `piece` is a live, exclusively borrowed range, unregistered
                    // before the borrow ends.
                    unsafe {
                        let p = piece.as_mut_ptr().cast();
                        cudarc::driver::sys::cuMemHostRegister_v2(p, piece.len(), 0)
                            .result()
                            .expect("register");
                        cudarc::driver::sys::cuMemHostUnregister(p)
                            .result()
                            .expect("unregister");
                    }
                });
            }
        })
    });
    len as f64 / secs / 1e9
}

/// Runs the variants of `specs` on `data` (dickens pages) and prints one VARIANT line each.
pub fn run(gpu: &Arc<Gpu>, specs: &str, data: &[u8], ring_input: &[u8]) {
    let bytes = data.len();
    let gbs = |s: f64| bytes as f64 / s / 1e9;
    // Registration throughput by threads (PTXFLOW_LZ4_REGISTER_BENCH=1; 12-16 GB/s on the
    // H100 machine whatever the threads, 2026-11-25).
    let threads: &[usize] = if std::env::var("PTXFLOW_LZ4_REGISTER_BENCH").is_ok_and(|v| v == "1") {
        &[1, 2, 4, 8, 16]
    } else {
        &[]
    };
    for &t in threads {
        println!(
            "VARIANT register+unregister 256 MiB over {t} threads: {:.1} GB/s",
            register_gbs(gpu, t)
        );
    }
    let mut base = GpuPageCodec::new(gpu.clone(), GpuOptions::default()).expect("GPU codec");
    let pinned = |base: &mut GpuPageCodec| {
        let mut v: Vec<f64> = (0..5)
            .map(|_| {
                base.time_pinned_pipeline(ring_input, PAGE_BYTES, 16, true)
                    .expect("pipeline")
            })
            .collect();
        v.sort_by(f64::total_cmp);
        (ring_input.len() * 16) as f64 / v[2] / 1e9
    };
    let ring0 = pinned(&mut base);
    println!("VARIANT pinned ring (default options) {ring0:.1} GB/s");
    let default_streaming = par::streaming_stores();
    let default_loop = par::copy_loop();
    // The stored pages every variant must reproduce: the default codec's.
    let reference = base.compress_pages(data, PAGE_BYTES).expect("compress");
    let reference = &reference;
    for spec in specs.split(',').filter(|s| !s.is_empty()) {
        let Some(v) = parse(spec) else {
            println!("VARIANT {spec}: cannot parse");
            continue;
        };
        par::set_streaming_stores(v.streaming.0, v.streaming.1);
        par::set_copy_chunk_bytes(v.chunk_kib.unwrap_or(256) << 10);
        par::set_copy_loop(v.copy_loop);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(v.threads.unwrap_or(rayon::current_num_threads()))
            .build()
            .expect("thread pool");
        // A failing variant prints its panic and the next one runs.
        let line = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.install(|| {
            let mut codec = GpuPageCodec::new(gpu.clone(), v.options).expect("GPU codec");
            codec.set_host_tuning(HostTuning {
                eager_download: v.eager,
                register_pieces: v.register,
                register_ahead: v.ahead,
                register_threads: v.reg_threads,
                compress_parts: v.parts,
            });
            // Unaligned start, ragged end: the registered interior, staged head and tail.
            let odd = &data[3..bytes - 1001];
            let mut p = CompressedPages {
                page_bytes: PAGE_BYTES,
                data: Vec::new(),
                pages: Vec::new(),
                path: CodecPath::Gpu,
            };
            codec.compress_into(odd, PAGE_BYTES, &mut p).expect("compress");
            let mut b = Vec::new();
            codec.decompress_pages(&p, &mut b).expect("decompress");
            assert!(b == odd, "{spec}: unaligned round trip differs");
            let mut pages = CompressedPages {
                page_bytes: PAGE_BYTES,
                data: Vec::new(),
                pages: Vec::new(),
                path: CodecPath::Gpu,
            };
            codec
                .compress_into(data, PAGE_BYTES, &mut pages)
                .expect("compress");
            let mut back = Vec::with_capacity(bytes);
            codec
                .decompress_pages(&pages, &mut back)
                .expect("decompress");
            assert!(back == data, "{spec}: round trip differs");
            assert!(
                pages.pages.len() == reference.pages.len()
                    && (0..reference.pages.len()).all(|k| pages.page(k) == reference.page(k)),
                "{spec}: stored pages differ from the default codec's"
            );
            assert_eq!(pages.path, CodecPath::Gpu, "{spec}: {:?}", codec.fallback_reason());
            let c = common::wall_median_secs(7, || {
                codec
                    .compress_into(data, PAGE_BYTES, &mut pages)
                    .expect("compress")
            });
            let cph = codec.compress_phases().expect("phases");
            let d = common::wall_median_secs(7, || {
                back.clear();
                codec
                    .decompress_pages(&pages, &mut back)
                    .expect("decompress")
            });
            let dph = codec.decompress_phases().expect("phases");
            let mut line = format!(
                "VARIANT {spec}: compress {:.1} GB/s = {:.0}% of the pinned ring, decompress {:.1} GB/s = {:.0}%\n  compress [{cph}]\n  decompress [{dph}]",
                gbs(c),
                100.0 * gbs(c) / ring0,
                gbs(d),
                100.0 * gbs(d) / ring0,
            );
            if v.file {
                line += &file_line(&mut codec, data);
            }
            line
        })
        }));
        match line {
            Ok(line) => println!("{line}"),
            Err(e) => println!(
                "VARIANT {spec}: FAILED: {}",
                e.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            ),
        }
    }
    par::set_streaming_stores(default_streaming.0, default_streaming.1);
    par::set_copy_chunk_bytes(256 << 10);
    par::set_copy_loop(default_loop);
    println!(
        "VARIANT pinned ring (default options) again {:.1} GB/s",
        pinned(&mut base)
    );
}

/// File to file through lz4::files as the CLI runs it, page cache, medians of 3.
fn file_line(codec: &mut GpuPageCodec, data: &[u8]) -> String {
    let bytes = data.len();
    let dir = std::env::temp_dir().join(format!("ptxflow-variant-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (src, packed, restored) = (dir.join("in"), dir.join("in.lz4"), dir.join("out"));
    std::fs::write(&src, data).expect("write input");
    let options = FrameOptions {
        page_bytes: PAGE_BYTES,
        content_size: Some(bytes as u64),
        block_checksum: false,
    };
    let create = |p: &std::path::Path| std::fs::File::create(p).expect("create output");
    let c = common::wall_median_secs(3, || {
        files::compress_file_gpu(
            codec,
            &src,
            &create(&packed),
            &packed,
            options,
            Some(&mut HashJob::start(&src)),
        )
        .expect("gpu file compress");
    });
    let cph = codec.compress_phases().expect("phases");
    let d = common::wall_median_secs(3, || {
        files::decompress_file_gpu(codec, &packed, &create(&restored), &restored)
            .expect("gpu file decompress");
    });
    let dph = codec.decompress_phases().expect("phases");
    assert!(
        std::fs::read(&restored).expect("read back") == data,
        "file round trip"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let gbs = |s: f64| bytes as f64 / s / 1e9;
    format!(
        "\n  file compress {:.2} GB/s [{cph}]\n  file decompress {:.2} GB/s [{dph}]",
        gbs(c),
        gbs(d)
    )
}
