//! LZ4 on the GPU against the CPU reference: stored pages byte-identical to `compress_page` (corpus,
//! random, zeros, patterned, short tails; 1, 4 and 64 KiB pages), every block decoded by lz4_flex,
//! the page stream's order and backpressure, frames, GPU decompression, and corrupt pages giving
//! per-page errors. GPU tests skip without a device (fail under PTXFLOW_REQUIRE_GPU=1).
//! PTXFLOW_SANITIZE=1 shrinks the inputs for compute-sanitizer runs.

mod common;
mod lz4_support;

use ptxflow::lz4::gpu::{
    open_page_stream, Device, GpuOptions, GpuPageCodec, GpuPageStream, HostTuning,
};
use ptxflow::lz4::{
    compress_page, decode_frames, CodecPath, CompressedPage, CompressedPages, FrameEncoder,
    FrameOptions, PageCodec, PageKind, PageStream,
};
use ptxflow::rng::Rng;
use ptxflow::Error;

fn sanitize() -> bool {
    std::env::var("PTXFLOW_SANITIZE").is_ok_and(|v| v == "1")
}

/// Test inputs: (name, bytes), smaller under the sanitizer.
fn inputs() -> Vec<(String, Vec<u8>)> {
    let scale = if sanitize() { 1 } else { 8 };
    let mut rng = Rng::new(42);
    let mut v = vec![
        (
            "random".to_string(),
            (0..scale * 64 * 1024 + 333)
                .map(|_| rng.next_u64() as u8)
                .collect::<Vec<u8>>(),
        ),
        ("zeros".to_string(), vec![0u8; scale * 64 * 1024 + 7]),
    ];
    let mut mixed = Vec::new();
    for k in 0..(scale * 16) {
        let page: Vec<u8> = match k % 5 {
            0 => (0..4096).map(|i| (i % (k + 2)) as u8).collect(),
            1 => (0..4096)
                .map(|i| {
                    if i % 100 < 60 {
                        0
                    } else {
                        rng.next_u64() as u8
                    }
                })
                .collect(),
            2 => vec![0; 4096],
            3 => (0..4096).map(|_| rng.next_u64() as u8).collect(),
            _ => (0..4096)
                .map(|_| b"ab"[(rng.next_u64() % 2) as usize])
                .collect(),
        };
        mixed.extend_from_slice(&page);
    }
    mixed.extend_from_slice(b"short tail!");
    v.push(("mixed".to_string(), mixed));
    let limit = if sanitize() { 256 << 10 } else { usize::MAX };
    if let Some(d) = lz4_support::corpus("dickens", Some(limit)) {
        v.push(("dickens".to_string(), d));
    }
    // Prefixes of the other corpus files present (every kind of data the ratio table covers).
    let limit = if sanitize() { 64 << 10 } else { 1 << 20 };
    for name in lz4_support::CORPUS.iter().filter(|&&n| n != "dickens") {
        if let Some(d) = lz4_support::corpus(name, Some(limit)) {
            v.push((name.to_string(), d));
        }
    }
    v
}

/// A GPU codec with a small ring (`batch_bytes` per slot), so that tests wrap it and see partial
/// batches.
fn small_codec(
    gpu: std::sync::Arc<ptxflow::runtime::Gpu>,
    batch_bytes: usize,
    slots: usize,
) -> GpuPageCodec {
    GpuPageCodec::new(gpu, GpuOptions { batch_bytes, slots }).unwrap()
}

/// The inputs one after another, repeated to `mib` MiB and a ragged tail (a page and 333 bytes).
fn cycled_inputs(mib: usize) -> Vec<u8> {
    inputs()
        .into_iter()
        .flat_map(|(_, d)| d)
        .cycle()
        .take((mib << 20) + 4096 + 333)
        .collect()
}

