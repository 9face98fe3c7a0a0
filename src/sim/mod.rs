//! A PTX interpreter: runs a kernel's PTX on the CPU, so kernels can be unit-tested without a
//! GPU. It is a checker as much as an emulator: any global access outside the named buffers,
//! any shared access outside the block's shared memory, a misaligned access, two lanes storing
//! different values to one address in one instruction, a warp-wide operation (shuffle, vote,
//! `bar.sync`) reached by a diverged warp, and every instruction it does not model are errors
//! naming the PTX line.
//!
//! # Execution model
//! Each warp runs its 32 lanes in lock step with per-lane program counters; when lanes diverge
//! the lanes at the lowest program counter run first (they reconverge where structured control
//! flow joins). `bar.sync 0` waits for every warp of the block. Warps of the grid are interleaved
//! a few instructions at a time, so warps share memory and atomics as on a device (atomics are
//! applied one lane at a time in lane order, so float atomics sum in a fixed order).
//!
//! # What it models
//! One `.entry` per module; registers of every type; `.param` parameters; global memory
//! (buffers added to [`Memory`]); static and dynamic (`.extern`) shared arrays addressed by
//! symbol. Instructions:
//! - `mov` (registers, immediates, symbols, `%tid`/`%ntid`/`%ctaid`/`%nctaid` `.x/.y/.z`,
//!   `%laneid`, `%warpid`, `%clock`/`%clock64`/`%globaltimer` (always 0: no time passes, so a
//!   spin loop's time-out never fires), and `mov.b64` packing/unpacking `{lo, hi}`), `cvta.to.global`
//! - integer `add sub mul.lo mul.hi mul.wide mad.lo mad.wide div rem min max neg abs`
//! - float (f32, f64) `add sub mul fma mad div min max neg abs rcp sqrt rsqrt ex2 lg2 sin cos`;
//!   the `.approx` forms are computed in full precision (within PTX's stated error bounds)
//! - `and or xor not` (also on predicates), `shl shr` (arithmetic for signed types), `brev clz
//!   popc prmt (and .f4e) bfe bmsk`
//! - `setp` with every comparison (no combining forms), `selp`, `cvt` between integer and float
//!   types with the `.rn/.rz/.rm/.rp` and `.rni/.rzi/.rmi/.rpi` roundings
//! - `ld`/`st` `.global`, `.global.nc`, `.shared`, `.param` (loads), scalar and `.v2`/`.v4`,
//!   8/16-bit forms (sign-extending for `.s8`/`.s16`); `.relaxed`, `.acquire` and `.release`
//!   forms (`.gpu` or `.sys`) as plain accesses (the interpreter is sequentially consistent);
//!   `prefetch` (a no-op)
//! - `atom.add`/`red.add` on global or shared memory (u32, u64, s32, f32, f64), `atom.or`/`atom.and`
//!   (b32, b64)
//! - `shfl.sync` (`idx`, `bfly`, `down`, `up`; full warp), `vote.sync` (`ballot`, `any`,
//!   `all`), `match.any.sync`, `mma.sync.aligned.m8n8k4` / `.m16n8k4` `.row.col.f64` (full
//!   warp; the products added to C in k order, each as an fma), `bar.sync 0`, `bar.warp.sync`,
//!   `membar`/`fence` (no-ops: the interpreter is sequentially consistent), `bra`, `ret`, `exit`
//!
//! Anything else (texture, local memory, `atom.cas`, volatile loads, ...) is reported by
//! [`Program::parse`] as an error.
//!
//! ```
//! use ptxflow::ptx::*;
//! use ptxflow::sim::{Arg, Grid, Memory, Program};
//! let mut b = KernelBuilder::new("twice");
//! let (n, x) = (b.arg::<U32>("n"), b.global_arg::<F32>("x"));
//! b.grid_stride_x(n, |b, i| b.update_at(x, i, |b, v| b.add(v, v)));
//! let ptx = Module::single(Target::Sm75, b.finish()).emit().unwrap();
//! let prog = Program::parse(&ptx).unwrap();
//! let mut mem = Memory::new();
//! let x = mem.upload("x", &[1.0f32, 2.0, 3.0]);
//! prog.run(Grid::linear(1, 32), &[Arg::U32(3), x], &mut mem).unwrap();
//! assert_eq!(mem.download::<f32>("x").unwrap(), vec![2.0, 4.0, 6.0]);
//! ```

mod alu;
mod decode;
mod exec;
mod grid;
mod instr;
mod lanes;
mod memory;
mod parse;

pub use grid::{Counts, Grid, Options};
pub use memory::{Arg, Memory, SimElem};
pub use parse::{Program, SHARED_BASE};

/// Why the interpreter stopped: the PTX line (1-based; 0 when not tied to one), its text and
/// the problem.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("PTX interpreter: line {line} `{instruction}`: {problem}")]
pub struct SimError {
    /// 1-based line in the PTX text.
    pub line: usize,
    /// The instruction's text.
    pub instruction: String,
    /// What went wrong.
    pub problem: String,
}
