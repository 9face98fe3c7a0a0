//! 3-vectors with known-zero entries, for the cross-product forms of the paired-point
//! contributions (f64 in [`super::cross`], f32 in [`super::mixed`]): no instruction is emitted
//! for a product with a known zero.

use crate::ptx::*;

/// A 3-vector whose entries may be known zero (`None`).
pub(super) type V3<T> = [Option<Reg<T>>; 3];

/// `Σ a_k v_k` over the entries known on both sides; `None` when all are zero.
pub(super) fn dot<T: Float + Num>(b: &mut KernelBuilder, a: &V3<T>, v: &V3<T>) -> Option<Reg<T>> {
    let mut s: Option<Reg<T>> = None;
    for k in 0..3 {
        if let (Some(x), Some(y)) = (a[k], v[k]) {
            s = Some(match s {
                None => b.mul(x, y),
                Some(t) => b.fma(x, y, t),
            });
        }
    }
    s
}

/// `u × v` with known zeros skipped.
pub(super) fn cross<T: Float + Num>(b: &mut KernelBuilder, u: &V3<T>, v: &V3<T>) -> V3<T> {
    let term = |b: &mut KernelBuilder, i: usize, j: usize| -> Option<Reg<T>> {
        // u_i v_j − u_j v_i
        let p = match (u[i], v[j]) {
            (Some(x), Some(y)) => Some(b.mul(x, y)),
            _ => None,
        };
        match (u[j], v[i], p) {
            (Some(x), Some(y), Some(p)) => {
                let ny = b.neg(y);
                Some(b.fma(x, ny, p))
            }
            (Some(x), Some(y), None) => {
                let m = b.mul(x, y);
                Some(b.neg(m))
            }
            (_, _, p) => p,
        }
    };
    [term(b, 1, 2), term(b, 2, 0), term(b, 0, 1)]
}