/// Every page of `pages` equals `compress_page` of the input page and decodes with lz4_flex.
fn check_pages(pages: &CompressedPages, input: &[u8], what: &str) {
    let pb = pages.page_bytes;
    assert_eq!(
        pages.pages.len(),
        input.len().div_ceil(pb),
        "{what}: page count"
    );
    for (k, page) in input.chunks(pb).enumerate() {
        let (want, kind) = compress_page(page).unwrap();
        let (got, got_kind) = pages.page(k);
        assert_eq!(got_kind, kind, "{what}: page {k} kind");
        assert!(
            got == &want[..],
            "{what}: page {k} of {} B: GPU {} B != CPU {} B",
            page.len(),
            got.len(),
            want.len()
        );
        if kind == PageKind::Compressed {
            let flex = lz4_flex::block::decompress(got, page.len())
                .unwrap_or_else(|e| panic!("{what}: page {k}: lz4_flex: {e}"));
            assert!(
                flex == page,
                "{what}: page {k}: lz4_flex decodes other bytes"
            );
        } else {
            assert!(got.len() <= page.len());
        }
    }
}

#[test]
fn gpu_pages_are_byte_identical_to_the_cpu_reference() {
    let Some(gpu) = common::gpu_or_skip("gpu_pages_are_byte_identical_to_the_cpu_reference") else {
        return;
    };
    // Small batches and few slots so the ring wraps and partial batches occur.
    let mut codec = small_codec(gpu, 1 << 20, 3);
    for (name, data) in inputs() {
        for pb in [1024, 4096, 65536] {
            let pages = codec.compress_pages(&data, pb).unwrap();
            assert_eq!(
                pages.path,
                CodecPath::Gpu,
                "{name}: {:?}",
                codec.fallback_reason()
            );
            check_pages(&pages, &data, &format!("{name} at {pb} B pages"));
            let mut back = Vec::new();
            codec.decompress_pages(&pages, &mut back).unwrap();
            assert!(
                back == data,
                "{name} at {pb} B pages: GPU decompression differs"
            );
            eprintln!(
                "{name} at {pb} B pages: {} -> {} B, identical to the CPU",
                data.len(),
                pages.stored_bytes()
            );
        }
    }
    assert_eq!(codec.path(), CodecPath::Gpu);
    let empty = codec.compress_pages(&[], 4096).unwrap();
    assert!(empty.pages.is_empty());
    assert!(matches!(
        codec.compress_pages(&[1, 2, 3], 1000),
        Err(Error::Input { .. })
    ));
}

#[test]
fn gpu_decompress_reports_corrupt_pages_and_stays_usable() {
    let Some(gpu) = common::gpu_or_skip("gpu_decompress_reports_corrupt_pages_and_stays_usable")
    else {
        return;
    };
    let mut codec = small_codec(gpu, 1 << 20, 2);
    let data = lz4_support::corpus("dickens", Some(200_000))
        .unwrap_or_else(|| (0..200_000u32).map(|i| (i % 251) as u8).collect());
    let good = codec.compress_pages(&data, 4096).unwrap();
    let mut rng = Rng::new(9);
    let mut errors = 0;
    for round in 0..40 {
        let mut bad = good.clone();
        let k = rng.next_u64() as usize % bad.pages.len();
        let e = bad.pages[k];
        match round % 4 {
            0 => bad.data[e.offset + rng.next_u64() as usize % e.stored_bytes] ^= 0xFF,
            1 => bad.pages[k].stored_bytes = e.stored_bytes / 2,
            2 => bad.pages[k].original_bytes = e.original_bytes + 1,
            _ => bad.pages[k].offset = bad.data.len() + 100,
        }
        let mut out = Vec::new();
        match codec.decompress_pages(&bad, &mut out) {
            Err(Error::Corrupt { what }) => {
                errors += 1;
                assert!(
                    what.contains(&format!("page {k}")) || what.contains("entry"),
                    "{what}"
                );
            }
            Err(e) => panic!("round {round}: unexpected error {e}"),
            Ok(()) => assert!(
                out != data || round % 4 == 0,
                "round {round}: corruption decoded to the original"
            ),
        }
        assert_eq!(
            codec.path(),
            CodecPath::Gpu,
            "corrupt input must not retire the GPU: {:?}",
            codec.fallback_reason()
        );
    }
    assert!(errors >= 25, "{errors} of 40 corruptions reported");
    let mut back = Vec::new();
    codec.decompress_pages(&good, &mut back).unwrap();
    assert!(back == data);
}

