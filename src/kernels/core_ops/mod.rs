//! Foundation kernels that later pipelines reuse: element-wise correction (`correct_add`) and
//! f32 -> f64 sum (`reduce_sum`); `crate::core_ops` runs them behind `VectorOps` under the same
//! names, with its CPU twin `CpuOps`.

pub mod correct_add;
pub mod reduce_sum;

use crate::ptx::*;

/// A grid-stride walk over `n` elements: this thread starts at `tid` (its global index) and steps
/// by `stride` (the grid's thread count).
struct Walk {
    n: Reg<U32>,
    tid: Reg<U32>,
    stride: Reg<U32>,
}

/// The walk both kernels share: when `aligned` (uniform over the grid), `vector(b, i)` for each
/// group `i < n / 4` of four elements, then `scalar(b, i)` for the last `n % 4` elements by
/// threads 0..3 of the grid; otherwise `scalar(b, i)` for every element `i < n`.
fn vec4_grid_stride(
    b: &mut KernelBuilder,
    aligned: Reg<Pred>,
    walk: Walk,
    vector: impl FnOnce(&mut KernelBuilder, Reg<U32>),
    scalar: impl Fn(&mut KernelBuilder, Reg<U32>),
) {
    let Walk { n, tid, stride } = walk;
    b.if_else(
        aligned,
        |b| {
            let n4 = b.shr(n, 2u32);
            b.for_range(tid, n4, stride, |b, i, _| vector(b, i));
            let done = b.shl(n4, 2u32);
            let i = b.add(done, tid);
            let tail = b.setp(Cmp::Lt, i, n);
            b.if_then(tail, |b| scalar(b, i));
        },
        |b| {
            b.for_range(tid, n, stride, |b, i, _| scalar(b, i));
        },
    );
}
