//! `ptxflow info`: device facts (or why there is none) and each kernel's resources.

use ptxflow::kernels::ALL_KERNELS;
use ptxflow::runtime::{jit_cache_dir, jit_stats, precompile, Gpu};
use std::time::Instant;

pub fn run() -> ptxflow::Result<()> {
    println!("ptxflow {}", env!("CARGO_PKG_VERSION"));
    let t = Instant::now();
    let opened = Gpu::open_default();
    let context_ms = t.elapsed().as_secs_f64() * 1e3;
    let gpu = match opened {
        Ok(g) => g,
        Err(e) => {
            println!("GPU: none ({e})");
            println!("Pipelines run on the CPU. Kernels embedded (PTX, targets):");
            for &id in ALL_KERNELS {
                let ts: Vec<&str> = id.targets().iter().map(|t| t.name()).collect();
                println!("  {:<28} {}", id.name(), ts.join(", "));
            }
            return Ok(());
        }
    };
    let f = gpu.facts();
    println!("GPU {}: {}", f.ordinal, f.name);
    println!(
        "  compute capability {}.{} (loading PTX for {})",
        f.compute_capability.0, f.compute_capability.1, f.target
    );
    println!(
        "  {} SMs at {:.0} MHz, L2 {} MiB",
        f.sm_count,
        f.clock_khz as f64 / 1e3,
        f.l2_bytes >> 20
    );
    println!(
        "  memory {:.1} GiB, {}-bit bus, peak DRAM {:.0} GB/s",
        f.total_memory_bytes as f64 / (1u64 << 30) as f64,
        f.memory_bus_bits,
        f.peak_dram_gbs()
    );
    // Compile every kernel on all cores into the JIT cache first (only what is missing).
    let t = Instant::now();
    let compiled = precompile(&gpu, ALL_KERNELS);
    let precompile_ms = t.elapsed().as_secs_f64() * 1e3;
    println!("Kernels as the driver reports them after JIT:");
    println!(
        "  {:<28} {:>5} {:>12} {:>10} {:>8}",
        "kernel", "regs", "shared (B)", "local (B)", "PTX for"
    );
    for &id in ALL_KERNELS {
        match gpu.kernel_resources(id) {
            Ok(r) => println!(
                "  {:<28} {:>5} {:>12} {:>10} {:>8}",
                id.name(),
                r.registers,
                r.static_shared_bytes,
                r.local_bytes,
                r.target.name()
            ),
            Err(e) => println!("  {:<28} failed to load: {e}", id.name()),
        }
    }
    let j = jit_stats();
    let cache = match jit_cache_dir() {
        Some(d) => format!("JIT cache {}", d.display()),
        None => "on-disk JIT cache off (PTXFLOW_JIT_CACHE=1 turns it on; the driver's compute cache applies)".into(),
    };
    println!(
        "Start-up: context {context_ms:.1} ms; {} kernels compiled on all cores in {precompile_ms:.1} ms; \
         {} modules loaded ({} from the {cache}, {} compiled one by one), {:.1} ms in all",
        compiled,
        j.hits + j.misses,
        j.hits,
        j.misses,
        j.load_ms
    );
    Ok(())
}
