//! The Gaussian field's finishing kernels: deterministic sums of the partial results that the
//! forward and backward kernels leave per block (no atomics, fixed order).
//!
//! `gaussian_reduce_rows_{f32,f64}`: `out[m] = scale * sum_{r < rows} partial[r * stride + m]`
//! for m < len, rows added in index order ([`ROWS_IN_FLIGHT`] rows loaded before they are
//! added, in both kernels). Used for field values (forward chunks, scale 1) and
//! for dLoss/dx (backward Gaussian blocks, scale -1). Launch: blocks of exactly [`BLOCK`] threads,
//! any 1-D grid (grid-stride over m); 64-bit indices.
//!
//! `gaussian_finish_{f32,f64}`: per Gaussian j < N (grid-stride, blocks of [`BLOCK`]), adds the
//! backward's per-chunk sums A (10 per Gaussian, `partial[(r * n_pad + j) * 10 + k]`, rows in
//! order, 2-wide vector loads) and writes the packed gradient `out[j * 10 + k]`:
//! dmu = (w c 2^o) `A[0..3]`, dL = (w c 2^o) `A[3..9]`, dw = (c 2^o) `A[9]`, and when `normalised` != 0
//! dLkk -= w dw / a_k (k = 0, 1, 2 at slots 3, 5, 8), as `crate::gaussian::pair::add_normalisation_grad`.

use super::common::*;
use crate::ptx::*;

/// Threads per block (required) for both kernels.
pub const BLOCK: u32 = 256;
/// Rows loaded before they are added (in row order, so the sums are those of a one-row loop):
/// with few rows per thread the kernels are bound by load latency, not bandwidth.
pub const ROWS_IN_FLIGHT: u32 = 4;

/// Walks rows 0..`rows` in order, ROWS_IN_FLIGHT at a time while that many are left, then one
/// at a time; `body(b, r, count)` handles rows r..r + count (count is ROWS_IN_FLIGHT or 1).
fn for_rows(
    b: &mut KernelBuilder,
    rows: Reg<U32>,
    mut body: impl FnMut(&mut KernelBuilder, Reg<U32>, u32),
) {
    let rem = rows_rem(b, rows);
    let full = b.sub(rows, rem);
    b.for_range(0u32, full, ROWS_IN_FLIGHT, |b, r, _| {
        body(b, r, ROWS_IN_FLIGHT)
    });
    b.for_range(full, rows, 1u32, |b, r, _| body(b, r, 1));
}

/// rows mod ROWS_IN_FLIGHT.
fn rows_rem(b: &mut KernelBuilder, rows: Reg<U32>) -> Reg<U32> {
    b.and(rows, ROWS_IN_FLIGHT - 1)
}

const _: () = assert!(ROWS_IN_FLIGHT.is_power_of_two());

/// f32 row sums.
pub fn build_rows_f32(target: Target) -> Module {
    build_rows::<F32>(target)
}

/// f64 row sums.
pub fn build_rows_f64(target: Target) -> Module {
    build_rows::<F64>(target)
}

/// f32 gradient finish.
pub fn build_finish_f32(target: Target) -> Module {
    build_finish::<F32>(target)
}

/// f64 gradient finish.
pub fn build_finish_f64(target: Target) -> Module {
    build_finish::<F64>(target)
}

fn build_rows<T: KFloat>(target: Target) -> Module {
    let mut b = KernelBuilder::new(&format!("gaussian_reduce_rows_{}", T::SUFFIX));
    b.reqntid(BLOCK, 1, 1);
    let partial = b.param::<U64>("partial");
    let rows = b.param::<U32>("rows");
    let stride = b.param::<U32>("stride");
    let len = b.param::<U32>("len");
    let scale = b.param::<T>("scale");
    let out = b.param::<U64>("out");
    let partial = b.global_ptr(&partial);
    let rows = b.ld_param(&rows);
    let stride = b.ld_param(&stride);
    let len = b.ld_param(&len);
    let scale = b.ld_param(&scale);
    let out = b.global_ptr(&out);
    let start = b.global_tid_x();
    let step = b.grid_size_x();
    b.for_range(start, len, step, |b, m, _| {
        let acc = b.mov(T::imm(0.0));
        for_rows(b, rows, |b, r, count| {
            let a = addr2d(b, partial, r, stride, m, T::BYTES);
            let step = b.mul_wide(stride, T::BYTES);
            let mut at = a;
            let mut vals = Vec::new();
            for u in 0..count {
                if u > 0 {
                    at = b.add(at, step);
                }
                vals.push(b.ld::<T>(Space::GlobalNc, at));
            }
            for v in vals {
                let s = b.add(acc, v);
                b.mov_to(acc, s);
            }
        });
        let v = b.mul(acc, scale);
        let a = b.index_addr(out, m, T::BYTES);
        b.st(Space::Global, a, v);
    });
    Module::single(target, b.finish())
}

