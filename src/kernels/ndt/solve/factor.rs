//! The Newton step's two Cholesky factorisations over the solver warp and the triangular solves
//! (nalgebra's `Cholesky::new` and `Cholesky::solve`, operation for operation; see `newton.rs`).

use crate::ptx::*;

/// The lower triangle of a symmetric 6×6 matrix (`m[i][j]`, `j ≤ i`).
pub(super) type Lower = [[Option<Reg<F64>>; 6]; 6];

pub(super) fn at(m: &Lower, i: usize, j: usize) -> Reg<F64> {
    m[i][j].expect("lower-triangle entry present")
}

/// nalgebra's `Cholesky::new` of `a − τ I` (lanes 0..6: row `i` in lane `i`) and of `a`
/// (lanes 8..14), both at once, over the solver warp: column by column, lane `j`'s pivot is
/// broadcast, its square root taken, rows below divided, and the columns to its right updated
/// in every row at once (right-looking). Each entry sees the same subtractions in the same
/// order (`k` ascending) with the same products as nalgebra's left-looking loop, so the
/// factors are equal bit for bit. Returns the factor of `a` (in every lane) and whether each
/// factorisation had only positive pivots.
#[allow(clippy::needless_range_loop)] // i, c index the matrix, the lane predicates and the rows
pub(super) fn cholesky_pair(
    b: &mut KernelBuilder,
    a: &Lower,
    tau: Reg<F64>,
    lane: Reg<U32>,
    yes: Reg<Pred>,
    safe: bool,
) -> (Lower, Reg<Pred>, Reg<Pred>) {
    let li = b.and(lane, 7u32);
    // OPT_SAFE_LANES: lanes 16..32 mirror lanes 0..16 (else they factor zeros).
    let (base, shifted) = if safe {
        let base = b.and(lane, 8u32);
        (base, b.setp(Cmp::Eq, base, 0u32))
    } else {
        (b.and(lane, 24u32), b.setp(Cmp::Lt, lane, 8u32))
    };
    let real_row = safe.then(|| b.setp(Cmp::Lt, li, 6u32));
    let is: [Reg<Pred>; 6] = std::array::from_fn(|i| b.setp(Cmp::Eq, li, i as u32));
    let row: [Reg<F64>; 6] = [(); 6].map(|_| b.mov(0.0f64));
    for i in 0..6 {
        for c in 0..=i {
            let v = if c == i {
                let sh = b.sub(at(a, i, i), tau);
                b.selp(sh, at(a, i, i), shifted)
            } else {
                at(a, i, c)
            };
            b.when(is[i], |b| b.mov_to(row[c], v));
        }
    }
    let mut ok = yes;
    for j in 0..6 {
        let src = b.add(base, j as u32);
        let d = b.shfl(Shfl::Idx, row[j], src);
        let pos = b.setp(Cmp::Gt, d, 0.0f64);
        ok = b.and(ok, pos);
        let r = b.sqrt(d);
        let (q, below) = if safe {
            // Only rows below the pivot use the quotient: the others divide r by itself.
            let below = b.setp(Cmp::Gt, li, j as u32);
            let used = b.and(below, real_row.expect("safe"));
            let num = b.selp(row[j], r, used);
            (b.div(num, r), below)
        } else {
            let q = b.div(row[j], r);
            (q, b.setp(Cmp::Gt, li, j as u32))
        };
        let v = b.selp(q, row[j], below);
        let v = b.selp(r, v, is[j]);
        b.mov_to(row[j], v);
        for c in j + 1..6 {
            let src = b.add(base, c as u32);
            let lcj = b.shfl(Shfl::Idx, row[j], src);
            let p = b.mul(lcj, row[j]);
            let nv = b.sub(row[c], p);
            let upd = b.setp(Cmp::Ge, li, c as u32);
            let v = b.selp(nv, row[c], upd);
            b.mov_to(row[c], v);
        }
    }
    let okw = b.selp(1u32, 0u32, ok);
    let ok1 = b.shfl(Shfl::Idx, okw, 0u32);
    let ok2 = b.shfl(Shfl::Idx, okw, 8u32);
    let ok1 = b.setp(Cmp::Ne, ok1, 0u32);
    let ok2 = b.setp(Cmp::Ne, ok2, 0u32);
    let mut l: Lower = [[None; 6]; 6];
    for i in 0..6 {
        for c in 0..=i {
            l[i][c] = Some(b.shfl(Shfl::Idx, row[c], 8 + i as u32));
        }
    }
    (l, ok1, ok2)
}

/// `Cholesky::solve`: `L y = g` forward, then `Lᵀ x = y` backward.
#[allow(clippy::needless_range_loop)] // i, r index the factor and the vector together
pub(super) fn solve(
    b: &mut KernelBuilder,
    l: &Lower,
    g: &[Reg<F64>; 6],
    fast: bool,
) -> [Reg<F64>; 6] {
    // OPT_FAST_DIV: x / d as q = x y, r = x − d q, q + r y with y = 1/d rounded.
    let recips: Option<Vec<(Reg<F64>, Reg<F64>)>> = fast.then(|| {
        (0..6)
            .map(|i| {
                let d = at(l, i, i);
                (b.rcp(d), b.neg(d))
            })
            .collect()
    });
    let quotient = |b: &mut KernelBuilder, x: Reg<F64>, i: usize| match &recips {
        Some(r) => {
            let (y, nd) = r[i];
            let q = b.mul(x, y);
            let e = b.fma(nd, q, x);
            b.fma(e, y, q)
        }
        None => b.div(x, at(l, i, i)),
    };
    let mut x = *g;
    for i in 0..6 {
        let c = quotient(b, x[i], i);
        x[i] = c;
        for r in i + 1..6 {
            let p = b.mul(c, at(l, r, i));
            x[r] = b.sub(x[r], p);
        }
    }
    for i in (0..6).rev() {
        let mut dot = b.mov(0.0f64);
        for r in i + 1..6 {
            let p = b.mul(at(l, r, i), x[r]);
            dot = b.add(dot, p);
        }
        let v = b.sub(x[i], dot);
        x[i] = quotient(b, v, i);
    }
    x
}
