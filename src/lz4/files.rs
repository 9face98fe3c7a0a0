//! File to file, as `ptxflow lz4` runs it (and the benches time it): compression and
//! decompression on the GPU (the rings, streaming) or on the CPU (all cores), each writing to
//! an open file. Memory is bounded by the rings or a few batches, never by the file size.
//! `progress` is called with the input bytes consumed so far.

use super::frame_write::lay_out_blocks;
use super::gpu::{BatchSource, FileSource, FrameStreamError, GpuPageCodec, HashJob};
use super::par::par_extend;
use super::xxh32::Xxh32;
use super::PageKind;
use super::{check_page_bytes, DecodeStats, FastEncoder, FrameDecoder, FrameOptions, FrameStats};
use crate::{Error, Result};
use rayon::prelude::*;
use std::fs::File;
use std::io::{BufReader, Write};
use std::path::Path;

/// Input bytes per batch on the CPU path.
const CPU_BATCH_BYTES: usize = 4 << 20;

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Compresses the file `input` into one frame on `out` (named `out_name`) on the GPU. With
/// `hash`, a [`HashJob`] already running over `input` supplies the content checksum (start it
/// before opening the device: it then overlaps the context creation). Fails like
/// [`GpuPageCodec::compress_frame`]; the frame is then incomplete.
pub fn compress_file_gpu(
    codec: &mut GpuPageCodec,
    input: &Path,
    out: &File,
    out_name: &Path,
    options: FrameOptions,
    hash: Option<&mut HashJob>,
) -> Result<FrameStats> {
    let file = File::open(input).map_err(io_err(input))?;
    let mut source = FileSource::new(&file, input)?;
    let mut digest = hash.map(|h| move || h.digest());
    let digest = digest
        .as_mut()
        .map(|f| f as &mut dyn FnMut() -> Result<u32>);
    Ok(codec
        .compress_frame_with_hash(&mut source, out, out_name, options, digest)?
        .1)
}

