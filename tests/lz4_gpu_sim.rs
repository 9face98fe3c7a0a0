//! The LZ4 kernels' PTX run by a lock-step interpreter (tests/sim_support), without a GPU: stored
//! pages byte-identical to the CPU reference on corpus, random, zero, patterned pages and short
//! tails at several page sizes; decoding agrees with the CPU decoder on valid and corrupt blocks;
//! every access inside its buffers, every branch warp-uniform, no conflicting lane stores.

mod lz4_support;
mod sim_support;

use ptxflow::kernels::lz4::{compress, decompress};
use ptxflow::kernels::KernelId;
use ptxflow::lz4::gpu::kernels::{build_geometry, KernelVariants};
use ptxflow::lz4::gpu::layout::{
    compress_geometry_for, decompress_entries, decompress_geometry, info_words, page_lengths,
    read_compress_info, SmLimits,
};
use ptxflow::lz4::{
    compress_page, decode_block, CompressedPages, CpuPageCodec, PageCodec, PageEntry, PageKind,
};
use ptxflow::ptx::Target;
use ptxflow::rng::Rng;
use sim_support::{launch, launch_with, Counts, Memory, Program};

/// The kernel's PTX.
fn program(id: KernelId) -> Program {
    Program::parse(&id.build(Target::Sm75).emit().unwrap())
}

/// The compress build `PTXFLOW_LZ4_COMPRESS` asks for (by default the table's).
fn compressor() -> Program {
    let v = KernelVariants::from_env().unwrap().compress;
    let ptx = compress::build_variant(Target::Sm75, v).emit().unwrap();
    if let Ok(path) = std::env::var("PTXFLOW_SIM_DUMP_PTX") {
        std::fs::write(path, &ptx).unwrap();
    }
    Program::parse(&ptx)
}

/// A decompress build and its PTX.
struct Decoder {
    prog: Program,
    build: decompress::Variant,
}

/// The decompress builds under test: the build `PTXFLOW_LZ4_DECOMPRESS` asks for, or by default
/// both of the table's (`lz4_decompress`, `lz4_decompress_wide`), each on every page size.
fn decoders() -> Vec<Decoder> {
    let variants = KernelVariants::from_env().unwrap();
    let defaults = KernelVariants::default();
    if (variants.decompress, variants.decompress_full_grid)
        != (defaults.decompress, defaults.decompress_full_grid)
    {
        let module = decompress::build_variant(Target::Sm75, variants.decompress);
        return vec![Decoder {
            prog: Program::parse(&module.emit().unwrap()),
            build: variants.decompress,
        }];
    }
    vec![
        Decoder {
            prog: program(KernelId::Lz4Decompress),
            build: decompress::Variant::TABLE,
        },
        Decoder {
            prog: program(KernelId::Lz4DecompressWide),
            build: decompress::Variant::WIDE,
        },
    ]
}

/// Launch shape of `d` over `n` pages of `pb` bytes (at most 2 blocks).
fn decoder_geometry(d: &Decoder, pb: usize, n: usize) -> ptxflow::lz4::gpu::layout::Geometry {
    let sm = SmLimits {
        shared_bytes: 228 << 10,
        regs_per_thread: 56,
    };
    let g = if d.build == decompress::Variant::TABLE {
        // The table build's shape is the layout's rule.
        decompress_geometry(pb, n, 1, sm)
    } else {
        build_geometry(d.build, false, pb, n, 1, sm)
    };
    ptxflow::lz4::gpu::layout::Geometry {
        blocks: g.blocks.min(2),
        ..g
    }
}

