//! The persistent build of `ndt_derivatives` ([`super::Variant::server`], table entry
//! `ndt_derivatives_server`): one cooperative launch serves every evaluation of an alignment,
//! so an evaluation costs no launch and no driver synchronization.
//!
//! # Protocol (all words little-endian, in mapped page-locked host memory)
//! - `mailbox` (host writes): u64 word 0 = `seq | cmd << 32` (written last, with a release
//!   store), words 2..12 the request record of [`super::REQUEST_BYTES`] bytes (the layout of
//!   the ordinary kernel's request rows). `cmd` [`CMD_EVALUATE`] asks for one evaluation,
//!   [`CMD_STOP`] ends the kernel.
//! - `results` (device writes): the [`super::VALUES`] sums as in the ordinary kernel, then the
//!   u32 at word [`RESULT_SEQ_WORD`]: the `seq` of the request those sums answer (stored with
//!   release semantics after the sums), and the u32 at word [`STATUS_WORD`]: why the kernel
//!   stopped on its own ([`STATUS_IDLE`], [`STATUS_NOT_RESIDENT`]; the host zeroes it), and the
//!   u64 at [`EXIT_WORD`]: `first_seq | 1 << 32` once the last block has left the loop.
//!
//! # What each block does
//! 1. All blocks meet at a grid barrier (`rnn::barrier`, with its timeout): a block that never
//!    arrives means the grid is not co-resident, and every block that sees the barrier's status
//!    set writes [`STATUS_NOT_RESIDENT`] and ends instead of waiting for requests.
//! 2. Thread 0 of block 0 polls the mailbox word with `ld.acquire.sys` until its `seq` differs
//!    from the last one served, copies the record into the relay in device memory (`grid_sync`
//!    from [`RELAY_RECORD_WORD`]) and releases the word there ([`RELAY_WORD`]); thread 0 of
//!    every other block polls the relay with `ld.acquire.gpu`. (With every block polling host
//!    memory, an evaluation took 1.3 ms instead of microseconds on an H200: the host's memory
//!    answered one block's read after the other.) When `%globaltimer` says that `idle_ns`
//!    passed without a request, block 0 relays [`STATUS_IDLE`]'s command and every block ends
//!    (the others also give up by themselves after twice that), so a host that died never
//!    leaves a spinning kernel; the command goes to each block through shared memory.
//!    Polls are relaxed loads (one round trip each) and a fence follows the one that sees a new
//!    `seq` (an acquire load per poll cost a system-scope fence each time); the record is then
//!    read with weak vector loads (ten strong system-scope loads took a round trip each). A
//!    protocol without the flag word (two record slots that the host poisons, each polled whole
//!    with strong vector loads, and answers read once none is poison) was slower on an H200:
//!    3.1 us a poll instead of 1.1, 234 us an alignment instead of 188 (session 8).
//! 3. Steps 1 to 3 of the ordinary kernel, with thread 0 reading the request from the relay
//!    and the block that reduces last writing the sums; after a barrier its thread 0 fences at
//!    system scope (cumulative: the block's sums come first for every observer) and stores
//!    `seq` into `results`. The request counter is reset before that, and a block writes its
//!    next partial only after it has seen the next request, which the host sends only after it
//!    has read this answer.
//! 4. On the stop command (or idle), each block counts itself out; the last one writes the
//!    exit word, so the host can reuse the mailbox without synchronizing the stream.

use super::VALUES;
use crate::kernels::ndt::solve::{SolveCtx, SolveParams};
use crate::kernels::rnn::barrier::GridBarrier;
use crate::ptx::*;

mod solve_hooks;

