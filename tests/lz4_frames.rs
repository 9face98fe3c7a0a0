//! LZ4 frames and the page codec seam: round trips (corpus, random, zeros, short tails, empty),
//! decoding of our frames by lz4_flex, decoding of lz4_flex's frames (linked blocks, checksums,
//! legacy) by ours, concatenated/skippable frames, corruption, and stream backpressure.

mod lz4_support;

use lz4_flex::frame::{BlockMode, BlockSize, FrameInfo};
use lz4_support::corpus;
use ptxflow::lz4::frame_header::{FrameHeader, UNCOMPRESSED_BIT};
use ptxflow::lz4::*;
use ptxflow::rng::Rng;
use ptxflow::Error;
use std::io::{Read, Write};
use std::path::Path;

fn inputs() -> Vec<(String, Vec<u8>)> {
    let mut rng = Rng::new(3);
    let mut v: Vec<(String, Vec<u8>)> = Vec::new();
    for len in [0, 1, 12, 13, 1023, 1024, 1025, 4095, 4096, 4097, 65537] {
        v.push((
            format!("text{len}"),
            (0..len).map(|i| b"the cat sat. "[i % 13]).collect(),
        ));
    }
    v.push((
        "random".into(),
        (0..100_000).map(|_| rng.next_u64() as u8).collect(),
    ));
    v.push(("zeros".into(), vec![0; 100_003]));
    if let Some(d) = corpus("dickens", Some((1 << 20) + 123)) {
        v.push(("dickens".into(), d));
    }
    if let Some(d) = corpus("x-ray", Some(300_000)) {
        v.push(("x-ray".into(), d));
    }
    v
}

