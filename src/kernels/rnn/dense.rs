//! `rnn_dense_f32` / `rnn_dense_f16`: the dense encoder `y = relu(x W + b)`.
//!
//! Shapes: `x` is `rows x input` f32, `W` is `input x output` (f32, or f16 bit patterns for the
//! f16-storage variant, widened exactly with `cvt.f32.f16`), `b` and each row of `y` have
//! `output` f32 values; all row-major.
//!
//! Launch: 1-D grid of [`BLOCK`]-thread blocks covering `rows * output` threads. Thread `t`
//! computes `y[t / output][t % output]`: `acc = 0; acc = fma(x[i], W[i][o], acc)` for i ascending
//! (f32, one rounding per term), then `relu(acc + b[o])`. Consecutive threads read consecutive
//! columns of W (coalesced) and, within a row, the same `x[i]` (a broadcast). The input loop runs
//! four terms per pass (loads first, then the fmas) and the remainder one at a time.

use crate::ptx::*;

/// Threads per block.
pub const BLOCK: u32 = 256;

/// How W is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// f32 values.
    F32,
    /// f16 bit patterns, widened exactly to f32.
    F16,
}

/// The f32-weight kernel.
pub fn build_f32(target: Target) -> Module {
    build(target, Storage::F32)
}

/// The f16-weight kernel.
pub fn build_f16(target: Target) -> Module {
    build(target, Storage::F16)
}

fn load_w(b: &mut KernelBuilder, w: Reg<U64>, idx: Reg<U32>, storage: Storage) -> Reg<F32> {
    match storage {
        Storage::F16 => {
            let a = b.index_addr(w, idx, 2);
            let bits = b.ld::<U16>(Space::GlobalNc, a);
            let h = b.bitcast::<F16, U16>(bits);
            b.cvt::<F32, F16>(h)
        }
        Storage::F32 => {
            let a = b.index_addr(w, idx, 4);
            b.ld::<F32>(Space::GlobalNc, a)
        }
    }
}

fn build(target: Target, storage: Storage) -> Module {
    let name = match storage {
        Storage::F16 => "rnn_dense_f16",
        Storage::F32 => "rnn_dense_f32",
    };
    let mut b = KernelBuilder::new(name);
    b.maxntid(BLOCK, 1, 1);
    let x = b.param::<U64>("x");
    let w = b.param::<U64>("w");
    let bias = b.param::<U64>("bias");
    let y = b.param::<U64>("y");
    let rows = b.param::<U32>("rows");
    let input = b.param::<U32>("input");
    let output = b.param::<U32>("output");
    let (x, w, bias, y) = (
        b.global_ptr(&x),
        b.global_ptr(&w),
        b.global_ptr(&bias),
        b.global_ptr(&y),
    );
    let (rows, input, output) = (b.ld_param(&rows), b.ld_param(&input), b.ld_param(&output));
    let t = b.global_tid_x();
    let total = b.mul(rows, output);
    let inside = b.setp(Cmp::Lt, t, total);
    b.if_then(inside, |b| {
        let row = b.div(t, output);
        let o = b.rem(t, output);
        let xrow = b.mul(row, input);
        let acc = b.mov(0.0f32);
        let n4 = b.and(input, !3u32);
        b.for_range(0u32, n4, 4u32, |b, i, _| {
            let mut xs = Vec::new();
            let mut ws = Vec::new();
            for u in 0..4u32 {
                let ii = b.add(i, u);
                let xi = b.add(xrow, ii);
                let xa = b.index_addr(x, xi, 4);
                xs.push(b.ld::<F32>(Space::GlobalNc, xa));
                let wi = b.mad(ii, output, o);
                ws.push(load_w(b, w, wi, storage));
            }
            for u in 0..4 {
                let s = b.fma(xs[u], ws[u], acc);
                b.mov_to(acc, s);
            }
        });
        b.for_range(n4, input, 1u32, |b, i, _| {
            let xi = b.add(xrow, i);
            let xa = b.index_addr(x, xi, 4);
            let xv = b.ld::<F32>(Space::GlobalNc, xa);
            let wi = b.mad(i, output, o);
            let wv = load_w(b, w, wi, storage);
            let s = b.fma(xv, wv, acc);
            b.mov_to(acc, s);
        });
        let ba = b.index_addr(bias, o, 4);
        let bv = b.ld::<F32>(Space::GlobalNc, ba);
        let v = b.add(acc, bv);
        let v = b.max(v, 0.0f32);
        let ya = b.index_addr(y, t, 4);
        b.st(Space::Global, ya, v);
    });
    Module::single(target, b.finish())
}
