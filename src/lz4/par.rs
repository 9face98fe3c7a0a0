//! Copies with every core (rayon), for moving batches between ordinary and pinned memory at
//! memory speed.
//!
//! Copies out of the GPU rings' pinned slots into the caller's memory use streaming
//! (non-temporal) stores: the destination lines are written without being read into the cache
//! first, so such a copy moves 2 bytes of memory traffic per byte instead of 3 and does not push
//! the ring (which the copy engines read and write) out of the cache. Copies into the slots use
//! ordinary stores, which leave the staged batch in the cache for the copy engine to read
//! (session 4's choice; since session 7 both directions stream, with software prefetch: see
//! [`CopyLoop`]). On
//! the H100 machine (16 cores, 300 MiB L3; 256 MiB of dickens from ordinary memory, one run) the
//! codec from memory compressed at 15.9 GB/s with ordinary stores both ways, 22.5-24.2 GB/s
//! with streaming stores both ways and 27.7 GB/s with streaming stores out only; decompression
//! 11.2, 22.1-23.9 and 23.8 GB/s. [`set_streaming_stores`] picks the kind per direction
//! (benches compare them); [`par_copy`], [`par_extend`] and [`par_concat`] always use ordinary
//! stores, for destinations that are read again right away (hashing, writing to a file).

