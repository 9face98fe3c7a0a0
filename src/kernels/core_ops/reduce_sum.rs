//! `core_reduce_sum`: `*total += sum(x[0..n])`, f32 inputs accumulated in f64.
//!
//! Launch: 1-D grid of blocks of exactly [`BLOCK`] threads (`.reqntid`); the kernel grid-strides,
//! so the host picks a grid that fills the device (a few blocks per SM). `*total` (one f64 in
//! global memory) must be zeroed by the host first.
//!
//! Each thread converts its f32 values to f64 and sums them (`float4` loads through the
//! non-coherent cache when `x` is 16-byte aligned; scalar loads otherwise). The block then
//! reduces: xor-shuffles within each warp (64-bit shuffles as two 32-bit halves), one f64 per warp
//! into the shared array `warp_sums` (addressed by its symbol), a barrier, warp 0 reduces the
//! [`BLOCK`]/32 partials, and lane 0 adds the block's total with one `red.global.add.f64`.
//! Traffic: 4 bytes per element read once; one atomic per block.

use super::{vec4_grid_stride, Walk};
use crate::ptx::*;

/// Threads per block (required).
pub const BLOCK: u32 = 256;

/// Builds the module.
pub fn build(target: Target) -> Module {
    let mut b = KernelBuilder::new("core_reduce_sum");
    b.reqntid(BLOCK, 1, 1);
    let x = b.param::<U64>("x");
    let n = b.param::<U32>("n");
    let total = b.param::<U64>("total");
    let x = b.global_ptr(&x);
    let n = b.ld_param(&n);
    let total = b.global_ptr(&total);
    let warp_sums = b.shared_array::<F64>("warp_sums", BLOCK / 32);
    let tid = b.global_tid_x();
    let stride = b.grid_size_x();
    let acc = b.mov(0.0f64);

    let low = b.and(x, 15u64);
    let aligned = b.setp(Cmp::Eq, low, 0u64);
    vec4_grid_stride(
        &mut b,
        aligned,
        Walk { n, tid, stride },
        |b, i| {
            let a = b.index_addr(x, i, 16);
            let v = b.ld_v4::<F32>(Space::GlobalNc, a);
            for r in v {
                let d = b.cvt::<F64, F32>(r);
                let s = b.add(acc, d);
                b.mov_to(acc, s);
            }
        },
        |b, i| add_scalar(b, x, i, acc),
    );

    let warp_total = b.warp_sum(acc);
    let thread = b.special(Special::TidX);
    let lane = b.and(thread, 31u32);
    let warp = b.shr(thread, 5u32);
    let lane0 = b.setp(Cmp::Eq, lane, 0u32);
    let slot = b.shared_index(&warp_sums, warp);
    b.when(lane0, |b| b.st(Space::Shared, slot, warp_total));
    b.bar_sync();
    let first_warp = b.setp(Cmp::Eq, warp, 0u32);
    b.if_then(first_warp, |b| {
        let partial = b.mov(0.0f64);
        let has = b.setp(Cmp::Lt, lane, BLOCK / 32);
        let src = b.shared_index(&warp_sums, lane);
        b.when(has, |b| {
            let loaded = b.ld::<F64>(Space::Shared, src);
            b.mov_to(partial, loaded);
        });
        let block_total = b.warp_sum(partial);
        b.when(lane0, |b| {
            b.red(Space::Global, AtomOp::Add, total, block_total)
        });
    });
    Module::single(target, b.finish())
}

fn add_scalar(b: &mut KernelBuilder, x: Reg<U64>, i: Reg<U32>, acc: Reg<F64>) {
    let a = b.index_addr(x, i, 4);
    let v = b.ld::<F32>(Space::GlobalNc, a);
    let d = b.cvt::<F64, F32>(v);
    let s = b.add(acc, d);
    b.mov_to(acc, s);
}
