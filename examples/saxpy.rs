//! SAXPY (`y = a x + y`) as a user kernel, end to end: written with ptxflow's builder (8
//! lines), emitted as PTX, snapshot-tested with insta, then run through the checked launch API
//! on the GPU, or in ptxflow's PTX interpreter when there is no GPU.
//!
//! `cargo run --release --example saxpy`

use ptxflow::ptx::*;
use ptxflow::runtime::{Gpu, LaunchConfig};
use ptxflow::sim::{self, Grid, Memory};

/// The kernel: one thread per element in a grid-stride loop.
fn saxpy() -> Module {
    let mut b = KernelBuilder::new("saxpy");
    let (n, a) = (b.arg::<U32>("n"), b.arg::<F32>("a"));
    let (x, y) = (b.global_arg::<F32>("x"), b.global_arg::<F32>("y"));
    b.grid_stride_x(n, |b, i| {
        let xi = b.load_at(x, i);
        b.update_at(y, i, |b, yi| b.fma(a, xi, yi));
    });
    Module::single(Target::Sm75, b.finish())
}

fn main() -> ptxflow::Result<()> {
    // Emit (an error, not a panic, if the builder was misused) and snapshot: a change in the
    // emitted PTX fails here until reviewed with `cargo insta review`.
    let ptx = snapshot(saxpy)?;
    insta::assert_snapshot!("saxpy", ptx);

    let n = 100_000usize;
    let a = 2.5f32;
    let x: Vec<f32> = (0..n).map(|i| (i % 97) as f32 * 0.25).collect();
    let y0: Vec<f32> = (0..n).map(|i| 1.0 - (i % 13) as f32).collect();
    let want: Vec<f32> = x.iter().zip(&y0).map(|(x, y)| a.mul_add(*x, *y)).collect();

    let (y, ran_on) = match Gpu::open_default() {
        Ok(gpu) => (run_gpu(&gpu, a, &x, &y0)?, "the GPU (checked launch)"),
        Err(e) if e.is_no_device() => {
            eprintln!("no GPU ({e}); running in the PTX interpreter");
            (run_sim(&ptx, a, &x, &y0)?, "the PTX interpreter")
        }
        Err(e) => return Err(e),
    };
    assert_eq!(y, want, "saxpy result differs from the CPU");
    println!("saxpy: {n} elements on {ran_on}, identical to the CPU (fma per element)");
    Ok(())
}

fn run_gpu(gpu: &Gpu, a: f32, x: &[f32], y: &[f32]) -> ptxflow::Result<Vec<f32>> {
    let s = gpu.stream();
    let drv = ptxflow::Error::driver("saxpy buffers");
    let k = gpu.load_module(&saxpy(), "saxpy")?;
    let xd = s.clone_htod(x).map_err(drv)?;
    let mut yd = s.clone_htod(y).map_err(drv)?;
    let n = x.len() as u32;
    let cfg = LaunchConfig {
        grid_dim: (gpu.facts().sm_count * 4, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: x and y hold n floats and the kernel touches indices below n only; argument types
    // and the block shape are checked against the kernel's contract before the launch.
    unsafe {
        k.launch(s, cfg)
            .arg(&n)
            .arg(&a)
            .arg(&xd)
            .arg(&mut yd)
            .launch()
    }?;
    s.clone_dtoh(&yd).map_err(drv)
}

fn run_sim(ptx: &str, a: f32, x: &[f32], y: &[f32]) -> ptxflow::Result<Vec<f32>> {
    let prog = sim::Program::parse(ptx)?;
    let mut mem = Memory::new();
    let (xa, ya) = (mem.upload("x", x), mem.upload("y", y));
    let args = [sim::Arg::U32(x.len() as u32), sim::Arg::F32(a), xa, ya];
    prog.run(Grid::linear(16, 256), &args, &mut mem)?;
    Ok(mem.download("y").unwrap_or_default())
}
