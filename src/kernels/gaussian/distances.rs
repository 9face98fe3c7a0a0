//! `gaussian_distances_{f32,f64}`: the squared Mahalanobis distance matrix, `out[i * N + j] =
//! d_ij` (row-major B x N), for callers that want it (the fused forward never forms it).
//!
//! Launch: blocks of exactly [`BLOCK`] threads; grid (ceil(B / [`POINTS_PER_BLOCK`]), ceil(N /
//! BLOCK)) (points on x, which allows 2^31 - 1 blocks). Thread tid of block (y, x) owns Gaussian
//! j = x * BLOCK + tid (its
//! prepared constants in registers; j < n_pad always holds since the host pads to a multiple of
//! `common::GAUSSIAN_PAD`) and walks points y * POINTS_PER_BLOCK .. min(+POINTS_PER_BLOCK, B); every thread of the
//! block reads the same point (one broadcast load per coordinate) and consecutive threads store
//! consecutive j, so each row segment is written coalesced. Only j < N is stored. Indices into
//! `out` are 64-bit. Output-bandwidth bound: 4 (f32) or 8 (f64) bytes written per pair.

use super::common::*;
use crate::ptx::*;

/// Threads (Gaussians) per block (required).
pub const BLOCK: u32 = 128;
/// Points per block row.
pub const POINTS_PER_BLOCK: u32 = 32;

/// f32 module.
pub fn build_f32(target: Target) -> Module {
    build::<F32>(target)
}

/// f64 module.
pub fn build_f64(target: Target) -> Module {
    build::<F64>(target)
}

fn build<T: KFloat>(target: Target) -> Module {
    let mut b = KernelBuilder::new(&format!("gaussian_distances_{}", T::SUFFIX));
    b.reqntid(BLOCK, 1, 1);
    let prep = b.param::<U64>("prep");
    let n = b.param::<U32>("num_gaussians");
    let points = b.param::<U64>("points");
    let num_points = b.param::<U32>("num_points");
    let out = b.param::<U64>("out");
    let prep = b.global_ptr(&prep);
    let n = b.ld_param(&n);
    let points = b.global_ptr(&points);
    let num_points = b.ld_param(&num_points);
    let out = b.global_ptr(&out);

    let tid = b.special(Special::TidX);
    let py = b.special(Special::CtaidX);
    let gx = b.special(Special::CtaidY);
    let j = b.mad(gx, BLOCK, tid);
    let inside = b.setp(Cmp::Lt, j, n);
    let src = b.index_addr(prep, j, PREP_STRIDE * T::BYTES);
    let pr = load_prepared::<T>(&mut b, Space::GlobalNc, src.into());
    let g = GaussRegs::from_prepared(&pr);
    let i0 = b.mul(py, POINTS_PER_BLOCK);
    let i_stop = b.add(i0, POINTS_PER_BLOCK);
    let i_end = b.min(i_stop, num_points);
    b.for_range(i0, i_end, 1u32, |b, i, _| {
        let a = b.index_addr(points, i, 3 * T::BYTES);
        let x = [0i64, 1, 2]
            .map(|k| b.ld::<T>(Space::GlobalNc, Addr::from(a).off(k * i64::from(T::BYTES))));
        let (_, d) = solve(b, &g, x);
        b.guarded(inside, false, |b| {
            let dst = addr2d(b, out, i, n, j, T::BYTES);
            b.st(Space::Global, dst, d);
        });
    });
    Module::single(target, b.finish())
}
