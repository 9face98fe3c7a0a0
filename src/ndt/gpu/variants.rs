//! Which build of `ndt_derivatives` the pipeline runs, and its grid: the table's kernels for the
//! default choices (hash and dense cell table), run-time [`Variant`]s for the others. Every variant sums
//! the same terms in the same order, so their records are equal bit for bit (`tests/ndt_sim.rs`
//! checks this in the interpreter); they differ only in speed. Environment variables, read when
//! a pipeline is created (`1` on, `0` off, unset: the default):
//! - `PTXFLOW_NDT_COMPACT`: the dense probes' hits compacted per thread before pairing;
//! - `PTXFLOW_NDT_PREFETCH` (implies compaction): the next hit's voxel record loaded ahead;
//! - `PTXFLOW_NDT_LINEAR`: dense probes of interior cells by table offset, without bounds;
//! - `PTXFLOW_NDT_SHARED_ACC`: the 28 accumulators in shared memory instead of registers;
//! - `PTXFLOW_NDT_SMALL_PREFETCH`: rounds of at most one block per SM (one alignment) run the
//!   prefetching variant whatever the others say;
//! - `PTXFLOW_NDT_SPLIT`: batches run as two groups in flight (`pipeline/split.rs`);
//! - `PTXFLOW_NDT_SERVER`: single alignments run on the persistent evaluation server (on by
//!   default, `pipeline/server`);
//! - `PTXFLOW_NDT_SPLIT_POINTS`: rounds of at most one block per SM (and the evaluation server)
//!   run the split variant, two warps per point (`Variant::split_point`; not bit-identical, off:
//!   session 8, H200, Velodyne alignment 256 us against 241 us without it, criterion, same
//!   run; ncu at locked clocks 15.9 us for 250 blocks against 13.8 us for 125 — the points are
//!   not what bounds a one-pair round, the two-level reduction is);
//! - `PTXFLOW_NDT_MIXED`: rounds of more than one block per SM (batches) run the mixed-precision
//!   build (`Variant::mixed`: per-pair and per-point maths in f32, transform, `x' − μ` and sums
//!   in f64; not bit-identical, off by default), with `PTXFLOW_NDT_ACC32` (its per-thread sums
//!   in f32 registers, off by default) and `PTXFLOW_NDT_FAST_PROBES` (Direct7 probes of interior
//!   cells at fixed table offsets, on by default) and `PTXFLOW_NDT_HILO` (`x' − μ` from
//!   double-f32 splits, no f64 operation per pair, on by default) and `PTXFLOW_NDT_SCORE64` (each
//!   pair's `x' − μ`, `q`, `e` and the score exactly as the f64 kernels, only gradient and
//!   Hessian terms in f32; off by default, and when on `HILO` does not apply);
//! - `PTXFLOW_NDT_CROSS`: every round of a batch of alignments (both groups of a split batch,
//!   lockstep batches) runs the f64 cross-product build `ndt_derivatives_dense_cross`
//!   (`Variant::DENSE_CROSS`: the angular derivatives from two vectors per pose instead of nine
//!   matrices per point; records differ from the matrix form in the last bits); direct
//!   `linearize` calls, single alignments, the server and the device solve keep the matrix
//!   kernels, so their records stay equal to the hash kernel's bit for bit. With `MIXED` every
//!   round of a batch runs the mixed build instead (`pipeline/round.rs`);
//! - `PTXFLOW_NDT_PROBES7` (on by default): pipelines searching Direct7 run their batch rounds on
//!   `ndt_derivatives_dense_cross7` (`Variant::DENSE_CROSS7`, a Direct7-only build): the seven
//!   probes at fixed offsets from the point's cell entry (`Variant::probes7`), the per-request
//!   vectors `u_b`, `u_c` read from shared memory at each paired point instead of held in
//!   registers (`Variant::late_loads`: 96 registers instead of 127 on sm_90, so 5 blocks per SM
//!   instead of 4) and the shared accumulators in pairs with `v2` accesses
//!   (`Variant::acc_pairs`); records bit-identical to `ndt_derivatives_dense_cross`'s;
//! - `PTXFLOW_NDT_LATE_LOADS`, `PTXFLOW_NDT_ACC_PAIRS` (default: on where the Direct7 build runs,
//!   off elsewhere): those two for any batch kernel (built at run time; other searches keep
//!   session 10's `ndt_derivatives_dense_cross` by default because only the Direct7 build went
//!   through the sanitizers on the GPU);
//! - `PTXFLOW_NDT_WIDE_RECORDS` (off by default): the batch kernel reads padded 96-byte voxel
//!   records (uploaded beside the plain ones) with `v2` loads (`Variant::wide_records`;
//!   bit-identical; within noise, so it stays off);
//! - `PTXFLOW_NDT_PAIR2` (off by default): the batch kernel's pair loop takes two hits per step
//!   (`Variant::pair2`: two independent chains; bit-identical, but 222-240 registers: slower);
//! - `PTXFLOW_NDT_BATCH_DEVICE` (on by default since session 12): batches of alignments run
//!   the Newton / More-Thuente solver on the device too (`pipeline/batch`, `ndt_batch_solve`),
//!   with `PTXFLOW_NDT_BATCH_GROUPS` (chains, default 2), `PTXFLOW_NDT_BATCH_LAG` (default 1),
//!   `PTXFLOW_NDT_BATCH_PRIORITY` (solver steps on high-priority streams, on by default) and
//!   `PTXFLOW_NDT_BATCH_TIMING` (events around every round's kernels);
//! - `PTXFLOW_NDT_MIN_BLOCKS=n`: `.minnctapersm n` (an occupancy experiment);
//! - `PTXFLOW_NDT_BLOCKS_PER_SM=n`: the grid's aim in blocks per SM (default 8).
//!
//! The defaults are kernels of the table (snapshots, ptxas gate): `ndt_derivatives` for the hash,
//! `ndt_derivatives_dense` and, for small rounds, `ndt_derivatives_dense_small`; any other
//! choice is built and JIT-compiled when the pipeline is created.
//!
//! Defaults (session 7, H100, criterion `gpu/ndt/align/velodyne` and `gpu/ndt/batch/256` in one
//! run, `.gpu-F/bench.sh`): compaction, shared accumulators (dense table only), the prefetching
//! variant for small rounds and split batches are on; linear probes and prefetching for every
//! round are off. Batch of 256 hypotheses: all switches off 13.26 ms, the defaults with linear
//! probes 8.64 ms, without them 8.32 ms; without shared accumulators 11.47 ms, without the
//! split 12.36 ms. Velodyne alignment: 229 us off, 229 us with the defaults (246 with linear
//! probes). Every switch's records equal the hash kernel's bit for bit in the interpreter
//! (`tests/ndt_sim.rs`); set a switch to `0` or `1` to compare.
//!
//! Session 9 (H100, `PTXFLOW_NDT_BATCH_AB=1` bench: medians of 15 alternating batches in one
//! process, `gpu-results/s9/ndtb-{1,2,3}.log`): the f64 default 8.42 ms; `CROSS` 7.96 ms (16 of
//! 256 results move beyond 1 mm / 0.01 deg of the default's, the CPU agrees with the GPU as
//! well as with itself: 19 differ against 21 for the default, 24 for the CPU with its points
//! reversed); `MIXED` (all-f32 pairs and points) 7.92 ms but 50-62 results beyond the bound,
//! `MIXED` with `SCORE64` 9.80 ms (against 8.72) and still 60: f32 anywhere in the gradient
//! moves where the solver stops, so `MIXED` stays off; grid aims of 12 and 16 blocks per SM
//! 8.52 and 8.59 ms; `MIN_BLOCKS=5` with `CROSS` 8.35 ms.
//!
//! Session 10: `CROSS` became a kernel of the table (`ndt_derivatives_dense_cross`) that only
//! the rounds of a batch run, and the default (H100, `gpu-results/s10/ndtb-1.log`, 15
//! alternating batches in one process: 8.51 ms against 8.95 for session 9's kernels, criterion
//! 8.44 / 8.33 against 8.75 / 8.76; GPU vs CPU 19 of 256 beyond 1 mm / 0.01 deg, CPU vs CPU
//! with its points reversed 24; the NDT GPU tests pass, memcheck and racecheck 0).
//!
//! Session 11 (H100, 15 alternating batches in one process, `gpu-results/s11/ndtb-{1,2}.log`;
//! every build's 256 results equal session 10's bit for bit): session 10's batch kernel 6.82 /
//! 6.90 ms; late loads 6.80 (run 1); late loads with paired accumulators and wide records 6.60 /
//! 6.71; late loads with Direct7 probes 6.47, with wide records 6.45, with both 6.41 ms (run 2);
//! `.minnctapersm 6` on top of late loads (80 registers, 52 bytes of spills) 7.64; late loads
//! with the prefetching pair loop (166-168 registers) 8.19-8.45; two pairs per step 9.85. The
//! default for Direct7 pipelines is the last (`ndt_derivatives_dense_cross7`); final run
//! (`gpu-results/s11/ndtb-3.log`): 6.357 ms against 6.677 for session 10's kernel, 6.476 for
//! late loads and paired accumulators without the Direct7 probes.

