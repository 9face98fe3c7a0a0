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
//! e.g. `4x16:plain:eager` (the design of session 4) or `8x8:nt:lazy:t8`; session 8 added
//! `:x` (guessed eager downloads, `HostTuning::guess_download`), `:serial` (fill, then submit and
//! drain, not side by side: each side's own cost in the phases, `HostTuning::serial_steps`),
//! `:huge` (transparent huge pages for outputs the codec grows, `par::set_huge_outputs`), `:hs`
//! (slots in huge-page registered memory, `lz4::gpu::set_huge_slots`) and
//! `:fresh` (pairs only: every run into new output buffers, as a caller without reuse),
//! `:x0` / `:x1` (guessed downloads off / on), `:late` / `:early` (`HostTuning::submit_early`
//! off / on), `:ws` / `:wp` (`HostTuning::parallel_stage` off / on), `:c0` (balanced copy tasks,
//! the default since session 8) or `:cKIB` (fixed tasks; `:c256` before session 8). Main's
//! behaviour before session 8: `4x16:c256:x0` (`:late` and `:ws` are the defaults).
//!
//! `A/B` times compression and decompression from memory with A and B in turns (31 rounds, the
//! order swapped every round, so that a slow period of the machine hits both alike) and prints
//! each side's median, the median of B's time over A's in the same round and in how many rounds
//! B was faster, with the host time by phase of each side's last run.

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
    guess: bool,
    early: bool,
    parallel_stage: bool,
    serial: bool,
    huge: bool,
    huge_slots: bool,
    fresh: bool,
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
        guess: HostTuning::default().guess_download,
        early: HostTuning::default().submit_early,
        parallel_stage: HostTuning::default().parallel_stage,
        serial: false,
        huge: par::huge_outputs(),
        huge_slots: ptxflow::lz4::gpu::huge_slots(),
        fresh: false,
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
            "x" | "x1" => v.guess = true,
            "x0" => v.guess = false,
            "early" => v.early = true,
            "late" => v.early = false,
            "wp" => v.parallel_stage = true,
            "ws" => v.parallel_stage = false,
            "serial" => v.serial = true,
            "huge" => v.huge = true,
            "hs" => v.huge_slots = true,
            "fresh" => v.fresh = true,
            "w" => v.copy_loop.wide = true,
            p if p.starts_with('p') => v.copy_loop.prefetch = p[1..].parse().ok()?,
            t if t.starts_with('t') => v.threads = t[1..].parse().ok(),
            r if r.starts_with('r') => v.register = r[1..].parse().ok()?,
            a if a.starts_with('a') => v.ahead = a[1..].parse().ok()?,
            g if g.starts_with('g') => v.reg_threads = g[1..].parse().ok()?,
            c if c.starts_with('c') => v.chunk_kib = Some(c[1..].parse().ok()?),
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
    println!("VARIANT {}", host_copies());
    let default_streaming = par::streaming_stores();
    let default_loop = par::copy_loop();
    // The stored pages every variant must reproduce: the default codec's.
    let reference = base.compress_pages(data, PAGE_BYTES).expect("compress");
    let reference = &reference;
    let default_huge = par::huge_outputs();
    for spec in specs.split(',').filter(|s| !s.is_empty()) {
        if let Some((a, b)) = spec.split_once('/') {
            let line = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                pair_line(gpu, (a, b), data, ring0)
            }));
            match line {
                Ok(line) => println!("{line}"),
                Err(_) => println!("VARIANT {spec}: FAILED"),
            }
            continue;
        }
        let Some(v) = parse(spec) else {
            println!("VARIANT {spec}: cannot parse");
            continue;
        };
        set_globals(&v);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(v.threads.unwrap_or(rayon::current_num_threads()))
            .build()
            .expect("thread pool");
        // A failing variant prints its panic and the next one runs.
        let line = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.install(|| {
            let mut codec = codec_of(gpu, &v);
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
        // The next spec starts from the defaults (its parse reads them).
        par::set_streaming_stores(default_streaming.0, default_streaming.1);
        par::set_copy_loop(default_loop);
        par::set_huge_outputs(default_huge);
        ptxflow::lz4::gpu::set_huge_slots(false);
    }
    par::set_streaming_stores(default_streaming.0, default_streaming.1);
    par::set_copy_chunk_bytes(par::BALANCED);
    par::set_copy_loop(default_loop);
    par::set_huge_outputs(default_huge);
    ptxflow::lz4::gpu::set_huge_slots(false);
    println!(
        "VARIANT pinned ring (default options) again {:.1} GB/s",
        pinned(&mut base)
    );
}

/// What kind of host the run got: parallel copies of 64 MiB between ordinary buffers with
/// ordinary and with streaming stores (medians of 5), on every core.
fn host_copies() -> String {
    let n = 64 << 20;
    let src = vec![3u8; n];
    let mut dst = vec![0u8; n];
    let plain = common::wall_median_secs(5, || par::par_copy(&mut dst, &src));
    let saved = par::streaming_stores();
    par::set_streaming_stores(true, saved.1);
    let nt = common::wall_median_secs(5, || par::par_copy_to_slot(&mut dst, &src));
    par::set_streaming_stores(saved.0, saved.1);
    format!(
        "host copies ordinary->ordinary ({} threads, 64 MiB): {:.1} GB/s with ordinary stores, {:.1} GB/s with the slot copy loop ({:?})",
        rayon::current_num_threads(),
        n as f64 / plain / 1e9,
        n as f64 / nt / 1e9,
        par::copy_loop()
    )
}

