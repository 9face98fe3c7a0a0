//! Fuzzing the LZ4 decoders on the CPU: valid blocks and frames made from real corpus slices
//! (`$PTXFLOW_DATA_DIR/corpus/*.xz`) are mutated (bytes changed, inserted, removed, truncated,
//! length fields stretched, frame header sizes set to extremes with a valid header checksum),
//! with a fixed seed, plus purely random inputs. Each case must return `Ok` or `Err`, never panic,
//! with a bounded heap peak (counted by the global allocator below) and bounded time; where both
//! our block decoder and lz4_flex accept a block they must agree, and a frame with a content
//! checksum must not decode to changed content. Every frame case also goes through
//! `FrameDecoder` (`io::Read`, its blocks on a one-thread pool of the case's thread so the
//! allocator counts them), which must give the same verdict and bytes. `PTXFLOW_FUZZ_CASES` scales the run (default
//! 1500: 15000 blocks, 6000 frames).

mod fuzz_support;
mod lz4_support;

use fuzz_support::{cases, mutate, rng, run_case, CountingAlloc, Worst, EXTREMES};
use ptxflow::lz4::frame_header::FrameHeader;
use ptxflow::lz4::xxh32::xxh32;
use ptxflow::lz4::{
    compress_frame, decode_block, decode_block_append, decompress_frame, encode_block, FrameDecoder,
};
use ptxflow::rng::Rng;
use ptxflow::Error;
use std::io::{Read, Write};

/// A one-thread rayon pool whose worker is the calling thread, so `FrameDecoder`'s parallel
/// block buffers are allocated (and counted by [`CountingAlloc`]) on the case's thread.
fn this_thread_pool() -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .use_current_thread()
        .build()
        .expect("a one-thread pool")
}