#[test]
fn gpu_stream_keeps_order_and_applies_backpressure() {
    let Some(gpu) = common::gpu_or_skip("gpu_stream_keeps_order_and_applies_backpressure") else {
        return;
    };
    let data = inputs().pop().unwrap().1;
    let pb = 4096;
    let mut s = GpuPageStream::new(
        gpu.clone(),
        pb,
        GpuOptions {
            batch_bytes: 8 * pb,
            slots: 3,
        },
    )
    .unwrap();
    assert_eq!(s.path(), CodecPath::Gpu);
    assert_eq!(s.free_slots(), 24);
    let pages: Vec<&[u8]> = data.chunks(pb).collect();
    let (mut next_push, mut next_pop) = (0, 0);
    let mut out = CompressedPage::default();
    while next_pop < pages.len() {
        // Push until full, check the refusal, then pop a few.
        while next_push < pages.len() && s.free_slots() > 0 {
            s.push_page(pages[next_push]).unwrap();
            next_push += 1;
        }
        if next_push < pages.len() {
            assert!(matches!(
                s.push_page(pages[next_push]),
                Err(Error::Capacity { .. })
            ));
        }
        for _ in 0..5 {
            if !s.pop_page(&mut out).unwrap() {
                break;
            }
            let (want, kind) = compress_page(pages[next_pop]).unwrap();
            assert!(
                out.bytes == want && out.kind == kind,
                "page {next_pop} differs"
            );
            assert_eq!(out.original_bytes, pages[next_pop].len());
            next_pop += 1;
        }
    }
    assert!(!s.pop_page(&mut out).unwrap());
    assert_eq!(s.pending(), 0);
    assert!(matches!(s.push_page(&[]), Err(Error::Input { .. })));

    // A whole frame through the GPU stream decodes with lz4_flex and with ours.
    let mut s = GpuPageStream::new(
        gpu,
        pb,
        GpuOptions {
            batch_bytes: 16 * pb,
            slots: 2,
        },
    )
    .unwrap();
    let options = FrameOptions {
        page_bytes: pb,
        content_size: Some(data.len() as u64),
        block_checksum: true,
    };
    let mut enc =
        FrameEncoder::new(Vec::new(), std::path::Path::new("<mem>"), &mut s, options).unwrap();
    assert_eq!(enc.path(), CodecPath::Gpu);
    enc.write(&data).unwrap();
    let (frame, stats) = enc.finish().unwrap();
    assert_eq!(stats.pages as usize, pages.len());
    let mut flex = Vec::new();
    std::io::copy(
        &mut lz4_flex::frame::FrameDecoder::new(&frame[..]),
        &mut flex,
    )
    .unwrap();
    assert!(
        flex == data,
        "lz4_flex decodes the GPU frame to other bytes"
    );
    let mut ours = Vec::new();
    decode_frames(
        &mut &frame[..],
        std::path::Path::new("<mem>"),
        &mut ours,
        std::path::Path::new("<out>"),
        &mut |_| {},
    )
    .unwrap();
    assert!(ours == data);
}

