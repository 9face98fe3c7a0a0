//! `gaussian_prepare_{f32,f64}`: the prepared device layout ([`PREP_STRIDE`] per Gaussian, see
//! [`super::common`]) and the compensation records ([`COMP_STRIDE`]) from packed Gaussians
//! (10 scalars each, `crate::gaussian::layout`), on the device. The host computes the same in
//! `crate::gaussian::layout::prepare` and `GpuGaussianField`'s staging; this kernel exists for
//! callers whose Gaussians never leave the device (the PyTorch op), and rounds every operation
//! as the host does: `a_k = Lkk + eps`, `1/a_k` correctly rounded, `c = ((u * 1/a0) * 1/a1) *
//! 1/a2` with u = (2 pi)^-3/2 rounded to the type, `w c`, then `w c 2^o` and `c 2^o` as f64
//! products rounded once; the f32 compensation records take `a_k` exactly in f64 and flag the
//! Gaussian when `crate::gaussian::layout::kappa_estimate` (same f64 operations, same order)
//! exceeds `crate::gaussian::layout::COMPENSATE_KAPPA`. f64 writes no flag (the host never
//! compensates f64). It does not validate: non-finite values or a non-positive diagonal pass
//! through as inf or NaN.
//!
//! Parameters: `(packed, num_gaussians, n_pad, normalised, diag_eps, diag_eps_f64, exp_scale,
//! prep, comp)`; threads j < n_pad (grid-stride, blocks of exactly [`BLOCK`]) write prepared
//! Gaussian j (zero for j >= num_gaussians, the padding) and its compensation record. `prep` and
//! `comp` must be 16-byte aligned.

use super::common::*;
use crate::ptx::*;

/// Threads per block (required).
pub const BLOCK: u32 = 256;
/// Kappa threshold above which an f32 Gaussian is compensated (`layout::COMPENSATE_KAPPA`).
pub const COMPENSATE_KAPPA: f64 = 16.0;

/// f32 preparation.
pub fn build_f32(target: Target) -> Module {
    build::<F32>(target)
}

/// f64 preparation.
pub fn build_f64(target: Target) -> Module {
    build::<F64>(target)
}

/// One Gaussian's loaded scalars and the values both types derive alike.
struct Head<T: KFloat> {
    g: [Reg<T>; 10],
    a: [Reg<T>; 3],
    norm: Reg<T>,
    weight_norm: Reg<T>,
}

fn build<T: KFloat>(target: Target) -> Module {
    let mut b = KernelBuilder::new(&format!("gaussian_prepare_{}", T::SUFFIX));
    b.reqntid(BLOCK, 1, 1);
    let packed = b.param::<U64>("packed");
    let n = b.param::<U32>("num_gaussians");
    let n_pad = b.param::<U32>("n_pad");
    let normalised = b.param::<U32>("normalised");
    let eps = b.param::<T>("diag_eps");
    let eps64 = b.param::<F64>("diag_eps_f64");
    let scale = b.param::<F64>("exp_scale");
    let prep = b.param::<U64>("prep");
    let comp = b.param::<U64>("comp");
    let packed = b.global_ptr(&packed);
    let n = b.ld_param(&n);
    let n_pad = b.ld_param(&n_pad);
    let normalised = b.ld_param(&normalised);
    let eps = b.ld_param(&eps);
    // Only f32 rounds through f64 and compensates (f64 leaves both parameters unread).
    let wide = T::BYTES == 4;
    let eps64 = wide.then(|| b.ld_param(&eps64));
    let scale = wide.then(|| b.ld_param(&scale));
    let prep = b.global_ptr(&prep);
    let comp = b.global_ptr(&comp);
    let norm_on = b.setp(Cmp::Ne, normalised, 0u32);
    let start = b.global_tid_x();
    let step = b.grid_size_x();
    b.for_range(start, n_pad, step, |b, j, _| {
        let prow = b.index_addr(prep, j, PREP_STRIDE * T::BYTES);
        let crow = b.index_addr(comp, j, COMP_STRIDE * T::BYTES);
        let inside = b.setp(Cmp::Lt, j, n);
        b.if_else(
            inside,
            |b| {
                let src = b.index_addr(packed, j, 10 * T::BYTES);
                let g = [0i64, 1, 2, 3, 4, 5, 6, 7, 8, 9]
                    .map(|k| b.ld::<T>(Space::Global, Addr::from(src).off(k * T::BYTES as i64)));
                let a = [3usize, 5, 8].map(|k| b.add(g[k], eps));
                let inv = a.map(|x| b.rcp(x));
                let unit = T::imm((std::f64::consts::TAU).powf(-1.5));
                let c = b.mul(inv[0], unit);
                let c = b.mul(c, inv[1]);
                let c = b.mul(c, inv[2]);
                let norm = b.selp(c, T::imm(1.0), norm_on);
                let weight_norm = b.mul(g[9], norm);
                let neg = [4usize, 6, 7].map(|k| b.neg(g[k]));
                let h = Head {
                    g,
                    a,
                    norm,
                    weight_norm,
                };
                let (wn_scaled, norm_scaled) = scaled(b, &h, scale);
                let row = [
                    g[0],
                    g[1],
                    g[2],
                    neg[0],
                    neg[1],
                    neg[2],
                    inv[0],
                    inv[1],
                    inv[2],
                    wn_scaled,
                    norm_scaled,
                    g[9],
                ];
                store_prepared(b, Space::Global, prow.into(), &row);
                let rec = compensation(b, &h, eps64);
                for (k, v) in rec.iter().enumerate() {
                    b.st(
                        Space::Global,
                        Addr::from(crow).off((k as u32 * T::BYTES) as i64),
                        *v,
                    );
                }
            },
            |b| {
                let zero = b.mov(T::imm(0.0));
                store_prepared(b, Space::Global, prow.into(), &[zero; 12]);
                for k in 0..COMP_STRIDE {
                    b.st(
                        Space::Global,
                        Addr::from(crow).off((k * T::BYTES) as i64),
                        zero,
                    );
                }
            },
        );
    });
    Module::single(target, b.finish())
}

