//! The device solver's build options (`Variant::solve_opts` bits; [`TABLE_OPTS`] is the
//! table's `ndt_align_device`, 0 session 9's build, `profile::OPT_PROFILE` is bit 1). Every build solves like the table's
//! (equal results in `tests/ndt_solve_sim.rs` and on the GPU's real data); the parent's module
//! docs say what each one was measured to save.

/// `Variant::solve_opts` bit: block 0 polls the blocks' count with relaxed loads and fences
/// once it is complete (an acquire load per poll otherwise).
pub const OPT_RELAXED_COUNT: u32 = 2;
/// `Variant::solve_opts` bit: the solver state lives in block 0's shared memory only (block 0
/// always reduces: the `reducer` parameter is ignored), so no step stores it to device memory
/// and no evaluation stages it back.
pub const OPT_SHARED_STATE: u32 = 4;
/// `Variant::solve_opts` bit: the triangular solves divide by the factor's diagonal through
/// its correctly rounded reciprocals, computed up front (`q = x y`, `q + (x − L q) y` with
/// FMAs: the IEEE quotient for operands away from overflow and underflow, Markstein), so the
/// dependent chain holds three FMAs per division instead of a whole division.
pub const OPT_FAST_DIV: u32 = 8;
/// `Variant::solve_opts` bit: the blocks store their partial sums value-major (value `k` of
/// block `j` at `k · blocks + j`), so the reducing block's threads (thread `j` sums block
/// `j`'s values, the same additions in the same order) read each value of 32 blocks with one
/// coalesced load instead of 32 scattered ones.
pub const OPT_XPOSE_PARTIALS: u32 = 16;
/// `Variant::solve_opts` bit: the solver warp's lanes whose results nobody reads divide and take
/// square roots of ordinary numbers (the two Cholesky factorisations' spare lanes mirror the
/// working ones; lanes not below a pivot and spare lanes divide the pivot by itself; the
/// direction's spare lanes divide the length by itself) instead of zeros, whose quotients and
/// roots leave the hardware's fast path for the slow subroutine, which the whole warp waits for
/// (session 10 profile: decode and factorisations 2.9 us a Newton step). The lanes that are
/// read compute the same numbers.
pub const OPT_SAFE_LANES: u32 = 32;
/// `Variant::solve_opts` bit: the eigen-path round trip without system fences, both payloads
/// checked ([`super::assist`]); the host answers in kind. Measured slower (session 10, H100, same
/// process: 236.5 us against 211.5 us for options 0, 203.5 / 199.4 us with the other options
/// against 175.4 / 173.6 us without it; the round trip 6.9 -> ~10 us): polling nine mapped
/// words per iteration costs more than the fences it saves. Off; kept for the record.
pub const OPT_FAST_ASSIST: u32 = 64;
/// `Variant::solve_opts` bit: the reducing block reads the partials without the fence before
/// the final reduction (its thread 0 already acquired the blocks' count, which the barrier
/// extends to the block; the fence only waited for the block's own phase-stamp stores).
pub const OPT_LEAN_FINAL: u32 = 128;

/// `Variant::solve_opts` bit: the Newton steps whose Hessian the Cholesky path cannot take
/// (the host's eigen path) run on the device too (`eigen.rs`: cyclic Jacobi over the solver
/// warp), instead of asking the host ([`super::assist`]'s round trip): no step leaves the
/// device. The increment equals the host's up to rounding (not bit for bit).
pub const OPT_DEVICE_EIGEN: u32 = 256;

/// `Variant::solve_opts` bit: the points' angular derivatives as cross products
/// (`Variant::cross`, the batch kernel's form: fewer f64 operations per point; sums equal to
/// the matrix form's up to the last bits, so results equal the host path's within rounding,
/// not bit for bit).
pub const OPT_CROSS: u32 = 512;

/// `Variant::solve_opts` bit, with [`OPT_DEVICE_EIGEN`]: every lane computes each round's three
/// Jacobi rotations from shuffled entries (no broadcast of the pairs' rotations), and the
/// off-diagonal test skips the first two sweeps (`eigen.rs`).
pub const OPT_EIGEN_ALL_LANES: u32 = 1024;

/// `Variant::solve_opts` bit, with [`OPT_DEVICE_EIGEN`]: each Jacobi rotation's angle from f32
/// arithmetic (single SFU instructions), its cosine made exact by two f64 Newton steps
/// (`eigen/mod.rs`).
pub const OPT_EIGEN_F32_ANGLE: u32 = 2048;

/// The build options of the table's `ndt_align_device` (the default single-alignment path):
/// session 10's (state in shared memory, Markstein divisions, value-major partials, safe lanes,
/// no fence before the final reduction: 188) and, since session 11, the eigen path on the device
/// ([`OPT_DEVICE_EIGEN`] with [`OPT_EIGEN_F32_ANGLE`]: no host round trip is left) and the
/// cross-product point derivatives ([`OPT_CROSS`]): 3004. `188` (`PTXFLOW_NDT_DEVICE_OPTS=188`)
/// is session 10's build, whose eigen-path steps the host answers bit for bit. Other values are
/// built at run time.
pub const TABLE_OPTS: u32 = HOST_EIGEN_OPTS | OPT_DEVICE_EIGEN | OPT_EIGEN_F32_ANGLE | OPT_CROSS;

/// Session 10's table build (188; `PTXFLOW_NDT_DEVICE_OPTS=188`): the eigen-path steps go to the
/// host (one round trip each, the host's increment bit for bit), the kept fallback switch.
pub const HOST_EIGEN_OPTS: u32 =
    OPT_SHARED_STATE | OPT_FAST_DIV | OPT_XPOSE_PARTIALS | OPT_SAFE_LANES | OPT_LEAN_FINAL;