fn build_finish<T: KFloat>(target: Target) -> Module {
    let mut b = KernelBuilder::new(&format!("gaussian_finish_{}", T::SUFFIX));
    b.reqntid(BLOCK, 1, 1);
    let partial = b.param::<U64>("partial");
    let rows = b.param::<U32>("rows");
    let n_pad = b.param::<U32>("n_pad");
    let prep = b.param::<U64>("prep");
    let n = b.param::<U32>("num_gaussians");
    let normalised = b.param::<U32>("normalised");
    let out = b.param::<U64>("out");
    let partial = b.global_ptr(&partial);
    let rows = b.ld_param(&rows);
    let n_pad = b.ld_param(&n_pad);
    let prep = b.global_ptr(&prep);
    let n = b.ld_param(&n);
    let normalised = b.ld_param(&normalised);
    let out = b.global_ptr(&out);
    let norm_on = b.setp(Cmp::Ne, normalised, 0u32);
    let start = b.global_tid_x();
    let step = b.grid_size_x();
    b.for_range(start, n, step, |b, j, _| {
        let acc = [(); GRAD_STRIDE as usize].map(|_| b.mov(T::imm(0.0)));
        for_rows(b, rows, |b, r, count| {
            let a = addr2d(b, partial, r, n_pad, j, GRAD_STRIDE * T::BYTES);
            let step = b.mul_wide(n_pad, GRAD_STRIDE * T::BYTES);
            let mut at = a;
            let mut rows_vals = Vec::new();
            for u in 0..count {
                if u > 0 {
                    at = b.add(at, step);
                }
                let vals: Vec<Reg<T>> = (0..(GRAD_STRIDE / 2) as usize)
                    .flat_map(|h| {
                        b.ld_v2::<T>(
                            Space::GlobalNc,
                            Addr::from(at).off((2 * h) as i64 * i64::from(T::BYTES)),
                        )
                    })
                    .collect();
                rows_vals.push(vals);
            }
            for vals in rows_vals {
                for (k, v) in vals.into_iter().enumerate() {
                    let s = b.add(acc[k], v);
                    b.mov_to(acc[k], s);
                }
            }
        });
        let src = b.index_addr(prep, j, PREP_STRIDE * T::BYTES);
        let pr = load_prepared::<T>(b, Space::GlobalNc, src.into());
        let (wn, cn, w) = (
            pr[PREP_WEIGHT_NORM as usize],
            pr[PREP_NORM as usize],
            pr[PREP_WEIGHT as usize],
        );
        let inv = [pr[6], pr[7], pr[8]];
        let mut o: Vec<Reg<T>> = (0..9).map(|k| b.mul(wn, acc[k])).collect();
        let dw = b.mul(cn, acc[9]);
        o.push(dw);
        let wg = b.mul(w, dw);
        for (slot, k) in [(3usize, 0usize), (5, 1), (8, 2)] {
            let t = b.mul(wg, inv[k]);
            let v = b.sub(o[slot], t);
            b.guarded(norm_on, false, |b| b.mov_to(o[slot], v));
        }
        let dst = b.index_addr(out, j, GRAD_STRIDE * T::BYTES);
        for h in 0..(GRAD_STRIDE / 2) as usize {
            b.st_v2(
                Space::Global,
                Addr::from(dst).off((2 * h) as i64 * i64::from(T::BYTES)),
                [o[2 * h], o[2 * h + 1]],
            );
        }
    });
    Module::single(target, b.finish())
}
