//! The pieces of `gaussian_backward_lanes_f32` (see the module docs of [`super::lanes`]): a
//! Gaussian's constants from its shared-memory record, the staging of a tile, the per-pair
//! solves and the per-pair sums.

use super::fast_pairs::S2_SLOTS;
use super::lanes::{BLOCK, REC};
use crate::kernels::gaussian::common::*;
use crate::kernels::gaussian::forward_fast::{FAST_FLAG, FAST_STRIDE};
use crate::ptx::*;

/// One staged Gaussian's constants, read from its shared-memory record.
pub(super) struct Consts {
    pub(super) m: [Reg<F32>; 6],
    pub(super) nb: [Reg<F32>; 3],
    pub(super) n: [Reg<F32>; 6],
}

pub(super) fn load_consts(b: &mut KernelBuilder, at: Addr) -> Consts {
    let [m00, m10, m11, m20] = b.ld_v4::<F32>(Space::Shared, at.clone());
    let [m21, m22, nb0, nb1] = b.ld_v4::<F32>(Space::Shared, at.clone().off(16));
    let [nb2, n00, n01, n02] = b.ld_v4::<F32>(Space::Shared, at.clone().off(32));
    let [n11, n12, n22, _] = b.ld_v4::<F32>(Space::Shared, at.off(48));
    Consts {
        m: [m00, m10, m11, m20, m21, m22],
        nb: [nb0, nb1, nb2],
        n: [n00, n01, n02, n11, n12, n22],
    }
}
/// Point p of this thread (`first` + p BLOCK) and whether it exists.
pub(super) fn point_index(
    b: &mut KernelBuilder,
    first: Reg<U32>,
    num_points: Reg<U32>,
    p: u32,
) -> (Reg<U32>, Reg<Pred>) {
    let i = b.add(first, p * BLOCK);
    (i, b.setp(Cmp::Lt, i, num_points))
}

/// Loads point `i` (zeros unless `ok`).
pub(super) fn load_point(
    b: &mut KernelBuilder,
    points: Reg<U64>,
    i: Reg<U32>,
    ok: Reg<Pred>,
) -> [Reg<F32>; 3] {
    let x = [(); 3].map(|_| b.mov(0.0f32));
    b.guarded(ok, false, |b| {
        let a = b.index_addr(points, i, 12);
        for (k, xk) in x.iter().enumerate() {
            let v = b.ld::<F32>(Space::GlobalNc, Addr::from(a).off(4 * k as i64));
            b.mov_to(*xk, v);
        }
    });
    x
}

/// What the staging of one Gaussian reads and writes.
pub(super) struct StageCtx<'a> {
    pub(super) prep: Reg<U64>,
    pub(super) fast: Reg<U64>,
    pub(super) wmax: &'a SharedArray<F32>,
    pub(super) rec: &'a SharedArray<F32>,
    pub(super) mus: &'a SharedArray<F32>,
    pub(super) tflag: &'a SharedArray<U32>,
}

/// Thread `slot` (< the tile) stages Gaussian `j`: its record with N, its mean, and (lane 0 of each
/// staging warp) whether any of its warp's Gaussians needs the subtract form.
pub(super) fn stage(b: &mut KernelBuilder, s: &StageCtx<'_>, j: Reg<U32>, slot: Reg<U32>) {
    let zero = F32::imm(0.0);
    let limit = F32::imm(F32::GROWTH_LIMIT);
    let src = b.index_addr(s.fast, j, FAST_STRIDE * 4);
    let r = load_prepared::<F32>(b, Space::GlobalNc, src.into());
    let m = [r[0], r[1], r[2], r[3], r[4], r[5]];
    let nb = [r[6], r[7], r[8]];
    let wn = r[9];
    let [m00, m10, m11, m20, m21, m22] = m;
    let n = [m00, m10, m20, m11, m21, m22].map(|x| b.mul(wn, x));
    let psrc = b.index_addr(s.prep, j, PREP_STRIDE * 4);
    let [mu0, mu1, mu2, _] = b.ld_v4::<F32>(Space::GlobalNc, Addr::from(psrc));
    // x_lim = (2^100 - max |b|) / max row sum |M|; fast when the record is not flagged, every
    // constant is at most 2^100 (NaN fails) and the block's |x~|_inf is within x_lim.
    let a = m.map(|x| b.abs(x));
    let row1 = b.add(a[1], a[2]);
    let row2 = b.add(a[3], a[4]);
    let row2 = b.add(row2, a[5]);
    let rows = b.max(a[0], row1);
    let rows = b.max(rows, row2);
    let mut bm = b.abs(nb[0]);
    for x in [nb[1], nb[2]] {
        let ax = b.abs(x);
        bm = b.max(bm, ax);
    }
    let room = b.sub(limit, bm);
    let lim = b.div(room, rows);
    let mut big = b.max(rows, bm);
    for x in n {
        let ax = b.abs(x);
        big = b.max(big, ax);
    }
    let sane = b.setp(Cmp::Le, big, limit);
    let w0 = b.shared_index(s.wmax, 0u32);
    let [x0, x1, x2, x3] = b.ld_v4::<F32>(Space::Shared, w0);
    let xm = b.max(x0, x1);
    let xm = b.max(xm, x2);
    let xm = b.max(xm, x3);
    let fits = b.setp(Cmp::Le, xm, lim);
    let plain = b.setp(Cmp::Eq, r[FAST_FLAG as usize], zero);
    let ok = b.and(plain, sane);
    let ok = b.and(ok, fits);
    let special = b.not(ok);
    let any = b.vote_any(special);
    let z = b.mov(0.0f32);
    let at = b.mul(slot, REC);
    let dst = b.shared_index(s.rec, at);
    let d = Addr::from(dst);
    b.st_v4(Space::Shared, d.clone(), [m00, m10, m11, m20]);
    b.st_v4(Space::Shared, d.clone().off(16), [m21, m22, nb[0], nb[1]]);
    b.st_v4(Space::Shared, d.clone().off(32), [nb[2], n[0], n[1], n[2]]);
    b.st_v4(Space::Shared, d.off(48), [n[3], n[4], n[5], z]);
    let at = b.mul(slot, 4u32);
    let dst = b.shared_index(s.mus, at);
    b.st_v4(Space::Shared, Addr::from(dst), [mu0, mu1, mu2, z]);
    let lane = b.and(slot, 31u32);
    let first = b.setp(Cmp::Eq, lane, 0u32);
    b.if_then(first, |b| {
        let w = b.selp(1u32, 0u32, any);
        let warp = b.shr(slot, 5u32);
        let dst = b.shared_index(s.tflag, warp);
        b.st(Space::Shared, dst, w);
    });
}