#[test]
fn auto_device_picks_a_working_path() {
    let (mut s, note) = open_page_stream(
        Device::Auto,
        4096,
        8,
        GpuOptions {
            batch_bytes: 1 << 16,
            slots: 2,
        },
    )
    .unwrap();
    match s.path() {
        CodecPath::Gpu => assert!(note.is_none()),
        CodecPath::Cpu => assert!(note.is_some(), "the CPU path must say why"),
    }
    s.push_page(&[7u8; 4096]).unwrap();
    s.push_page(b"tail").unwrap();
    let mut out = CompressedPage::default();
    assert!(s.pop_page(&mut out).unwrap());
    assert_eq!(out.bytes, compress_page(&[7u8; 4096]).unwrap().0);
    assert!(s.pop_page(&mut out).unwrap());
    assert_eq!(
        (out.bytes.as_slice(), out.kind),
        (&b"tail"[..], PageKind::Raw)
    );
    let (cpu, _) = open_page_stream(Device::Cpu, 4096, 8, GpuOptions::default()).unwrap();
    assert_eq!(cpu.path(), CodecPath::Cpu);
    if common::gpu_or_skip("auto_device_picks_a_working_path (Device::Gpu)").is_none() {
        assert!(matches!(
            open_page_stream(Device::Gpu, 4096, 8, GpuOptions::default()),
            Err(Error::NoDevice { .. })
        ));
    }
    assert!(open_page_stream(Device::Auto, 1000, 8, GpuOptions::default()).is_err());
}

#[test]
fn gpu_decodes_ptxflow_frames_and_leaves_others_to_the_cpu() {
    let Some(gpu) = common::gpu_or_skip("gpu_decodes_ptxflow_frames_and_leaves_others_to_the_cpu")
    else {
        return;
    };
    let k = ptxflow::lz4::gpu::Lz4Kernels::new(gpu).unwrap();
    for (name, data) in inputs() {
        for pb in [1024, 4096, 65536] {
            let frame = ptxflow::lz4::compress_frame(&data, pb).unwrap();
            let mut out = Vec::new();
            match ptxflow::lz4::gpu::decode_frames_gpu(&k, &frame, &mut out).unwrap() {
                Some((frames, blocks)) => {
                    assert_eq!(
                        (frames, blocks),
                        (1, data.len().div_ceil(pb)),
                        "{name} {pb}"
                    );
                    assert!(
                        out == data,
                        "{name} at {pb} B pages: GPU frame decode differs"
                    );
                }
                // Few blocks: the guessed bound can be below the page size; the CPU decides.
                None => assert!(
                    data.len().div_ceil(pb) <= 64,
                    "{name} at {pb} B pages left to the CPU"
                ),
            }
        }
    }
    // Linked blocks (lz4_flex's default) are for the CPU decoder.
    let mut enc = lz4_flex::frame::FrameEncoder::new(Vec::new());
    std::io::Write::write_all(&mut enc, &[5u8; 300_000]).unwrap();
    let linked = enc.finish().unwrap();
    let mut out = Vec::new();
    assert!(
        ptxflow::lz4::gpu::decode_frames_gpu(&k, &linked, &mut out)
            .unwrap()
            .is_none()
            || out == vec![5u8; 300_000]
    );
    // A corrupt block in a ptxflow frame: an error or the CPU, never wrong bytes.
    let data = inputs().pop().unwrap().1;
    let mut frame = ptxflow::lz4::compress_frame(&data, 4096).unwrap();
    let at = frame.len() / 2;
    frame[at] ^= 0x55;
    let mut out = Vec::new();
    match ptxflow::lz4::gpu::decode_frames_gpu(&k, &frame, &mut out) {
        Ok(Some(_)) => panic!("a corrupt frame decoded"),
        Ok(None) | Err(Error::Corrupt { .. }) => {}
        Err(e) => panic!("unexpected error {e}"),
    }
}

