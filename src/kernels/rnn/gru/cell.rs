//! Step 2 of the GRU kernels (see `gru`'s module notes): the gates and the new state of one
//! (batch row, hidden unit), written to the exchange words and, without layer norm and dropout,
//! to `out`.

use super::Exchange;
use crate::kernels::rnn::mathf::{sigmoid_sfu, tanh_sfu};
use crate::ptx::*;

/// Which (step, row, unit) the calling thread updates.
pub(super) struct CellAt {
    /// The step t (tags and output rows).
    pub t: Reg<U32>,
    /// The slot of step t in the shared gi buffers.
    pub gi_step: Reg<U32>,
    /// Batch row within the block's rows.
    pub row: Reg<U32>,
    /// Unit within the block's units (the unit is j0 + jj).
    pub jj: Reg<U32>,
}

/// Where h' goes besides the exchange words (and `out`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum NewState {
    /// Only there: the gather (which then covers the block's own units) refills the shared h.
    ExchangeOnly,
    /// Also over h in the shared rows: only this thread reads that element in the cell, and a
    /// gather that skips the block's own units never writes it, so no barrier is needed before
    /// the gather.
    AlsoShared,
}

/// `gh(b, lr)`: `W_hh h` of the cell's row at local gate row lr.
pub(super) type GateSum<'a> = dyn Fn(&mut KernelBuilder, Reg<U32>) -> Reg<F32> + 'a;

/// Step 2 for the calling thread's (row, unit) `at`: gi from shared offset `o_gi` (slot
/// `at.gi_step`, rows of 3J), gh from `gh`.
pub(super) fn cell(
    b: &mut KernelBuilder,
    ex: &Exchange<'_>,
    at: &CellAt,
    o_gi: Reg<U32>,
    gh: &GateSum<'_>,
    state: NewState,
) {
    let NewH {
        h: hn,
        at: ha,
        unit,
    } = new_h(b, ex, at, o_gi, gh);
    if state == NewState::AlsoShared {
        b.st(Space::Shared, ha, hn);
    }
    publish(b, ex, at, unit, hn);
}

/// h' of (row, unit) to its exchange word and, without layer norm and dropout, to `out`.
fn publish(b: &mut KernelBuilder, ex: &Exchange<'_>, at: &CellAt, unit: Reg<U32>, hn: Reg<F32>) {
    let p = ex.p;
    // Word index ((e T + t) Bp + row0 + row) H + unit, shared by hx and out.
    let wi = ex.word_index(b, at.t, at.row);
    let wi = b.add(wi, unit);
    let tag = b.add(ex.epoch, at.t);
    let tag = b.add(tag, 1u32);
    let bits = b.bitcast::<U32, F32>(hn);
    let word = b.pack64::<U64>(bits, tag);
    let xa = b.index_addr(p.hx, wi, 8);
    b.st_relaxed_gpu(xa, word);
    let transformed = b.or(p.ln, p.drop);
    let raw = b.not(transformed);
    b.if_then(raw, |b| {
        let oa = b.index_addr(p.out, wi, 4);
        b.st(Space::Global, oa, hn);
    });
}

/// The new state of one cell ([`new_h`]): h', the shared address of its h element (row `row`
/// of the rows at `o_h`) and the unit.
pub(super) struct NewH {
    pub h: Reg<F32>,
    pub at: Reg<U32>,
    pub unit: Reg<U32>,
}

/// The gates and h' of the calling thread's (row, unit) `at` (h from the rows at `ex.o_h`).
pub(super) fn new_h(
    b: &mut KernelBuilder,
    ex: &Exchange<'_>,
    at: &CellAt,
    o_gi: Reg<U32>,
    gh: &GateSum<'_>,
) -> NewH {
    let p = ex.p;
    let smem = ex.smem;
    let (row, jj) = (at.row, at.jj);
    let unit = b.add(ex.j0, jj);
    // b_hh of the n gate (the host folded those of r and z into b_ih).
    let bhn = {
        let i = b.mad(p.h, 2u32, unit);
        let i = b.add(i, ex.bias_base);
        let a = b.index_addr(p.b_hh, i, 4);
        b.ld::<F32>(Space::GlobalNc, a)
    };
    let lr0 = b.mul(jj, 3u32);
    let gi_row = b.mad(at.gi_step, ex.rows, row);
    let gi_base = b.mad(gi_row, ex.r3, lr0);
    let gi_base = b.add(gi_base, o_gi);
    let shared_at = |b: &mut KernelBuilder, base: Reg<U32>, q: u32| {
        let i = b.add(base, q);
        let a = b.shared_index(smem, i);
        b.ld::<F32>(Space::Shared, a)
    };
    let (gir, giz, gin) = (
        shared_at(b, gi_base, 0),
        shared_at(b, gi_base, 1),
        shared_at(b, gi_base, 2),
    );
    let ghs: Vec<Reg<F32>> = (0..3u32)
        .map(|q| {
            let lr = b.add(lr0, q);
            gh(b, lr)
        })
        .collect();
    let (ghr, ghz, ghn) = (ghs[0], ghs[1], ghs[2]);
    let ar = b.add(gir, ghr);
    let rg = sigmoid_sfu(b, ar);
    let az = b.add(giz, ghz);
    let zg = sigmoid_sfu(b, az);
    let u = b.add(ghn, bhn);
    let an = b.fma(rg, u, gin);
    let n = tanh_sfu(b, an);
    let hi = b.mad(row, p.h, unit);
    let hi = b.add(hi, ex.o_h);
    let ha = b.shared_index(smem, hi);
    let hprev = b.ld::<F32>(Space::Shared, ha);
    let d = b.sub(hprev, n);
    let hn = b.fma(zg, d, n);
    NewH {
        h: hn,
        at: ha,
        unit,
    }
}
