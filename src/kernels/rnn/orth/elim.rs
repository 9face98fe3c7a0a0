//! The per-block factorisation step of `rnn_orth` (CholeskyQR): the symmetric elimination
//! `G = L D L^T` of the 48 x 48 f64 Gram matrix with `E = L^{-1}` formed alongside, register
//! resident and one `bar.sync` per step (CPU mirror: `crate::rnn::cholqr::factor`).
//!
//! The matrix state is 2304 = 256 x 9 f64 values: the lower triangle `S_ac` (a >= c, 1176
//! values, numbered row by row) followed by the strictly lower triangle of E (`E_ac`, a > c,
//! 1128 values); thread t owns values t + 256 q, q = 0..9, in registers. Step j reads two
//! shared rows (rows are `LD` = 49 f64 apart) written one step earlier:
//! - `lcol[j][a] = S_aj` at step j (a >= j): the column being eliminated, `d_j = lcol[j][j]`;
//! - `erow[j][c] = E_jc` (c < j; final since step j - 1), `erow[j][j] = 1`, zeros above;
//!
//! and updates `S_ac -= m_a S_cj` (c > j) and `E_ac -= m_a E_jc` (a > j >= c) with
//! `m_a = S_aj * (1 / d_j)` (fma; a dead pivot d_j <= 0 gives 1 / d_j = 0). The other values
//! take the same instruction unmasked and either stay unchanged (they read a zero) or were
//! published already (their registers are dead; see `eliminate`). A value that became
//! final (column j + 1 of S, row j + 1 of E) is stored to row j + 1 of `lcol` / `erow` by its
//! owner right after its update, so step j + 1 only waits for one barrier. At the end `lcol`
//! holds `U = D L^T` row by row (`lcol[i][k] = U_ik`, k >= i) and `erow` holds E.

use crate::ptx::*;

use super::{LD, WIDTH};

const W: u32 = WIDTH;
const LOWER: u32 = W * (W + 1) / 2;
/// Values per thread (256 threads).
const PER: u32 = 9;

/// Ownership of the elimination's values by this thread (see the module notes).
pub struct Elim {
    /// Row of value q.
    a: Vec<Reg<U32>>,
    /// Column of value q.
    c: Vec<Reg<U32>>,
    /// Value q belongs to S (else to E); only value 4 mixes both kinds across threads.
    left: Vec<Option<bool>>,
    left4: Reg<Pred>,
    /// Shared address of `lcol[0][a]` (the multiplier's row is a + step offset).
    a_addr: Vec<Reg<U32>>,
    /// Shared address of `lcol[0][c]` (S values) or `erow[0][c]` (E values).
    src_addr: Vec<Reg<U32>>,
    /// Where the value is published: `lcol[c][a]` (S) or `erow[a][c]` (E).
    pub_addr: Vec<Reg<U32>>,
}

/// `(r, c)` with `idx = r (r + 1) / 2 + c`, `c <= r`: the row by row lower-triangle numbering.
fn tri_decode(b: &mut KernelBuilder, idx: Reg<U32>) -> (Reg<U32>, Reg<U32>) {
    let x = b.shl(idx, 3u32);
    let x = b.add(x, 1u32);
    let xf = b.cvt::<F32, U32>(x);
    let s = b.sqrt(xf);
    let s = b.sub(s, 1.0f32);
    let s = b.mul(s, 0.5f32);
    let r = b.cvt::<U32, F32>(s);
    // The float estimate may be one off either way: correct it exactly in integers.
    let r1 = b.add(r, 1u32);
    let r2 = b.add(r, 2u32);
    let t1 = b.mul(r1, r2);
    let t1 = b.shr(t1, 1u32);
    let up = b.setp(Cmp::Le, t1, idx);
    let r = b.selp(r1, r, up);
    let t0 = b.mul(r, r1);
    let t0 = b.shr(t0, 1u32);
    let down = b.setp(Cmp::Gt, t0, idx);
    let rm = b.sub(r, 1u32);
    let r = b.selp(rm, r, down);
    let rp = b.add(r, 1u32);
    let t = b.mul(r, rp);
    let t = b.shr(t, 1u32);
    let c = b.sub(idx, t);
    (r, c)
}

