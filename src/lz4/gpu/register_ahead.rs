//! Registering the caller's memory ahead of the ring, on a thread of its own ([`Ahead`]): while
//! every core stages batches through the pinned slots, one thread registers (`cuMemHostRegister`)
//! the batches a few steps ahead of the fill, so that the copy engine reads (compression) or
//! writes (decompression) those in place and the host copies them neither in nor out; it also
//! unregisters the batches the ring has drained. A batch the fill reaches before its registration
//! is ready is staged as usual (the registration, when it finishes, is undone), so the split
//! between registered and copied batches follows the two rates on the machine at hand.
//!
//! Registration runs in the driver and the kernel (page pinning, I/O mappings) and costs little
//! memory bandwidth, which the copies are bound by; registering everything on the critical path
//! instead was 2-8x slower than staging (see `HostTuning`). Only the caller's memory is pinned
//! here (nothing is allocated), at most `window` batches of it beyond those in the ring.

use super::register::ExtInput;
use cudarc::driver::CudaContext;
use std::sync::{Arc, Condvar, Mutex};

/// Batches registered ahead at most, beyond those the fill has reached.
pub(crate) const AHEAD_WINDOW: usize = 2;

/// Where one batch lies in the caller's memory (address, bytes); `None`: never registered.
pub(crate) type Span = Option<(usize, usize)>;

enum Batch {
    Idle,
    Registering,
    Ready(ExtInput),
    Taken,
}

struct Inner {
    batches: Vec<Batch>,
    /// Batches the fill has reached (every batch below is Taken).
    fill_pos: usize,
    /// Drained batches' registrations, to undo.
    release: Vec<ExtInput>,
    done: bool,
    /// Batches registered in time and taken by the fill.
    used: usize,
    /// Registrations the fill overtook (undone unused).
    wasted: usize,
}

/// The shared state of one run: the fill takes batches, the ring's drain gives registrations
/// back, the registrar thread ([`Ahead::run`]) works ahead.
pub(crate) struct Ahead {
    spans: Vec<Span>,
    read_only: bool,
    lead: usize,
    window: usize,
    inner: Mutex<Inner>,
    cv: Condvar,
}

/// What the registrar does next.
enum Job {
    Release(ExtInput),
    Register(usize),
    Exit,
}

impl Ahead {
    /// A run over `spans` (batch by batch, in fill order); registrations start `lead` batches
    /// past the fill and reach at most `window` batches further. `read_only`: the device only
    /// reads the memory (compression input).
    pub(crate) fn new(spans: Vec<Span>, read_only: bool, lead: usize, window: usize) -> Self {
        let n = spans.len();
        Ahead {
            spans,
            read_only,
            lead: lead.max(1),
            window: window.max(1),
            inner: Mutex::new(Inner {
                batches: (0..n).map(|_| Batch::Idle).collect(),
                fill_pos: 0,
                release: Vec::new(),
                done: false,
                used: 0,
                wasted: 0,
            }),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A poisoned lock only means another thread panicked; the state stays consistent
        // (every transition is one assignment).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The fill reached batch `b`: its registration when ready (the caller stages its head and
    /// tail), else `None` (the caller stages the whole batch).
    pub(crate) fn take(&self, b: usize) -> Option<ExtInput> {
        let mut g = self.lock();
        g.fill_pos = g.fill_pos.max(b + 1);
        let was = std::mem::replace(g.batches.get_mut(b)?, Batch::Taken);
        let r = match was {
            Batch::Ready(ext) => {
                g.used += 1;
                Some(ext)
            }
            _ => None,
        };
        drop(g);
        self.cv.notify_all();
        r
    }

    /// A drained batch's registration (its copies have completed): undone on the registrar.
    pub(crate) fn give_back(&self, ext: ExtInput) {
        self.lock().release.push(ext);
        self.cv.notify_all();
    }

    /// No more batches: the registrar undoes what is left and returns.
    pub(crate) fn finish(&self) {
        self.lock().done = true;
        self.cv.notify_all();
    }

    /// (batches registered in time, registrations overtaken by the fill).
    pub(crate) fn counts(&self) -> (usize, usize) {
        let g = self.lock();
        (g.used, g.wasted)
    }

    fn next_job(&self) -> Job {
        let mut g = self.lock();
        loop {
            if let Some(e) = g.release.pop() {
                return Job::Release(e);
            }
            if g.done {
                return Job::Exit;
            }
            let from = g.fill_pos + self.lead - 1;
            let to = (from + self.window).min(g.batches.len());
            let pick = (from..to)
                .find(|&b| matches!(g.batches[b], Batch::Idle) && self.spans[b].is_some());
            if let Some(b) = pick {
                g.batches[b] = Batch::Registering;
                return Job::Register(b);
            }
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The registrar's loop (run it on one or more threads of their own until
    /// [`Ahead::finish`]; each takes the next job).
    ///
    /// # Safety
    /// Every span must stay valid memory of the caller, which the device may read (or, not
    /// `read_only`, write) in place from the moment its batch is taken, until the registrar
    /// returns; registrations handed out by `take` must come back through `give_back` only
    /// after every copy that uses them has completed (or be dropped then).
    pub(crate) unsafe fn run(&self, ctx: &Arc<CudaContext>) {
        loop {
            match self.next_job() {
                Job::Release(e) => drop(e),
                Job::Exit => break,
                Job::Register(b) => {
                    let (addr, len) = self.spans[b].expect("picked spans are Some");
                    // SAFETY: the caller's contract; one piece, registered on this thread.
                    let ext = unsafe {
                        ExtInput::register_span(ctx, addr as *mut u8, len, self.read_only)
                    };
                    let mut g = self.lock();
                    // (After `finish`, another registrar thread may have emptied the list.)
                    if let Some(slot @ Batch::Registering) = g.batches.get_mut(b) {
                        *slot = match ext {
                            Some(e) => Batch::Ready(e),
                            // Refused (the fill stages it): not tried again.
                            None => Batch::Taken,
                        };
                    } else {
                        // The fill got there first and staged the batch (or the run ended).
                        g.wasted += 1;
                        drop(g);
                        drop(ext);
                    }
                }
            }
        }
        // Registrations nobody took (the input ended early or the run failed): never used.
        let left: Vec<Batch> = std::mem::take(&mut self.lock().batches);
        drop(left);
    }
}

/// Runs `work` (a ring's stream) while `ahead`'s registrar runs on `threads` threads of its
/// own, then stops the registrar and waits until it has undone every registration.
pub(crate) fn with_registrar<R>(
    ctx: &Arc<CudaContext>,
    ahead: Option<&Ahead>,
    threads: usize,
    work: impl FnOnce() -> R,
) -> R {
    let Some(a) = ahead else { return work() };
    /// Stops the registrar however `work` ends (a panic included), so the scope's join ends.
    struct Finish<'a>(&'a Ahead);
    impl Drop for Finish<'_> {
        fn drop(&mut self) {
            self.0.finish();
        }
    }
    std::thread::scope(|s| {
        // SAFETY: the spans name the caller's memory, borrowed for the whole ring call that
        // `work` runs (the scope joins the registrar before it returns); the rings hand
        // registrations back, or drop them in `reset`, only after their copies completed.
        for _ in 0..threads.max(1) {
            s.spawn(|| unsafe { a.run(ctx) });
        }
        let _finish = Finish(a);
        work()
    })
}
