//! `ptxflow lz4 compress|decompress`: files to and from the standard LZ4 frame format (readable by
//! the `lz4` tool), one independent block per page, on the GPU when there is one (`--device`).
//! Prints which path ran, ratio and throughput; large files get a progress line on stderr.

use ptxflow::lz4::gpu::{decode_frames_gpu, GpuOptions, GpuPageStream, Lz4Kernels};
use ptxflow::lz4::{decode_frames, CpuPageStream, FrameEncoder, FrameOptions, PageStream};
use ptxflow::runtime::Gpu;
use ptxflow::{Error, Result};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Arguments of `ptxflow lz4`.
#[derive(clap::Args)]
pub struct Lz4Args {
    #[command(subcommand)]
    action: Lz4Action,
}

/// Where pages are compressed: the library's device choice.
pub use ptxflow::Device;

#[derive(clap::Subcommand)]
enum Lz4Action {
    /// Compress IN into the LZ4 frame OUT (one block per page).
    Compress {
        input: PathBuf,
        output: PathBuf,
        /// Page (block) size in KiB, 1..=64.
        #[arg(long, default_value_t = 4)]
        page_kib: usize,
        /// Also write an xxHash32 after every block.
        #[arg(long)]
        block_checksum: bool,
        /// Where to compress: cpu, gpu or auto.
        #[arg(long, default_value_t = Device::Auto)]
        device: Device,
    },
    /// Decompress the LZ4 data IN (frames written by ptxflow or the `lz4` tool) into OUT.
    Decompress {
        input: PathBuf,
        output: PathBuf,
        /// Where to decompress: cpu, gpu or auto (frames with linked or larger-than-64-KiB
        /// blocks use the CPU).
        #[arg(long, default_value_t = Device::Auto)]
        device: Device,
    },
}

/// Pages per batch handed to the page stream (4 MiB at 4 KiB pages).
const STREAM_SLOTS: usize = 1024;
/// Bytes read from the input per call.
const READ_CHUNK_BYTES: usize = 4 << 20;
/// Files at least this large get a progress line.
const PROGRESS_MIN_BYTES: u64 = 16 << 20;