#[allow(clippy::needless_range_loop)] // q indexes several per-value arrays in lockstep
impl Elim {
    /// Decodes this thread's values and their shared addresses (once per launch).
    pub fn new(
        b: &mut KernelBuilder,
        tid: Reg<U32>,
        lcol: &SharedArray<F64>,
        erow: &SharedArray<F64>,
    ) -> Self {
        let mut a = Vec::new();
        let mut c = Vec::new();
        let mut left = Vec::new();
        let (mut a_addr, mut src_addr, mut pub_addr) = (Vec::new(), Vec::new(), Vec::new());
        let e4 = b.add(tid, 4 * 256u32);
        let left4 = b.setp(Cmp::Lt, e4, LOWER);
        for q in 0..PER {
            let e = b.add(tid, 256 * q);
            let kind = if 256 * (q + 1) <= LOWER {
                Some(true)
            } else if 256 * q >= LOWER {
                Some(false)
            } else {
                None
            };
            let idx = match kind {
                Some(true) => e,
                Some(false) => b.sub(e, LOWER),
                None => {
                    let r = b.sub(e, LOWER);
                    b.selp(e, r, left4)
                }
            };
            let (r, col) = tri_decode(b, idx);
            // E's strictly lower numbering is the lower numbering shifted down one row.
            let row = match kind {
                Some(true) => r,
                Some(false) => b.add(r, 1u32),
                None => {
                    let r1 = b.add(r, 1u32);
                    b.selp(r, r1, left4)
                }
            };
            let la = b.shared_index(lcol, row);
            let lc = b.shared_index(lcol, col);
            let ec = b.shared_index(erow, col);
            let li = b.mad(col, LD, row);
            let lp = b.shared_index(lcol, li);
            let ei = b.mad(row, LD, col);
            let ep = b.shared_index(erow, ei);
            let (src, publ) = match kind {
                Some(true) => (lc, lp),
                Some(false) => (ec, ep),
                None => (b.selp(lc, ec, left4), b.selp(lp, ep, left4)),
            };
            a_addr.push(la);
            src_addr.push(src);
            pub_addr.push(publ);
            a.push(row);
            c.push(col);
            left.push(kind);
        }
        Elim {
            a,
            c,
            left,
            left4,
            a_addr,
            src_addr,
            pub_addr,
        }
    }

    /// `p` restricted to the values of S (`left`) or of E (`!left`) for value q.
    fn only(&self, b: &mut KernelBuilder, q: usize, left: bool, p: Reg<Pred>) -> Reg<Pred> {
        match self.left[q] {
            Some(_) => p,
            None if left => b.and(p, self.left4),
            None => {
                let right = b.not(self.left4);
                b.and(p, right)
            }
        }
    }

    /// Zeroes `lcol` and sets `erow` to the identity (its diagonal and upper part never change).
    pub fn init_shared(
        &self,
        b: &mut KernelBuilder,
        tid: Reg<U32>,
        lcol: &SharedArray<F64>,
        erow: &SharedArray<F64>,
    ) {
        b.for_range(tid, W * LD, 256u32, |b, e, _| {
            let la = b.shared_index(lcol, e);
            b.st(Space::Shared, la, 0.0f64);
            let diag = b.rem(e, LD + 1);
            let on = b.setp(Cmp::Eq, diag, 0u32);
            let v = b.selp(1.0f64, 0.0f64, on);
            let ea = b.shared_index(erow, e);
            b.st(Space::Shared, ea, v);
        });
    }

    /// Loads this thread's values of `[G | 0]` from the global Gram matrix (`W x W` f64).
    pub fn load(&self, b: &mut KernelBuilder, gram: Reg<U64>) -> Vec<Reg<F64>> {
        (0..PER as usize)
            .map(|q| {
                if self.left[q] == Some(false) {
                    // E starts as the identity: its strictly lower values start at zero.
                    return b.mov(0.0f64);
                }
                let e = b.mad(self.a[q], W, self.c[q]);
                let ga = b.index_addr(gram, e, 8);
                let g = b.ld::<F64>(Space::Global, ga);
                match self.left[q] {
                    None => b.selp(g, 0.0f64, self.left4),
                    _ => g,
                }
            })
            .collect()
    }