/// v' = M x~ - b (the order of `forward_fast`) and t = o + |v'|^2.
pub(super) fn expanded(
    b: &mut KernelBuilder,
    c: &Consts,
    xt: [Reg<F32>; 3],
) -> ([Reg<F32>; 3], Reg<F32>) {
    let [m00, m10, m11, m20, m21, m22] = c.m;
    let [x0, x1, x2] = xt;
    let v0 = b.fma(m00, x0, c.nb[0]);
    let s1 = b.fma(m11, x1, c.nb[1]);
    let v1 = b.fma(m10, x0, s1);
    let s2 = b.fma(m22, x2, c.nb[2]);
    let s2 = b.fma(m21, x1, s2);
    let v2 = b.fma(m20, x0, s2);
    ([v0, v1, v2], exponent(b, [v0, v1, v2]))
}

/// v' = M (x - mu) and t = o + |v'|^2.
pub(super) fn subtract(
    b: &mut KernelBuilder,
    c: &Consts,
    mu: [Reg<F32>; 3],
    x: [Reg<F32>; 3],
) -> ([Reg<F32>; 3], Reg<F32>) {
    let [m00, m10, m11, m20, m21, m22] = c.m;
    let r = [0, 1, 2].map(|k| b.sub(x[k], mu[k]));
    let v0 = b.mul(m00, r[0]);
    let s1 = b.mul(m11, r[1]);
    let v1 = b.fma(m10, r[0], s1);
    let s2 = b.mul(m22, r[2]);
    let s2 = b.fma(m21, r[1], s2);
    let v2 = b.fma(m20, r[0], s2);
    ([v0, v1, v2], exponent(b, [v0, v1, v2]))
}

/// t = o + |v'|^2.
pub(super) fn exponent(b: &mut KernelBuilder, v: [Reg<F32>; 3]) -> Reg<F32> {
    let t = b.fma(v[0], v[0], F32::imm(F32::EXP2_OFFSET));
    let t = b.fma(v[1], v[1], t);
    b.fma(v[2], v[2], t)
}

/// One pair's sums: returns the Gaussian's S0, S1, S2 with this pair added to `sums` (None: the
/// first pair of the Gaussian, whose terms start the sums) and adds the point's terms to `pc`.
pub(super) fn pair(
    b: &mut KernelBuilder,
    c: &Consts,
    v: [Reg<F32>; 3],
    e: Reg<F32>,
    g: Reg<F32>,
    sums: Option<[Reg<F32>; GRAD_STRIDE as usize]>,
    pc: &[Reg<F32>; 3],
) -> [Reg<F32>; GRAD_STRIDE as usize] {
    let ge = b.mul(g, e);
    let gv = v.map(|x| b.mul(ge, x));
    let mut out = Vec::with_capacity(GRAD_STRIDE as usize);
    match sums {
        None => {
            out.push(ge);
            out.extend(gv);
            for (ra, cb) in S2_SLOTS {
                out.push(b.mul(gv[ra], v[cb]));
            }
        }
        Some(s) => {
            out.push(b.add(s[0], ge));
            for k in 0..3 {
                out.push(b.add(s[1 + k], gv[k]));
            }
            for (slot, (ra, cb)) in S2_SLOTS.into_iter().enumerate() {
                out.push(b.fma(gv[ra], v[cb], s[4 + slot]));
            }
        }
    }
    // P += N gv, N = (w c 2^o) M^T upper triangular: N00 N01 N02 N11 N12 N22.
    let [n00, n01, n02, n11, n12, n22] = c.n;
    let p0 = b.fma(n00, gv[0], pc[0]);
    let p0 = b.fma(n01, gv[1], p0);
    let p0 = b.fma(n02, gv[2], p0);
    let p1 = b.fma(n11, gv[1], pc[1]);
    let p1 = b.fma(n12, gv[2], p1);
    let p2 = b.fma(n22, gv[2], pc[2]);
    for (d, v) in pc.iter().zip([p0, p1, p2]) {
        b.mov_to(*d, v);
    }
    out.try_into().unwrap_or_else(|_| unreachable!("10 sums"))
}
