//! The inner loops of the parallel copies in [`par`](super::par): streaming-store copies with
//! software prefetch (see [`CopyLoop`]), or the C library's `memcpy`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// How the slot copies' inner loop moves bytes (benches compare the kinds in one run,
/// `PTXFLOW_LZ4_VARIANTS` specs `pN` and `w`). The default is the loop the rings shipped with:
/// streaming-store copies use 16-byte SSE2 loads and stores without software prefetch, and
/// ordinary-store copies use the C library's `memcpy`; with `prefetch` or `wide` set, the
/// ordinary-store slot copies use the same loop with ordinary stores. Default since session 7:
/// streaming stores both ways with a 4 KiB prefetch distance, the fastest host copy on the H100
/// machine (16 threads, 64 MiB each: into slots 96.4 GB/s, out 78.0, both at once 91.4, against
/// 65.8 / 52.5 / 58.0 for memcpy in and streaming out without prefetch; `benches/lz4_host.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyLoop {
    /// Bytes ahead of the loads to prefetch the source (0: none). A core's copy from DRAM is
    /// bound by the cache misses it has in flight, and the hardware prefetchers stop at every
    /// 4 KiB page; prefetching ahead keeps more lines in flight.
    pub prefetch: usize,
    /// 32-byte AVX2 loads and streaming stores where the CPU has AVX2 (else 16-byte SSE2).
    pub wide: bool,
}

static PREFETCH: AtomicUsize = AtomicUsize::new(4096);
static WIDE: AtomicBool = AtomicBool::new(false);

/// Sets the inner loop of the streaming-store slot copies (see [`CopyLoop`]).
pub fn set_copy_loop(l: CopyLoop) {
    PREFETCH.store(l.prefetch, Ordering::Relaxed);
    WIDE.store(l.wide, Ordering::Relaxed);
}

/// The inner loop in use (see [`set_copy_loop`]).
pub fn copy_loop() -> CopyLoop {
    CopyLoop {
        prefetch: PREFETCH.load(Ordering::Relaxed),
        wide: WIDE.load(Ordering::Relaxed),
    }
}

/// Copies `len` bytes from `src` to `dst` with streaming stores where the CPU has them.
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of `len` bytes; the ranges must not overlap.
pub(crate) unsafe fn copy_raw(dst: *mut u8, src: *const u8, len: usize, streaming: bool) {
    #[cfg(target_arch = "x86_64")]
    {
        let l = copy_loop();
        let own_loop = streaming || l.prefetch > 0 || l.wide;
        if own_loop && len >= 4096 {
            if l.wide && std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the caller's ranges; AVX2 was detected just above.
                unsafe { copy_avx2(dst, src, len, l.prefetch, streaming) };
            } else {
                // SAFETY: the caller's ranges.
                unsafe { copy_sse2(dst, src, len, l.prefetch, streaming) };
            }
            return;
        }
    }
    let _ = streaming;
    // SAFETY: the caller's ranges.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

/// Prefetches the source line `ahead` bytes past `at` (prefetches never fault; the address is
/// formed with wrapping arithmetic, so one past the end is no undefined behaviour).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch(src: *const u8, at: usize, ahead: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    if ahead > 0 {
        // SAFETY: a prefetch is a hint: it reads nothing architecturally and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(src.wrapping_add(at + ahead) as *const i8) };
    }
}

/// The copy with 16-byte SSE2 accesses, 64 bytes a step, with streaming stores when `nt`.
///
/// # Safety
/// As [`copy_raw`].
#[cfg(target_arch = "x86_64")]
unsafe fn copy_sse2(dst: *mut u8, src: *const u8, len: usize, ahead: usize, nt: bool) {
    use std::arch::x86_64::{
        __m128i, _mm_loadu_si128, _mm_sfence, _mm_store_si128, _mm_stream_si128,
    };
    // SAFETY: the caller's ranges; SSE2 is part of x86-64. `head` aligns the stores to 16
    // bytes as the aligned stores require; loads are unaligned; every access stays in range.
    unsafe {
        let head = dst.align_offset(16).min(len);
        std::ptr::copy_nonoverlapping(src, dst, head);
        let mut i = head;
        while i + 64 <= len {
            prefetch(src, i, ahead);
            let s = src.add(i) as *const __m128i;
            let d = dst.add(i) as *mut __m128i;
            let (a, b) = (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)));
            let (c, e) = (_mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
            if nt {
                _mm_stream_si128(d, a);
                _mm_stream_si128(d.add(1), b);
                _mm_stream_si128(d.add(2), c);
                _mm_stream_si128(d.add(3), e);
            } else {
                _mm_store_si128(d, a);
                _mm_store_si128(d.add(1), b);
                _mm_store_si128(d.add(2), c);
                _mm_store_si128(d.add(3), e);
            }
            i += 64;
        }
        std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i);
        // Streaming stores are weakly ordered: make them visible before the task ends (the
        // pool's synchronization, then a DMA engine or another thread, reads them).
        _mm_sfence();
    }
}

/// The copy with 32-byte AVX2 accesses, 128 bytes a step, with streaming stores when `nt`.
///
/// # Safety
/// As [`copy_raw`], on a CPU with AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn copy_avx2(dst: *mut u8, src: *const u8, len: usize, ahead: usize, nt: bool) {
    use std::arch::x86_64::{
        __m256i, _mm256_loadu_si256, _mm256_store_si256, _mm256_stream_si256, _mm_sfence,
    };
    // SAFETY: the caller's ranges and CPU; `head` aligns the stores to 32 bytes as the aligned
    // stores require; loads are unaligned; every access stays in range.
    unsafe {
        let head = dst.align_offset(32).min(len);
        std::ptr::copy_nonoverlapping(src, dst, head);
        let mut i = head;
        while i + 128 <= len {
            prefetch(src, i, ahead);
            prefetch(src, i + 64, ahead);
            let s = src.add(i) as *const __m256i;
            let d = dst.add(i) as *mut __m256i;
            let (a, b) = (_mm256_loadu_si256(s), _mm256_loadu_si256(s.add(1)));
            let (c, e) = (_mm256_loadu_si256(s.add(2)), _mm256_loadu_si256(s.add(3)));
            if nt {
                _mm256_stream_si256(d, a);
                _mm256_stream_si256(d.add(1), b);
                _mm256_stream_si256(d.add(2), c);
                _mm256_stream_si256(d.add(3), e);
            } else {
                _mm256_store_si256(d, a);
                _mm256_store_si256(d.add(1), b);
                _mm256_store_si256(d.add(2), c);
                _mm256_store_si256(d.add(3), e);
            }
            i += 128;
        }
        std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i);
        _mm_sfence();
    }
}