    /// Adds `shift` to the diagonal values `S_aa`, a < l.
    pub fn add_shift(
        &self,
        b: &mut KernelBuilder,
        vals: &[Reg<F64>],
        shift: Reg<F64>,
        l: Reg<U32>,
    ) {
        for q in 0..PER as usize {
            if self.left[q] == Some(false) {
                continue;
            }
            let diag = b.setp(Cmp::Eq, self.a[q], self.c[q]);
            let live = b.setp(Cmp::Lt, self.a[q], l);
            let on = b.and(diag, live);
            let on = self.only(b, q, true, on);
            let s = b.add(vals[q], shift);
            let nv = b.selp(s, vals[q], on);
            b.mov_to(vals[q], nv);
        }
    }

    /// `left4 ? l : r` for predicates (value 4 mixes S and E values across threads).
    fn pick(&self, b: &mut KernelBuilder, l: Reg<Pred>, r: Reg<Pred>) -> Reg<Pred> {
        let lp = b.and(l, self.left4);
        let not4 = b.not(self.left4);
        let rp = b.and(r, not4);
        b.or(lp, rp)
    }

    /// Publishes column `j` (S values with c == j, to `lcol[c][a]`) and row `j` (E values with
    /// a == j, to `erow[a][c]`): each value's destination is fixed, only the step varies.
    fn publish(&self, b: &mut KernelBuilder, vals: &[Reg<F64>], j: Reg<U32>) {
        for q in 0..PER as usize {
            let w = match self.left[q] {
                Some(true) => b.setp(Cmp::Eq, self.c[q], j),
                Some(false) => b.setp(Cmp::Eq, self.a[q], j),
                None => {
                    let l = b.setp(Cmp::Eq, self.c[q], j);
                    let r = b.setp(Cmp::Eq, self.a[q], j);
                    self.pick(b, l, r)
                }
            };
            let addr = self.pub_addr[q];
            b.guarded(w, false, |b| b.st(Space::Shared, addr, vals[q]));
        }
    }

    /// The whole elimination: publishes column 0, then `steps` (l) steps with one barrier each:
    /// a step after l would meet only the padding's dead pivots (zero rows and columns, no
    /// shift) and change nothing, and what it would publish (zeros) is what `init_shared` left
    /// there. Leaves U in `lcol` and E in `erow` (see the module notes); ends with a barrier.
    pub fn eliminate(
        &self,
        b: &mut KernelBuilder,
        vals: &[Reg<F64>],
        lcol: &SharedArray<F64>,
        steps: Reg<U32>,
    ) {
        let zero = b.mov(0u32);
        self.publish(b, vals, zero);
        b.bar_sync();
        b.for_range(0u32, steps, 1u32, |b, j, _| {
            // Byte offset of row j in lcol / erow.
            let off = b.mul(j, 8 * LD);
            let dj = b.mul(j, LD + 1);
            let da = b.shared_index(lcol, dj);
            let d = b.ld::<F64>(Space::Shared, da);
            let live = b.setp(Cmp::Gt, d, 0.0f64);
            // rcp.rn == div.rn(1, d) (both correctly rounded), on the critical path of each step.
            let inv = b.rcp(d);
            let inv = b.selp(inv, 0.0f64, live);
            // Every value takes the update unmasked: a value the step must not change either
            // reads a zero (`lcol[j][c]`, c < j, and `erow[j][c]`, c > j, are never written;
            // `lcol[j][a]`, a < j, likewise gives m_a = 0), or was published already and its
            // register is dead (S values with c <= j, E rows a <= j): shared memory holds its
            // final value and nothing reads the register again.
            for q in 0..PER as usize {
                let maa = b.add(self.a_addr[q], off);
                let saj = b.ld::<F64>(Space::Shared, maa);
                let m = b.mul(saj, inv);
                let nm = b.neg(m);
                let sa = b.add(self.src_addr[q], off);
                let src = b.ld::<F64>(Space::Shared, sa);
                let nv = b.fma(nm, src, vals[q]);
                b.mov_to(vals[q], nv);
            }
            let j1 = b.add(j, 1u32);
            self.publish(b, vals, j1);
            b.bar_sync();
        });
    }
}