/// `cmd`: evaluate the request record.
pub const CMD_EVALUATE: u32 = 0;
/// `cmd`: end the kernel.
pub const CMD_STOP: u32 = 1;
/// Internal command: no request within `idle_ns`.
const CMD_IDLE: u32 = 2;
/// u64 word of `mailbox` where the request record starts.
pub const REQUEST_WORD: usize = 2;
/// u64 word of `grid_sync` (device memory, after the start barrier's four u32) where block 0
/// relays the mailbox's word 0 to the other blocks (release after the record).
pub const RELAY_WORD: usize = 2;
/// u64 word of `grid_sync` where the relayed request record starts (16-byte aligned).
pub const RELAY_RECORD_WORD: usize = 4;
/// u64 word of `results` where the last block out writes `first_seq | 1 << 32` once every
/// block has left the serving loop (the host's cue that the kernel no longer touches its
/// memory, without a driver synchronization).
pub const EXIT_WORD: usize = VALUES + 2;
/// u32 words of `grid_sync` the host allocates (zero before the first launch).
pub const GRID_SYNC_WORDS: usize = 32;
/// u64 word of `results` that holds the answered `seq` (low half).
pub const RESULT_SEQ_WORD: usize = VALUES;
/// u64 word of `results` that holds the status (low half).
pub const STATUS_WORD: usize = VALUES + 1;
/// u64 words of `results` the host allocates.
pub const RESULT_WORDS: usize = 40;
/// Word of `results` where the `%globaltimer` stamps of the last request start (ns): block 0
/// saw the request ([`STAMP_SEEN`]), had the terms ([`STAMP_TERMS`]), had done its points
/// ([`STAMP_POINTS`]); the block that reduced last started its reduction ([`STAMP_LAST`]) and
/// had fenced the sums ([`STAMP_FENCED`]). Written with plain stores, for phase measurements.
pub const STAMP_WORD: usize = 32;
/// Stamp index: block 0 saw the request.
pub const STAMP_SEEN: usize = 0;
/// Stamp index: block 0's terms were in shared memory.
pub const STAMP_TERMS: usize = 1;
/// Stamp index: block 0 had done its points.
pub const STAMP_POINTS: usize = 2;
/// Stamp index: the last block began the final reduction.
pub const STAMP_LAST: usize = 3;
/// Stamp index: the last block had fenced the sums (just before storing `seq`).
pub const STAMP_FENCED: usize = 4;
/// Stamp index: block 0 issued the poll that saw the request (the poll's round trip is
/// [`STAMP_SEEN`] minus this, up to the stamp's own cost).
pub const STAMP_POLL: usize = 5;
/// Stamp index: the last block saw the request (through the relay).
pub const STAMP_LAST_SEEN: usize = 6;
/// Stamp index: block 0 had fenced after seeing the request (before reading its record).
pub const STAMP_REQ_FENCED: usize = 7;
/// Stamps per request.
pub const STAMPS: usize = 8;
/// Status: a block waited longer than `idle_ns` for a request and ended.
pub const STATUS_IDLE: u32 = 2;
/// Status: the start barrier timed out (the grid was not co-resident).
pub const STATUS_NOT_RESIDENT: u32 = 3;

/// The server's extra parameters (after the ordinary kernel's and the dense table's).
pub(super) struct ServerParams {
    mailbox: Param<U64>,
    grid_sync: Param<U64>,
    idle_ns: Param<U64>,
    first_seq: Param<U32>,
    /// The device solver's parameters ([`super::Variant::solve`]).
    solve: Option<SolveParams>,
}

impl ServerParams {
    /// Declares `mailbox` (mapped host address), `grid_sync` (4 u32 in device memory, zero
    /// before the first launch: the start barrier's `arrive, exit, status`), `idle_ns` and
    /// `first_seq` (the mailbox's `seq` at launch, already served); with `solve`, the device
    /// solver's after them ([`SolveParams::declare`]).
    pub(super) fn declare(b: &mut KernelBuilder, solve: bool, opts: u32) -> ServerParams {
        ServerParams {
            mailbox: b.param::<U64>("mailbox"),
            grid_sync: b.param::<U64>("grid_sync"),
            idle_ns: b.param::<U64>("idle_ns"),
            first_seq: b.param::<U32>("first_seq"),
            solve: solve.then(|| SolveParams::declare(b, opts)),
        }
    }
}

/// The registers of the serving loop.
pub(super) struct ServerRegs {
    mailbox: Reg<U64>,
    grid_sync: Reg<U64>,
    idle_ns: Reg<U64>,
    results: Reg<U64>,
    /// The `seq` of the request being served (thread 0's copy is the one that counts).
    seq: Reg<U32>,
    is0: Reg<Pred>,
    /// Thread 0 of block 0.
    first_thread: Reg<Pred>,
    /// Block 0.
    blk0: Reg<Pred>,
    first_seq_param: Param<U32>,
    /// Thread 0: when this block saw the request it serves (`%globaltimer`).
    seen_at: Reg<U64>,
    /// The device solver ([`super::Variant::solve`]) and a predicate that never holds (no
    /// block polls the host then).
    solve: Option<(SolveCtx, Reg<Pred>)>,
}

