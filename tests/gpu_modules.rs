//! Loads every kernel of the table through the driver (JIT on the device) and checks that the
//! driver's view of each (registers, shared memory) is sane.

mod common;

use ptxflow::kernels::ALL_KERNELS;

#[test]
fn every_kernel_loads_on_the_gpu() {
    let Some(gpu) = common::gpu_or_skip("every_kernel_loads_on_the_gpu") else {
        return;
    };
    let f = gpu.facts();
    eprintln!(
        "device: {} (sm_{}{}, {} SMs)",
        f.name, f.compute_capability.0, f.compute_capability.1, f.sm_count
    );
    for &id in ALL_KERNELS {
        let r = gpu
            .kernel_resources(id)
            .unwrap_or_else(|e| panic!("{}: {e}", id.name()));
        eprintln!(
            "{:<28} {:>3} regs {:>6} B shared {:>4} B local  ({})",
            id.name(),
            r.registers,
            r.static_shared_bytes,
            r.local_bytes,
            r.target
        );
        assert!(r.registers > 0 && r.registers <= 255, "{}", id.name());
        assert_eq!(r.local_bytes, 0, "{} spills to local memory", id.name());
    }
    gpu.check_healthy().unwrap();
}

#[test]
fn no_device_is_an_error_with_a_reason() {
    // On a machine without a GPU this is the path users hit; with one, it must just work.
    match ptxflow::runtime::Gpu::open_default() {
        Ok(g) => assert!(!g.facts().name.is_empty()),
        Err(e) => {
            assert!(e.is_no_device(), "{e}");
            assert!(!e.to_string().is_empty());
        }
    }
}

/// SAXPY written with the structured builder calls (typed pointers, grid-stride loop).
fn saxpy() -> ptxflow::ptx::Module {
    use ptxflow::ptx::*;
    let mut b = KernelBuilder::new("saxpy");
    b.maxntid(256, 1, 1);
    let (n, a) = (b.arg::<U32>("n"), b.arg::<F32>("a"));
    let (x, y) = (b.global_arg::<F32>("x"), b.global_arg::<F32>("y"));
    b.grid_stride_x(n, |b, i| {
        let xi = b.load_at(x, i);
        b.update_at(y, i, |b, yi| b.fma(a, xi, yi));
    });
    Module::single(Target::Sm75, b.finish())
}

/// Block-wide f64 sum of u32 values, one atomic per block.
fn block_sum() -> ptxflow::ptx::Module {
    use ptxflow::ptx::*;
    let mut b = KernelBuilder::new("block_sum");
    b.reqntid(256, 1, 1);
    let (x, n) = (b.global_arg::<U32>("x"), b.arg::<U32>("n"));
    let out = b.global_arg::<U64>("out");
    let acc = b.mov(0u64);
    b.grid_stride_x(n, |b, i| {
        let v = b.load_at(x, i);
        let v = b.cvt::<U64, U32>(v);
        b.add_to(acc, v);
    });
    let total = b.block_sum(acc);
    b.if_first_thread(|b| {
        let o = b.elem(out, 0u32);
        b.atomic_add(o, total);
    });
    Module::single(Target::Sm75, b.finish())
}