#[test]
fn gpu_codec_from_memory_reuses_buffers_and_decodes_any_page_order() {
    let Some(gpu) =
        common::gpu_or_skip("gpu_codec_from_memory_reuses_buffers_and_decodes_any_page_order")
    else {
        return;
    };
    let mut codec = small_codec(gpu, 256 << 10, 3);
    let mut pages = CompressedPages {
        page_bytes: 4096,
        data: Vec::new(),
        pages: Vec::new(),
        path: CodecPath::Cpu,
    };
    for (name, data) in inputs() {
        for pb in [1024, 4096] {
            codec.compress_into(&data, pb, &mut pages).unwrap();
            assert_eq!(pages.path, CodecPath::Gpu, "{:?}", codec.fallback_reason());
            check_pages(
                &pages,
                &data,
                &format!("{name} at {pb} B pages, reused buffers"),
            );
            // CPU pages (tight), then the same pages stored in reverse order (gathered).
            let cpu = ptxflow::lz4::CpuPageCodec
                .compress_pages(&data, pb)
                .unwrap();
            let mut back = Vec::new();
            codec.decompress_pages(&cpu, &mut back).unwrap();
            assert!(
                back == data,
                "{name} at {pb} B: CPU pages on the GPU differ"
            );
            let mut rev = cpu.clone();
            rev.data.clear();
            for k in (0..cpu.pages.len()).rev() {
                let (bytes, _) = cpu.page(k);
                rev.pages[k].offset = rev.data.len();
                rev.data.extend_from_slice(bytes);
            }
            back.clear();
            codec.decompress_pages(&rev, &mut back).unwrap();
            assert!(back == data, "{name} at {pb} B: reversed pages differ");
        }
    }
}

#[test]
fn gpu_frame_stream_decodes_our_frames_and_refuses_what_it_cannot() {
    let Some(gpu) =
        common::gpu_or_skip("gpu_frame_stream_decodes_our_frames_and_refuses_what_it_cannot")
    else {
        return;
    };
    use ptxflow::lz4::gpu::FrameStreamError;
    use ptxflow::lz4::{compress_frame, decompress_frame};
    let mut codec = small_codec(gpu, 256 << 10, 3);
    let mut decode = |frame: &[u8]| {
        let mut out = Vec::new();
        let mut emit = |b: &[u8]| {
            out.extend_from_slice(b);
            Ok(())
        };
        let mut input = frame;
        codec
            .decode_frames_stream(&mut input, std::path::Path::new("<mem>"), &mut emit)
            .map(|_| out)
    };
    for (name, data) in inputs() {
        for pb in [1024, 4096, 65536] {
            let mut frame = compress_frame(&data, pb).unwrap();
            // A second frame, a skippable one between, and an empty frame at the end.
            frame.extend_from_slice(&0x184D_2A5Fu32.to_le_bytes());
            frame.extend_from_slice(&1u32.to_le_bytes());
            frame.push(0);
            frame.extend_from_slice(&compress_frame(&data[..data.len() / 3], pb).unwrap());
            frame.extend_from_slice(&compress_frame(&[], pb).unwrap());
            let want = decompress_frame(&frame).unwrap();
            let got = decode(&frame).unwrap_or_else(|e| panic!("{name} at {pb}: {e:?}"));
            assert!(got == want, "{name} at {pb} B pages: GPU stream differs");
            let mut bad = frame.clone();
            let n = bad.len();
            bad[n / 2] ^= 0x10;
            if decompress_frame(&bad).is_err() {
                assert!(
                    matches!(
                        decode(&bad),
                        Err(FrameStreamError::Failed(Error::Corrupt { .. }))
                    ),
                    "{name} at {pb}: corruption not reported"
                );
            }
        }
    }
    let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(
        lz4_flex::frame::FrameInfo::new().block_mode(lz4_flex::frame::BlockMode::Linked),
        Vec::new(),
    );
    std::io::Write::write_all(&mut enc, &[5u8; 100_000]).unwrap();
    let linked = enc.finish().unwrap();
    assert!(matches!(
        decode(&linked),
        Err(FrameStreamError::Unsuitable(_))
    ));
    assert_eq!(
        codec.path(),
        CodecPath::Gpu,
        "{:?}",
        codec.fallback_reason()
    );
}