impl ServerRegs {
    /// Loads the parameters; `results` is the kernel's `results` parameter, `r0` its first
    /// request record (the device solver's initial request).
    pub(super) fn new(
        b: &mut KernelBuilder,
        p: &ServerParams,
        results: &Param<U64>,
        r0: (&[Param<F64>], &Param<U32>, &Param<U32>),
    ) -> Self {
        let mailbox = b.global_ptr(&p.mailbox);
        let grid_sync = b.global_ptr(&p.grid_sync);
        let idle_ns = b.ld_param(&p.idle_ns);
        let results = b.global_ptr(results);
        let seq = b.ld_param(&p.first_seq);
        let tid = b.special(Special::TidX);
        let is0 = b.setp(Cmp::Eq, tid, 0u32);
        let blk = b.special(Special::CtaidX);
        let blk0 = b.setp(Cmp::Eq, blk, 0u32);
        let first_thread = b.and(blk0, is0);
        ServerRegs {
            mailbox,
            grid_sync,
            idle_ns,
            results,
            seq,
            is0,
            first_thread,
            blk0,
            first_seq_param: p.first_seq.clone(),
            seen_at: b.mov(0u64),
            solve: p.solve.clone().map(|sp| {
                let never = b.setp(Cmp::Ne, tid, tid);
                (SolveCtx::new(b, sp, r0.0, r0.1, r0.2), never)
            }),
        }
    }

    /// In the last block (thread 0): when it saw the request ([`STAMP_LAST_SEEN`]), then
    /// [`STAMP_LAST`] = now.
    pub(super) fn stamp_last(&self, b: &mut KernelBuilder, is0: Reg<Pred>) {
        let a = Addr::from(self.results).off(8 * (STAMP_WORD + STAMP_LAST_SEEN) as i64);
        let seen_at = self.seen_at;
        b.if_then(is0, |b| b.st(Space::Global, a, seen_at));
        self.stamp(b, is0, STAMP_LAST);
    }

    /// Where `who` holds: stamp `k` (see [`STAMP_WORD`]) = `%globaltimer`.
    pub(super) fn stamp(&self, b: &mut KernelBuilder, who: Reg<Pred>, k: usize) {
        let a = Addr::from(self.results).off(8 * (STAMP_WORD + k) as i64);
        b.if_then(who, |b| {
            let now = b.globaltimer();
            b.st(Space::Global, a, now);
        });
    }

    /// Stamp `k` by thread 0 of block 0.
    pub(super) fn stamp_block0(&self, b: &mut KernelBuilder, k: usize) {
        self.stamp(b, self.first_thread, k);
        self.prof_block0(b, k);
    }

    /// Thread 0: the request record from the relay into `w` (nine f64), `first`, `n`.
    pub(super) fn read_request(
        &self,
        b: &mut KernelBuilder,
        w: &[Reg<F64>],
        first: Reg<U32>,
        n: Reg<U32>,
    ) {
        let rq = Addr::from(self.grid_sync).off(8 * RELAY_RECORD_WORD as i64);
        let words: Vec<Reg<U64>> = (0..5i64)
            .flat_map(|k| b.ld_relaxed_gpu_v2::<U64>(rq.off(16 * k)))
            .collect();
        for (k, &wk) in w.iter().enumerate() {
            let v = b.bitcast::<F64, U64>(words[k]);
            b.mov_to(wk, v);
        }
        let f = b.cvt::<U32, U64>(words[9]);
        b.mov_to(first, f);
        let hi = b.shr(words[9], 32u32);
        let c = b.cvt::<U32, U64>(hi);
        b.mov_to(n, c);
    }

