//! Wider memory accesses for the batch kernel, two build options of the cross-product build
//! that change no arithmetic (records stay equal to [`super::Variant::DENSE_CROSS`]'s bit for
//! bit):
//! - [`super::Variant::wide_records`]: the `voxels` argument is a padded copy of the voxel
//!   records, [`WIDE_RECORD_VALUES`] f64 per voxel (the nine values, then zeros), so a record
//!   is 32-byte aligned and read with four `ld.v2.f64` and one `ld.f64` (five load instructions
//!   and three sectors instead of nine loads over three or four sectors);
//! - [`super::Variant::acc_pairs`]: the 28 shared-memory accumulators as 14 pairs, pair `m` of
//!   thread `t` at `acc + 16 (m · BLOCK + t)`, each pair read and written with one `v2`
//!   access (the same additions: accumulator `k` still adds one value per paired point).

use super::{Ctx, BLOCK};
use crate::ptx::*;

/// f64 per voxel record in the padded copy ([`super::Variant::wide_records`]).
pub const WIDE_RECORD_VALUES: usize = 12;

/// Bytes between a thread's consecutive accumulator pairs ([`super::Variant::acc_pairs`]).
const PAIR_STRIDE: i64 = 16 * BLOCK as i64;

/// Voxel `v`'s record (mean, inverse covariance): nine scalar loads at 72 bytes per voxel, or,
/// with wide records, four pair loads and one scalar load at 96 bytes per voxel.
pub(super) fn load_record(b: &mut KernelBuilder, cx: &Ctx, v: Reg<S32>) -> [Reg<F64>; 9] {
    let vu = b.bitcast::<U32, S32>(v);
    if cx.wide_records {
        let va: Addr = b
            .index_addr(cx.voxels, vu, (8 * WIDE_RECORD_VALUES) as u32)
            .into();
        let p: Vec<[Reg<F64>; 2]> = (0..4)
            .map(|k| b.ld_v2::<F64>(Space::GlobalNc, va.off(16 * k)))
            .collect();
        let last = b.ld::<F64>(Space::GlobalNc, va.off(64));
        std::array::from_fn(|k| if k == 8 { last } else { p[k / 2][k % 2] })
    } else {
        let va: Addr = b.index_addr(cx.voxels, vu, 72).into();
        let w: Vec<Reg<F64>> = (0..9)
            .map(|k| b.ld::<F64>(Space::GlobalNc, va.off(8 * k)))
            .collect();
        std::array::from_fn(|k| w[k])
    }
}

/// The thread's accumulator column for [`super::Variant::acc_pairs`]: `acc + 16 · tid`.
pub(super) fn pair_column(
    b: &mut KernelBuilder,
    arr: &SharedArray<F64>,
    tid: Reg<U32>,
) -> Reg<U32> {
    let base = b.shared_base(arr);
    b.mad(tid, 16u32, base)
}

/// Address of accumulator `k` in the thread's column (`pairs`: the pair layout).
pub(super) fn acc_addr(col: Reg<U32>, k: usize, pairs: bool) -> Addr {
    if pairs {
        Addr::from(col).off((k / 2) as i64 * PAIR_STRIDE + 8 * (k % 2) as i64)
    } else {
        Addr::from(col).off(k as i64 * super::ACC_STRIDE)
    }
}

/// Adds values to the thread's shared accumulators in pairs: a value waits until its
/// partner's arrives, then both are added with one `v2` load and one `v2` store.
pub(super) struct PairedAcc {
    col: Reg<U32>,
    pending: [Option<Reg<F64>>; 28],
}

impl PairedAcc {
    pub(super) fn new(col: Reg<U32>) -> PairedAcc {
        PairedAcc {
            col,
            pending: [None; 28],
        }
    }

    /// Queues `v` for accumulator `k` (each `k` once per paired point).
    pub(super) fn add(&mut self, b: &mut KernelBuilder, k: usize, v: Reg<F64>) {
        let partner = k ^ 1;
        match self.pending[partner].take() {
            Some(other) => {
                let m = k / 2;
                let (lo, hi) = if k.is_multiple_of(2) {
                    (v, other)
                } else {
                    (other, v)
                };
                let a = acc_addr(self.col, 2 * m, true);
                let old = b.ld_v2::<F64>(Space::Shared, a.clone());
                let s0 = b.add(old[0], lo);
                let s1 = b.add(old[1], hi);
                b.st_v2(Space::Shared, a, [s0, s1]);
            }
            None => self.pending[k] = Some(v),
        }
    }

    /// Every accumulator must have had its value (a value without its partner would be lost).
    pub(super) fn finish(self) {
        assert!(
            self.pending.iter().all(Option::is_none),
            "every accumulator pair gets both values per paired point"
        );
    }
}