#[test]
fn gpu_codec_registering_caller_memory_gives_the_same_bytes() {
    let Some(gpu) = common::gpu_or_skip("gpu_codec_registering_caller_memory_gives_the_same_bytes")
    else {
        return;
    };
    let mut codec = small_codec(gpu, 2 << 20, 3);
    let mib = if sanitize() { 3 } else { 11 };
    let all = cycled_inputs(mib);
    // Registered in place: the 64 KiB-aligned interior of each 2 MiB batch (every batch, or
    // those a registrar thread registered ahead in time); staged: the rest.
    let every = HostTuning {
        register_pieces: 4,
        ..HostTuning::default()
    };
    let ahead = HostTuning {
        register_ahead: 2,
        ..HostTuning::default()
    };
    // Unaligned starts, ragged ends.
    for (tuning, from, pb) in [
        (every, 0, 4096),
        (every, 3, 4096),
        (every, 4096 + 5, 1024),
        (ahead, 0, 4096),
        (ahead, 3, 4096),
        (ahead, 4096 + 5, 1024),
    ] {
        codec.set_host_tuning(tuning);
        let data = &all[from..];
        let mut pages = CompressedPages {
            page_bytes: pb,
            data: Vec::new(),
            pages: Vec::new(),
            path: CodecPath::Cpu,
        };
        codec.compress_into(data, pb, &mut pages).unwrap();
        assert_eq!(pages.path, CodecPath::Gpu, "{:?}", codec.fallback_reason());
        check_pages(&pages, data, &format!("registered input from {from}"));
        let phases = codec.compress_phases().unwrap();
        // Output after a prefix (an unaligned start of the registered output), then alone.
        let mut back = b"prefix".to_vec();
        codec.decompress_pages(&pages, &mut back).unwrap();
        assert!(back[6..] == *data && back[..6] == *b"prefix", "from {from}");
        back.clear();
        codec.decompress_pages(&pages, &mut back).unwrap();
        assert!(back == data, "from {from}: registered output differs");
        eprintln!(
            "registered ({tuning:?}) from {from} at {pb} B pages: compress [{phases}], decompress [{}]",
            codec.decompress_phases().unwrap()
        );
        // A corrupt page: an error, the output as before, and the codec still works.
        let mut bad = pages.clone();
        if let Some(k) = (bad.pages.len() / 2..bad.pages.len())
            .find(|&k| bad.pages[k].kind == PageKind::Compressed)
        {
            let e = bad.pages[k];
            bad.data[e.offset..e.offset + e.stored_bytes].fill(0xff);
            let mut out = b"keep".to_vec();
            // A block of 0xFF bytes claims more literals than it holds: the device refuses it.
            assert!(matches!(
                codec.decompress_pages(&bad, &mut out),
                Err(Error::Corrupt { .. })
            ));
            assert_eq!(out, b"keep");
            back.clear();
            codec.decompress_pages(&pages, &mut back).unwrap();
            assert!(back == data, "from {from}: after a corrupt batch");
        }
    }
    assert_eq!(codec.path(), CodecPath::Gpu);
}

#[test]
fn gpu_codec_batches_in_parts_give_the_same_bytes() {
    let Some(gpu) = common::gpu_or_skip("gpu_codec_batches_in_parts_give_the_same_bytes") else {
        return;
    };
    let mut codec = small_codec(gpu, 1 << 20, 3);
    let mib = if sanitize() { 2 } else { 6 };
    let all = cycled_inputs(mib);
    // Whole batches, quarter batches at the end, a ragged last page, batches of fewer pages
    // than parts (64 KiB pages: 16 a batch), and the same codec switching between part counts.
    for (parts, from, pb) in [
        (2, 0, 4096),
        (4, 3, 4096),
        (3, 0, 1024),
        (3, 4096 + 5, 65536),
        (8, 17, 65536),
        (1, 0, 4096),
    ] {
        codec.set_host_tuning(HostTuning {
            compress_parts: parts,
            ..HostTuning::default()
        });
        for data in [&all[from..], &all[from..from + 1000]] {
            let mut pages = CompressedPages {
                page_bytes: pb,
                data: Vec::new(),
                pages: Vec::new(),
                path: CodecPath::Cpu,
            };
            codec.compress_into(data, pb, &mut pages).unwrap();
            assert_eq!(pages.path, CodecPath::Gpu, "{:?}", codec.fallback_reason());
            let what = format!("{parts} parts, {} B from {from}, {pb} B pages", data.len());
            check_pages(&pages, data, &what);
            let mut back = Vec::new();
            codec.decompress_pages(&pages, &mut back).unwrap();
            assert!(back == data, "{what}: round trip differs");
            eprintln!("{what}: compress [{}]", codec.compress_phases().unwrap());
        }
    }
    assert_eq!(codec.path(), CodecPath::Gpu);
}