/// Runs the subcommand.
pub fn run(args: Lz4Args) -> Result<()> {
    match args.action {
        Lz4Action::Compress {
            input,
            output,
            page_kib,
            block_checksum,
            device,
        } => compress(&input, &output, page_kib, block_checksum, device),
        Lz4Action::Decompress {
            input,
            output,
            device,
        } => decompress(&input, &output, device),
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A stderr progress line, redrawn at most every quarter second, only for large inputs.
struct Progress {
    total: u64,
    last: Instant,
    shown: bool,
}

impl Progress {
    fn new(total: u64) -> Self {
        Progress {
            total,
            last: Instant::now(),
            shown: false,
        }
    }

    fn update(&mut self, done: u64) {
        if self.total < PROGRESS_MIN_BYTES || self.last.elapsed().as_millis() < 250 {
            return;
        }
        self.last = Instant::now();
        self.shown = true;
        let pct = 100.0 * done as f64 / self.total as f64;
        eprint!(
            "\r  {pct:5.1}% of {:.1} MiB",
            self.total as f64 / (1 << 20) as f64
        );
    }

    fn done(&self) {
        if self.shown {
            eprintln!(
                "\r  100.0% of {:.1} MiB",
                self.total as f64 / (1 << 20) as f64
            );
        }
    }
}

fn gb_per_s(bytes: u64, seconds: f64) -> f64 {
    bytes as f64 / seconds.max(1e-9) / 1e9
}

/// The page stream for `device`, and why the CPU runs when `Auto` found no usable GPU.
enum Stream {
    Cpu(CpuPageStream, Option<String>),
    Gpu(GpuPageStream),
}

impl Stream {
    fn open(device: Device, page_bytes: usize) -> Result<Stream> {
        ptxflow::lz4::check_page_bytes(page_bytes)?;
        if device == Device::Cpu {
            return Ok(Stream::Cpu(
                CpuPageStream::new(page_bytes, STREAM_SLOTS)?,
                None,
            ));
        }
        let options = GpuOptions {
            batch_bytes: 8 << 20,
            slots: 3,
        };
        match Gpu::open_default().and_then(|g| GpuPageStream::new(g, page_bytes, options)) {
            Ok(s) => Ok(Stream::Gpu(s)),
            Err(e) if device == Device::Auto && ptxflow::lz4::gpu::device_failure(&e) => {
                Ok(Stream::Cpu(
                    CpuPageStream::new(page_bytes, STREAM_SLOTS)?,
                    Some(e.to_string()),
                ))
            }
            Err(e) => Err(e),
        }
    }

    fn as_dyn(&mut self) -> &mut dyn PageStream {
        match self {
            Stream::Cpu(s, _) => s,
            Stream::Gpu(s) => s,
        }
    }

    /// Which path ran, with the reason when it is the CPU although a GPU was wanted.
    fn describe(&self) -> String {
        match self {
            Stream::Cpu(_, None) => "CPU".into(),
            Stream::Cpu(_, Some(why)) => format!("CPU ({why})"),
            Stream::Gpu(s) => match s.fallback_reason() {
                None => "GPU".into(),
                Some(why) => format!("CPU after a GPU failure ({why})"),
            },
        }
    }
}

fn compress(
    input: &Path,
    output: &Path,
    page_kib: usize,
    block_checksum: bool,
    device: Device,
) -> Result<()> {
    let page_bytes = page_kib
        .checked_mul(1024)
        .ok_or_else(|| Error::input("page size overflows"))?;
    let mut stream = Stream::open(device, page_bytes)?;
    let file = File::open(input).map_err(io_err(input))?;
    let size = file.metadata().map_err(io_err(input))?.len();
    let mut reader = BufReader::with_capacity(READ_CHUNK_BYTES, file);
    let out = BufWriter::with_capacity(1 << 20, File::create(output).map_err(io_err(output))?);
    let started = Instant::now();
    let result = (|| {
        let options = FrameOptions {
            page_bytes,
            content_size: Some(size),
            block_checksum,
        };
        let mut enc = FrameEncoder::new(out, output, stream.as_dyn(), options)?;
        let mut progress = Progress::new(size);
        let mut chunk = vec![0u8; READ_CHUNK_BYTES];
        loop {
            let n = reader.read(&mut chunk).map_err(io_err(input))?;
            if n == 0 {
                break;
            }
            enc.write(&chunk[..n])?;
            progress.update(enc.stats().input_bytes);
        }
        progress.done();
        let (_, stats) = enc.finish()?;
        Ok(stats)
    })();
    let stats = match result {
        Ok(r) => r,
        Err(e) => {
            // Leave no half-written frame behind that could pass for a result.
            let _ = std::fs::remove_file(output);
            return Err(e);
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "compressed {} -> {}: {} -> {} bytes, ratio {:.3}, {} pages of {} KiB ({} stored raw), {:.3} GB/s on {}",
        input.display(),
        output.display(),
        stats.input_bytes,
        stats.output_bytes,
        stats.input_bytes as f64 / stats.output_bytes as f64,
        stats.pages,
        page_kib,
        stats.raw_pages,
        gb_per_s(stats.input_bytes, seconds),
        stream.describe(),
    );
    Ok(())
}

/// Decodes on the GPU when `device` allows and the frames suit it; `Ok(None)` leaves the file to
/// the CPU path, with the reason.
fn decompress_gpu(input: &Path, output: &Path, device: Device) -> Result<Option<String>> {
    let kernels = match Gpu::open_default().and_then(Lz4Kernels::new) {
        Ok(k) => k,
        Err(e) if device == Device::Auto && ptxflow::lz4::gpu::device_failure(&e) => {
            return Ok(Some(e.to_string()))
        }
        Err(e) => return Err(e),
    };
    let data = std::fs::read(input).map_err(io_err(input))?;
    let started = Instant::now();
    let mut out = Vec::new();
    let (frames, blocks) = match decode_frames_gpu(&kernels, &data, &mut out) {
        Ok(Some(counts)) => counts,
        Ok(None) => {
            return Ok(Some(
                "frames with linked, larger or unusual blocks are decoded on the CPU".into(),
            ))
        }
        Err(e) if ptxflow::lz4::gpu::device_failure(&e) => {
            return Ok(Some(format!("GPU failed: {e}")))
        }
        Err(e) => return Err(e),
    };
    let seconds = started.elapsed().as_secs_f64();
    std::fs::write(output, &out).map_err(io_err(output))?;
    println!(
        "decompressed {} -> {}: {} -> {} bytes, ratio {:.3}, {frames} frames, {blocks} blocks, {:.3} GB/s (of output) on GPU",
        input.display(),
        output.display(),
        data.len(),
        out.len(),
        out.len() as f64 / data.len().max(1) as f64,
        gb_per_s(out.len() as u64, seconds),
    );
    Ok(None)
}

fn decompress(input: &Path, output: &Path, device: Device) -> Result<()> {
    let mut note = None;
    if device != Device::Cpu {
        match decompress_gpu(input, output, device)? {
            None => return Ok(()),
            Some(why) => note = Some(why),
        }
    }
    let file = File::open(input).map_err(io_err(input))?;
    let size = file.metadata().map_err(io_err(input))?.len();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut writer =
        BufWriter::with_capacity(1 << 20, File::create(output).map_err(io_err(output))?);
    let started = Instant::now();
    let mut progress = Progress::new(size);
    let result = decode_frames(&mut reader, input, &mut writer, output, &mut |s| {
        progress.update(s.input_bytes)
    });
    progress.done();
    drop(writer);
    let stats = match result {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_file(output);
            return Err(e);
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "decompressed {} -> {}: {} -> {} bytes, ratio {:.3}, {} frames, {} blocks, {:.3} GB/s (of output) on CPU{}",
        input.display(),
        output.display(),
        stats.input_bytes,
        stats.output_bytes,
        stats.output_bytes as f64 / stats.input_bytes.max(1) as f64,
        stats.frames,
        stats.blocks,
        gb_per_s(stats.output_bytes, seconds),
        note.map_or(String::new(), |n| format!(" ({n})")),
    );
    Ok(())
}