use crate::kernels::ndt::derivatives::{build_variant, Variant};
use crate::kernels::KernelId;
use crate::ptx::Target;
use crate::runtime::{Gpu, LoadedKernel};
use crate::Result;

/// Defaults of the switches above.
const COMPACT: bool = true;
const PREFETCH: bool = false;
const SHARED_ACC: bool = true;
const LINEAR: bool = false;
const SMALL_PREFETCH: bool = true;
/// Default of `PTXFLOW_NDT_SPLIT_POINTS` (small rounds of the dense table only).
const SPLIT_POINTS: bool = false;
/// Default of `PTXFLOW_NDT_MIXED` (rounds of more than one block per SM: batches).
const MIXED: bool = false;
/// Defaults of `PTXFLOW_NDT_ACC32` and `PTXFLOW_NDT_FAST_PROBES` (mixed build only).
const ACC32: bool = false;
const FAST_PROBES: bool = true;
/// Default of `PTXFLOW_NDT_HILO` (mixed build only).
const HILO: bool = true;
/// Default of `PTXFLOW_NDT_SCORE64` (mixed build only).
const SCORE64: bool = false;
/// Default of `PTXFLOW_NDT_CROSS` (every round of a batch, dense table, not mixed).
const CROSS: bool = true;
/// Default of `PTXFLOW_NDT_WIDE_RECORDS` (the batch kernel only).
const WIDE_RECORDS: bool = false;
/// Default of `PTXFLOW_NDT_PROBES7` (the batch kernel of Direct7 pipelines only);
/// `PTXFLOW_NDT_LATE_LOADS` and `PTXFLOW_NDT_ACC_PAIRS` default to what it decides.
const PROBES7: bool = true;
/// Default of `PTXFLOW_NDT_PAIR2` (the batch kernel only).
const PAIR2: bool = false;
/// Default of `PTXFLOW_NDT_SPLIT` (see `pipeline/split.rs`).
pub(super) const SPLIT: bool = true;