/// Compresses `input` with the kernel (2 blocks); returns the entries, packed bytes and counts.
fn sim_compress(
    prog: &Program,
    input: &[u8],
    page_bytes: usize,
) -> (Vec<PageEntry>, Vec<u8>, Counts) {
    let lens: Vec<usize> = page_lengths(input.len(), page_bytes).collect();
    let n = lens.len();
    // The geometry of the build under test (`PTXFLOW_LZ4_COMPRESS`): wide builds get wide blocks.
    let mut g = compress_geometry_for(
        KernelVariants::from_env().unwrap().compress,
        page_bytes,
        n,
        1,
        SmLimits {
            shared_bytes: 228 << 10,
            regs_per_thread: 80,
        },
    );
    g.blocks = g.blocks.min(2);
    let mut mem = Memory::new();
    let inp = mem.add("input", input.to_vec());
    let scratch = mem.add("scratch", vec![0xCD; g.warps() as usize * page_bytes]);
    let packed = mem.add("packed", vec![0xAB; (n * page_bytes).max(16)]);
    let info = mem.add("info", vec![0; info_words(n) * 4]);
    let params = [
        inp,
        input.len() as u64,
        page_bytes as u64,
        n as u64,
        scratch,
        packed,
        info,
    ];
    let counts = launch(
        prog,
        g.blocks,
        g.threads(),
        g.shared_bytes,
        &params,
        &mut mem,
    );
    if std::env::var("PTXFLOW_SIM_PROFILE").is_ok()
        && page_bytes == 4096
        && input.len() >= 64 << 10
        && std::fs::metadata("/tmp/sim_cprofile.txt").is_err()
    {
        let dump: String = counts
            .per_instr
            .iter()
            .zip(0..)
            .map(|(n, i)| format!("{n:>8} {}\n", prog.instr_text(i)))
            .collect();
        std::fs::write("/tmp/sim_cprofile.txt", dump).unwrap();
    }
    let words: Vec<u32> = mem
        .get("info")
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let entries = read_compress_info(&words, &lens).unwrap();
    (entries, mem.get("packed").to_vec(), counts)
}

/// Asserts every page equals `compress_page`; returns the warp instructions per input byte.
fn check_compress(prog: &Program, input: &[u8], page_bytes: usize, what: &str) -> f64 {
    let (entries, packed, counts) = sim_compress(prog, input, page_bytes);
    for (k, (e, page)) in entries.iter().zip(input.chunks(page_bytes)).enumerate() {
        let (want, kind) = compress_page(page).unwrap();
        let got = &packed[e.offset..e.offset + e.stored_bytes];
        assert_eq!(e.kind, kind, "{what}: page {k} kind");
        if got != &want[..] {
            let first = got.iter().zip(&want).position(|(a, b)| a != b);
            panic!("{what}: page {k} ({} B) differs: GPU {} B, CPU {} B, first difference at {first:?}", page.len(), got.len(), want.len());
        }
    }
    if std::env::var("PTXFLOW_SIM_PROFILE").is_ok() {
        let mut blocks: Vec<(u64, usize)> = counts.per_instr.iter().copied().zip(0..).collect();
        blocks.sort();
        for (n, i) in blocks.iter().rev().take(12) {
            eprintln!("{what}: {n:>9} x {}", prog.instr_text(*i));
        }
        if what == "dickens" && page_bytes == 4096 {
            let dump: String = counts
                .per_instr
                .iter()
                .zip(0..)
                .map(|(n, i)| format!("{n:>8} {}\n", prog.instr_text(i)))
                .collect();
            std::fs::write("/tmp/sim_profile.txt", dump).unwrap();
        }
    }
    counts.total as f64 / input.len().max(1) as f64
}

#[test]
fn compress_matches_cpu_on_corpus_pages() {
    let prog = compressor();
    for name in ["dickens", "nci", "xml", "x-ray"] {
        let Some(data) = lz4_support::corpus(name, Some(96 << 10)) else {
            return;
        };
        let per_byte = check_compress(&prog, &data[..64 << 10], 4096, name);
        eprintln!("{name}: {per_byte:.2} warp instructions per input byte at 4 KiB pages");
        check_compress(&prog, &data[..(16 << 10) + 333], 1024, name);
        check_compress(&prog, &data[..(96 << 10) - 77], 65536, name);
    }
}

#[test]
fn compress_matches_cpu_on_zero_random_patterned_and_tails() {
    let prog = compressor();
    let mut rng = Rng::new(7);
    let random: Vec<u8> = (0..16384).map(|_| rng.next_u64() as u8).collect();
    check_compress(&prog, &random, 4096, "random");
    check_compress(&prog, &vec![0u8; 8192 + 4096 + 13], 4096, "zeros");
    let mut mixed = Vec::new();
    for k in 0..8usize {
        let page: Vec<u8> = match k % 4 {
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
            2 => (0..4096).map(|i| b"abcabcabd"[i % 9]).collect(),
            _ => (0..4096)
                .map(|_| b"ab"[(rng.next_u64() % 2) as usize])
                .collect(),
        };
        mixed.extend_from_slice(&page);
    }
    check_compress(&prog, &mixed, 4096, "patterned");
    for tail in (1..=40).chain([255, 1000, 1023]) {
        let mut d = mixed[..2048].to_vec();
        d.extend_from_slice(&mixed[4096..4096 + tail]);
        check_compress(&prog, &d, 1024, &format!("tail of {tail} B"));
        check_compress(
            &prog,
            &vec![0u8; 1024 + tail],
            1024,
            &format!("zero tail of {tail} B"),
        );
    }
}

