//! Row slabs of the randomized SVD's tall `rows x WIDTH` f32 matrices (sketch width 48, rows a
//! multiple of [`SLAB`]), shared by `rnn_orth` and `rnn_apply_small`: the sizes and the staging
//! of one slab into shared memory.

use crate::ptx::*;

/// Padded sketch width: the GPU randomized SVD supports rank + oversampling <= 48.
pub const WIDTH: u32 = 48;
/// Rows per slab.
pub const SLAB: u32 = 32;

/// Where a slab is staged from and to.
pub struct SlabCopy<'a> {
    /// The `rows x WIDTH` f32 matrix (global address).
    pub src: Reg<U64>,
    /// How it is read (`Global`, or `GlobalNc` when the kernel does not write it).
    pub space: Space,
    /// The shared destination.
    pub dst: &'a SharedArray<F32>,
    /// Row stride of the destination (floats, a multiple of 4, at least WIDTH).
    pub stride: u32,
}

/// Copies row slab `slab` per `copy`: 16-byte loads, two per thread of a 256-thread block
/// (`tid`).
pub fn stage_slab(b: &mut KernelBuilder, copy: &SlabCopy<'_>, slab: Reg<U32>, tid: Reg<U32>) {
    for j in 0..2u32 {
        let idx = b.add(tid, 256 * j);
        let live = b.setp(Cmp::Lt, idx, SLAB * WIDTH / 4);
        b.if_then(live, |b| {
            let row = b.div(idx, WIDTH / 4);
            let ch = b.rem(idx, WIDTH / 4);
            let grow = b.mad(slab, SLAB, row);
            let col = b.shl(ch, 2u32);
            let e = b.mad(grow, WIDTH, col);
            let ga = b.index_addr(copy.src, e, 4);
            let v = b.ld_v4::<F32>(copy.space, ga);
            let le = b.mad(row, copy.stride, col);
            let sa = b.shared_index(copy.dst, le);
            b.st_v4(Space::Shared, sa, v);
        });
    }
}
