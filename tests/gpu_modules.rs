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
