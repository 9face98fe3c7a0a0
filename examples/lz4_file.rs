//! LZ4 through `std::io`: compresses a file (or generated text) into an LZ4 frame with
//! `FrameEncoder` as an `io::Write`, on the GPU when there is one (else on the CPU, same
//! bytes), decodes it back with `GpuFrameDecoder` as an `io::Read` (GPU, or the CPU's
//! `FrameDecoder` without one), and checks the round trip.
//! The frame is a standard one: `lz4 -d` reads it.
//!
//! `cargo run --release --example lz4_file [INPUT [OUTPUT.lz4]]`

use ptxflow::lz4::gpu::{open_page_stream, Device, GpuFrameDecoder, GpuOptions, GpuPageCodec};
use ptxflow::lz4::{FrameEncoder, FrameOptions};
use std::io::{BufReader, BufWriter, Read, Write};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let input = match args.first() {
        Some(path) => std::fs::read(path)?,
        None => (0..200_000)
            .flat_map(|i: u32| format!("line {i}: the quick brown fox\n").into_bytes())
            .collect(),
    };
    let out_path = args.get(1).cloned().unwrap_or_else(|| {
        std::env::temp_dir()
            .join("ptxflow-example.lz4")
            .display()
            .to_string()
    });

    // Compress: any Write sink; the encoder owns its page stream (GPU, or CPU with the reason).
    let (stream, cpu_reason) = open_page_stream(Device::Auto, 4096, 256, GpuOptions::default())?;
    println!(
        "compressing {} bytes on {}",
        input.len(),
        cpu_reason.map_or("the GPU".to_string(), |why| format!("the CPU ({why})"))
    );
    let file = BufWriter::new(std::fs::File::create(&out_path)?);
    let mut encoder = FrameEncoder::owned(file, stream, FrameOptions::default())?;
    for chunk in input.chunks(1 << 16) {
        encoder.write_all(chunk)?;
    }
    let (_, stats) = encoder.finish()?;
    println!(
        "wrote {out_path}: {} -> {} bytes ({} pages)",
        stats.input_bytes, stats.output_bytes, stats.pages
    );

    // Decompress: any Read source, read like a file (on the GPU when there is one; the CPU's
    // parallel `FrameDecoder` otherwise, or for frames the GPU does not take).
    let codec = GpuPageCodec::open_or_cpu(GpuOptions::default());
    let file = BufReader::new(std::fs::File::open(&out_path)?);
    let mut decoder = GpuFrameDecoder::new(codec, file);
    let mut back = Vec::new();
    decoder.read_to_end(&mut back)?;
    assert!(back == input, "round trip differs");
    println!(
        "read back {} bytes on {:?}: identical",
        back.len(),
        decoder.path().expect("read to the end")
    );
    Ok(())
}
