//! `ptxflow demo`: every pipeline on generated data, on the GPU when there is one and otherwise
//! on the CPU, with its agreement with the CPU reference.

use ptxflow::core_ops::{CpuOps, GpuOps, VectorOps};
use ptxflow::rng::Rng;
use ptxflow::runtime::Gpu;
use std::sync::Arc;
use std::time::Instant;

/// One line of the demo table.
pub struct Row {
    pub pipeline: String,
    pub device: String,
    pub seconds: f64,
    pub agreement: String,
}

pub fn run() -> ptxflow::Result<()> {
    let gpu = match Gpu::open_default() {
        Ok(g) => {
            println!("GPU: {} ({} SMs)", g.facts().name, g.facts().sm_count);
            Some(g)
        }
        Err(e) => {
            println!("GPU: none ({e}); running every pipeline on the CPU");
            None
        }
    };
    let mut rows = Vec::new();
    rows.extend(core_ops(gpu.clone())?);
    rows.push(ndt_row(None)?);
    if let Some(g) = &gpu {
        rows.push(ndt_row(Some(g.clone()))?);
    }
    rows.extend(lz4_rows(gpu.clone())?);
    rows.push(gaussian_row(gpu.clone())?);
    rows.extend(rnn_rows(gpu.clone())?);
    print_table(&rows);
    Ok(())
}

fn print_table(rows: &[Row]) {
    println!(
        "\n{:<42} {:<7} {:>11}  agreement with CPU reference",
        "pipeline", "device", "time"
    );
    println!("{}", "-".repeat(110));
    for r in rows {
        println!(
            "{:<42} {:<7} {:>8.3} ms  {}",
            r.pipeline,
            r.device,
            r.seconds * 1e3,
            r.agreement
        );
    }
}

fn core_ops(gpu: Option<Arc<Gpu>>) -> ptxflow::Result<Vec<Row>> {
    let n = 10_000_003;
    let mut rng = Rng::new(42);
    let p = rng.vec_f32(n, -100.0, 100.0);
    let c = rng.vec_f32(n, -1.0, 1.0);
    let mut reference = vec![0.0f32; n];
    CpuOps.correct_add(&p, &c, &mut reference)?;
    let ref_sum = CpuOps.reduce_sum(&p)?;
    let mut ops: Box<dyn VectorOps> = match gpu {
        Some(g) => Box::new(GpuOps::new(g)?),
        None => Box::new(CpuOps),
    };
    let mut out = vec![f32::NAN; n];
    ops.correct_add(&p, &c, &mut out)?; // warm-up (module load, allocation)
    let t = Instant::now();
    ops.correct_add(&p, &c, &mut out)?;
    let add_s = t.elapsed().as_secs_f64();
    let mismatches = out
        .iter()
        .zip(&reference)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    let t = Instant::now();
    let sum = ops.reduce_sum(&p)?;
    let sum_s = t.elapsed().as_secs_f64();
    let rel = ((sum - ref_sum) / ref_sum.abs().max(1e-300)).abs();
    Ok(vec![
        Row {
            pipeline: "core: correct_add (10M f32, h2h)".into(),
            device: ops.device().into(),
            seconds: add_s,
            agreement: format!("{mismatches} of {n} elements differ (bitwise)"),
        },
        Row {
            pipeline: "core: reduce_sum (10M f32 -> f64)".into(),
            device: ops.device().into(),
            seconds: sum_s,
            agreement: format!("relative difference {rel:.1e}"),
        },
    ])
}

fn ndt_row(gpu: Option<Arc<Gpu>>) -> ptxflow::Result<Row> {
    // The same solver either way; on the GPU the derivatives come from the derivative pipeline.
    let device = if gpu.is_some() { "gpu" } else { "cpu" };
    let r = match gpu {
        Some(g) => ptxflow::ndt::demo::run_gpu(g)?,
        None => ptxflow::ndt::demo::run_cpu()?,
    };
    Ok(Row {
        pipeline: format!("ndt: align generated scene ({} pts)", r.source_points),
        device: device.into(),
        seconds: r.seconds,
        agreement: format!(
            "vs known motion: {:.1} mm, {:.3} deg; {} after {} iterations",
            r.translation_error_m * 1e3,
            r.rotation_error_deg,
            r.stop,
            r.iterations
        ),
    })
}

