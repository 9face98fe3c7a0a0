//! The caller's ordinary memory registered with the driver (`cuMemHostRegister`) for the length
//! of one batch, so the copy engine reads it in place instead of the host staging it through a
//! pinned slot: no host copy, two bytes of memory traffic per input byte fewer. Pinning costs CPU
//! time in the kernel (page-table walks) but no memory bandwidth, so a batch is registered in
//! several pieces on several threads. Host-memory capability owned by the LZ4 rings (kept apart
//! from `host_mem.rs`, whose types move into the runtime).
//!
//! Registration works on whole OS pages and refuses pages already registered, so only the 64
//! KiB-aligned interior of a batch is registered (64 KiB covers every page size Linux uses on
//! x86-64 and arm64 short of huge pages); the unaligned head and tail are staged as before. Any
//! refusal (read-only or special memory, a range another user registered, no support) falls
//! back to staging the whole batch: registration is an optimisation, never an error.

use cudarc::driver::CudaContext;
use rayon::prelude::*;
use std::ffi::c_void;
use std::sync::Arc;

/// Alignment of registered pieces.
const ALIGN: usize = 64 << 10;
/// Smallest piece worth a registration.
const MIN_PIECE: usize = 1 << 20;

/// One registered range; unregistered on drop. The owner drops it only once no copy that reads
/// it can still run.
struct Range {
    ptr: *mut c_void,
    ctx: Arc<CudaContext>,
}

// SAFETY: a registration is a process-wide driver object; any thread may end it.
unsafe impl Send for Range {}

impl Drop for Range {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: registered in `register`; a failed unregister (dead context) leaves nothing
        // the host can undo.
        unsafe {
            let _ = cudarc::driver::sys::cuMemHostUnregister(self.ptr);
        }
    }
}

fn register(
    ctx: &Arc<CudaContext>,
    ptr: *mut c_void,
    len: usize,
    read_only: bool,
) -> Option<Range> {
    use cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED as READ_ONLY_OK;
    use cudarc::driver::sys::{cuMemHostRegister_v2, CU_MEMHOSTREGISTER_READ_ONLY};
    ctx.bind_to_thread().ok()?;
    // Read-only where the device supports it (the device only reads input, and private file
    // mappings are then not copied on write); asked first so that no call is made to fail.
    let flags = if read_only && ctx.attribute(READ_ONLY_OK).is_ok_and(|v| v == 1) {
        CU_MEMHOSTREGISTER_READ_ONLY
    } else {
        0
    };
    // SAFETY: the caller's live range (see the callers' contracts).
    let r = unsafe { cuMemHostRegister_v2(ptr, len, flags) }.result();
    r.is_ok().then(|| Range {
        ptr,
        ctx: ctx.clone(),
    })
}

/// The 64 KiB-aligned interior `(start, end)` (offsets) of the `len` bytes at `base`, when it
/// holds at least one piece.
fn interior(base: *mut u8, len: usize) -> Option<(usize, usize)> {
    let start = base.align_offset(ALIGN);
    if start >= len {
        return None;
    }
    let end = ((len - start) / ALIGN) * ALIGN + start;
    (end - start >= MIN_PIECE).then_some((start, end))
}

/// A batch of the caller's memory that the copy engine reads or writes in place: `parts`
/// (offsets into the batch, registered) plus a head and tail that go through a pinned slot.
pub(crate) struct ExtInput {
    base: *mut u8,
    len: usize,
    /// Registered pieces as (offset, bytes) within the batch.
    pub(crate) parts: Vec<(usize, usize)>,
    ranges: Vec<Range>,
}

/// The same for a batch of output (the caller's buffer, written by the device).
pub(crate) type ExtOutput = ExtInput;

// SAFETY: the pointers name the caller's memory, which the ring's call borrows for longer than
// any value lives; the host touches it only as the constructors' contracts allow.
unsafe impl Send for ExtInput {}