    /// In the block that reduced last, after its threads stored the sums: a barrier, then
    /// thread 0 fences at system scope and stores the request's `seq`.
    pub(super) fn publish(&self, b: &mut KernelBuilder, is0: Reg<Pred>) {
        if let Some((sv, _)) = &self.solve {
            // The sums in shared memory for warp 0, which runs the solver step.
            b.bar_sync();
            let relay = b.add(self.grid_sync, 8 * RELAY_WORD as u64);
            let (seq, results) = (self.seq, self.results);
            let (mailbox, idle_ns) = (self.mailbox, self.idle_ns);
            let token = b.ld_param(&self.first_seq_param);
            let tid = b.special(Special::TidX);
            let warp0 = b.setp(Cmp::Lt, tid, 32u32);
            b.if_then(warp0, |b| {
                sv.step(b, relay, seq, results, mailbox, idle_ns, token)
            });
            return;
        }
        // The barrier puts the sums before thread 0's fence, which (cumulative) puts them
        // before the seq for every observer: one system-scope fence on the path.
        b.bar_sync();
        let (results, seq) = (self.results, self.seq);
        b.if_then(is0, |b| b.fence_acq_rel(Scope::Sys));
        self.stamp(b, is0, STAMP_FENCED);
        b.if_then(is0, |b| {
            let a = Addr::from(results).off(8 * RESULT_SEQ_WORD as i64);
            b.st_relaxed_sys::<U32>(a, seq);
        });
    }

