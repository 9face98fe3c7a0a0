//! `gaussian_backward_fast_f32`: the f32 fused backward with the expanded solve of
//! `gaussian_forward_fast_f32` and the Gaussian sums kept in v' until the end. Same launch
//! geometry, shared memory use, point sums and outputs as `gaussian_backward_f32` (the finishing
//! kernels are unchanged).
//!
//! # Per pair
//! v' = M x~ - b (6 multiply-adds from the host-staged records of `forward_fast`, x~ = x - o staged
//! per point), t = o_exp + |v'|^2 (3), e' = 2^-t (1), ge = g' e' (1), gv = ge v' (3), and
//! - Gaussian j: S0 += ge, S1 += gv (4 adds), S2_cb += gv_c v'_b for c >= b (6 multiply-adds);
//! - point i: P += N gv with N = (w c 2^o) M^T (6 multiply-adds; N upper triangular, each entry
//!   rounded once in the launch's setup);
//!
//! 30 instructions per pair against the unit form's 33. The sums the unit form forms per pair
//! (ge s' and ge s'_a v'_b with s' = M^T v') are linear in S1 and S2, so they are formed once per
//! Gaussian at the end, in f64 with M built exactly from the prepared f32 constants
//! (`fast_pairs::unscale`): slot a = (M^T S1)_a, slot (a, b) = (M^T S2)_ab / sigma, slot 9 =
//! sigma^2 S0, the quantities `gaussian_backward_f32` stores.
//!
//! # Bodies
//! As `Check::Batch` of the unit kernel, once per staged batch of points: the unguarded body
//! when every lane's Gaussians are plain (record flag 0, not compensated, N finite, and v'
//! finite for |x~|_inf <= x_lim, x_lim = (2^100 - max |b|) / max_k sum_l |M_kl| per Gaussian, the
//! warp's smallest) and the batch's largest |x~|_inf is at most x_lim; then every v' is finite
//! and a pair beyond the cutoff (e' = 0) adds exactly 0. Otherwise the guarded body of
//! `fast_pairs::fast_pair_sums` (selects; flagged Gaussians in the subtract and compensated
//! forms).

use super::fast_pairs::{fast_pair_sums, unscale, Body, FastPoint};
use super::smem::{load4, store4};
use super::{batch_points, psum_row, BLOCK, ROWS_PER_STEP};
use crate::kernels::gaussian::common::*;
use crate::kernels::gaussian::forward_fast::{FAST_FLAG, FAST_STRIDE};
use crate::kernels::gaussian::scaled::sigma;
use crate::ptx::*;

/// Every lane of the warp.
const ALL_LANES: u32 = 0xffff_ffff;

/// Build options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastOptions {
    /// Gaussians per thread (divides `GAUSSIAN_PAD / BLOCK`).
    pub q: u32,
    /// Keep N = (w c 2^o) M^T in registers (6 per Gaussian) for the point term, else form
    /// (w c 2^o) (M^T gv) per pair (3 more instructions).
    pub use_n: bool,
    /// `.maxnreg`, or none.
    pub max_registers: Option<u32>,
    /// Two points per iteration of the unguarded point loop (the last odd point alone).
    pub two_points: bool,
}

/// The built-in kernel's options (4 Gaussians per thread: 182 registers on sm_90 with ptxas
/// 13.0, 8 one-warp blocks per SM; 8 per thread spill with N in registers).
pub const FAST_OPTIONS: FastOptions = FastOptions {
    q: 4,
    use_n: true,
    max_registers: None,
    two_points: false,
};

/// The built-in module.
pub fn build_fast_f32(target: Target) -> Module {
    build_fast(target, FAST_OPTIONS)
}

