//! The per-pair maths of the fused forward and backward with the exponential's scale folded into
//! per-Gaussian constants.
//!
//! With sigma = sqrt(log2(e) / 2) ([`sigma`]) and v' = sigma v, |v'|^2 = d log2(e) / 2, so the
//! kernel exponential e' = exp(-d/2) 2^-o is 2^-(o + |v'|^2): three multiply-adds from v' to the
//! exponent (no separate squared distance, no scaling step). v' is the forward substitution with
//! the scaled factor L' = L / sigma: per Gaussian the kernels use -L'_ab = -L_ab / sigma and 1/a'_k =
//! sigma / a_k ([`PairConsts`], made once per Gaussian per block from the prepared layout of
//! `common`, each constant rounded once from an f64 product). The back substitution with L'
//! gives s' = L'^-T v' = sigma^2 s. Every operation is a fused multiply-add (f32 and f64), in the
//! order of `crate::gaussian::pair`.
//! The exponential of t is `KFloat::exp2_neg` (`super::exp`).

use super::common::*;
use crate::ptx::*;

/// sigma = sqrt(log2(e) / 2).
pub fn sigma() -> f64 {
    (std::f64::consts::LOG2_E / 2.0).sqrt()
}

/// Scalars per Gaussian of the scaled constants in shared memory: mu (3), -L'10 -L'20 -L'21,
/// 1/a'0..2, w c 2^o, two zeros (three 16-byte vectors in f32).
pub const PAIR_STRIDE: u32 = 12;

/// One Gaussian's scaled per-pair constants in registers.
#[derive(Clone, Copy)]
pub struct PairConsts<T: KFloat> {
    /// Mean.
    pub mu: [Reg<T>; 3],
    /// -L10 / sigma, -L20 / sigma, -L21 / sigma.
    pub neg_l: [Reg<T>; 3],
    /// sigma / a_k.
    pub inv: [Reg<T>; 3],
    /// w c 2^o.
    pub weight_norm: Reg<T>,
}

impl<T: KFloat> PairConsts<T> {
    /// From the 12 scalars of a prepared Gaussian (`common`'s layout).
    pub fn from_prepared(b: &mut KernelBuilder, p: &[Reg<T>; 12]) -> Self {
        let s = sigma();
        PairConsts {
            mu: [p[0], p[1], p[2]],
            neg_l: [3usize, 4, 5].map(|k| T::scale_const(b, p[k], 1.0 / s)),
            inv: [6usize, 7, 8].map(|k| T::scale_const(b, p[k], s)),
            weight_norm: p[9],
        }
    }

    /// The [`PAIR_STRIDE`] scalars stored in shared memory (`zero` fills the last two).
    pub fn to_array(self, zero: Reg<T>) -> [Reg<T>; 12] {
        let (m, l, i) = (self.mu, self.neg_l, self.inv);
        [
            m[0],
            m[1],
            m[2],
            l[0],
            l[1],
            l[2],
            i[0],
            i[1],
            i[2],
            self.weight_norm,
            zero,
            zero,
        ]
    }

    /// Back from [`Self::to_array`]'s layout.
    pub fn from_array(p: &[Reg<T>; 12]) -> Self {
        PairConsts {
            mu: [p[0], p[1], p[2]],
            neg_l: [p[3], p[4], p[5]],
            inv: [p[6], p[7], p[8]],
            weight_norm: p[9],
        }
    }

    /// Whether every scaled constant is at most `bound` in magnitude (for the backward's
    /// unguarded path: then s' stays finite whenever |v'|^2 < `T::SAFE_T`).
    pub fn bounded(&self, b: &mut KernelBuilder, bound: f64) -> Reg<Pred> {
        let mut m = b.abs(self.neg_l[0]);
        for x in [
            self.neg_l[1],
            self.neg_l[2],
            self.inv[0],
            self.inv[1],
            self.inv[2],
        ] {
            let a = b.abs(x);
            m = b.max(m, a);
        }
        b.setp(Cmp::Le, m, T::imm(bound))
    }
}

/// Forward substitution with the scaled factor: v' = sigma v and t = o + |v'|^2 (the negated
/// exponent of 2, see the module docs).
pub fn solve_scaled<T: KFloat>(
    b: &mut KernelBuilder,
    g: &PairConsts<T>,
    x: [Reg<T>; 3],
) -> ([Reg<T>; 3], Reg<T>) {
    let r0 = b.sub(x[0], g.mu[0]);
    let r1 = b.sub(x[1], g.mu[1]);
    let r2 = b.sub(x[2], g.mu[2]);
    let v0 = b.mul(r0, g.inv[0]);
    let t1 = b.fma(g.neg_l[0], v0, r1);
    let v1 = b.mul(t1, g.inv[1]);
    let t2 = b.fma(g.neg_l[1], v0, r2);
    let t2 = b.fma(g.neg_l[2], v1, t2);
    let v2 = b.mul(t2, g.inv[2]);
    let t = b.fma(v0, v0, T::imm(T::EXP2_OFFSET));
    let t = b.fma(v1, v1, t);
    let t = b.fma(v2, v2, t);
    ([v0, v1, v2], t)
}

/// Back substitution with the scaled factor: s' = L'^-T v' (= sigma^2 s for v' = sigma v).
pub fn back_solve_scaled<T: KFloat>(
    b: &mut KernelBuilder,
    g: &PairConsts<T>,
    v: [Reg<T>; 3],
) -> [Reg<T>; 3] {
    let s2 = b.mul(v[2], g.inv[2]);
    let t1 = b.fma(g.neg_l[2], s2, v[1]);
    let s1 = b.mul(t1, g.inv[1]);
    let t0 = b.fma(g.neg_l[0], s1, v[0]);
    let t0 = b.fma(g.neg_l[1], s2, t0);
    let s0 = b.mul(t0, g.inv[0]);
    [s0, s1, s2]
}
