//! A spinning worker pool for the solver updates of a split batch (`PTXFLOW_NDT_FEED_POOL=n`;
//! by default `min(8, cores / 2)` threads on hosts with at least 8 cores, none on smaller
//! ones): `n` threads that live for the batch and wait for work by spinning (then yielding)
//! instead of sleeping, so handing them a round's updates costs about a microsecond where
//! waking the rayon pool costs tens (the host's share of a GPU batch is mostly these updates:
//! 6x6 eigen-decompositions of up to 128 solvers per group round).
//!
//! Measured (session 9, H100 host, 8 threads, split-batch phases of the 256-hypothesis batch):
//! the host's update time per batch 6.0 -> 2.8 ms (a 128-solver round 100 -> 55 us), but the
//! batch was bound by the device (8.4 ms busy of 8.8 ms): 8.47 against 8.42 ms without the pool.
//! Session 10: once the two groups' rounds overlap on the device (`PTXFLOW_NDT_TWO_STREAMS`),
//! the host's updates are what the batch waits for, and the pool pays: 7.23 ms against 8.45 ms
//! with two streams and no pool, 8.39 with the pool on one stream, 8.59 with neither (H100,
//! 16-core host, 15 alternating batches in one process, `gpu-results/s10/ndtb-2.log`; in
//! `ndtb-3.log` 6.86 against 7.51 without the pool).
//!
//! Each state is updated by exactly one thread with the linearization meant for it, and the
//! states are independent, so the results equal the sequential and rayon updates bit for bit.
//!
//! # Protocol
//! The caller publishes a job (the states, their linearizations, the chunk count) in atomics,
//! then stores `epoch << 32` into `next`; every thread (workers and the caller) claims chunks by
//! a compare-and-swap on `next` that only succeeds while its epoch is the job's, so a worker
//! that wakes late can never claim a chunk of a newer job with an older job's pointers. The
//! caller returns once `done` counts every chunk: all updates of the job have finished.

use super::Newton;
use crate::ndt::linearize::Linearization;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// States per claimed chunk.
const CHUNK: usize = 4;
/// Spins before a waiting worker starts yielding its core.
const SPINS: u32 = 1 << 14;

/// Threads of the pool: `PTXFLOW_NDT_FEED_POOL` (0: no pool; at most 64), else
/// [`default_threads`].
pub(super) fn threads_from_env() -> usize {
    std::env::var("PTXFLOW_NDT_FEED_POOL")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map_or_else(default_threads, |n| n.min(64))
}

/// Half the host's cores, at most 8, on hosts with at least 8 cores (the caller's thread and
/// the driver keep theirs); no pool on smaller hosts, where spinning threads would take the
/// cores the caller needs.
fn default_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    if cores >= 8 {
        (cores / 2).min(8)
    } else {
        0
    }
}

/// The shared state of the pool (see the module docs).
pub(super) struct Pool {
    states: AtomicPtr<Newton>,
    fed: AtomicPtr<Option<Linearization>>,
    len: AtomicUsize,
    /// `epoch << 32 | next chunk`.
    next: AtomicU64,
    done: AtomicUsize,
    quit: AtomicBool,
    /// An update panicked on a pool thread (the caller re-raises it).
    panicked: AtomicBool,
}

/// Runs `f` with a pool of `threads` spinning workers (`None` for 0), stopping them after.
pub(super) fn with_pool<R>(threads: usize, f: impl FnOnce(Option<&Pool>) -> R) -> R {
    if threads == 0 {
        return f(None);
    }
    let pool = Pool {
        states: AtomicPtr::new(std::ptr::null_mut()),
        fed: AtomicPtr::new(std::ptr::null_mut()),
        len: AtomicUsize::new(0),
        next: AtomicU64::new(0),
        done: AtomicUsize::new(0),
        quit: AtomicBool::new(false),
        panicked: AtomicBool::new(false),
    };
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| pool.worker());
        }
        // Stop the workers even when `f` panics (the scope joins them before returning).
        struct Quit<'a>(&'a AtomicBool);
        impl Drop for Quit<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
            }
        }
        let _quit = Quit(&pool.quit);
        f(Some(&pool))
    })
}