/// The options of a comparison variant (`PTXFLOW_GAUSS_BWD_FAST`): `q<N>` Gaussians per thread
/// (4, 8 or 16), `n0` / `n1` without / with N in registers, `r<N>` a register cap, `p2` / `p1`
/// two points per iteration or one, joined by `-` (`q4-n1-p2`). None for names it does not
/// parse.
pub fn fast_variant_options(name: &str) -> Option<FastOptions> {
    let mut o = FAST_OPTIONS;
    for part in name.split('-') {
        let (key, val) = part.split_at(1.min(part.len()));
        let v: u32 = val.parse().ok()?;
        match key {
            "q" if [4, 8, 16].contains(&v) => o.q = v,
            "n" if v <= 1 => o.use_n = v == 1,
            "r" => o.max_registers = Some(v),
            "p" if (1..=2).contains(&v) => o.two_points = v == 2,
            _ => return None,
        }
    }
    Some(o)
}

/// One owned Gaussian: index, expanded constants, flags and sums.
pub(super) struct FastOwned {
    pub(super) j: Reg<U32>,
    /// M00 M10 M11 M20 M21 M22.
    pub(super) m: [Reg<F32>; 6],
    /// -b.
    pub(super) nb: [Reg<F32>; 3],
    /// The mean (the subtract body's r = x - mu).
    pub(super) mu: [Reg<F32>; 3],
    /// w c 2^o.
    pub(super) wn: Reg<F32>,
    /// N = wn M^T: N00 N10 N20 N11 N21 N22 (wn M00, wn M10, ...), when kept.
    pub(super) n: [Reg<F32>; 6],
    /// The record's flag or the compensation flag: the guarded body's subtract form.
    pub(super) special: Reg<Pred>,
    /// Compensated (badly conditioned).
    pub(super) comp_on: Reg<Pred>,
    /// S0, S1 (3), S2 (6).
    pub(super) sums: [Reg<F32>; GRAD_STRIDE as usize],
}

