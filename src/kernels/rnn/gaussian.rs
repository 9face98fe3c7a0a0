//! `rnn_gaussian`: fills the randomized SVD's sketch `Omega` (`rows x ld` f32, row-major) with
//! standard normal values in the first `l` columns and zeros in the padding columns `l..ld`.
//!
//! Element (r, c < l) uses the counter `i = r * l + c`: two 32-bit hashes (`mathf::hash32` of
//! `2i` and `2i + 1` under the seed) give `u1 in (0, 1]` and `u2 in [0, 1)` (24 bits each), and
//! Box–Muller gives `sqrt(-2 ln u1) cos(2 pi u2 - pi)` (the sign flip from the `- pi` keeps
//! `cos.approx` in its accurate range [-pi, pi] and does not change the distribution). `lg2` and
//! `cos` are the approximate instructions: the values only need to be Gaussian, not to match a
//! reference bit for bit.
//!
//! Launch: 1-D grid-stride over `rows * ld` elements, [`BLOCK`] threads per block.

use super::mathf::hash32;
use crate::ptx::*;

/// Threads per block.
pub const BLOCK: u32 = 256;

/// Builds the module.
pub fn build(target: Target) -> Module {
    let mut b = KernelBuilder::new("rnn_gaussian");
    b.maxntid(BLOCK, 1, 1);
    let out = b.param::<U64>("out");
    let rows = b.param::<U32>("rows");
    let ld = b.param::<U32>("ld");
    let l = b.param::<U32>("l");
    let seed_lo = b.param::<U32>("seed_lo");
    let seed_hi = b.param::<U32>("seed_hi");
    let out = b.global_ptr(&out);
    let (rows, ld, l) = (b.ld_param(&rows), b.ld_param(&ld), b.ld_param(&l));
    let (slo, shi) = (b.ld_param(&seed_lo), b.ld_param(&seed_hi));
    let total = b.mul(rows, ld);
    let t = b.global_tid_x();
    let stride = b.grid_size_x();
    b.for_range(t, total, stride, |b, i, _| {
        let r = b.div(i, ld);
        let c = b.rem(i, ld);
        let v = b.mov(0.0f32);
        let live = b.setp(Cmp::Lt, c, l);
        b.if_then(live, |b| {
            let ctr = b.mad(r, l, c);
            let c2 = b.shl(ctr, 1u32);
            let h1 = hash32(b, c2, slo, shi);
            let c3 = b.add(c2, 1u32);
            let h2 = hash32(b, c3, slo, shi);
            let m1 = b.shr(h1, 8u32);
            let m1 = b.add(m1, 1u32);
            let m2 = b.shr(h2, 8u32);
            let u1 = b.cvt::<F32, U32>(m1);
            let u1 = b.mul(u1, 1.0f32 / 16_777_216.0);
            let u2 = b.cvt::<F32, U32>(m2);
            let u2 = b.mul(u2, 1.0f32 / 16_777_216.0);
            let lg = b.lg2_approx(u1);
            let rad2 = b.mul(lg, -2.0f32 * std::f32::consts::LN_2);
            let rad2 = b.max(rad2, 0.0f32);
            let rad = b.sqrt(rad2);
            let th = b.fma(u2, std::f32::consts::TAU, -std::f32::consts::PI);
            let cs = b.cos_approx(th);
            let g = b.mul(rad, cs);
            b.mov_to(v, g);
        });
        let a = b.index_addr(out, i, 4);
        b.st(Space::Global, a, v);
    });
    Module::single(target, b.finish())
}
