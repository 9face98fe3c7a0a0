//! Copies with every core (rayon), for moving batches between ordinary and pinned memory at
//! memory speed.

use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Bytes per parallel copy task.
const COPY_CHUNK_BYTES: usize = 256 << 10;

/// Copies `src` into `dst` (same length) with every core.
pub fn par_copy(dst: &mut [u8], src: &[u8]) {
    debug_assert_eq!(dst.len(), src.len());
    if src.len() <= COPY_CHUNK_BYTES {
        dst.copy_from_slice(src);
        return;
    }
    dst.par_chunks_mut(COPY_CHUNK_BYTES)
        .zip(src.par_chunks(COPY_CHUNK_BYTES))
        .for_each(|(d, s)| d.copy_from_slice(s));
}

/// Appends `src` to `dst` with every core (the new bytes are written once, never zeroed first).
pub fn par_extend(dst: &mut Vec<u8>, src: &[u8]) {
    dst.reserve(src.len());
    let old = dst.len();
    let spare = &mut dst.spare_capacity_mut()[..src.len()];
    let write = |d: &mut [MaybeUninit<u8>], s: &[u8]| {
        for (d, &s) in d.iter_mut().zip(s) {
            d.write(s);
        }
    };
    if src.len() <= COPY_CHUNK_BYTES {
        write(spare, src);
    } else {
        spare
            .par_chunks_mut(COPY_CHUNK_BYTES)
            .zip(src.par_chunks(COPY_CHUNK_BYTES))
            .for_each(|(d, s)| write(d, s));
    }
    // SAFETY: the `src.len()` bytes after `old` were all initialised just above, within the
    // capacity reserved for them.
    unsafe { dst.set_len(old + src.len()) };
}

/// Replaces `dst` with the concatenation of `parts`, with every core.
pub fn par_concat(dst: &mut Vec<u8>, parts: &[&[u8]]) {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    dst.clear();
    dst.reserve(total);
    let mut rest = &mut dst.spare_capacity_mut()[..total];
    let mut pieces = Vec::with_capacity(parts.len());
    for p in parts {
        let (d, r) = std::mem::take(&mut rest).split_at_mut(p.len());
        pieces.push(d);
        rest = r;
    }
    pieces
        .into_par_iter()
        .zip(parts.par_iter())
        .for_each(|(d, s)| {
            for (d, &s) in d.iter_mut().zip(s.iter()) {
                d.write(s);
            }
        });
    // SAFETY: the pieces cover the first `total` spare bytes exactly and were all written.
    unsafe { dst.set_len(total) };
}