impl Pool {
    fn worker(&self) {
        let mut seen = 0u64;
        let mut idle = 0u32;
        while !self.quit.load(Ordering::Acquire) {
            let epoch = self.next.load(Ordering::Acquire) >> 32;
            if epoch != seen {
                seen = epoch;
                idle = 0;
                self.run(epoch);
            } else if idle < SPINS {
                idle += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Claims and runs chunks of job `epoch` until none is left.
    fn run(&self, epoch: u64) {
        let states = self.states.load(Ordering::Acquire);
        let fed = self.fed.load(Ordering::Acquire);
        let len = self.len.load(Ordering::Acquire);
        let chunks = len.div_ceil(CHUNK) as u64;
        let mut cur = self.next.load(Ordering::Acquire);
        loop {
            if cur >> 32 != epoch || (cur & 0xFFFF_FFFF) >= chunks {
                return;
            }
            match self
                .next
                .compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    let c = (cur & 0xFFFF_FFFF) as usize;
                    // A panicking update must still count its chunk, or the caller would wait
                    // forever; the caller re-raises it.
                    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        for k in c * CHUNK..(c * CHUNK + CHUNK).min(len) {
                            // SAFETY: the claim above succeeded for job `epoch`, whose pointers
                            // (read after observing `epoch`, published before it) stay valid
                            // until `done` counts every chunk, which needs this one; chunk `c`
                            // is claimed by one thread only, so element `k` is borrowed once.
                            let (s, l) = unsafe { (&mut *states.add(k), &mut *fed.add(k)) };
                            if let Some(l) = l.take() {
                                s.feed(l);
                            }
                        }
                    }));
                    if ran.is_err() {
                        self.panicked.store(true, Ordering::Release);
                    }
                    self.done.fetch_add(1, Ordering::AcqRel);
                    cur = self.next.load(Ordering::Acquire);
                }
                Err(now) => cur = now,
            }
        }
    }

    /// Feeds `fed[k]` (when present) to `states[k]` on every thread of the pool and this one;
    /// returns when all are fed.
    pub(super) fn feed(&self, states: &mut [Newton], fed: &mut [Option<Linearization>]) {
        assert_eq!(states.len(), fed.len(), "one slot per state");
        let epoch = (self.next.load(Ordering::Acquire) >> 32) + 1;
        self.states.store(states.as_mut_ptr(), Ordering::Release);
        self.fed.store(fed.as_mut_ptr(), Ordering::Release);
        self.len.store(states.len(), Ordering::Release);
        self.done.store(0, Ordering::Release);
        self.next.store(epoch << 32, Ordering::Release);
        self.run(epoch);
        let chunks = states.len().div_ceil(CHUNK);
        while self.done.load(Ordering::Acquire) < chunks {
            std::hint::spin_loop();
        }
        assert!(
            !self.panicked.load(Ordering::Acquire),
            "a solver update panicked on a feed-pool thread"
        );
    }
}

/// [`super::feed_round`] on `pool`: the same updates, spread over the pool's threads.
pub(super) fn feed_round(
    pool: &Pool,
    states: &mut [Newton],
    who: Vec<usize>,
    out: Vec<Linearization>,
) -> crate::Result<()> {
    if out.len() != who.len() {
        return Err(crate::Error::Shape {
            what: "linearizations returned by SplitLinearize::complete".into(),
            expected: who.len().to_string(),
            got: out.len().to_string(),
        });
    }
    let mut fed: Vec<Option<Linearization>> = vec![None; states.len()];
    for (k, l) in who.into_iter().zip(out) {
        fed[k] = Some(l);
    }
    pool.feed(states, &mut fed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ndt::params::SolverParams;
    use crate::rng::Rng;
    use nalgebra::{Isometry3, Matrix6, Translation3, Vector6};

    /// A linearization with a random negative definite Hessian.
    fn lin(rng: &mut Rng) -> Linearization {
        let m = Matrix6::from_fn(|_, _| rng.normal());
        let h = -(m * m.transpose() + Matrix6::identity());
        Linearization {
            score: rng.range(10.0, 20.0),
            gradient: Vector6::from_fn(|_, _| rng.normal()),
            hessian: h,
            correspondences: 100,
        }
    }

    #[test]
    fn pool_updates_equal_sequential_updates() {
        let params = SolverParams::default();
        let n = 37;
        let inits: Vec<Isometry3<f64>> = (0..n)
            .map(|i| {
                Isometry3::from_parts(
                    Translation3::new(i as f64 * 0.01, 0.0, 0.0),
                    Default::default(),
                )
            })
            .collect();
        let mut a: Vec<Newton> = inits.iter().map(|i| Newton::new(i, 100, params)).collect();
        let mut b: Vec<Newton> = inits.iter().map(|i| Newton::new(i, 100, params)).collect();
        let mut rng = Rng::new(9);
        with_pool(3, |pool| {
            let pool = pool.expect("three threads");
            for round in 0..6 {
                let lins: Vec<Linearization> = (0..n).map(|_| lin(&mut rng)).collect();
                // Every other state skips a round (as finished or not asked).
                let who: Vec<usize> = (0..n).filter(|k| (k + round) % 3 != 0).collect();
                let out: Vec<Linearization> = who.iter().map(|&k| lins[k].clone()).collect();
                for (&k, l) in who.iter().zip(out.clone()) {
                    a[k].feed(l);
                }
                feed_round(pool, &mut b, who, out).unwrap();
                for (x, y) in a.iter().zip(&b) {
                    assert_eq!(x.wants(), y.wants(), "round {round}");
                }
            }
        });
        assert!(with_pool(0, |p| p.is_none()));
    }
}