/// `(w c 2^o, c 2^o)`: for f32 the f64 products with `exp_scale` rounded once (as the host's
/// `T::from_f64(x.to_f64() * scale)`); for f64 the scale is 1 and the values pass as they are.
fn scaled<T: KFloat>(
    b: &mut KernelBuilder,
    h: &Head<T>,
    scale: Option<Reg<F64>>,
) -> (Reg<T>, Reg<T>) {
    let Some(scale) = scale else {
        return (h.weight_norm, h.norm);
    };
    let wide = |b: &mut KernelBuilder, x: Reg<T>| {
        let x64 = b.cvt::<F64, T>(x);
        let p = b.mul(x64, scale);
        b.cvt::<T, F64>(p)
    };
    (wide(b, h.weight_norm), wide(b, h.norm))
}

/// The compensation record `[-ah0, -ah1, -ah2, flag, -al0, -al1, -al2, 0]` (f64: no flag and
/// al = 0, as the host writes it).
fn compensation<T: KFloat>(
    b: &mut KernelBuilder,
    h: &Head<T>,
    eps64: Option<Reg<F64>>,
) -> [Reg<T>; 8] {
    let neg_a = h.a.map(|x| b.neg(x));
    let zero = b.mov(T::imm(0.0));
    let Some(eps64) = eps64 else {
        return [neg_a[0], neg_a[1], neg_a[2], zero, zero, zero, zero, zero];
    };
    let wide = |b: &mut KernelBuilder, x: Reg<T>| b.cvt::<F64, T>(x);
    let exact = [3usize, 5, 8].map(|k| {
        let x = wide(b, h.g[k]);
        b.add(x, eps64)
    });
    let lo = [0usize, 1, 2].map(|k| {
        let ah = wide(b, h.a[k]);
        let d = b.sub(exact[k], ah);
        let d = b.cvt::<T, F64>(d);
        b.neg(d)
    });
    let [l10, l20, l21] = [4usize, 6, 7].map(|k| wide(b, h.g[k]));
    let kappa = kappa_estimate(b, exact, l10, l20, l21);
    let over = b.setp(Cmp::Gt, kappa, COMPENSATE_KAPPA);
    let flag = b.selp(T::imm(1.0), T::imm(0.0), over);
    [
        neg_a[0], neg_a[1], neg_a[2], flag, lo[0], lo[1], lo[2], zero,
    ]
}

/// `||L||_F ||L^-1||_F` in f64, operation for operation as `layout::kappa_estimate`.
fn kappa_estimate(
    b: &mut KernelBuilder,
    a: [Reg<F64>; 3],
    l10: Reg<F64>,
    l20: Reg<F64>,
    l21: Reg<F64>,
) -> Reg<F64> {
    let a01 = b.mul(a[0], a[1]);
    let a12 = b.mul(a[1], a[2]);
    let a02 = b.mul(a[0], a[2]);
    let n10 = b.neg(l10);
    let i10 = b.div(n10, a01);
    let n21 = b.neg(l21);
    let i21 = b.div(n21, a12);
    let t = b.mul(l21, l10);
    let t = b.div(t, a[1]);
    let t = b.sub(t, l20);
    let i20 = b.div(t, a02);
    let sq = |b: &mut KernelBuilder, x: Reg<F64>| b.mul(x, x);
    let mut s = sq(b, a[0]);
    for x in [a[1], a[2], l10, l20, l21] {
        let q = sq(b, x);
        s = b.add(s, q);
    }
    let norm = b.sqrt(s);
    let mut t = b.mov(0.0f64);
    for x in a {
        let q = sq(b, x);
        let r = b.rcp(q);
        t = b.add(t, r);
    }
    for x in [i10, i20, i21] {
        let q = sq(b, x);
        t = b.add(t, q);
    }
    let inv_norm = b.sqrt(t);
    b.mul(norm, inv_norm)
}