fn lz4_rows(gpu: Option<Arc<Gpu>>) -> ptxflow::Result<Vec<Row>> {
    use ptxflow::lz4::gpu::{GpuOptions, GpuPageStream};
    use ptxflow::lz4::{CodecPath, FrameEncoder, FrameOptions, DEFAULT_PAGE_BYTES};
    // Generated text-like data: words drawn from a small vocabulary, so LZ4 finds matches.
    let mut rng = Rng::new(5);
    let words = [
        "point", "cloud", "voxel", "kernel", "warp", "page", "frame", "block", "the", "of",
    ];
    let mut data = Vec::with_capacity(8 << 20);
    while data.len() < 8 << 20 {
        data.extend_from_slice(words[rng.below(words.len() as u64) as usize].as_bytes());
        data.push(if rng.below(8) == 0 { b'\n' } else { b' ' });
    }
    let name = format!("lz4: compress {} MiB, 4 KiB pages", data.len() >> 20);
    let t = Instant::now();
    let frame = ptxflow::lz4::compress_frame(&data, DEFAULT_PAGE_BYTES)?;
    let seconds = t.elapsed().as_secs_f64();
    let back = ptxflow::lz4::decompress_frame(&frame)?;
    let ratio = data.len() as f64 / frame.len() as f64;
    let mut rows = vec![Row {
        pipeline: name.clone(),
        device: "cpu".into(),
        seconds,
        agreement: format!(
            "ratio {ratio:.3}; round trip {}",
            if back == data { "exact" } else { "MISMATCH" }
        ),
    }];
    let Some(gpu) = gpu else { return Ok(rows) };
    let mut stream = GpuPageStream::new(gpu, DEFAULT_PAGE_BYTES, GpuOptions::default())?;
    let options = FrameOptions {
        page_bytes: DEFAULT_PAGE_BYTES,
        content_size: Some(data.len() as u64),
        block_checksum: false,
    };
    // The first frame loads the kernels and fills the pinned ring; the second one is timed.
    let encode = |stream: &mut GpuPageStream| -> ptxflow::Result<(Vec<u8>, CodecPath)> {
        let mut enc = FrameEncoder::new(
            Vec::with_capacity(data.len() / 2),
            std::path::Path::new("<memory>"),
            stream,
            options,
        )?;
        enc.write(&data)?;
        let path = enc.path();
        Ok((enc.finish()?.0, path))
    };
    encode(&mut stream)?;
    let t = Instant::now();
    let (gpu_frame, path) = encode(&mut stream)?;
    let seconds = t.elapsed().as_secs_f64();
    rows.push(Row {
        pipeline: name,
        device: if path == CodecPath::Gpu {
            "gpu"
        } else {
            "cpu*"
        }
        .into(),
        seconds,
        agreement: format!(
            "frame {} the CPU's ({} bytes); pinned ring, host to host{}",
            if gpu_frame == frame {
                "byte-identical to"
            } else {
                "DIFFERS from"
            },
            gpu_frame.len(),
            if path == CodecPath::Gpu {
                String::new()
            } else {
                format!(
                    " (fell back to the CPU: {})",
                    stream.fallback_reason().unwrap_or("?")
                )
            }
        ),
    });
    Ok(rows)
}

fn gaussian_row(gpu: Option<Arc<Gpu>>) -> ptxflow::Result<Row> {
    use ptxflow::gaussian::{demo, FieldOptions, GaussianField, GpuGaussianField};
    let config = demo::FitConfig::default();
    let r = match gpu {
        Some(g) => demo::fit(
            &mut GpuGaussianField::<f32>::new(g, FieldOptions::default())?,
            &config,
        )?,
        None => demo::fit(
            &mut GaussianField::<f32>::new(FieldOptions::default())?,
            &config,
        )?,
    };
    Ok(Row {
        pipeline: format!("gaussian: fit {} Gaussians, {} pts", r.gaussians, r.points),
        device: r.device.to_string(),
        seconds: r.elapsed.as_secs_f64(),
        agreement: format!(
            "loss {:.2e} -> {:.2e} in {} steps",
            r.first_loss, r.last_loss, r.steps
        ),
    })
}

fn rnn_rows(gpu: Option<Arc<Gpu>>) -> ptxflow::Result<Vec<Row>> {
    let r = ptxflow::rnn::demo::run(gpu)?;
    let chain_agreement = match r.chain_rel_error {
        Some(e) => format!("max |gpu - f64 ref| / max |ref| = {e:.1e}"),
        None => "f64 reference (no GPU)".into(),
    };
    Ok(vec![
        Row {
            pipeline: format!("rnn: encode+GRU({} steps)+low-rank, B={}", r.steps, r.batch),
            device: r.device.into(),
            seconds: r.chain_seconds,
            agreement: chain_agreement,
        },
        Row {
            pipeline: format!("rnn: rSVD {0}x{0} rank {1}", r.rsvd_size, r.rank),
            device: r.device.into(),
            seconds: r.rsvd_seconds,
            agreement: format!(
                "error {:.4}x optimal; |U^T U - I| {:.1e}, |V^T V - I| {:.1e}",
                r.rsvd_error_ratio, r.u_orthonormality, r.v_orthonormality
            ),
        },
    ])
}