/// Compresses the file `input` into one frame on `out` on the CPU, a batch at a time: the next
/// batch is read (positioned reads on every core) while the current one is compressed (pages in
/// parallel with the fast greedy [`FastEncoder`], valid LZ4 but not the GPU's bytes) and hashed,
/// and a writer thread writes the previous one.
pub fn compress_file_cpu(
    input: &Path,
    out: &File,
    out_name: &Path,
    options: FrameOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<FrameStats> {
    check_page_bytes(options.page_bytes)?;
    let pb = options.page_bytes;
    let file = File::open(input).map_err(io_err(input))?;
    let mut source = FileSource::new(&file, input)?;
    let header = options.header().to_bytes()?;
    let mut stats = FrameStats {
        output_bytes: header.len() as u64,
        ..FrameStats::default()
    };
    let mut hash = Xxh32::new(0);
    let batch = (CPU_BATCH_BYTES / pb).max(1) * pb;
    let (mut cur, mut next) = (vec![0u8; batch], vec![0u8; batch]);
    let mut parts: Vec<(Vec<u8>, PageKind)> = Vec::new();
    let (to_writer, batches) = std::sync::mpsc::sync_channel::<Vec<u8>>(2);
    let (recycle, spare) = std::sync::mpsc::channel::<Vec<u8>>();
    let (result, written) = std::thread::scope(|s| {
        let writer = s.spawn(move || {
            let mut w = out;
            let mut r = w.write_all(&header);
            for buf in batches {
                if r.is_ok() {
                    r = w.write_all(&buf);
                }
                let _ = recycle.send(buf);
            }
            r
        });
        let result = (|| {
            let mut n = source.fill(&mut cur)?;
            while n > 0 {
                let pages: Vec<&[u8]> = cur[..n].chunks(pb).collect();
                if parts.len() < pages.len() {
                    parts.resize_with(pages.len(), || (Vec::new(), PageKind::Raw));
                }
                let mut frame = spare.try_recv().unwrap_or_default();
                let parts = &mut parts[..pages.len()];
                let (read, ()) = rayon::join(
                    || source.fill(&mut next),
                    || {
                        rayon::join(
                            || hash.update(&cur[..n]),
                            || {
                                parts.par_iter_mut().zip(pages.par_iter()).for_each_init(
                                    FastEncoder::new,
                                    |enc, ((bytes, kind), page)| {
                                        *kind = enc.compress_page(page, bytes);
                                    },
                                );
                                let blocks: Vec<(&[u8], bool)> = parts
                                    .iter()
                                    .map(|(b, k)| (&b[..], *k == PageKind::Raw))
                                    .collect();
                                lay_out_blocks(&blocks, options.block_checksum, &mut frame);
                            },
                        );
                    },
                );
                stats.input_bytes += n as u64;
                stats.output_bytes += frame.len() as u64;
                stats.pages += pages.len() as u64;
                stats.raw_pages += parts.iter().filter(|p| p.1 == PageKind::Raw).count() as u64;
                progress(stats.input_bytes);
                if to_writer.send(frame).is_err() {
                    break;
                }
                std::mem::swap(&mut cur, &mut next);
                n = read?;
            }
            let tail = [0u32.to_le_bytes(), hash.digest().to_le_bytes()].concat();
            stats.output_bytes += tail.len() as u64;
            let _ = to_writer.send(tail);
            Ok::<(), Error>(())
        })();
        drop(to_writer);
        (
            result,
            writer.join().expect("the writer thread does not panic"),
        )
    });
    result?;
    written.map_err(io_err(out_name))?;
    if let Some(declared) = options.content_size {
        if declared != stats.input_bytes {
            return Err(Error::input(format!(
                "frame declared {declared} bytes of content but {} were read",
                stats.input_bytes
            )));
        }
    }
    Ok(stats)
}

/// Decodes every frame of the file `input` onto `out` on the GPU, streaming; a writer thread
/// writes each batch while the next is read, decoded and checked. Returns
/// [`FrameStreamError::Unsuitable`] (nothing written worth keeping) for input the CPU must decode.
pub fn decompress_file_gpu(
    codec: &mut GpuPageCodec,
    input: &Path,
    out: &File,
    out_name: &Path,
) -> std::result::Result<DecodeStats, FrameStreamError> {
    let file = File::open(input).map_err(io_err(input))?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let (to_writer, batches) = std::sync::mpsc::sync_channel::<Vec<u8>>(2);
    let (recycle, spare) = std::sync::mpsc::channel::<Vec<u8>>();
    let spare = std::sync::Mutex::new(spare);
    let (decoded, written) = std::thread::scope(|s| {
        let writer = s.spawn(move || {
            let mut r = Ok(());
            let mut w = out;
            for buf in batches {
                if r.is_ok() {
                    r = w.write_all(&buf);
                }
                let _ = recycle.send(buf);
            }
            r
        });
        let mut emit = |bytes: &[u8]| {
            let mut buf = spare
                .lock()
                .map(|r| r.try_recv().unwrap_or_default())
                .unwrap_or_default();
            buf.clear();
            par_extend(&mut buf, bytes);
            // A send fails only when the writer stopped; its error is reported below.
            let _ = to_writer.send(buf);
            Ok(())
        };
        let decoded = codec.decode_frames_stream(&mut reader, input, &mut emit);
        drop(to_writer);
        (
            decoded,
            writer.join().expect("the writer thread does not panic"),
        )
    });
    let stats = decoded?;
    written.map_err(io_err(out_name))?;
    Ok(stats)
}

/// Decodes every frame of the file `input` onto `out` on the CPU: blocks in parallel, the
/// writes on their own thread.
pub fn decompress_file_cpu(
    input: &Path,
    out: &File,
    out_name: &Path,
    progress: &mut dyn FnMut(u64),
) -> Result<DecodeStats> {
    let file = File::open(input).map_err(io_err(input))?;
    let reader = BufReader::with_capacity(1 << 20, file);
    let mut decoder = FrameDecoder::named(reader, input);
    // The writer writes batch k while batch k+1 decodes; buffers go back and forth.
    let (to_writer, batches) = std::sync::mpsc::sync_channel::<Vec<u8>>(1);
    let (recycle, spare) = std::sync::mpsc::channel::<Vec<u8>>();
    let (decoded, written) = std::thread::scope(|s| {
        let writer = s.spawn(move || {
            let mut r = Ok(());
            let mut w = out;
            for buf in batches {
                if r.is_ok() {
                    r = w.write_all(&buf);
                }
                let _ = recycle.send(buf);
            }
            r
        });
        let decoded = (|| {
            let mut buf = Vec::new();
            while decoder.next_batch()?.is_some() {
                decoder.take_batch(&mut buf);
                progress(decoder.stats().input_bytes);
                if to_writer.send(std::mem::take(&mut buf)).is_err() {
                    break;
                }
                buf = spare.try_recv().unwrap_or_default();
            }
            Ok::<_, Error>(decoder.stats())
        })();
        drop(to_writer);
        (
            decoded,
            writer.join().expect("the writer thread does not panic"),
        )
    });
    let stats = decoded?;
    written.map_err(io_err(out_name))?;
    Ok(stats)
}