/// Whether the switch `name` is on (`1`), off (`0`) or, unset, `default`.
pub(super) fn env_switch(name: &str, default: bool) -> bool {
    match std::env::var(name).as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => default,
    }
}

/// The variant for the dense table (`dense`) or the hash, for any round or (`small`) for rounds
/// of at most one block per SM.
pub(super) fn variant_from_env(dense: bool, small: bool) -> Variant {
    variant_with(dense, small, None)
}

/// [`variant_from_env`] with `PTXFLOW_NDT_MIXED` overridden by `mixed` when it is given.
pub(super) fn variant_with(dense: bool, small: bool, mixed: Option<bool>) -> Variant {
    // The mixed-precision build replaces the per-point code of the other switches.
    let mixed = dense && !small && mixed.unwrap_or_else(|| env_switch("PTXFLOW_NDT_MIXED", MIXED));
    let acc32 = mixed && env_switch("PTXFLOW_NDT_ACC32", ACC32);
    let prefetch = dense
        && !mixed
        && (env_switch("PTXFLOW_NDT_PREFETCH", PREFETCH)
            || (small && env_switch("PTXFLOW_NDT_SMALL_PREFETCH", SMALL_PREFETCH)));
    Variant {
        dense,
        min_blocks_per_sm: std::env::var("PTXFLOW_NDT_MIN_BLOCKS")
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
            .filter(|n| (1..=16).contains(n)),
        compact: prefetch || mixed || (dense && env_switch("PTXFLOW_NDT_COMPACT", COMPACT)),
        prefetch,
        linear: dense && !mixed && env_switch("PTXFLOW_NDT_LINEAR", LINEAR),
        // The hash path keeps the table's register build unless asked (not measured otherwise).
        shared_acc: !acc32 && env_switch("PTXFLOW_NDT_SHARED_ACC", SHARED_ACC && dense),
        server: false,
        solve: false,
        split_point: dense && small && env_switch("PTXFLOW_NDT_SPLIT_POINTS", SPLIT_POINTS),
        mixed,
        acc32,
        fast_probes: mixed && env_switch("PTXFLOW_NDT_FAST_PROBES", FAST_PROBES),
        hilo: mixed && env_switch("PTXFLOW_NDT_HILO", HILO),
        score64: mixed && env_switch("PTXFLOW_NDT_SCORE64", SCORE64),
        cross: false,
        solve_opts: 0,
        wide_records: false,
        acc_pairs: false,
        late_loads: false,
        probes7: false,
        pair2: false,
    }
}

