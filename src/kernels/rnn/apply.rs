//! `rnn_apply_small`: `out = X M` for a tall f32 `X` (`rows x W`, W = 48) and a small f64 `M`
//! (`W x W`), rounded to f32: the randomized SVD's last step, `U = Q Z_k` and `V = Q_b W_k`, both
//! in one launch: parameters `(x0, m0, out0, slabs0, x1, m1, out1)`; blocks below `slabs0` take
//! slab `ctaid` of product 0, the others slab `ctaid - slabs0` of product 1.
//!
//! Launch: `rows0 / SLAB + rows1 / SLAB` blocks of [`THREADS`] threads (`rows % SLAB == 0`). Each block stages
//! its 32 rows of X (f32) and all of M (f64) in shared memory; thread t computes row t / 8,
//! columns t % 8 + 8q (q < 6): `s = sum_a x[a] M[a][c]` with f64 fma, a ascending — the same
//! order as `rnn_orth`'s apply and `crate::rnn::cholqr::apply`. `out` must not alias `X`.

use super::slab::{stage_slab, SlabCopy, SLAB, WIDTH};
use crate::ptx::*;

/// Threads per block.
pub const THREADS: u32 = 256;

/// Builds the module.
pub fn build(target: Target) -> Module {
    let mut b = KernelBuilder::new("rnn_apply_small");
    b.reqntid(THREADS, 1, 1);
    let px0 = b.param::<U64>("x0");
    let pm0 = b.param::<U64>("m0");
    let pout0 = b.param::<U64>("out0");
    let pslabs0 = b.param::<U32>("slabs0");
    let px1 = b.param::<U64>("x1");
    let pm1 = b.param::<U64>("m1");
    let pout1 = b.param::<U64>("out1");
    let (x0, m0, out0) = (b.global_ptr(&px0), b.global_ptr(&pm0), b.global_ptr(&pout0));
    let (x1, m1, out1) = (b.global_ptr(&px1), b.global_ptr(&pm1), b.global_ptr(&pout1));
    let slabs0 = b.ld_param(&pslabs0);
    let xs = b.shared_array::<F32>("slab", SLAB * WIDTH);
    let ms = b.shared_array::<F64>("m", WIDTH * WIDTH);
    b.comment("setup: which product and slab this block takes");
    let tid = b.special(Special::TidX);
    let cta = b.special(Special::CtaidX);
    let second = b.setp(Cmp::Ge, cta, slabs0);
    let off = b.selp(slabs0, 0u32, second);
    let slab = b.sub(cta, off);
    let x = b.selp(x1, x0, second);
    let m = b.selp(m1, m0, second);
    let out = b.selp(out1, out0, second);
    b.comment("stage the slab of X and all of M");
    let staged = SlabCopy {
        src: x,
        space: Space::GlobalNc,
        dst: &xs,
        stride: WIDTH,
    };
    stage_slab(&mut b, &staged, slab, tid);
    for q in 0..9u32 {
        let e = b.add(tid, 256 * q);
        let ga = b.index_addr(m, e, 8);
        let v = b.ld::<F64>(Space::GlobalNc, ga);
        let sa = b.shared_index(&ms, e);
        b.st(Space::Shared, sa, v);
    }
    b.bar_sync();
    b.comment("out = X M: row t / 8, columns t % 8 + 8q (f64 fma, a ascending)");
    let r = b.shr(tid, 3u32);
    let cq = b.and(tid, 7u32);
    let xrow: Addr = {
        let i = b.mul(r, WIDTH);
        b.shared_index(&xs, i).into()
    };
    for q in 0..6u32 {
        let c = b.add(cq, 8 * q);
        let mcol: Addr = b.shared_index(&ms, c).into();
        let s = b.mov(0.0f64);
        for a in 0..WIDTH {
            let xv = b.ld::<F32>(Space::Shared, xrow.off(4 * i64::from(a)));
            let xv = b.cvt::<F64, F32>(xv);
            let mv = b.ld::<F64>(Space::Shared, mcol.off(8 * i64::from(a * WIDTH)));
            let ns = b.fma(xv, mv, s);
            b.mov_to(s, ns);
        }
        let o = b.cvt::<F32, F64>(s);
        let grow = b.mad(slab, SLAB, r);
        let e = b.mad(grow, WIDTH, c);
        let ga = b.index_addr(out, e, 4);
        b.st(Space::Global, ga, o);
    }
    Module::single(target, b.finish())
}