fn flex_decode(frame: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    lz4_flex::frame::FrameDecoder::new(frame)
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// Walks the blocks of one of our frames: (stored size, raw) per block.
fn blocks(frame: &[u8]) -> (FrameHeader, Vec<(usize, bool)>) {
    let len = FrameHeader::descriptor_len(frame[4]);
    let header = FrameHeader::parse(&frame[4..4 + len]).unwrap();
    let mut at = 4 + len;
    let mut out = Vec::new();
    loop {
        let word = u32::from_le_bytes(frame[at..at + 4].try_into().unwrap());
        at += 4;
        if word == 0 {
            break;
        }
        let size = (word & !UNCOMPRESSED_BIT) as usize;
        out.push((size, word & UNCOMPRESSED_BIT != 0));
        at += size + if header.block_checksum { 4 } else { 0 };
    }
    assert_eq!(at + 4, frame.len(), "content checksum closes the frame");
    (header, out)
}

#[test]
fn frames_round_trip_and_decode_with_lz4_flex() {
    for (name, data) in inputs() {
        for page_bytes in [1024, 4096, 65536] {
            let frame = compress_frame(&data, page_bytes).unwrap();
            assert!(
                decompress_frame(&frame).unwrap() == data,
                "{name} @ {page_bytes}"
            );
            assert!(
                flex_decode(&frame) == data,
                "{name} @ {page_bytes}: lz4_flex differs"
            );
            let (header, blocks) = blocks(&frame);
            assert!(header.block_independent && header.content_checksum);
            assert_eq!(header.content_size, Some(data.len() as u64));
            assert_eq!(
                blocks.len(),
                data.len().div_ceil(page_bytes),
                "{name}: one block per page"
            );
            for (k, &(size, raw)) in blocks.iter().enumerate() {
                let page_len = page_bytes.min(data.len() - k * page_bytes);
                assert!(
                    size <= page_len && (raw || size < page_len),
                    "{name} block {k}"
                );
            }
            if name == "random" {
                assert!(blocks.iter().all(|b| b.1), "random pages are stored raw");
            }
        }
    }
}

#[test]
fn encoder_accepts_any_write_sizes_and_block_checksums() {
    let data = corpus("xml", Some(200_000)).unwrap_or_else(|| vec![7; 200_000]);
    let whole = compress_frame(&data, 4096).unwrap();
    let name = Path::new("<memory>");
    for (step, slots) in [(1usize, 1usize), (4095, 3), (4097, 1024), (50_000, 7)] {
        let mut stream = CpuPageStream::new(4096, slots).unwrap();
        let options = FrameOptions {
            page_bytes: 4096,
            content_size: Some(data.len() as u64),
            block_checksum: false,
        };
        let mut enc = FrameEncoder::new(Vec::new(), name, &mut stream, options).unwrap();
        assert_eq!(enc.path(), CodecPath::Cpu);
        for c in data.chunks(step) {
            enc.write(c).unwrap();
        }
        let (frame, stats) = enc.finish().unwrap();
        assert!(frame == whole, "step {step}, slots {slots}");
        assert_eq!(stats.output_bytes, frame.len() as u64);
        assert_eq!(stats.pages, data.len().div_ceil(4096) as u64);
    }
    let mut stream = CpuPageStream::new(4096, 16).unwrap();
    let options = FrameOptions {
        page_bytes: 4096,
        content_size: None,
        block_checksum: true,
    };
    let mut enc = FrameEncoder::new(Vec::new(), name, &mut stream, options).unwrap();
    enc.write(&data).unwrap();
    let frame = enc.finish().unwrap().0;
    assert!(blocks(&frame).0.block_checksum);
    assert!(decompress_frame(&frame).unwrap() == data && flex_decode(&frame) == data);
    // A wrong declared content size is refused.
    let mut stream = CpuPageStream::new(4096, 16).unwrap();
    let options = FrameOptions {
        page_bytes: 4096,
        content_size: Some(5),
        block_checksum: false,
    };
    let mut enc = FrameEncoder::new(Vec::new(), name, &mut stream, options).unwrap();
    enc.write(b"four").unwrap();
    assert!(matches!(enc.finish(), Err(Error::Input { .. })));
}

#[test]
fn decodes_lz4_flex_frames_linked_checksummed_and_legacy() {
    let data =
        corpus("dickens", Some(700_000)).unwrap_or_else(|| b"lorem ipsum dolor ".repeat(40_000));
    for (mode, size, checks, legacy) in [
        (BlockMode::Independent, BlockSize::Max64KB, false, false),
        (BlockMode::Linked, BlockSize::Max64KB, true, false),
        (BlockMode::Linked, BlockSize::Max256KB, false, false),
        (BlockMode::Independent, BlockSize::Max4MB, true, false),
        (BlockMode::Independent, BlockSize::Max4MB, false, true),
    ] {
        let info = FrameInfo::new()
            .block_mode(mode)
            .block_size(size)
            .block_checksums(checks)
            .content_checksum(!legacy)
            .content_size(Some(data.len() as u64))
            .legacy_frame(legacy);
        let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
        enc.write_all(&data).unwrap();
        let frame = enc.finish().unwrap();
        let got = decompress_frame(&frame).unwrap_or_else(|e| panic!("{mode:?} {size:?}: {e}"));
        assert!(got == data, "{mode:?} {size:?} legacy {legacy}");
    }
}

#[test]
fn concatenated_and_skippable_frames() {
    let a = compress_frame(b"first frame, first frame, first frame", 1024).unwrap();
    let b = compress_frame(&[9u8; 5000], 4096).unwrap();
    let mut all = a.clone();
    all.extend_from_slice(&0x184D_2A53u32.to_le_bytes());
    all.extend_from_slice(&3u32.to_le_bytes());
    all.extend_from_slice(b"xyz");
    all.extend_from_slice(&b);
    let mut want = b"first frame, first frame, first frame".to_vec();
    want.extend_from_slice(&[9u8; 5000]);
    assert_eq!(decompress_frame(&all).unwrap(), want);
    assert!(decompress_frame(&compress_frame(&[], 4096).unwrap())
        .unwrap()
        .is_empty());
}

#[test]
fn corrupt_frames_give_errors() {
    let data: Vec<u8> = (0..20_000u32)
        .map(|i| (i % 251) as u8 ^ (i / 3000) as u8)
        .collect();
    let frame = compress_frame(&data, 4096).unwrap();
    let corrupt = |f: &[u8]| matches!(decompress_frame(f), Err(Error::Corrupt { .. }));
    assert!(corrupt(&[]), "empty input");
    assert!(corrupt(&frame[..frame.len() - 1]), "truncated checksum");
    for cut in [3, 5, 7, 12, 20, frame.len() - 4, frame.len() - 8] {
        assert!(corrupt(&frame[..cut]), "cut at {cut}");
    }
    let mut f = frame.clone();
    f[0] ^= 1;
    assert!(corrupt(&f), "magic");
    let mut f = frame.clone();
    f[6] ^= 1;
    assert!(corrupt(&f), "content size vs header checksum");
    let mut f = frame.clone();
    let n = f.len();
    f[n - 1] ^= 0x80;
    assert!(corrupt(&f), "content checksum");
    // Every single-byte change is detected (header checksum, block structure or content
    // checksum), unless it leaves the content unchanged: an offset into periodic data may point
    // one period further back and copy the same bytes.
    let mut same = 0;
    for at in 0..frame.len() {
        let mut f = frame.clone();
        f[at] = f[at].wrapping_add(1);
        match decompress_frame(&f) {
            Err(_) => {}
            Ok(d) => {
                assert!(d == data, "change at byte {at} went unnoticed");
                same += 1;
            }
        }
    }
    assert!(same < 10, "{same} changes without effect");
}

#[test]
fn page_codec_batches_and_stream_backpressure() {
    let data = corpus("nci", Some(100_000)).unwrap_or_else(|| vec![1; 100_000]);
    let mut codec = CpuPageCodec;
    assert_eq!(codec.path(), CodecPath::Cpu);
    let pages = codec.compress_pages(&data, 4096).unwrap();
    assert_eq!(pages.pages.len(), data.len().div_ceil(4096));
    assert_eq!(pages.original_bytes(), data.len());
    let mut enc = PageEncoder::new();
    for (k, chunk) in data.chunks(4096).enumerate() {
        let mut want = Vec::new();
        let kind = enc.compress_page(chunk, &mut want).unwrap();
        assert_eq!(pages.page(k), (&want[..], kind), "page {k}");
    }
    let mut back = Vec::new();
    codec.decompress_pages(&pages, &mut back).unwrap();
    assert!(back == data);
    assert!(matches!(
        codec.compress_pages(&data, 4000),
        Err(Error::Input { .. })
    ));
    let mut bad = pages.clone();
    bad.data[pages.pages[1].offset + 3] ^= 0x40;
    let mut out = Vec::new();
    let r = codec.decompress_pages(&bad, &mut out);
    assert!(
        r.is_err() || out != data,
        "a flipped bit must not decode silently to the same data"
    );

    let mut s = CpuPageStream::new(1024, 2).unwrap();
    assert!(CpuPageStream::new(1000, 2).is_err() && CpuPageStream::new(1024, 0).is_err());
    s.push_page(&data[..1024]).unwrap();
    s.push_page(&data[1024..2048]).unwrap();
    assert_eq!((s.free_slots(), s.pending()), (0, 2));
    assert!(matches!(
        s.push_page(&data[..1024]),
        Err(Error::Capacity { .. })
    ));
    let mut page = CompressedPage::default();
    assert!(s.pop_page(&mut page).unwrap());
    assert_eq!(decode_block(&page.bytes, 1024).unwrap(), &data[..1024]);
    assert!(matches!(s.push_page(&[]), Err(Error::Input { .. })));
    assert!(matches!(s.push_page(&[0; 1025]), Err(Error::Input { .. })));
    s.push_page(&data[2048..2148]).unwrap();
    assert!(
        matches!(s.push_page(&data[..1024]), Err(Error::Input { .. })),
        "after a short page"
    );
    assert!(s.pop_page(&mut page).unwrap());
    assert_eq!(page.original_bytes, 1024);
    assert!(s.pop_page(&mut page).unwrap());
    assert_eq!(page.original_bytes, 100);
    assert!(!s.pop_page(&mut page).unwrap());
    // Drained after its short page, the stream takes the next input (the next frame).
    s.push_page(&data[..1024]).unwrap();
    assert!(s.pop_page(&mut page).unwrap());
    assert_eq!(decode_block(&page.bytes, 1024).unwrap(), &data[..1024]);
}
