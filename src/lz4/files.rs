//! File to file, as `ptxflow lz4` runs it (and the benches time it): compression and
//! decompression on the GPU (the rings, streaming) or on the CPU (all cores), each writing to
//! an open file. Memory is bounded by the rings or a few batches, never by the file size.
//! `progress` is called with the input bytes consumed so far.

use super::gpu::{FileSource, FrameStreamError, GpuPageCodec};
use super::{CpuPageStream, DecodeStats, FrameDecoder, FrameEncoder, FrameOptions, FrameStats};
use crate::{Error, Result};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

/// Pages queued on the CPU stream (parallel batches of 4 MiB at 4 KiB pages).
const CPU_STREAM_SLOTS: usize = 1024;
/// Bytes read from the input per call on the CPU path.
const READ_CHUNK_BYTES: usize = 4 << 20;

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Compresses the file `input` into one frame on `out` (named `out_name`) on the GPU. Fails
/// like [`GpuPageCodec::compress_frame`]; the frame is then incomplete.
pub fn compress_file_gpu(
    codec: &mut GpuPageCodec,
    input: &Path,
    out: &File,
    out_name: &Path,
    options: FrameOptions,
) -> Result<FrameStats> {
    let file = File::open(input).map_err(io_err(input))?;
    let mut source = FileSource::new(&file, input)?;
    Ok(codec.compress_frame(&mut source, out, out_name, options)?.1)
}

/// Compresses the file `input` into one frame on `out` on the CPU (pages in parallel, with the
/// fast greedy [`FastEncoder`](super::FastEncoder): valid LZ4, not the GPU's bytes).
pub fn compress_file_cpu(
    input: &Path,
    out: &File,
    out_name: &Path,
    options: FrameOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<FrameStats> {
    let file = File::open(input).map_err(io_err(input))?;
    let mut reader = BufReader::with_capacity(READ_CHUNK_BYTES, file);
    let writer = BufWriter::with_capacity(1 << 20, out);
    let mut stream = CpuPageStream::new_fast(options.page_bytes, CPU_STREAM_SLOTS)?;
    let mut enc = FrameEncoder::new(writer, out_name, &mut stream, options)?;
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    loop {
        let n = reader.read(&mut chunk).map_err(io_err(input))?;
        if n == 0 {
            break;
        }
        enc.write(&chunk[..n])?;
        progress(enc.stats().input_bytes);
    }
    Ok(enc.finish()?.1)
}

/// Decodes every frame of the file `input` onto `out` on the GPU, streaming. Returns
/// [`FrameStreamError::Unsuitable`] (nothing written worth keeping) for input the CPU must decode.
pub fn decompress_file_gpu(
    codec: &mut GpuPageCodec,
    input: &Path,
    out: &File,
    out_name: &Path,
) -> std::result::Result<DecodeStats, FrameStreamError> {
    let file = File::open(input).map_err(io_err(input))?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut emit = |bytes: &[u8]| {
        let mut w = out;
        w.write_all(bytes).map_err(io_err(out_name))
    };
    codec.decode_frames_stream(&mut reader, input, &mut emit)
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