/// Decodes `pages` with the kernel; returns per-page status and the output buffer.
fn sim_decompress(d: &Decoder, pages: &CompressedPages) -> (Vec<u32>, Vec<u8>) {
    let n = pages.pages.len();
    let pb = pages.page_bytes;
    let g = decoder_geometry(d, pb, n);
    let mut mem = Memory::new();
    let mut data = pages.data.clone();
    data.resize(data.len().div_ceil(16) * 16 + 16, 0);
    let words = decompress_entries(&pages.pages, pb).unwrap();
    let packed_len = data.len();
    let packed = mem.add("packed", data);
    let entries = mem.add(
        "entries",
        words.iter().flat_map(|w| w.to_le_bytes()).collect(),
    );
    let output = mem.add("output", vec![0xEE; (n * pb).max(1)]);
    let status = mem.add("status", vec![0xFF; (4 * n).max(4)]);
    let params = [
        packed,
        packed_len as u64,
        entries,
        n as u64,
        pb as u64,
        output,
        status,
    ];
    // Half-warp decoders branch per half (only those).
    let counts = launch_with(
        &d.prog,
        g.blocks,
        g.threads(),
        g.shared_bytes,
        &params,
        &mut mem,
        d.build.lanes_per_page() == 32,
    );
    if std::env::var("PTXFLOW_SIM_PROFILE").is_ok() {
        eprintln!(
            "decompress: {:.2} warp instructions per output byte",
            counts.total as f64 / pages.original_bytes().max(1) as f64
        );
        let dump: String = counts
            .per_instr
            .iter()
            .zip(0..)
            .map(|(n, i)| format!("{n:>8} {}\n", d.prog.instr_text(i)))
            .collect();
        if pb == 4096
            && pages.original_bytes() > 30000
            && std::fs::metadata("/tmp/sim_dprofile.txt").is_err()
        {
            std::fs::write("/tmp/sim_dprofile.txt", dump).unwrap();
        }
    }
    let st = mem
        .get("status")
        .chunks(4)
        .take(n)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    (st, mem.get("output").to_vec())
}

/// Asserts the kernel accepts exactly the pages the CPU decoder accepts, with the same bytes.
fn check_decompress(d: &Decoder, pages: &CompressedPages, what: &str) -> usize {
    let (st, out) = sim_decompress(d, pages);
    let mut errors = 0;
    for (k, e) in pages.pages.iter().enumerate() {
        let stored = &pages.data[e.offset..e.offset + e.stored_bytes];
        let cpu = match e.kind {
            PageKind::Raw => Ok(stored.to_vec()),
            PageKind::Compressed => decode_block(stored, e.original_bytes),
        };
        let slot = &out[k * pages.page_bytes..k * pages.page_bytes + e.original_bytes];
        match cpu {
            Ok(bytes) => {
                assert_eq!(
                    st[k] & 0xFF,
                    0,
                    "{what}: page {k}: CPU decodes, GPU status {}",
                    st[k]
                );
                assert_eq!(
                    st[k] >> 8,
                    e.original_bytes as u32,
                    "{what}: page {k}: produced bytes"
                );
                assert!(
                    slot == &bytes[..],
                    "{what}: page {k} decodes to different bytes"
                );
            }
            Err(_) => {
                assert_ne!(
                    st[k] & 0xFF,
                    0,
                    "{what}: page {k}: CPU rejects it, GPU accepts"
                );
                errors += 1;
            }
        }
    }
    errors
}

