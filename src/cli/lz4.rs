//! `ptxflow lz4 compress|decompress`: files to and from the standard LZ4 frame format (readable by
//! the `lz4` tool), one independent block per page, on the GPU when there is one (`--device`).
//! Prints which path ran, ratio and throughput; large files get a progress line on stderr.

use super::output::AtomicOutput;
use ptxflow::lz4::files;
use ptxflow::lz4::gpu::{device_failure, FrameStreamError, GpuOptions, GpuPageCodec, HashJob};
use ptxflow::lz4::{FrameOptions, FrameStats};
use ptxflow::runtime::Gpu;
use ptxflow::{Error, Result};
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
        /// Print where the time went (context, module load, I/O and compute) on stderr.
        #[arg(long)]
        timing: bool,
    },
    /// Decompress the LZ4 data IN (frames written by ptxflow or the `lz4` tool) into OUT.
    Decompress {
        input: PathBuf,
        output: PathBuf,
        /// Where to decompress: cpu, gpu or auto (frames with linked or larger-than-64-KiB
        /// blocks use the CPU).
        #[arg(long, default_value_t = Device::Auto)]
        device: Device,
        /// Print where the time went (context, module load, I/O and compute) on stderr.
        #[arg(long)]
        timing: bool,
    },
}

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
            timing,
        } => compress(&input, &output, page_kib, block_checksum, device, timing),
        Lz4Action::Decompress {
            input,
            output,
            device,
            timing,
        } => decompress(&input, &output, device, timing),
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

/// Where a run spent its time, printed on stderr with `--timing`.
#[derive(Default)]
struct Timing {
    phases: Vec<(&'static str, f64)>,
    last: Option<Instant>,
}

impl Timing {
    fn start() -> Self {
        Timing {
            phases: Vec::new(),
            last: Some(Instant::now()),
        }
    }

    /// Ends the phase `name` now.
    fn lap(&mut self, name: &'static str) {
        let now = Instant::now();
        let t = self.last.map_or(0.0, |l| (now - l).as_secs_f64());
        self.phases.push((name, t));
        self.last = Some(now);
    }