/// All of `frame` read through [`FrameDecoder`] as an `io::Read`, in reads of 64 KiB.
fn read_through_decoder(frame: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut dec = FrameDecoder::new(frame);
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = dec.read(&mut buf)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// 64 KiB slices of text, XML and image data from the corpus (or a fallback text), and edge cases.
fn seed_pages() -> Vec<Vec<u8>> {
    let mut rng = Rng::new(1);
    let mut pages = Vec::new();
    for name in ["dickens", "xml", "x-ray"] {
        if let Some(text) = lz4_support::corpus(name, Some(64 << 10)) {
            pages.extend(text.chunks(4096).take(3).map(|c| c.to_vec()));
            pages.push(text);
        }
    }
    if pages.is_empty() {
        let text = b"It was the best of times, it was the worst of times. ".repeat(1300);
        pages.extend(text.chunks(4096).take(6).map(|c| c.to_vec()));
        pages.push(text[..65536].to_vec());
    }
    pages.push(vec![0; 4096]);
    pages.push((0..600).map(|i| b"abcab"[i % 5]).collect());
    pages.push((0..1000).map(|_| rng.next_u64() as u8).collect());
    pages.push((0..40).map(|i| (i / 7) as u8).collect());
    pages
}

#[test]
fn block_decoder_never_panics_on_mutated_or_random_blocks() {
    let pages = seed_pages();
    let blocks: Vec<(Vec<u8>, usize)> = pages
        .iter()
        .map(|p| (encode_block(p).unwrap(), p.len()))
        .collect();
    let mut rng = rng(42);
    let n = 10 * cases();
    let (mut ok, mut agree, mut worst) = (0, 0, Worst::default());
    for iter in 0..n {
        let (mut block, len) = blocks[iter % blocks.len()].clone();
        if iter % 10 == 9 {
            block = (0..rng.below(80)).map(|_| rng.next_u64() as u8).collect();
        } else {
            for _ in 0..1 + rng.below(3) {
                mutate(&mut rng, &mut block);
            }
        }
        let (ours, cost) = run_case("decode_block", iter, &block, || decode_block(&block, len));
        worst.add(cost);
        if let Ok(out) = &ours {
            ok += 1;
            if let Ok(flex) = lz4_flex::block::decompress(&block, len) {
                assert!(
                    &flex == out,
                    "lz4_flex and ours disagree on iteration {iter}"
                );
                agree += 1;
            }
        }
        // With history before the block and a random output limit.
        let history: Vec<u8> = (0..rng.below(300)).map(|_| rng.next_u64() as u8).collect();
        let limit = rng.below(2 * len as u64 + 1) as usize;
        let start = rng.below(history.len() as u64 + 1) as usize;
        let (_, cost) = run_case("decode_block_append", iter, &block, || {
            let mut out = history.clone();
            let r = decode_block_append(&block, &mut out, start, limit);
            if let Ok(n) = r {
                assert!(n <= limit && out.len() == history.len() + n);
            }
        });
        worst.add(cost);
    }
    eprintln!(
        "{n} mutated blocks: {ok} decoded to the right length, {agree} also by lz4_flex; worst \
         case {} KiB peak, {:?}",
        worst.peak_bytes >> 10,
        worst.time
    );
}

/// Sets the frame header's content size (when the frame declares one) to `v` and re-seals the
/// header checksum, so the reader gets past the header with a hostile size.
fn set_content_size(frame: &mut [u8], v: u64) {
    if frame.len() < 7 || frame[..4] != 0x184D_2204u32.to_le_bytes() || frame[4] & 0x08 == 0 {
        return;
    }
    let len = FrameHeader::descriptor_len(frame[4]);
    if frame.len() < 4 + len {
        return;
    }
    frame[6..14].copy_from_slice(&v.to_le_bytes());
    frame[4 + len - 1] = (xxh32(&frame[4..4 + len - 1], 0) >> 8) as u8;
}

/// Frames of corpus data in every shape the reader accepts, and their decoded content.
fn seed_frames() -> (Vec<Vec<u8>>, Vec<Vec<u8>>, usize) {
    let pages = seed_pages();
    let text: Vec<u8> = pages.concat();
    let mut contents: Vec<Vec<u8>> = vec![
        text[..20_000].to_vec(),
        text[..9000].to_vec(),
        pages[pages.len() - 2].clone(),
        Vec::new(),
        text[text.len() - 70_000..].to_vec(),
    ];
    let mut frames: Vec<Vec<u8>> = contents
        .iter()
        .zip([1024, 4096, 4096, 4096, 65536])
        .map(|(c, p)| compress_frame(c, p).unwrap())
        .collect();
    // A skippable frame, then a frame.
    let mut skip = 0x184D_2A53u32.to_le_bytes().to_vec();
    skip.extend(5u32.to_le_bytes());
    skip.extend(b"hello");
    skip.extend(&frames[1]);
    frames.push(skip);
    contents.push(contents[1].clone());
    for (mode, checks, size, legacy) in [
        (lz4_flex::frame::BlockMode::Linked, true, true, false),
        (lz4_flex::frame::BlockMode::Independent, false, false, true),
    ] {
        let info = lz4_flex::frame::FrameInfo::new()
            .block_mode(mode)
            .block_checksums(checks)
            .content_size(size.then_some(30_000))
            .content_checksum(!legacy)
            .legacy_frame(legacy);
        let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
        enc.write_all(&text[..30_000]).unwrap();
        frames.push(enc.finish().unwrap());
        contents.push(text[..30_000].to_vec());
    }
    // The last frame is legacy: no checksum, so changed literals go unnoticed there.
    let checked = frames.len() - 1;
    (frames, contents, checked)
}

#[test]
fn frame_decoder_never_panics_on_mutated_or_random_frames() {
    let (frames, contents, checked) = seed_frames();
    let mut rng = rng(7);
    let n = 4 * cases();
    let (mut accepted, mut changed, mut worst) = (0, 0, Worst::default());
    let mut worst_read = Worst::default();
    let pool = this_thread_pool();
    for iter in 0..n {
        let k = iter % frames.len();
        let mut frame = frames[k].clone();
        let random = iter % 10 == 9;
        if random {
            frame = 0x184D_2204u32.to_le_bytes().to_vec();
            frame.extend((0..rng.below(64)).map(|_| rng.next_u64() as u8));
        } else if iter % 10 == 8 {
            set_content_size(
                &mut frame,
                EXTREMES[rng.below(EXTREMES.len() as u64) as usize],
            );
        } else {
            for _ in 0..1 + rng.below(3) {
                mutate(&mut rng, &mut frame);
            }
        }
        let (result, cost) = run_case("decompress_frame", iter, &frame, || {
            decompress_frame(&frame)
        });
        worst.add(cost);
        // The same case through `FrameDecoder` as an `io::Read`: the same verdict and bytes.
        let (read, cost) = run_case("FrameDecoder", iter, &frame, || {
            pool.install(|| read_through_decoder(&frame))
        });
        worst_read.add(cost);
        match (&result, &read) {
            (Ok(a), Ok(b)) => assert!(a == b, "frame case {iter}: the readers' outputs differ"),
            (Err(_), Err(e)) => match e.get_ref().and_then(|e| e.downcast_ref::<Error>()) {
                Some(Error::Corrupt { .. } | Error::Input { .. }) => {}
                _ => panic!("frame case {iter}: unexpected FrameDecoder error {e:?}"),
            },
            _ => panic!(
                "frame case {iter}: decompress_frame {:?} but FrameDecoder {:?}",
                result.as_ref().map(Vec::len).map_err(|e| e.to_string()),
                read.as_ref().map(Vec::len).map_err(|e| e.to_string())
            ),
        }
        match result {
            Ok(out) => {
                accepted += 1;
                // A cut right after a whole frame leaves a valid, shorter stream (seen with
                // seed 5: the skippable frame alone decodes to nothing); any other change of
                // a checksummed frame's content must be an error.
                // (The rest of the seed then decodes on its own to the missing content.)
                let cut_at_frame_end = frames[k].starts_with(&frame)
                    && decompress_frame(&frames[k][frame.len()..])
                        .is_ok_and(|rest| [out.as_slice(), &rest].concat() == contents[k]);
                if !random && k < checked && out != contents[k] && !cut_at_frame_end {
                    changed += 1;
                }
            }
            Err(Error::Corrupt { .. } | Error::Input { .. }) => {}
            Err(e) => panic!("frame case {iter}: unexpected error kind {e:?}"),
        }
    }
    eprintln!(
        "{n} mutated frames: {accepted} accepted, {changed} of them checksummed with changed \
         content; worst case {} KiB peak, {:?}; through FrameDecoder {} KiB peak, {:?}",
        worst.peak_bytes >> 10,
        worst.time,
        worst_read.peak_bytes >> 10,
        worst_read.time
    );
    assert_eq!(
        changed, 0,
        "a checksummed frame decoded to changed content without an error"
    );
}

#[test]
fn hostile_frame_sizes_are_errors_without_large_allocations() {
    let small = compress_frame(b"hello hello hello hello", 1024).unwrap();
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    for v in [u64::MAX, 1 << 40, 0] {
        let mut f = small.clone();
        set_content_size(&mut f, v);
        cases.push((v.to_string(), f));
    }
    // A skippable frame claiming 4 GiB, a block size with every bit but the raw flag set, and a
    // legacy block of 2 GiB.
    let mut skip = 0x184D_2A50u32.to_le_bytes().to_vec();
    skip.extend(u32::MAX.to_le_bytes());
    cases.push(("skippable frame size 4294967295".into(), skip));
    let mut block = small[..4 + FrameHeader::descriptor_len(small[4])].to_vec();
    block.extend(0x7FFF_FFFFu32.to_le_bytes());
    cases.push(("block size 2147483647".into(), block));
    let mut legacy = 0x184C_2102u32.to_le_bytes().to_vec();
    legacy.extend(0x8000_0000u32.to_le_bytes());
    cases.push(("legacy block size 2147483648".into(), legacy));
    // Each message names the input, the field and the number read, from both readers.
    let pool = this_thread_pool();
    for (id, (what, f)) in cases.iter().enumerate() {
        let (r, cost) = run_case(what, id, f, || decompress_frame(f));
        match &r {
            Err(e @ Error::Corrupt { .. }) => {
                let msg = e.to_string();
                assert!(
                    msg.contains("<memory>: ") && msg.contains(what.as_str()),
                    "{msg}"
                );
            }
            _ => panic!("{what}: expected a corrupt-data error, got {r:?}"),
        }
        assert!(
            cost.peak_bytes < 1 << 20,
            "{what}: {} bytes peak",
            cost.peak_bytes
        );
        let (r, cost) = run_case(what, id, f, || pool.install(|| read_through_decoder(f)));
        match &r {
            Err(e) => {
                let msg = e.to_string();
                assert!(
                    msg.contains("<reader>: ") && msg.contains(what.as_str()),
                    "FrameDecoder: {msg}"
                );
            }
            _ => panic!("{what}: FrameDecoder accepted it"),
        }
        assert!(
            cost.peak_bytes < 1 << 20,
            "{what}: FrameDecoder {} bytes peak",
            cost.peak_bytes
        );
    }
}