impl ExtInput {
    /// Registers the aligned interior of `src` in up to `pieces` pieces on several threads and
    /// stages the rest into `staging` (same offsets); `None` (nothing registered, nothing
    /// staged) when the interior is too small or the driver refuses any piece.
    ///
    /// # Safety
    /// `src` must stay alive and unmodified until the value is dropped, and the value must be
    /// dropped only after every copy that reads the registered pieces has completed.
    pub(crate) unsafe fn new(
        ctx: &Arc<CudaContext>,
        src: &[u8],
        staging: &mut [u8],
        pieces: usize,
    ) -> Option<Self> {
        // SAFETY: the caller's contract; the device only reads (read-only registration).
        let ext = unsafe { Self::register(ctx, src.as_ptr() as *mut u8, src.len(), pieces, true) }?;
        ext.stage_from(src, staging);
        Some(ext)
    }

    /// Registers the aligned interior of the `len` bytes at `base` (the device will write it).
    ///
    /// # Safety
    /// The range must be writable memory that nothing else reads or writes until the value is
    /// dropped, and the value must be dropped only after every copy into it has completed.
    pub(crate) unsafe fn for_output(
        ctx: &Arc<CudaContext>,
        base: *mut u8,
        len: usize,
        pieces: usize,
    ) -> Option<Self> {
        // SAFETY: the caller's contract.
        unsafe { Self::register(ctx, base, len, pieces, false) }
    }

    unsafe fn register(
        ctx: &Arc<CudaContext>,
        base: *mut u8,
        len: usize,
        pieces: usize,
        read_only: bool,
    ) -> Option<Self> {
        let (start, end) = interior(base, len)?;
        let interior = end - start;
        let piece = (interior / pieces.max(1))
            .div_ceil(ALIGN)
            .max(MIN_PIECE / ALIGN)
            * ALIGN;
        let parts: Vec<(usize, usize)> = (start..end)
            .step_by(piece)
            .map(|at| (at, piece.min(end - at)))
            .collect();
        let addr = base as usize;
        let ranges: Vec<Option<Range>> = parts
            .par_iter()
            .map(|&(at, n)| register(ctx, (addr + at) as *mut c_void, n, read_only))
            .collect();
        if ranges.iter().any(Option::is_none) {
            // Unregister what did register (nothing has used it).
            drop(ranges);
            return None;
        }
        Some(ExtInput {
            base,
            len,
            parts,
            ranges: ranges.into_iter().flatten().collect(),
        })
    }

    /// Registers the aligned interior of the `len` bytes at `base` as one piece on this thread
    /// (for a thread that registers ahead of the ring; see `register_ahead`). Input batches then
    /// stage their head and tail with [`ExtInput::stage_from`].
    ///
    /// # Safety
    /// As [`ExtInput::new`] when `read_only` (the device reads the memory), else as
    /// [`ExtInput::for_output`].
    pub(crate) unsafe fn register_span(
        ctx: &Arc<CudaContext>,
        base: *mut u8,
        len: usize,
        read_only: bool,
    ) -> Option<Self> {
        let (start, end) = interior(base, len)?;
        let r = register(
            ctx,
            (base as usize + start) as *mut c_void,
            end - start,
            read_only,
        )?;
        Some(ExtInput {
            base,
            len,
            parts: vec![(start, end - start)],
            ranges: vec![r],
        })
    }

    /// Stages the head and tail of an input batch (`src`, the batch registered) into
    /// `staging` (same offsets).
    pub(crate) fn stage_from(&self, src: &[u8], staging: &mut [u8]) {
        for (at, n) in self.staged() {
            staging[at..at + n].copy_from_slice(&src[at..at + n]);
        }
    }

    /// The ranges (offset, bytes) within the batch that go through the pinned slot.
    pub(crate) fn staged(&self) -> [(usize, usize); 2] {
        let start = self.parts.first().map_or(0, |p| p.0);
        let end = self.parts.last().map_or(0, |p| p.0 + p.1);
        [(0, start), (end, self.len - end)]
    }

    /// The batch as the caller holds it (input batches only).
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `new`'s contract keeps the caller's `len` bytes alive and unmodified.
        unsafe { std::slice::from_raw_parts(self.base, self.len) }
    }

    /// The device address range of registered part `k` as a host pointer and length.
    pub(crate) fn part_ptr(&self, k: usize) -> (*mut u8, usize) {
        let (at, n) = self.parts[k];
        (self.base.wrapping_add(at), n)
    }

    /// Unregisters every piece on several threads. Only once no copy uses them any more.
    pub(crate) fn release(self) {
        self.ranges.into_par_iter().for_each(drop);
    }
}