    fn print(&self, on: bool) {
        if on {
            let total: f64 = self.phases.iter().map(|p| p.1).sum();
            let parts: Vec<String> = self
                .phases
                .iter()
                .map(|(n, t)| format!("{n} {:.3} s", t))
                .collect();
            eprintln!("timing: {}; total {total:.3} s", parts.join(", "));
        }
    }
}

/// The GPU codec for `device`, or why the CPU runs (`Auto` without a usable GPU). Times the
/// context creation and the module load.
fn open_gpu(
    device: Device,
    timing: &mut Timing,
) -> Result<std::result::Result<GpuPageCodec, String>> {
    if device == Device::Cpu {
        return Ok(Err(String::new()));
    }
    let gpu = match Gpu::open_default() {
        Ok(g) => g,
        Err(e) if device == Device::Auto && device_failure(&e) => {
            timing.lap("device probe (no GPU)");
            return Ok(Err(e.to_string()));
        }
        Err(e) => return Err(e),
    };
    timing.lap("context");
    // 8 MiB batches, 4 in the ring: enough to keep the device and the file I/O busy, small
    // enough that the process stays well under 300 MB.
    let options = GpuOptions {
        batch_bytes: 8 << 20,
        slots: 4,
    };
    match GpuPageCodec::new(gpu, options) {
        Ok(c) => {
            timing.lap("module load");
            Ok(Ok(c))
        }
        Err(e) if device == Device::Auto && device_failure(&e) => Ok(Err(e.to_string())),
        Err(e) => Err(e),
    }
}

/// Compresses on the CPU (all cores), with a progress line.
fn compress_cpu(input: &Path, out: &AtomicOutput, options: FrameOptions) -> Result<FrameStats> {
    let size = std::fs::metadata(input).map_err(io_err(input))?.len();
    let mut progress = Progress::new(size);
    let stats = files::compress_file_cpu(input, out.file(), out.dest(), options, &mut |done| {
        progress.update(done)
    })?;
    progress.done();
    Ok(stats)
}

fn compress(
    input: &Path,
    output: &Path,
    page_kib: usize,
    block_checksum: bool,
    device: Device,
    show_timing: bool,
) -> Result<()> {
    let mut timing = Timing::start();
    let page_bytes = page_kib
        .checked_mul(1024)
        .ok_or_else(|| Error::input("page size overflows"))?;
    ptxflow::lz4::check_page_bytes(page_bytes)?;
    let size = std::fs::metadata(input).map_err(io_err(input))?.len();
    let options = FrameOptions {
        page_bytes,
        content_size: Some(size),
        block_checksum,
    };
    // The content checksum runs on its own thread from now on, beside the device's start-up.
    let mut hash = (device != Device::Cpu).then(|| HashJob::start(input));
    let codec = open_gpu(device, &mut timing)?;
    let started = Instant::now();
    let mut out = AtomicOutput::create(output)?;
    let (stats, path) = match codec {
        Ok(mut codec) => {
            match files::compress_file_gpu(
                &mut codec,
                input,
                out.file(),
                output,
                options,
                hash.as_mut(),
            ) {
                Ok(stats) => (stats, "GPU".to_string()),
                Err(e) if device == Device::Auto && device_failure(&e) => {
                    // Start over on the CPU; the partial frame goes with the old temporary file.
                    drop(hash.take());
                    out = AtomicOutput::create(output)?;
                    let stats = compress_cpu(input, &out, options)?;
                    (stats, format!("CPU after a GPU failure ({e})"))
                }
                Err(e) => return Err(e),
            }
        }
        Err(why) => {
            drop(hash.take());
            let stats = compress_cpu(input, &out, options)?;
            let path = if why.is_empty() {
                "CPU".to_string()
            } else {
                format!("CPU ({why})")
            };
            (stats, path)
        }
    };
    out.commit()?;
    let seconds = started.elapsed().as_secs_f64();
    timing.lap("read, compress and write");
    println!(
        "compressed {} -> {}: {} -> {} bytes, ratio {:.3}, {} pages of {} KiB ({} stored raw), {:.3} GB/s on {path}",
        input.display(),
        output.display(),
        stats.input_bytes,
        stats.output_bytes,
        stats.input_bytes as f64 / stats.output_bytes as f64,
        stats.pages,
        page_kib,
        stats.raw_pages,
        gb_per_s(stats.input_bytes, seconds),
    );
    timing.print(show_timing);
    Ok(())
}

/// Decodes on the GPU, streaming, when `device` allows and the frames suit it; `Ok(Some(why))`
/// leaves the file to the CPU path (nothing is written then).
fn decompress_gpu(
    input: &Path,
    output: &Path,
    device: Device,
    timing: &mut Timing,
) -> Result<Option<String>> {
    let mut codec = match open_gpu(device, timing)? {
        Ok(c) => c,
        Err(why) => return Ok(Some(why)),
    };
    let size = std::fs::metadata(input).map_err(io_err(input))?.len();
    let dest = AtomicOutput::create(output)?;
    let started = Instant::now();
    let stats = match files::decompress_file_gpu(&mut codec, input, dest.file(), output) {
        Ok(stats) => stats,
        Err(FrameStreamError::Unsuitable(why)) => return Ok(Some(why + " are decoded on the CPU")),
        Err(FrameStreamError::Failed(e)) if device == Device::Auto && device_failure(&e) => {
            return Ok(Some(format!("GPU failed: {e}")))
        }
        Err(FrameStreamError::Failed(e)) => return Err(e),
    };
    dest.commit()?;
    let seconds = started.elapsed().as_secs_f64();
    timing.lap("read, decompress and write");
    println!(
        "decompressed {} -> {}: {} -> {} bytes, ratio {:.3}, {} frames, {} blocks, {:.3} GB/s (of output) on GPU",
        input.display(),
        output.display(),
        size,
        stats.output_bytes,
        stats.output_bytes as f64 / size.max(1) as f64,
        stats.frames,
        stats.blocks,
        gb_per_s(stats.output_bytes, seconds),
    );
    Ok(None)
}

fn decompress(input: &Path, output: &Path, device: Device, show_timing: bool) -> Result<()> {
    let mut timing = Timing::start();
    let mut note = None;
    if device != Device::Cpu {
        match decompress_gpu(input, output, device, &mut timing)? {
            None => {
                timing.print(show_timing);
                return Ok(());
            }
            Some(why) => note = Some(why),
        }
    }
    let size = std::fs::metadata(input).map_err(io_err(input))?.len();
    let dest = AtomicOutput::create(output)?;
    let started = Instant::now();
    let mut progress = Progress::new(size);
    let stats = files::decompress_file_cpu(input, dest.file(), output, &mut |done| {
        progress.update(done)
    })?;
    progress.done();
    dest.commit()?;
    timing.lap("read, decompress and write");
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
    timing.print(show_timing);
    Ok(())
}
