//! Fuzzing the decoders on the CPU: valid blocks and frames are mutated (bytes changed, inserted,
//! removed, truncated, length fields stretched) many thousands of times with a fixed seed, plus
//! purely random inputs. The decoders must return `Ok` or `Err`, never panic; where both our block
//! decoder and lz4_flex accept a block, they must produce the same bytes.

mod lz4_support;

use ptxflow::lz4::{
    compress_frame, decode_block, decode_block_append, decompress_frame, encode_block,
};
use ptxflow::rng::Rng;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};

fn seed_pages() -> Vec<Vec<u8>> {
    let mut rng = Rng::new(1);
    let text = lz4_support::corpus("dickens", Some(64 << 10))
        .unwrap_or_else(|| b"It was the best of times, it was the worst of times. ".repeat(1300));
    let mut pages: Vec<Vec<u8>> = text.chunks(4096).take(6).map(|c| c.to_vec()).collect();
    pages.push(text[..65536.min(text.len())].to_vec());
    pages.push(vec![0; 4096]);
    pages.push((0..600).map(|i| b"abcab"[i % 5]).collect());
    pages.push((0..1000).map(|_| rng.next_u64() as u8).collect());
    pages.push((0..40).map(|i| (i / 7) as u8).collect());
    pages
}

/// One random mutation of `v` in place.
fn mutate(rng: &mut Rng, v: &mut Vec<u8>) {
    let pick = |rng: &mut Rng, n: usize| rng.below(n.max(1) as u64) as usize;
    match rng.below(7) {
        0 | 1 => {
            for _ in 0..1 + rng.below(4) {
                if !v.is_empty() {
                    let at = pick(rng, v.len());
                    v[at] = rng.next_u64() as u8;
                }
            }
        }
        2 => {
            let at = pick(rng, v.len() + 1);
            v.truncate(at);
        }
        3 => {
            let at = pick(rng, v.len() + 1);
            for _ in 0..1 + rng.below(8) {
                v.insert(at, rng.next_u64() as u8);
            }
        }
        4 => {
            if !v.is_empty() {
                let at = pick(rng, v.len());
                let n = 1 + pick(rng, 8).min(v.len() - at - 1 + 1);
                v.drain(at..(at + n).min(v.len()));
            }
        }
        5 => {
            // A stretched length: a nibble of 15 and a chain of 255s.
            if !v.is_empty() {
                let at = pick(rng, v.len());
                v[at] |= if rng.below(2) == 0 { 0xF0 } else { 0x0F };
                let chain = 1 + pick(rng, 20);
                for _ in 0..chain {
                    v.insert((at + 1).min(v.len()), 255);
                }
            }
        }
        _ => {
            // An offset-like pair of bytes set to extremes.
            if v.len() >= 2 {
                let at = pick(rng, v.len() - 1);
                let o: u16 = [0, 1, 0xFFFF, 0x8000][pick(rng, 4)];
                v[at..at + 2].copy_from_slice(&o.to_le_bytes());
            }
        }
    }
}

fn guarded<T>(what: &str, input: &[u8], f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(t) => t,
        Err(e) => {
            let hex: String = input.iter().take(256).map(|b| format!("{b:02x}")).collect();
            panic!("{what} panicked on {} bytes: {hex}... ({e:?})", input.len());
        }
    }
}

#[test]
fn block_decoder_never_panics_on_mutated_or_random_blocks() {
    let pages = seed_pages();
    let blocks: Vec<(Vec<u8>, usize)> = pages
        .iter()
        .map(|p| (encode_block(p).unwrap(), p.len()))
        .collect();
    let mut rng = Rng::new(42);
    let (mut ok, mut agree) = (0, 0);
    for iter in 0..30_000 {
        let (mut block, len) = blocks[iter % blocks.len()].clone();
        if iter % 10 == 9 {
            block = (0..rng.below(80)).map(|_| rng.next_u64() as u8).collect();
        } else {
            for _ in 0..1 + rng.below(3) {
                mutate(&mut rng, &mut block);
            }
        }
        let ours = guarded("decode_block", &block, || decode_block(&block, len));
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
        guarded("decode_block_append", &block, || {
            let mut out = history.clone();
            let start = rng.below(history.len() as u64 + 1) as usize;
            let r = decode_block_append(&block, &mut out, start, limit);
            if let Ok(n) = r {
                assert!(n <= limit && out.len() == history.len() + n);
            }
        });
    }
    eprintln!("30000 mutated blocks: {ok} decoded to the right length, {agree} also by lz4_flex");
}

#[test]
fn frame_decoder_never_panics_on_mutated_or_random_frames() {
    let pages = seed_pages();
    let text: Vec<u8> = pages.concat();
    let mut contents = vec![&text[..20_000], &text[..9000], &pages[9][..], &[][..]];
    let mut frames: Vec<Vec<u8>> = contents
        .iter()
        .zip([1024, 4096, 4096, 4096])
        .map(|(c, p)| compress_frame(c, p).unwrap())
        .collect();
    for (mode, checks, legacy) in [
        (lz4_flex::frame::BlockMode::Linked, true, false),
        (lz4_flex::frame::BlockMode::Independent, false, true),
    ] {
        let info = lz4_flex::frame::FrameInfo::new()
            .block_mode(mode)
            .block_checksums(checks)
            .content_checksum(!legacy)
            .legacy_frame(legacy);
        let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
        enc.write_all(&text[..30_000]).unwrap();
        frames.push(enc.finish().unwrap());
        contents.push(&text[..30_000]);
    }
    // The last frame is legacy: no checksum, so changed literals go unnoticed there.
    let checked = frames.len() - 1;
    let mut rng = Rng::new(7);
    let (mut accepted, mut changed) = (0, 0);
    for iter in 0..6_000 {
        let mut frame = frames[iter % frames.len()].clone();
        if iter % 10 == 9 {
            frame = 0x184D_2204u32.to_le_bytes().to_vec();
            frame.extend((0..rng.below(64)).map(|_| rng.next_u64() as u8));
        } else {
            for _ in 0..1 + rng.below(3) {
                mutate(&mut rng, &mut frame);
            }
        }
        let result = guarded("decompress_frame", &frame, || decompress_frame(&frame));
        if let Ok(out) = result {
            accepted += 1;
            let k = iter % frames.len();
            if iter % 10 != 9 && k < checked && out != contents[k] {
                changed += 1;
            }
        }
    }
    eprintln!("6000 mutated frames: {accepted} accepted, {changed} of them checksummed with changed content");
    assert_eq!(
        changed, 0,
        "a checksummed frame decoded to changed content without an error"
    );
}