#[test]
fn gpu_codec_host_tunings_give_the_same_bytes() {
    let Some(gpu) = common::gpu_or_skip("gpu_codec_host_tunings_give_the_same_bytes") else {
        return;
    };
    let mut codec = small_codec(gpu, 1 << 20, 3);
    let mib = if sanitize() { 1 } else { 3 };
    // Compressible, then incompressible, then compressible again: the guess taken from the
    // zeros falls short on the random bytes (the drain fetches the rest), and the guess taken
    // from the random bytes is the whole bound.
    let mut rng = Rng::new(13);
    let mut data = vec![0u8; mib << 20];
    data.extend((0..(mib << 20) + 777).map(|_| rng.next_u64() as u8));
    data.extend(cycled_inputs(mib));
    // (guess, serial steps, parts, page bytes, early submits, parallel staging)
    for (guess, serial, parts, pb, early, wide) in [
        (true, false, 2, 4096, true, true),
        (true, false, 4, 1024, false, false),
        (true, true, 2, 4096, true, true),
        (false, true, 1, 4096, false, true),
        (true, false, 1, 65536, true, false),
        (false, false, 2, 4096, false, false),
    ] {
        codec.set_host_tuning(HostTuning {
            compress_parts: parts,
            guess_download: guess,
            serial_steps: serial,
            submit_early: early,
            parallel_stage: wide,
            ..HostTuning::default()
        });
        let mut pages = CompressedPages {
            page_bytes: pb,
            data: Vec::new(),
            pages: Vec::new(),
            path: CodecPath::Cpu,
        };
        codec.compress_into(&data, pb, &mut pages).unwrap();
        assert_eq!(pages.path, CodecPath::Gpu, "{:?}", codec.fallback_reason());
        let what = format!(
            "guess {guess}, serial {serial}, {parts} parts, {pb} B pages, early {early}, \
             parallel staging {wide}"
        );
        check_pages(&pages, &data, &what);
        let ph = codec.compress_phases().unwrap();
        eprintln!("{what}: compress [{ph}]");
        if guess && parts > 1 {
            assert!(ph.refetched > 0, "{what}: no guess fell short");
        }
        let mut back = Vec::new();
        codec.decompress_pages(&pages, &mut back).unwrap();
        assert!(back == data, "{what}: round trip differs");
    }
    assert_eq!(codec.path(), CodecPath::Gpu);
    // Rings staging through huge-page registered memory, outputs advised huge pages: the same
    // bytes (the process-wide knobs only change how memory is backed).
    // (Rings are allocated on first use: the knob stays on until both exist.)
    ptxflow::lz4::gpu::set_huge_slots(true);
    ptxflow::lz4::par::set_huge_outputs(true);
    let gpu = codec.kernels().unwrap().gpu().clone();
    let mut huge = small_codec(gpu, 3 << 20, 3);
    let pages = huge.compress_pages(&data, 4096);
    let mut back = Vec::new();
    let r = match &pages {
        Ok(p) => huge.decompress_pages(p, &mut back),
        Err(_) => Ok(()),
    };
    ptxflow::lz4::gpu::set_huge_slots(false);
    ptxflow::lz4::par::set_huge_outputs(false);
    let pages = pages.unwrap();
    r.unwrap();
    assert_eq!(pages.path, CodecPath::Gpu, "{:?}", huge.fallback_reason());
    check_pages(&pages, &data, "huge slots");
    assert!(back == data, "huge slots: round trip differs");
}