/// The variant for every round of a batch of alignments when it differs from `large` (the
/// dense kernel for any round): `large` with cross-product derivatives under
/// `PTXFLOW_NDT_CROSS`; `None` for the hash, the mixed build (which serves batches itself) or
/// with the switch off. `direct7`: the pipeline searches Direct7 (the Direct7-only build
/// `Variant::probes7` may serve it).
pub(super) fn batch_variant(large: Variant, direct7: bool) -> Option<Variant> {
    let on = large.dense && !large.mixed && env_switch("PTXFLOW_NDT_CROSS", CROSS);
    // Direct7 pipelines: session 11's build (`ndt_derivatives_dense_cross7`) unless switched
    // off; other searches: session 10's (`ndt_derivatives_dense_cross`) unless switched on.
    let probes7 = direct7 && !large.linear && env_switch("PTXFLOW_NDT_PROBES7", PROBES7);
    on.then_some(Variant {
        cross: true,
        wide_records: env_switch("PTXFLOW_NDT_WIDE_RECORDS", WIDE_RECORDS),
        acc_pairs: large.shared_acc && env_switch("PTXFLOW_NDT_ACC_PAIRS", probes7),
        late_loads: env_switch("PTXFLOW_NDT_LATE_LOADS", probes7),
        probes7,
        pair2: !large.prefetch && env_switch("PTXFLOW_NDT_PAIR2", PAIR2),
        ..large
    })
}

/// Loads `variant`: a kernel of the table (`ndt_derivatives`, `ndt_derivatives_dense`,
/// `ndt_derivatives_dense_small`, `ndt_derivatives_dense_cross`, `ndt_derivatives_dense_cross7`)
/// where it is one, else built at run time.
pub(super) fn derivative_kernel(gpu: &Gpu, variant: Variant) -> Result<LoadedKernel> {
    if variant == Variant::default() {
        gpu.kernel(KernelId::NdtDerivatives)
    } else if variant == Variant::DENSE {
        gpu.kernel(KernelId::NdtDerivativesDense)
    } else if variant == Variant::DENSE_SMALL {
        gpu.kernel(KernelId::NdtDerivativesDenseSmall)
    } else if variant == Variant::DENSE_CROSS {
        gpu.kernel(KernelId::NdtDerivativesDenseCross)
    } else if variant == Variant::DENSE_CROSS7 {
        gpu.kernel(KernelId::NdtDerivativesDenseCross7)
    } else if variant == Variant::SERVER {
        gpu.kernel(KernelId::NdtDerivativesServer)
    } else {
        gpu.load_module(&build_variant(Target::Sm75, variant), "ndt_derivatives")
    }
}

/// Blocks per SM a round's grid aims for when it has enough points: 8 (two waves at 4
/// resident), or `PTXFLOW_NDT_BLOCKS_PER_SM` (1..=64).
pub fn blocks_per_sm_from_env() -> usize {
    std::env::var("PTXFLOW_NDT_BLOCKS_PER_SM")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| (1..=64).contains(n))
        .unwrap_or(8)
}