/// The kernel with `opts` (`gaussian_backward_fast_f32`).
pub fn build_fast(target: Target, opts: FastOptions) -> Module {
    let q_count = opts.q;
    let mut b = KernelBuilder::new("gaussian_backward_fast_f32");
    b.reqntid(BLOCK, 1, 1);
    if let Some(r) = opts.max_registers {
        b.maxnreg(r);
    }
    let prep = b.param::<U64>("prep");
    let fast = b.param::<U64>("fast");
    let n_pad = b.param::<U32>("n_pad");
    let points = b.param::<U64>("points");
    let grads = b.param::<U64>("grad_values");
    let num_points = b.param::<U32>("num_points");
    let chunk_len = b.param::<U32>("chunk_len");
    let partial_points = b.param::<U64>("partial_points");
    let partial_gauss = b.param::<U64>("partial_gauss");
    let comp = b.param::<U64>("comp");
    let origin = [
        b.param::<F32>("origin_x"),
        b.param::<F32>("origin_y"),
        b.param::<F32>("origin_z"),
    ];
    let prep = b.global_ptr(&prep);
    let fast = b.global_ptr(&fast);
    let n_pad = b.ld_param(&n_pad);
    let points = b.global_ptr(&points);
    let grads = b.global_ptr(&grads);
    let num_points = b.ld_param(&num_points);
    let chunk_len = b.ld_param(&chunk_len);
    let partial_points = b.global_ptr(&partial_points);
    let partial_gauss = b.global_ptr(&partial_gauss);
    let comp = b.global_ptr(&comp);
    let origin = origin.map(|o| b.ld_param(&o));
    let batch = batch_points::<F32>();
    // Per point: x~ and g' (`pts`), x and a pad (`ptsx`, the guarded body's subtract form).
    let pts = b.shared_array::<F32>("pts", batch * 4);
    let ptsx = b.shared_array::<F32>("ptsx", batch * 4);
    let psum = b.shared_array::<F32>("psum", BLOCK * psum_row::<F32>());

    let tid = b.special(Special::TidX);
    let gblock = b.special(Special::CtaidX);
    let chunk = b.special(Special::CtaidY);
    let zero = F32::imm(0.0);
    let limit = F32::imm(F32::GROWTH_LIMIT);

    b.comment("this thread's Gaussians: expanded records, flags, bounds, sums");
    let first_j = b.mad(gblock, BLOCK * q_count, tid);
    let mut own = Vec::new();
    // Per lane: (fast, sub) whether every Gaussian of the lane allows that body, and the
    // smallest x_lim of each (see the module docs).
    let mut plain: Option<(Reg<Pred>, Reg<Pred>)> = None;
    let mut x_lim: Option<(Reg<F32>, Reg<F32>)> = None;
    for q in 0..q_count {
        let j = b.add(first_j, q * BLOCK);
        let src = b.index_addr(fast, j, FAST_STRIDE * 4);
        let r = load_prepared::<F32>(&mut b, Space::GlobalNc, src.into());
        let m = [r[0], r[1], r[2], r[3], r[4], r[5]];
        let nb = [r[6], r[7], r[8]];
        let wn = r[9];
        let flagged = b.setp(Cmp::Ne, r[FAST_FLAG as usize], zero);
        let at = b.index_addr(comp, j, COMP_STRIDE * 4);
        let cflag = b.ld::<F32>(
            Space::GlobalNc,
            Addr::from(at).off(i64::from(COMP_FLAG * 4)),
        );
        let comp_on = b.setp(Cmp::Ne, cflag, zero);
        let special = b.or(flagged, comp_on);
        let psrc = b.index_addr(prep, j, PREP_STRIDE * 4);
        let [mu0, mu1, mu2, _] = b.ld_v4::<F32>(Space::GlobalNc, Addr::from(psrc));
        let mu = [mu0, mu1, mu2];
        let [m00, m10, m11, m20, m21, m22] = m;
        let n = if opts.use_n {
            [m00, m10, m20, m11, m21, m22].map(|x| b.mul(wn, x))
        } else {
            m
        };
        // rows = max row sum |M|; fast: x_lim = (2^100 - max |b|) / rows (inf for a zero
        // record), sub: 2^100 / rows - max |mu|; each plain when its constants are in range.
        let a = m.map(|x| b.abs(x));
        let row1 = b.add(a[1], a[2]);
        let row2 = b.add(a[3], a[4]);
        let row2 = b.add(row2, a[5]);
        let rows = b.max(a[0], row1);
        let rows = b.max(rows, row2);
        let max3 = |b: &mut KernelBuilder, v: [Reg<F32>; 3]| {
            let v = v.map(|x| b.abs(x));
            let m = b.max(v[0], v[1]);
            b.max(m, v[2])
        };
        let bm = max3(&mut b, nb);
        let mm = max3(&mut b, mu);
        let room = b.sub(limit, bm);
        let lim_fast = b.div(room, rows);
        let per = b.div(limit, rows);
        let lim_sub = b.sub(per, mm);
        let mut big = rows;
        for x in n {
            let ax = b.abs(x);
            big = b.max(big, ax);
        }
        let big = b.max(big, mm);
        let sane_sub = b.setp(Cmp::Le, big, limit);
        let big = b.max(big, bm);
        let sane_fast = b.setp(Cmp::Le, big, limit);
        let not_special = b.not(special);
        let ok_fast = b.and(not_special, sane_fast);
        let not_comp = b.not(comp_on);
        let ok_sub = b.and(not_comp, sane_sub);
        plain = Some(match plain {
            None => (ok_fast, ok_sub),
            Some((f, s)) => (b.and(f, ok_fast), b.and(s, ok_sub)),
        });
        x_lim = Some(match x_lim {
            None => (lim_fast, lim_sub),
            Some((f, s)) => (b.min(f, lim_fast), b.min(s, lim_sub)),
        });
        let sums = [(); GRAD_STRIDE as usize].map(|_| b.mov(zero));
        own.push(FastOwned {
            j,
            m,
            nb,
            mu,
            wn,
            n,
            special,
            comp_on,
            sums,
        });
    }
    let (plain_fast, plain_sub) =
        plain.unwrap_or_else(|| unreachable!("at least one Gaussian per thread"));
    let (lim_fast, lim_sub) =
        x_lim.unwrap_or_else(|| unreachable!("at least one Gaussian per thread"));
    let all_fast = b.vote_all(plain_fast);
    let all_sub = b.vote_all(plain_sub);
    let warp_min = |b: &mut KernelBuilder, v: Reg<F32>| {
        let mut m = v;
        for k in [16u32, 8, 4, 2, 1] {
            let o = b.shfl(Shfl::Xor, m, k);
            m = b.min(m, o);
        }
        m
    };
    let warp_lim_fast = warp_min(&mut b, lim_fast);
    let warp_lim_sub = warp_min(&mut b, lim_sub);

    let row = psum_row::<F32>();
    let my_row = b.mul(tid, row);
    let pad = b.mov(zero);
    // Point k's 16 bytes sit at pts + 16 k, ptsx + 16 k and (this thread's terms) row + 16 k.
    let pts0 = b.shared_index(&pts, 0u32);
    let ptsx0 = b.shared_index(&ptsx, 0u32);
    let row0 = b.shared_index(&psum, my_row);
    let to_x = b.sub(ptsx0, pts0);
    let to_row = b.sub(row0, pts0);
    let p_start = b.mul(chunk, chunk_len);
    let p_stop = b.add(p_start, chunk_len);
    let p_end = b.min(p_stop, num_points);
    b.for_range(p_start, p_end, batch, |b, batch_start, _| {
        b.comment("stage a batch of points: x - o and g / sigma^2, then x");
        let left = b.sub(p_end, batch_start);
        let count = b.min(left, batch);
        let mine = b.setp(Cmp::Lt, tid, count);
        let i = b.add(batch_start, tid);
        let x_mag = b.mov(zero);
        let xs_mag = b.mov(zero);
        b.if_then(mine, |b| {
            let a = b.index_addr(points, i, 12);
            let x = [0i64, 1, 2].map(|k| b.ld::<F32>(Space::GlobalNc, Addr::from(a).off(4 * k)));
            let xt = [0, 1, 2].map(|k| b.sub(x[k], origin[k]));
            let ax = xt.map(|v| b.abs(v));
            let m = b.max(ax[0], ax[1]);
            let m = b.max(m, ax[2]);
            b.mov_to(x_mag, m);
            let ax = x.map(|v| b.abs(v));
            let m = b.max(ax[0], ax[1]);
            let m = b.max(m, ax[2]);
            b.mov_to(xs_mag, m);
            let ga = b.index_addr(grads, i, 4);
            let g = b.ld::<F32>(Space::GlobalNc, ga);
            let s = sigma();
            let g = F32::scale_const(b, g, 1.0 / (s * s));
            let slot = b.shl(tid, 2u32);
            let dst = b.shared_index(&pts, slot);
            store4::<F32>(b, dst.into(), [xt[0], xt[1], xt[2], g]);
            let dst = b.shared_index(&ptsx, slot);
            store4::<F32>(b, dst.into(), [x[0], x[1], x[2], pad]);
        });
        b.warp_sync(ALL_LANES);
        // The point at `src` (its pts entry): this thread's pairs, its terms into the row.
        let point = |b: &mut KernelBuilder, src: Reg<U32>, body: Body| {
            b.comment("one point: this thread's pairs");
            let [x0, x1, x2, g] = load4::<F32>(b, src.into());
            let x = (body != Body::Fast).then(|| {
                let at = b.add(src, to_x);
                let [a, c, d, _] = load4::<F32>(b, at.into());
                [a, c, d]
            });
            let pc = [(); 3].map(|_| b.mov(zero));
            let ctx = FastPoint {
                own: &own,
                xt: [x0, x1, x2],
                x,
                g,
                pc,
                prep,
                comp,
            };
            fast_pair_sums(b, &ctx, body, opts.use_n);
            b.comment("this thread's terms of the point into its row (the fourth is unused)");
            let dst = b.add(src, to_row);
            store4::<F32>(b, dst.into(), [pc[0], pc[1], pc[2], pc[2]]);
        };
        let len = b.shl(count, 4u32);
        let end = b.add(pts0, len);
        b.comment("one body for the whole batch: its largest |x~|_inf and |x|_inf against the warp's limits");
        let warp_max = |b: &mut KernelBuilder, v: Reg<F32>| {
            let mut m = v;
            for k in [16u32, 8, 4, 2, 1] {
                let o = b.shfl(Shfl::Xor, m, k);
                m = b.max(m, o);
            }
            m
        };
        let m = warp_max(b, x_mag);
        let ms = warp_max(b, xs_mag);
        let fits = b.setp(Cmp::Le, m, warp_lim_fast);
        let fast_ok = b.and(all_fast, fits);
        let fits = b.setp(Cmp::Le, ms, warp_lim_sub);
        let sub_ok = b.and(all_sub, fits);
        let walk = |b: &mut KernelBuilder, body: Body| {
            b.for_range(pts0, end, 16u32, |b, a, _| point(b, a, body))
        };
        b.if_else(
            fast_ok,
            |b| {
                if opts.two_points {
                    let even = b.and(count, !1u32);
                    let even_len = b.shl(even, 4u32);
                    let even_end = b.add(pts0, even_len);
                    b.for_range(pts0, even_end, 32u32, |b, a, _| {
                        point(b, a, Body::Fast);
                        let a1 = b.add(a, 16u32);
                        point(b, a1, Body::Fast);
                    });
                    let odd = b.setp(Cmp::Ne, even, count);
                    b.if_then(odd, |b| point(b, even_end, Body::Fast));
                } else {
                    walk(b, Body::Fast);
                }
            },
            |b| b.if_else(sub_ok, |b| walk(b, Body::Sub), |b| walk(b, Body::Guarded)),
        );
        b.warp_sync(ALL_LANES);
        b.comment("point tid: add the rows of every lane in order and store");
        b.if_then(mine, |b| {
            let slot = b.shl(tid, 2u32);
            let src = b.shared_index(&psum, slot);
            let sums = [(); 3].map(|_| b.mov(zero));
            let step_bytes = ROWS_PER_STEP * row * 4;
            b.for_range(0u32, BLOCK / ROWS_PER_STEP, 1u32, |b, r, _| {
                let off = b.mul(r, step_bytes);
                let at = b.add(src, off);
                for l in 0..ROWS_PER_STEP {
                    let [v0, v1, v2, _] =
                        load4::<F32>(b, Addr::from(at).off(i64::from(l * row * 4)));
                    for (acc, v) in sums.iter().zip([v0, v1, v2]) {
                        let t = b.add(*acc, v);
                        b.mov_to(*acc, t);
                    }
                }
            });
            let dst = addr2d(b, partial_points, gblock, num_points, i, 12);
            for (c, v) in sums.into_iter().enumerate() {
                b.st(Space::Global, Addr::from(dst).off(c as i64 * 4), v);
            }
        });
    });

    b.comment("the sums in the unit kernel's terms (f64 transform per Gaussian) and stores");
    for o in &own {
        let src = b.index_addr(prep, o.j, PREP_STRIDE * 4);
        let pr = load_prepared::<F32>(&mut b, Space::GlobalNc, src.into());
        let out = unscale(&mut b, &pr, &o.sums);
        let dst = addr2d(&mut b, partial_gauss, chunk, n_pad, o.j, GRAD_STRIDE * 4);
        for (k, v) in out.into_iter().enumerate() {
            b.st(Space::Global, Addr::from(dst).off(k as i64 * 4), v);
        }
    }
    Module::single(target, b.finish())
}