/// Sets the process-wide copy knobs of `v`.
fn set_globals(v: &Variant) {
    par::set_streaming_stores(v.streaming.0, v.streaming.1);
    par::set_copy_chunk_bytes(v.chunk_kib.map_or(par::BALANCED, |k| k << 10));
    par::set_copy_loop(v.copy_loop);
    par::set_huge_outputs(v.huge);
    ptxflow::lz4::gpu::set_huge_slots(v.huge_slots);
}

/// A codec of `v`'s ring shape and host tuning.
fn codec_of(gpu: &Arc<Gpu>, v: &Variant) -> GpuPageCodec {
    let mut codec = GpuPageCodec::new(gpu.clone(), v.options).expect("GPU codec");
    codec.set_host_tuning(HostTuning {
        eager_download: v.eager,
        register_pieces: v.register,
        register_ahead: v.ahead,
        register_threads: v.reg_threads,
        compress_parts: v.parts,
        guess_download: v.guess,
        serial_steps: v.serial,
        submit_early: v.early,
        parallel_stage: v.parallel_stage,
    });
    codec
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Compression and decompression from memory with specs `a` and `b` in turns (see the module
/// docs); each side with its own codec, copy knobs and thread pool.
fn pair_line(gpu: &Arc<Gpu>, (a, b): (&str, &str), data: &[u8], ring0: f64) -> String {
    let (Some(va), Some(vb)) = (parse(a), parse(b)) else {
        return format!("VARIANT {a}/{b}: cannot parse");
    };
    let saved = (
        par::streaming_stores(),
        par::copy_loop(),
        par::huge_outputs(),
    );
    let vs = [&va, &vb];
    let pools: Vec<rayon::ThreadPool> = vs
        .iter()
        .map(|v| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(v.threads.unwrap_or(rayon::current_num_threads()))
                .build()
                .expect("thread pool")
        })
        .collect();
    let mut codecs = [codec_of(gpu, &va), codec_of(gpu, &vb)];
    let new_pages = || CompressedPages {
        page_bytes: PAGE_BYTES,
        data: Vec::new(),
        pages: Vec::new(),
        path: CodecPath::Gpu,
    };
    let mut pages = [new_pages(), new_pages()];
    let mut backs = [
        Vec::with_capacity(data.len()),
        Vec::with_capacity(data.len()),
    ];
    let (mut cs, mut ds) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    let rounds = 32;
    for round in 0..rounds {
        let order = [round % 2, 1 - round % 2];
        for k in order {
            set_globals(vs[k]);
            if vs[k].fresh {
                pages[k] = new_pages();
            }
            let t = std::time::Instant::now();
            pools[k].install(|| {
                codecs[k]
                    .compress_into(data, PAGE_BYTES, &mut pages[k])
                    .expect("compress")
            });
            // Round 0 warms both rings up.
            if round > 0 {
                cs[k].push(t.elapsed().as_secs_f64());
            }
        }
        for k in order {
            set_globals(vs[k]);
            if vs[k].fresh {
                backs[k] = Vec::new();
            } else {
                backs[k].clear();
            }
            let t = std::time::Instant::now();
            pools[k].install(|| {
                codecs[k]
                    .decompress_pages(&pages[k], &mut backs[k])
                    .expect("decompress")
            });
            if round > 0 {
                ds[k].push(t.elapsed().as_secs_f64());
            }
        }
        if round == 0 || round == rounds - 1 {
            for k in 0..2 {
                assert!(backs[k] == data, "{a}/{b}: side {k}: round trip differs");
                assert_eq!(pages[k].path, CodecPath::Gpu, "{a}/{b}: side {k}");
            }
            assert!(
                pages[0].pages.len() == pages[1].pages.len()
                    && (0..pages[0].pages.len()).all(|k| pages[0].page(k) == pages[1].page(k)),
                "{a}/{b}: stored pages differ"
            );
        }
    }
    par::set_streaming_stores(saved.0 .0, saved.0 .1);
    par::set_copy_loop(saved.1);
    par::set_huge_outputs(saved.2);
    ptxflow::lz4::gpu::set_huge_slots(false);
    par::set_copy_chunk_bytes(par::BALANCED);
    let gbs = |s: f64| data.len() as f64 / s / 1e9;
    let row = |what: &str, t: &[Vec<f64>; 2]| {
        let ratios: Vec<f64> = t[1].iter().zip(&t[0]).map(|(b, a)| b / a).collect();
        let faster = ratios.iter().filter(|&&r| r < 1.0).count();
        let (ga, gb) = (gbs(median(&t[0])), gbs(median(&t[1])));
        format!(
            "{what} {ga:.1} GB/s = {:.0}% / {gb:.1} GB/s = {:.0}% of the pinned ring, B/A time median {:.3}, B faster in {faster} of {}",
            100.0 * ga / ring0,
            100.0 * gb / ring0,
            median(&ratios),
            ratios.len()
        )
    };
    format!(
        "VARIANT {a}/{b}: {}; {}\n  A compress [{}]\n  B compress [{}]\n  A decompress [{}]\n  B decompress [{}]",
        row("compress", &cs),
        row("decompress", &ds),
        codecs[0].compress_phases().expect("phases"),
        codecs[1].compress_phases().expect("phases"),
        codecs[0].decompress_phases().expect("phases"),
        codecs[1].decompress_phases().expect("phases"),
    )
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