#[test]
fn decompress_round_trips_corpus_random_zero_pages_and_tails() {
    let mut rng = Rng::new(3);
    let mut inputs: Vec<(String, Vec<u8>, usize)> = vec![
        (
            "random".into(),
            (0..9000).map(|_| rng.next_u64() as u8).collect(),
            4096,
        ),
        ("zeros".into(), vec![0; 4096 * 2 + 17], 4096),
        (
            "runs".into(),
            (0..5000).map(|i| (i / 700) as u8).collect(),
            1024,
        ),
    ];
    for name in ["dickens", "nci", "x-ray"] {
        if let Some(d) = lz4_support::corpus(name, Some(64 << 10)) {
            inputs.push((name.into(), d[..(40 << 10) - 5].to_vec(), 4096));
            inputs.push((format!("{name} 64K"), d, 65536));
        }
    }
    for d in decoders() {
        for (what, data, pb) in &inputs {
            let pages = CpuPageCodec.compress_pages(data, *pb).unwrap();
            assert_eq!(
                check_decompress(&d, &pages, what),
                0,
                "{what}: valid pages rejected"
            );
        }
    }
}

#[test]
fn decompress_bounded_pages_report_their_length() {
    let Some(data) = lz4_support::corpus("xml", Some(30_000)) else {
        return;
    };
    let mut pages = CpuPageCodec.compress_pages(&data, 4096).unwrap();
    // Frame blocks: the original length is only a bound (kind bit 1); the kernel reports it.
    let want: Vec<usize> = pages.pages.iter().map(|e| e.original_bytes).collect();
    let mut words = ptxflow::lz4::gpu::layout::decompress_entries(&pages.pages, 4096).unwrap();
    for (k, e) in pages.pages.iter_mut().enumerate() {
        if e.kind == PageKind::Compressed {
            words[4 * k + 2] = 4096;
            words[4 * k + 3] = 2;
        }
    }
    let n = pages.pages.len();
    for dec in decoders() {
        let g = decoder_geometry(&dec, 4096, n);
        let mut mem = Memory::new();
        let mut d = pages.data.clone();
        d.resize(d.len().div_ceil(16) * 16 + 16, 0);
        let plen = d.len() as u64;
        let packed = mem.add("packed", d);
        let entries = mem.add(
            "entries",
            words.iter().flat_map(|w| w.to_le_bytes()).collect(),
        );
        let output = mem.add("output", vec![0; n * 4096]);
        let status = mem.add("status", vec![0xFF; 4 * n]);
        launch_with(
            &dec.prog,
            g.blocks,
            g.threads(),
            g.shared_bytes,
            &[packed, plen, entries, n as u64, 4096, output, status],
            &mut mem,
            dec.build.lanes_per_page() == 32,
        );
        let st: Vec<u32> = mem
            .get("status")
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        for k in 0..n {
            assert_eq!(st[k] & 0xFF, 0, "page {k}");
            assert_eq!((st[k] >> 8) as usize, want[k], "page {k} length");
            assert!(
                mem.get("output")[k * 4096..k * 4096 + want[k]]
                    == data[k * 4096..k * 4096 + want[k]]
            );
        }
    }
}

#[test]
fn decompress_reports_corrupt_pages_like_the_cpu_decoder() {
    let Some(data) = lz4_support::corpus("dickens", Some(48 << 10)) else {
        return;
    };
    let good = CpuPageCodec.compress_pages(&data, 4096).unwrap();
    for d in decoders() {
        let mut rng = Rng::new(11);
        let mut rejected = 0;
        for round in 0..6 {
            let mut bad = good.clone();
            for e in bad.pages.iter_mut() {
                let k = e.offset + (rng.next_u64() as usize % e.stored_bytes);
                match rng.next_u64() % 4 {
                    0 => bad.data[k] ^= 1 << (rng.next_u64() % 8),
                    1 => bad.data[k] = 0xFF,
                    2 => e.stored_bytes = (k - e.offset).max(1),
                    _ => bad.data[k] = 0,
                }
            }
            rejected += check_decompress(&d, &bad, &format!("round {round}"));
        }
        eprintln!("{rejected} corrupt pages rejected");
        assert!(rejected > 10);
        // Entries pointing outside the data or above the page size are rejected by the kernel
        // too.
        let mut bad = good.clone();
        bad.pages[0].offset = bad.data.len() + 64;
        bad.pages[1].kind = PageKind::Raw;
        let (st, _) = sim_decompress(&d, &bad);
        assert_ne!(st[0] & 0xFF, 0);
        assert_ne!(st[1] & 0xFF, 0);
        assert!(st[2..].iter().all(|&s| s & 0xFF == 0));
    }
}