    /// The kernel body around `steps` (the ordinary kernel's steps 1 to 3); `info` is its
    /// 4-word shared array, whose word 3 carries the command to the block.
    pub(super) fn serve(
        &self,
        b: &mut KernelBuilder,
        info: SharedArray<U32>,
        steps: impl FnOnce(&mut KernelBuilder),
    ) {
        let is0 = self.is0;
        let status = Addr::from(self.results).off(8 * STATUS_WORD as i64);
        let g = self.grid_sync;
        let arrive = g;
        let exit = b.add(g, 4u64);
        let bar_status = b.add(g, 8u64);
        let nblk = b.special(Special::NctaidX);
        b.comment("server: every block at the start barrier (a timeout: grid not co-resident)");
        let bar = GridBarrier::new(b, arrive, exit, bar_status, nblk);
        let relay = b.add(g, 8 * RELAY_WORD as u64);
        let (first_thread, seq0) = (self.first_thread, self.seq);
        let solve = self.solve.as_ref();
        b.if_then(first_thread, |b| match solve {
            // The device solver: the first request is in the relay from the start.
            Some((sv, _)) => sv.start(b, relay, seq0),
            None => {
                // The relay starts at the launch's seq (the barrier publishes it).
                let w = b.cvt::<U64, U32>(seq0);
                b.st_relaxed_gpu::<U64>(relay, w);
            }
        });
        bar.sync(b);
        b.if_then(is0, |b| {
            let st = b.ld_acquire_gpu::<U32>(bar_status);
            b.st(Space::Shared, info.at(3), st);
        });
        b.bar_sync();
        let st = b.ld::<U32>(Space::Shared, info.at(3));
        let resident = b.setp(Cmp::Eq, st, 0u32);
        // Word 3 carries the commands next.
        b.bar_sync();
        let end = b.label("server_end");
        let skip = b.label("resident");
        b.bra_if(resident, &skip);
        let st_at = status.clone();
        b.if_then(is0, |b| b.st_release_sys::<U32>(st_at, STATUS_NOT_RESIDENT));
        b.bra(&end);
        b.place(&skip);
        let (mailbox, idle_ns, seq, blk0) = (self.mailbox, self.idle_ns, self.seq, self.blk0);
        let (results, seen_at) = (self.results, self.seen_at);
        b.loop_forever(|b, brk, _| {
            b.comment("server: thread 0 waits for the next request (or the idle timeout)");
            b.if_then(is0, |b| {
                let start = b.globaltimer();
                let cmd = b.mov(CMD_IDLE);
                // Block 0 polls the host and relays; the others poll the relay (in L2), which
                // the host's memory sees as one reader instead of one per block.
                // The others wait twice as long, so block 0's timeout comes first and ends
                // them all together.
                let host = solve.map_or(blk0, |(_, never)| *never);
                let src = b.selp(mailbox, relay, host);
                let twice = b.add(idle_ns, idle_ns);
                let limit = b.selp(idle_ns, twice, host);
                // Relaxed polls (a plain round trip each), one fence once the word changed:
                // an acquire load per poll cost a system-scope fence every time.
                let issued = b.mov(start);
                b.loop_forever(|b, got, _| {
                    let word = b.reg::<U64>();
                    b.if_else(
                        host,
                        |b| {
                            let w = b.ld_relaxed_sys::<U64>(src);
                            b.mov_to(word, w);
                        },
                        |b| {
                            let w = b.ld_relaxed_gpu::<U64>(src);
                            b.mov_to(word, w);
                        },
                    );
                    let s = b.cvt::<U32, U64>(word);
                    let fresh = b.setp(Cmp::Ne, s, seq);
                    b.if_then(fresh, |b| {
                        let now = b.globaltimer();
                        b.mov_to(seen_at, now);
                        b.if_else(
                            host,
                            |b| b.fence_acq_rel(Scope::Sys),
                            |b| b.fence_acq_rel(Scope::Gpu),
                        );
                        let hi = b.shr(word, 32u32);
                        let c = b.cvt::<U32, U64>(hi);
                        b.mov_to(cmd, c);
                        b.mov_to(seq, s);
                        b.if_then(host, |b| {
                            let a = Addr::from(results).off(8 * (STAMP_WORD + STAMP_POLL) as i64);
                            b.st(Space::Global, a, issued);
                            let from = Addr::from(mailbox).off(8 * REQUEST_WORD as i64);
                            let to =
                                Addr::from(relay).off(8 * (RELAY_RECORD_WORD - RELAY_WORD) as i64);
                            let a =
                                Addr::from(results).off(8 * (STAMP_WORD + STAMP_REQ_FENCED) as i64);
                            let now = b.globaltimer();
                            b.st(Space::Global, a, now);
                            // Weak vector loads after the fence (strong system-scope loads of
                            // the ten words took about a round trip each), one round trip.
                            let v: Vec<[Reg<U64>; 2]> = (0..5i64)
                                .map(|k| b.ld_v2::<U64>(Space::Global, from.off(16 * k)))
                                .collect();
                            for (k, v) in v.into_iter().enumerate() {
                                b.st_v2::<U64>(Space::Global, to.off(16 * k as i64), v);
                            }
                            b.st_release_gpu::<U64>(relay, word);
                        });
                        b.bra(got);
                    });
                    let now = b.globaltimer();
                    b.mov_to(issued, now);
                    let waited = b.sub(now, start);
                    let late = b.setp(Cmp::Gt, waited, limit);
                    b.if_then(late, |b| {
                        // Block 0 tells the others to end too.
                        b.if_then(host, |b| {
                            let s1 = b.add(seq, 1u32);
                            let w = b.cvt::<U64, U32>(s1);
                            let idle = b.or(w, (CMD_IDLE as u64) << 32);
                            b.st_release_gpu::<U64>(relay, idle);
                        });
                        b.bra(got);
                    });
                });
                b.st(Space::Shared, info.at(3), cmd);
            });
            let a = Addr::from(self.results).off(8 * (STAMP_WORD + STAMP_SEEN) as i64);
            let seen_at = self.seen_at;
            b.if_then(self.first_thread, |b| b.st(Space::Global, a, seen_at));
            self.prof_seen(b, is0);
            b.bar_sync();
            let cmd = b.ld::<U32>(Space::Shared, info.at(3));
            let evaluate = b.setp(Cmp::Eq, cmd, CMD_EVALUATE);
            b.bra_unless(evaluate, brk);
            steps(b);
        });
        b.comment("server: stopped, or idle too long (then the status says so)");
        let cmd = b.ld::<U32>(Space::Shared, info.at(3));
        let idle = b.setp(Cmp::Eq, cmd, CMD_IDLE);
        let report = b.and(idle, is0);
        b.if_then(report, |b| b.st_release_sys::<U32>(status, STATUS_IDLE));
        b.place(&end);
        b.comment("server: the last block out tells the host (no driver synchronization needed)");
        let exits = b.add(g, 12u64);
        let (results, nblk2) = (self.results, nblk);
        let token = b.ld_param(&self.first_seq_param);
        b.if_then(is0, |b| {
            let old = b.atom::<U32>(Space::Global, AtomOp::Add, exits, 1u32);
            let last = b.sub(nblk2, 1u32);
            let is_last = b.setp(Cmp::Eq, old, last);
            b.if_then(is_last, |b| {
                b.st(Space::Global, exits, 0u32);
                b.fence_acq_rel(Scope::Sys);
                let t = b.cvt::<U64, U32>(token);
                let t = b.or(t, 1u64 << 32);
                let a = Addr::from(results).off(8 * EXIT_WORD as i64);
                b.st_relaxed_sys::<U64>(a, t);
            });
        });
        bar.finish(b);
    }
}