use super::copy_loop::copy_raw;
pub use super::copy_loop::{copy_loop, set_copy_loop, CopyLoop};
use rayon::prelude::*;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Bytes per parallel copy task before session 8 (now the default is [`BALANCED`]; see
/// [`set_copy_chunk_bytes`]).
pub const COPY_CHUNK_BYTES: usize = 256 << 10;

/// [`set_copy_chunk_bytes`] value for balanced tasks: each copy in [`TASKS_PER_THREAD`] tasks
/// per pool thread, of at least [`MIN_TASK_BYTES`] in whole 4 KiB.
pub const BALANCED: usize = 0;
/// Tasks per pool thread of a balanced copy.
pub const TASKS_PER_THREAD: usize = 4;
/// Smallest task of a balanced copy.
pub const MIN_TASK_BYTES: usize = 32 << 10;

static STREAM_IN: AtomicBool = AtomicBool::new(true);
static STREAM_OUT: AtomicBool = AtomicBool::new(true);
static CHUNK: AtomicUsize = AtomicUsize::new(BALANCED);

/// Whether [`par_copy_to_slot`] (`into_slots`) and [`par_extend_from_slot`] (`out_of_slots`)
/// use streaming stores (x86-64; elsewhere they are plain copies). By default both.
pub fn set_streaming_stores(into_slots: bool, out_of_slots: bool) {
    STREAM_IN.store(into_slots, Ordering::Relaxed);
    STREAM_OUT.store(out_of_slots, Ordering::Relaxed);
}

/// `(into_slots, out_of_slots)`: see [`set_streaming_stores`].
pub fn streaming_stores() -> (bool, bool) {
    (
        STREAM_IN.load(Ordering::Relaxed),
        STREAM_OUT.load(Ordering::Relaxed),
    )
}

/// Bytes per parallel copy task (at least 4 KiB), or [`BALANCED`] (the default): each copy in
/// tasks of equal size, [`TASKS_PER_THREAD`] per pool thread. Fixed 256 KiB tasks (the default
/// before session 8) leave a tail: a decode batch's ~12.3 MiB of stored bytes is 49 tasks, four
/// rounds of 16 threads for three rounds of work, and a compress part's ~6 MiB of packed bytes
/// 25 tasks, two rounds for 1.6. Balanced tasks took 0.940x (compression) and 0.958x
/// (decompression) the time of 256 KiB tasks from ordinary memory (H200 machine, 2026-11-26,
/// 256 MiB of dickens, 31 alternating rounds; faster in 25 and 22 of 31).
pub fn set_copy_chunk_bytes(bytes: usize) {
    let bytes = if bytes == BALANCED {
        0
    } else {
        bytes.max(4096)
    };
    CHUNK.store(bytes, Ordering::Relaxed);
}

/// The task size set (see [`set_copy_chunk_bytes`]; [`BALANCED`] for balanced tasks).
pub fn copy_chunk_bytes() -> usize {
    CHUNK.load(Ordering::Relaxed)
}

/// The task size of a parallel copy of `len` bytes (see [`set_copy_chunk_bytes`]).
fn chunk(len: usize) -> usize {
    match CHUNK.load(Ordering::Relaxed) {
        BALANCED => balanced_chunk(len, rayon::current_num_threads()),
        c => c,
    }
}

/// Balanced tasks of a copy of `len` bytes on `threads` threads.
fn balanced_chunk(len: usize, threads: usize) -> usize {
    len.div_ceil(TASKS_PER_THREAD * threads.max(1))
        .next_multiple_of(4096)
        .max(MIN_TASK_BYTES)
}

static HUGE_OUTPUTS: AtomicBool = AtomicBool::new(false);

/// Whether the GPU codec asks the kernel for transparent huge pages (`MADV_HUGEPAGE`) on the
/// output buffers it grows (Linux; off by default). A fresh 256 MiB output then takes 128 page
/// faults instead of 65536 as the parallel copies first touch it; buffers the caller reuses are
/// not affected. Off because it measured slower: into fresh outputs every run (H200 machine,
/// 2026-11-26, 256 MiB of dickens, 31 alternating rounds) compression took 1.093x and
/// decompression 1.034x the time of 4 KiB pages (10.5 / 10.8 GB/s without: the kernel's
/// page faults, not the copies, bound a fresh output; the threads that touch one huge page wait
/// while one of them clears all 2 MiB of it).
pub fn set_huge_outputs(on: bool) {
    HUGE_OUTPUTS.store(on, Ordering::Relaxed);
}

/// See [`set_huge_outputs`].
pub fn huge_outputs() -> bool {
    HUGE_OUTPUTS.load(Ordering::Relaxed)
}

/// Reserves room for `extra` more bytes in `v` and, when that allocated new memory and
/// [`huge_outputs`] is on, advises transparent huge pages for the 2 MiB-aligned part of the
/// spare capacity (untouched memory: the advice decides how its first touch is backed).
pub(crate) fn reserve_output(v: &mut Vec<u8>, extra: usize) {
    let before = (v.as_ptr(), v.capacity());
    v.reserve(extra);
    if (v.as_ptr(), v.capacity()) == before || !huge_outputs() {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let base = v.as_mut_ptr() as usize;
        let (from, to) = (base + v.len(), base + v.capacity());
        let (a, b) = (from.next_multiple_of(HUGE), to & !(HUGE - 1));
        if b > a {
            // SAFETY: `a..b` lies inside `v`'s allocation (its spare capacity); MADV_HUGEPAGE
            // only sets how the kernel backs those pages, never their contents, and a failure
            // (an old kernel, THP off) leaves the memory as it was.
            unsafe { libc::madvise(a as *mut libc::c_void, b - a, libc::MADV_HUGEPAGE) };
        }
    }
}

/// Copies `src` into `dst` (same length) with every core.
pub fn par_copy(dst: &mut [u8], src: &[u8]) {
    copy_with(dst, src, false)
}

/// Copies `src` into `dst` (same length), a GPU ring's pinned slot, with every core.
pub fn par_copy_to_slot(dst: &mut [u8], src: &[u8]) {
    copy_with(dst, src, STREAM_IN.load(Ordering::Relaxed))
}

fn copy_with(dst: &mut [u8], src: &[u8], streaming: bool) {
    assert_eq!(dst.len(), src.len(), "par_copy needs equal lengths");
    let c = chunk(src.len());
    // SAFETY: each call covers one chunk of `dst` and the same chunk of `src`; distinct
    // borrows, so they do not overlap.
    let one = |d: &mut [u8], s: &[u8]| unsafe {
        copy_raw(d.as_mut_ptr(), s.as_ptr(), s.len(), streaming)
    };
    if src.len() <= c {
        one(dst, src);
        return;
    }
    dst.par_chunks_mut(c)
        .zip(src.par_chunks(c))
        .for_each(|(d, s)| one(d, s));
}

/// Writes `src` into `dst` (same length).
fn write_uninit(d: &mut [MaybeUninit<u8>], s: &[u8], streaming: bool) {
    debug_assert_eq!(d.len(), s.len());
    // SAFETY: `d` is a distinct borrow of `s.len()` writable bytes (MaybeUninit<u8> has u8's
    // layout); writing initialises them.
    unsafe { copy_raw(d.as_mut_ptr().cast(), s.as_ptr(), s.len(), streaming) }
}

/// Appends `src` to `dst` with every core (the new bytes are written once, never zeroed first).
pub fn par_extend(dst: &mut Vec<u8>, src: &[u8]) {
    extend_with(dst, src, false)
}

/// Appends `src` (a GPU ring's pinned slot) to `dst` with every core.
pub fn par_extend_from_slot(dst: &mut Vec<u8>, src: &[u8]) {
    extend_with(dst, src, STREAM_OUT.load(Ordering::Relaxed))
}

fn extend_with(dst: &mut Vec<u8>, src: &[u8], streaming: bool) {
    dst.reserve(src.len());
    let old = dst.len();
    let spare = &mut dst.spare_capacity_mut()[..src.len()];
    let c = chunk(src.len());
    if src.len() <= c {
        write_uninit(spare, src, streaming);
    } else {
        spare
            .par_chunks_mut(c)
            .zip(src.par_chunks(c))
            .for_each(|(d, s)| write_uninit(d, s, streaming));
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
        .for_each(|(d, s)| write_uninit(d, s, false));
    // SAFETY: the pieces cover the first `total` spare bytes exactly and were all written.
    unsafe { dst.set_len(total) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balanced_tasks_split_copies_evenly() {
        // 16 threads: a 16 MiB slot in 64 tasks of 256 KiB, 12.3 MiB in 64 of ~197 KiB.
        assert_eq!(balanced_chunk(16 << 20, 16), 256 << 10);
        let n = 12_900_000;
        let c = balanced_chunk(n, 16);
        assert!(n.div_ceil(c) <= 64 && n.div_ceil(c) > 60 && c.is_multiple_of(4096));
        assert_eq!(balanced_chunk(100, 16), MIN_TASK_BYTES);
        assert_eq!(balanced_chunk(1 << 20, 0), 256 << 10);
    }

    #[test]
    fn copies_match_with_and_without_streaming_stores() {
        let src: Vec<u8> = (0..(3 << 20) + 77)
            .map(|i| (i * 7 + i / 251) as u8)
            .collect();
        // Unaligned starts and lengths on both sides.
        for (a, b) in [(0, 0), (1, 3), (15, 0), (5, 9)] {
            let s = &src[a..src.len() - b];
            for (streaming, l) in [
                (
                    false,
                    CopyLoop {
                        prefetch: 0,
                        wide: false,
                    },
                ),
                (
                    true,
                    CopyLoop {
                        prefetch: 0,
                        wide: false,
                    },
                ),
                (
                    true,
                    CopyLoop {
                        prefetch: 1024,
                        wide: false,
                    },
                ),
                (
                    true,
                    CopyLoop {
                        prefetch: 4096,
                        wide: true,
                    },
                ),
                (
                    false,
                    CopyLoop {
                        prefetch: 512,
                        wide: false,
                    },
                ),
                (
                    false,
                    CopyLoop {
                        prefetch: 0,
                        wide: true,
                    },
                ),
            ] {
                set_copy_loop(l);
                let mut d = vec![0u8; s.len() + 1];
                copy_with(&mut d[1..], s, streaming);
                assert!(d[1..] == *s);
                let mut v = vec![9u8; 3];
                extend_with(&mut v, s, streaming);
                assert!(v[3..] == *s && v[..3] == [9, 9, 9]);
            }
            set_copy_loop(CopyLoop {
                prefetch: 0,
                wide: false,
            });
            let mut c = Vec::new();
            par_concat(&mut c, &[&s[..100], &s[100..]]);
            assert!(c == s);
        }
    }
}
