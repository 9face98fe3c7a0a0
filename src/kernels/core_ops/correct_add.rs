//! `core_correct_add`: `out[i] = prediction[i] + correction[i]` for `i < n`, f32.
//!
//! Launch: 1-D grid of 1-D blocks of [`BLOCK`] threads (any grid size; the kernel grid-strides).
//! Memory: three f32 arrays of `n` elements in global memory; `out` may alias either input
//! (in-place correction), so inputs are read with plain `ld.global`, not the non-coherent path.
//!
//! When all three addresses are 16-byte aligned (checked in the kernel, uniformly for the whole
//! grid) each thread moves `float4`s: `n / 4` vector iterations, then the last `n % 4` elements
//! by threads 0..3 of the grid. Otherwise every element is handled with scalar loads.
//! Each element costs 12 bytes of traffic (two reads, one write) and one add.

use super::{vec4_grid_stride, Walk};
use crate::ptx::*;

/// Threads per block the host launches with.
pub const BLOCK: u32 = 256;

/// Builds the module.
pub fn build(target: Target) -> Module {
    let mut b = KernelBuilder::new("core_correct_add");
    b.maxntid(BLOCK, 1, 1);
    let pred = b.param::<U64>("prediction");
    let corr = b.param::<U64>("correction");
    let out = b.param::<U64>("out");
    let n = b.param::<U32>("n");
    let pred = b.global_ptr(&pred);
    let corr = b.global_ptr(&corr);
    let out = b.global_ptr(&out);
    let n = b.ld_param(&n);
    let tid = b.global_tid_x();
    let stride = b.grid_size_x();

    let any = b.or(pred, corr);
    let any = b.or(any, out);
    let low = b.and(any, 15u64);
    let aligned = b.setp(Cmp::Eq, low, 0u64);
    vec4_grid_stride(
        &mut b,
        aligned,
        Walk { n, tid, stride },
        |b, i| {
            let off = b.mul_wide(i, 16u32);
            let pa = b.add(pred, off);
            let ca = b.add(corr, off);
            let oa = b.add(out, off);
            let p = b.ld_v4::<F32>(Space::Global, pa);
            let c = b.ld_v4::<F32>(Space::Global, ca);
            let s = [
                b.add(p[0], c[0]),
                b.add(p[1], c[1]),
                b.add(p[2], c[2]),
                b.add(p[3], c[3]),
            ];
            b.st_v4(Space::Global, oa, s);
        },
        |b, i| scalar(b, pred, corr, out, i),
    );
    Module::single(target, b.finish())
}

fn scalar(b: &mut KernelBuilder, pred: Reg<U64>, corr: Reg<U64>, out: Reg<U64>, i: Reg<U32>) {
    let off = b.mul_wide(i, 4u32);
    let pa = b.add(pred, off);
    let ca = b.add(corr, off);
    let oa = b.add(out, off);
    let p = b.ld::<F32>(Space::Global, pa);
    let c = b.ld::<F32>(Space::Global, ca);
    let s = b.add(p, c);
    b.st(Space::Global, oa, s);
}
