//! A block-wide sum as a user kernel (15 builder lines): each thread accumulates a grid-stride
//! slice, the block reduces with warp shuffles and one shared array, thread 0 adds the block's
//! total to the output atomically. Emitted, snapshot-tested with insta, then run through the
//! checked launch API on the GPU, or in ptxflow's PTX interpreter when there is no GPU.
//!
//! `cargo run --release --example block_sum`

use ptxflow::ptx::*;
use ptxflow::runtime::{Gpu, LaunchConfig};
use ptxflow::sim::{self, Grid, Memory};

/// Threads per block (the kernel's `.reqntid`; the launch is checked against it).
const BLOCK: u32 = 256;

fn block_sum() -> Module {
    let mut b = KernelBuilder::new("block_sum");
    b.reqntid(BLOCK, 1, 1);
    let (x, n) = (b.global_arg::<F32>("x"), b.arg::<U32>("n"));
    let out = b.global_arg::<F32>("out");
    let acc = b.mov(0.0f32);
    b.grid_stride_x(n, |b, i| {
        let v = b.load_at(x, i);
        b.add_to(acc, v);
    });
    let total = b.block_sum(acc);
    b.if_first_thread(|b| {
        let o = b.elem(out, 0u32);
        b.atomic_add(o, total);
    });
    Module::single(Target::Sm75, b.finish())
}

fn main() -> ptxflow::Result<()> {
    let ptx = snapshot(block_sum)?;
    insta::assert_snapshot!("block_sum", ptx);

    let n = 1 << 20;
    // Small integers (0..16): every partial sum stays below 2^24, so it is exact in f32 and any
    // summation order gives the same.
    let x: Vec<f32> = (0..n as u64).map(|i| ((i * 7919) % 16) as f32).collect();
    let want: f64 = x.iter().map(|&v| f64::from(v)).sum();

    let (got, ran_on) = match Gpu::open_default() {
        Ok(gpu) => (run_gpu(&gpu, &x)?, "the GPU (checked launch)"),
        Err(e) if e.is_no_device() => {
            eprintln!("no GPU ({e}); running in the PTX interpreter");
            (run_sim(&ptx, &x)?, "the PTX interpreter")
        }
        Err(e) => return Err(e),
    };
    assert_eq!(f64::from(got), want, "block sum differs from the CPU");
    println!("block_sum: {n} values on {ran_on}: {got} (CPU: {want})");
    Ok(())
}

fn run_gpu(gpu: &Gpu, x: &[f32]) -> ptxflow::Result<f32> {
    let s = gpu.stream();
    let drv = ptxflow::Error::driver("block_sum buffers");
    let k = gpu.load_module(&block_sum(), "block_sum")?;
    let xd = s.clone_htod(x).map_err(drv)?;
    let mut out = s.alloc_zeros::<f32>(1).map_err(drv)?;
    let n = x.len() as u32;
    let cfg = LaunchConfig {
        grid_dim: (gpu.facts().sm_count * 2, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: x holds n floats and out one; argument types and the block shape are checked
    // against the kernel's contract before the launch.
    unsafe { k.launch(s, cfg).arg(&xd).arg(&n).arg(&mut out).launch() }?;
    Ok(s.clone_dtoh(&out).map_err(drv)?[0])
}

fn run_sim(ptx: &str, x: &[f32]) -> ptxflow::Result<f32> {
    let prog = sim::Program::parse(ptx)?;
    let mut mem = Memory::new();
    let xa = mem.upload("x", x);
    let out = mem.upload("out", &[0.0f32]);
    let args = [xa, sim::Arg::U32(x.len() as u32), out];
    prog.run(Grid::linear(8, BLOCK), &args, &mut mem)?;
    Ok(mem.download::<f32>("out").unwrap_or_default()[0])
}