#[test]
fn checked_launches_reject_mismatches_before_the_driver() {
    use ptxflow::kernels::KernelId;
    use ptxflow::runtime::LaunchConfig;
    let Some(gpu) = common::gpu_or_skip("checked_launches_reject_mismatches_before_the_driver")
    else {
        return;
    };
    let s = gpu.stream();
    let k = gpu.kernel(KernelId::CoreReduceSum).unwrap();
    let x = s.clone_htod(&[1.0f32; 1000]).unwrap();
    let mut total = s.alloc_zeros::<f64>(1).unwrap();
    let n = 1000u32;
    let cfg = |threads: u32| LaunchConfig {
        grid_dim: (2, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: x holds n floats and total one f64; rejected launches never reach the driver.
    let wrong_block = unsafe {
        k.launch(s, cfg(1024))
            .arg(&x)
            .arg(&n)
            .arg(&mut total)
            .launch()
    };
    let e = wrong_block.unwrap_err();
    assert!(matches!(e, ptxflow::Error::Launch { .. }), "{e}");
    assert!(e.to_string().contains(".reqntid 256"), "{e}");
    let n64 = 1000u64;
    // SAFETY: as above.
    let wrong_type = unsafe {
        k.launch(s, cfg(256))
            .arg(&x)
            .arg(&n64)
            .arg(&mut total)
            .launch()
    };
    assert!(wrong_type
        .unwrap_err()
        .to_string()
        .contains("argument 1 (`n`)"));
    // SAFETY: as above.
    let missing = unsafe { k.launch(s, cfg(256)).arg(&x).arg(&n).launch() };
    assert!(missing
        .unwrap_err()
        .to_string()
        .contains("2 arguments given"));
    // SAFETY: as above; this one is right.
    unsafe {
        k.launch(s, cfg(256))
            .arg(&x)
            .arg(&n)
            .arg(&mut total)
            .launch()
    }
    .unwrap();
    let t = s.clone_dtoh(&total).unwrap();
    assert_eq!(t[0], 1000.0);
    gpu.check_healthy().unwrap();
}

#[test]
fn user_kernels_load_through_the_module_cache_and_launch_checked() {
    use ptxflow::runtime::LaunchConfig;
    let Some(gpu) = common::gpu_or_skip("user_kernels_load_through_the_module_cache") else {
        return;
    };
    let s = gpu.stream();
    let m = saxpy();
    let k = gpu.load_module(&m, "saxpy").unwrap();
    let n = 10_000usize;
    let xs: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let ys: Vec<f32> = (0..n).map(|i| 1.0 - i as f32).collect();
    let x = s.clone_htod(&xs).unwrap();
    let mut y = s.clone_htod(&ys).unwrap();
    let (n32, a) = (n as u32, 3.0f32);
    let cfg = LaunchConfig {
        grid_dim: (8, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: x and y hold n floats; the kernel touches indices below n only.
    unsafe {
        k.launch(s, cfg)
            .arg(&n32)
            .arg(&a)
            .arg(&x)
            .arg(&mut y)
            .launch()
    }
    .unwrap();
    let got = s.clone_dtoh(&y).unwrap();
    for i in 0..n {
        assert_eq!(got[i], 3.0f32.mul_add(xs[i], ys[i]), "y[{i}]");
    }
    // The typed pointer is part of the contract: an f64 buffer for `x` is refused.
    let xd = s.clone_htod(&vec![0.0f64; n]).unwrap();
    // SAFETY: rejected before the driver.
    let e = unsafe {
        k.launch(s, cfg)
            .arg(&n32)
            .arg(&a)
            .arg(&xd)
            .arg(&mut y)
            .launch()
    };
    assert!(e.unwrap_err().to_string().contains("pointer to f32"));
    // Too many threads for .maxntid 256.
    let big = LaunchConfig {
        block_dim: (512, 1, 1),
        ..cfg
    };
    // SAFETY: rejected before the driver.
    let e = unsafe {
        k.launch(s, big)
            .arg(&n32)
            .arg(&a)
            .arg(&x)
            .arg(&mut y)
            .launch()
    };
    assert!(e.unwrap_err().to_string().contains(".maxntid"));

    // The same kernel as embedded text: loads through the cache, contract parsed from the PTX.
    let text = block_sum().emit().unwrap();
    let k = gpu.load_ptx("block_sum", &text).unwrap();
    let vals: Vec<u32> = (0..100_000u32)
        .map(|i| i.wrapping_mul(2654435761) >> 8)
        .collect();
    let xv = s.clone_htod(&vals).unwrap();
    let mut out = s.alloc_zeros::<u64>(1).unwrap();
    let nv = vals.len() as u32;
    let cfg = LaunchConfig {
        grid_dim: (40, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: xv holds nv values and out one u64.
    unsafe { k.launch(s, cfg).arg(&xv).arg(&nv).arg(&mut out).launch() }.unwrap();
    let got = s.clone_dtoh(&out).unwrap()[0];
    assert_eq!(got, vals.iter().map(|&v| u64::from(v)).sum::<u64>());
    gpu.check_healthy().unwrap();
}
