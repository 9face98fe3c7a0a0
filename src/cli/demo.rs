//! `ptxflow demo`: every pipeline on generated data, on the GPU when there is one and otherwise
//! on the CPU, with its agreement with the CPU reference.

use ptxflow::ops::{CpuOps, GpuOps, VectorOps};
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
    print_table(&rows);
    Ok(())
}

fn print_table(rows: &[Row]) {
    println!("\n{:<34} {:<7} {:>11}  agreement with CPU reference", "pipeline", "device", "time");
    println!("{}", "-".repeat(90));
    for r in rows {
        println!("{:<34} {:<7} {:>8.3} ms  {}", r.pipeline, r.device, r.seconds * 1e3, r.agreement);
    }
}

fn core_ops(gpu: Option<Arc<Gpu>>) -> ptxflow::Result<Vec<Row>> {
    let n = 10_000_003;
    let mut rng = Rng::new(42);
    let p = rng.vec_f32(n, -100.0, 100.0);
    let c = rng.vec_f32(n, -1.0, 1.0);
    let mut reference = vec![0.0f32; n];
    CpuOps.correct_add(&p, &c, &mut reference)?;
    let ref_sum = CpuOps.sum(&p)?;
    let mut ops: Box<dyn VectorOps> = match gpu {
        Some(g) => Box::new(GpuOps::new(g)?),
        None => Box::new(CpuOps),
    };
    let mut out = vec![f32::NAN; n];
    ops.correct_add(&p, &c, &mut out)?; // warm-up (module load, allocation)
    let t = Instant::now();
    ops.correct_add(&p, &c, &mut out)?;
    let add_s = t.elapsed().as_secs_f64();
    let mismatches = out.iter().zip(&reference).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    let t = Instant::now();
    let sum = ops.sum(&p)?;
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
