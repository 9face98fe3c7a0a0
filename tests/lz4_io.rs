//! LZ4 frames through `std::io`: `FrameEncoder` as `io::Write` (owning its stream, moved to
//! another thread) and `FrameDecoder` as `io::Read` (parallel batches) against `decode_frames`
//! on our frames, lz4_flex's (linked, checksummed, 4 MiB blocks, legacy), concatenated and
//! skippable frames, and corrupted or truncated copies of each: same bytes, same verdicts.

mod lz4_support;

use lz4_flex::frame::{BlockMode, BlockSize, FrameInfo};
use ptxflow::lz4::gpu::{open_page_stream, Device, GpuOptions};
use ptxflow::lz4::*;
use ptxflow::rng::Rng;
use std::io::{Read, Write};

fn data() -> Vec<u8> {
    lz4_support::corpus("dickens", Some(600_000))
        .unwrap_or_else(|| b"lorem ipsum dolor sit amet ".repeat(20_000))
}

fn frames(data: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut v = vec![("ours".to_string(), compress_frame(data, 4096).unwrap())];
    for (mode, size, checks, legacy) in [
        (BlockMode::Independent, BlockSize::Max64KB, true, false),
        (BlockMode::Linked, BlockSize::Max64KB, false, false),
        (BlockMode::Independent, BlockSize::Max4MB, false, false),
        (BlockMode::Independent, BlockSize::Max4MB, false, true),
    ] {
        let info = FrameInfo::new()
            .block_mode(mode)
            .block_size(size)
            .block_checksums(checks)
            .content_checksum(!legacy)
            .content_size((!legacy).then_some(data.len() as u64))
            .legacy_frame(legacy);
        let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
        enc.write_all(data).unwrap();
        v.push((format!("{mode:?} {size:?} {legacy}"), enc.finish().unwrap()));
    }
    let mut two = v[0].1.clone();
    two.extend_from_slice(&0x184D_2A51u32.to_le_bytes());
    two.extend_from_slice(&2u32.to_le_bytes());
    two.extend_from_slice(b"zz");
    two.extend_from_slice(&compress_frame(b"tail", 1024).unwrap());
    v.push(("concatenated".to_string(), two));
    v
}

/// Decodes through `io::Read` in reads of `step` bytes.
fn read_all(frame: &[u8], step: usize) -> std::io::Result<Vec<u8>> {
    let mut dec = FrameDecoder::new(frame);
    let mut out = Vec::new();
    let mut buf = vec![0u8; step];
    loop {
        let n = dec.read(&mut buf)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn frame_decoder_agrees_with_decode_frames() {
    let data = data();
    let mut rng = Rng::new(5);
    for (name, frame) in frames(&data) {
        let want = decompress_frame(&frame).unwrap();
        for step in [1, 4095, 1 << 20] {
            let got = read_all(&frame, step).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(got == want, "{name}, reads of {step}");
        }
        for round in 0..60 {
            let mut bad = frame.clone();
            if round % 3 == 0 {
                bad.truncate(rng.next_u64() as usize % frame.len());
            } else {
                let at = rng.next_u64() as usize % bad.len();
                bad[at] ^= 1 << (rng.next_u64() % 8);
            }
            let reference = decompress_frame(&bad);
            let ours = read_all(&bad, 1 << 16);
            match (&reference, &ours) {
                (Ok(a), Ok(b)) => assert!(a == b, "{name} round {round}: outputs differ"),
                (Err(_), Err(_)) => {}
                _ => panic!(
                    "{name} round {round}: decode_frames {:?} vs FrameDecoder {:?}",
                    reference
                        .as_ref()
                        .map(|v| v.len())
                        .map_err(|e| e.to_string()),
                    ours.as_ref().map(|v| v.len()).map_err(|e| e.to_string())
                ),
            }
        }
    }
    assert!(read_all(&[], 16).is_err(), "empty input is not a frame");
}

#[test]
fn frame_encoder_is_write_and_send() {
    let data = data();
    let (stream, _why) = open_page_stream(Device::Auto, 4096, 64, GpuOptions::default()).unwrap();
    let mut enc = FrameEncoder::owned(Vec::new(), stream, FrameOptions::default()).unwrap();
    let chunks: Vec<Vec<u8>> = data.chunks(7777).map(<[u8]>::to_vec).collect();
    // The encoder moves into a worker thread and comes back.
    let enc = std::thread::spawn(move || {
        for c in &chunks {
            enc.write_all(c).unwrap();
        }
        enc.flush().unwrap();
        enc
    })
    .join()
    .unwrap();
    let (frame, stats) = enc.finish().unwrap();
    assert_eq!(stats.input_bytes, data.len() as u64);
    assert!(frame == compress_frame_without_size(&data));
    let mut back = Vec::new();
    FrameDecoder::new(std::io::Cursor::new(frame))
        .read_to_end(&mut back)
        .unwrap();
    assert!(back == data);
}

/// Our frame of `data` without a declared content size (what `FrameOptions::default` writes).
fn compress_frame_without_size(data: &[u8]) -> Vec<u8> {
    let mut s = CpuPageStream::new(4096, 16).unwrap();
    let mut enc = FrameEncoder::new(
        Vec::new(),
        std::path::Path::new("<m>"),
        &mut s,
        FrameOptions::default(),
    )
    .unwrap();
    enc.write(data).unwrap();
    enc.finish().unwrap().0
}

#[test]
fn gpu_frame_decoder_reads_every_frame_kind() {
    use ptxflow::lz4::gpu::{GpuFrameDecoder, GpuPageCodec};
    let data = data();
    let options = GpuOptions {
        batch_bytes: 1 << 20,
        slots: 3,
    };
    for (name, frame) in frames(&data) {
        let want = decompress_frame(&frame).unwrap();
        let mut dec = GpuFrameDecoder::new(
            GpuPageCodec::open_or_cpu(options),
            std::io::Cursor::new(frame.clone()),
        );
        let mut got = Vec::new();
        dec.read_to_end(&mut got)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(got == want, "{name}: GpuFrameDecoder differs");
        eprintln!("{name}: decoded on {:?}", dec.path());
        let mut bad = frame.clone();
        let n = bad.len();
        bad[n - 1] ^= 0x55;
        let mut dec = GpuFrameDecoder::new(
            GpuPageCodec::open_or_cpu(options),
            std::io::Cursor::new(bad.clone()),
        );
        let r = dec.read_to_end(&mut Vec::new());
        assert_eq!(
            r.is_err(),
            decompress_frame(&bad).is_err(),
            "{name}: verdicts differ"
        );
    }
    // Dropped half-way: the worker stops.
    let frame = compress_frame(&data, 4096).unwrap();
    let mut dec = GpuFrameDecoder::new(
        GpuPageCodec::open_or_cpu(options),
        std::io::Cursor::new(frame),
    );
    let mut first = [0u8; 10];
    dec.read_exact(&mut first).unwrap();
    assert_eq!(&first[..], &data[..10]);
    drop(dec);
}
