//! `gaussian_forward_{f32,f64}`: partial field sums f_i^(c) = sum over the Gaussians j of chunk c
//! of w_j c_j exp(-d_ij / 2), never forming the B x N matrix.
//!
//! Launch: blocks of exactly [`BLOCK`] threads (`.reqntid`); grid (ceil(B / (BLOCK * P)), S) with P
//! = [`POINTS_PER_THREAD_F32`] or [`POINTS_PER_THREAD_F64`]. Block (x, c) takes points
//! x * BLOCK * P + p * BLOCK + tid for p < P
//! (coalesced), and Gaussians [c * chunk_len, min((c + 1) * chunk_len, n_pad)); `chunk_len` and
//! `n_pad` are multiples of [`CHUNK_ALIGN`] (the host pads with zero Gaussians, see `common`).
//!
//! Each thread keeps its points and their partial sums in registers (register blocking: every
//! Gaussian loaded from shared memory feeds P pairs). The block walks its chunk in
//! tiles of BLOCK Gaussians: each thread turns one prepared Gaussian (12 scalars, vector loads)
//! into its scaled per-pair constants (`scaled::PairConsts`: the exponential's scale folded in)
//! in the shared tile `tile`, a barrier, then every thread reads the tile's Gaussians in order
//! (broadcast loads) and accumulates w c 2^o 2^-t per pair (`scaled::solve_scaled`: 12 fused
//! operations, the exponential, one multiply-add; the exponential is one `ex2` in f32 and in f64
//! [`EXP_F64`]: a 256-entry table that thread 0 stores in shared memory `exp2_table` before the
//! first tile, one lookup and 8 FP64 operations, see `exp_f64`). Thread results go to `out[c * B + i]` for i < B
//! (points beyond B compute on zeros and are not stored). With S = 1 `out` is the value array
//! itself; otherwise `gaussian_reduce_rows` adds the S rows. Memory: points read once (12 or 24
//! bytes each), Gaussians once per block (L2).

use super::common::*;
use super::exp_f64::{Exp2, ExpF64};
use super::scaled::*;
use crate::ptx::*;

/// Threads per block (required).
pub const BLOCK: u32 = 128;
/// Points each thread owns (f32: 77 registers, 6 blocks per SM on sm_90; 600 us at 10000 x 100000
/// on the H100 against 624 at 4 points and 711 at 8).
pub const POINTS_PER_THREAD_F32: u32 = 6;
/// Points each thread owns (f64: 72 registers with the table exponential; session 5, with the
/// polynomial one: 2.30 ms against 2.37 at 6 and 2.47 at 8).
pub const POINTS_PER_THREAD_F64: u32 = 4;
/// Chunk lengths and the padded Gaussian count are multiples of this.
pub const CHUNK_ALIGN: u32 = 32;

/// Build options besides the type and points per thread (the built-in kernels use the default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `.maxnreg`: a register cap (more resident blocks), or none.
    pub max_registers: Option<u32>,
    /// Gaussians staged per tile, in blocks of [`BLOCK`] (1 when 0): fewer barriers per pair.
    pub tile_blocks: u32,
    /// The f64 exponential (`super::exp_f64`; f32 ignores it).
    pub exp: ExpF64,
}

/// f32 module.
pub fn build_f32(target: Target) -> Module {
    build::<F32>(target, POINTS_PER_THREAD_F32, Options::default())
}

/// The f64 kernel's exponential (`super::exp_f64`): a 256-entry table and a degree-4
/// polynomial, range reduction by FP64 rounding (8 FP64 operations; H100, 10000 x 100000, same
/// process: forward 1.80 ms against 2.33 with the session-7 polynomial, forward+backward 5.88
/// ms against 6.60). The backward uses it too.
pub const EXP_F64: ExpF64 = ExpF64::Table {
    bits: 8,
    degree: 4,
    int_reduce: false,
};

/// f64 module.
pub fn build_f64(target: Target) -> Module {
    build::<F64>(target, POINTS_PER_THREAD_F64, options_f64())
}

/// The built-in f64 kernel's options.
fn options_f64() -> Options {
    Options {
        exp: EXP_F64,
        ..Options::default()
    }
}

/// A variant of the built-in forward kernel `id` for comparisons (`PTXFLOW_GAUSS_FWD`, see
/// `crate::gaussian::gpu::launch`): `r<N>` caps registers at N, `t<K>` stages K x [`BLOCK`]
/// Gaussians per tile, `e<C>` takes the f64 exponential `ExpF64::from_code(C)`, joined by `-`
/// (`r64-t2`); same parameters, block and points per thread.
/// None for other names or kernels.
pub fn variant(id: crate::kernels::KernelId, name: &str) -> Option<Module> {
    use crate::kernels::KernelId;
    let mut o = if id == KernelId::GaussianForwardF64 {
        options_f64()
    } else {
        Options::default()
    };
    for part in name.split('-') {
        let (key, val) = part.split_at(1.min(part.len()));
        let v: u32 = val.parse().ok()?;
        match key {
            "r" => o.max_registers = Some(v),
            "t" => o.tile_blocks = v,
            "e" => o.exp = ExpF64::from_code(v)?,
            _ => return None,
        }
    }
    match id {
        KernelId::GaussianForwardF32 => Some(build::<F32>(Target::Sm75, POINTS_PER_THREAD_F32, o)),
        KernelId::GaussianForwardF64 => Some(build::<F64>(Target::Sm75, POINTS_PER_THREAD_F64, o)),
        _ => None,
    }
}

/// The kernel with `points_per_thread` points per thread (`gaussian_forward_<T>`).
pub fn build<T: KFloat>(target: Target, points_per_thread: u32, opts: Options) -> Module {
    let mut b = KernelBuilder::new(&format!("gaussian_forward_{}", T::SUFFIX));
    b.reqntid(BLOCK, 1, 1);
    if let Some(r) = opts.max_registers {
        b.maxnreg(r);
    }
    let tile_len = BLOCK * opts.tile_blocks.max(1);
    let prep = b.param::<U64>("prep");
    let n_pad = b.param::<U32>("n_pad");
    let chunk_len = b.param::<U32>("chunk_len");
    let points = b.param::<U64>("points");
    let num_points = b.param::<U32>("num_points");
    let out = b.param::<U64>("out");
    let prep = b.global_ptr(&prep);
    let n_pad = b.ld_param(&n_pad);
    let chunk_len = b.ld_param(&chunk_len);
    let points = b.global_ptr(&points);
    let num_points = b.ld_param(&num_points);
    let out = b.global_ptr(&out);
    let tile = b.shared_array::<T>("tile", tile_len * PAIR_STRIDE);

    b.comment("this thread's points (zeros beyond num_points) and their sums");
    let tid = b.special(Special::TidX);
    let pblock = b.special(Special::CtaidX);
    let chunk = b.special(Special::CtaidY);
    let first = b.mad(pblock, BLOCK * points_per_thread, tid);
    // (f64 table kinds: the tile barrier orders the table's stores before the first read.)
    let exp = Exp2::setup::<T>(&mut b, opts.exp, tid);
    let zero = T::imm(0.0);
    let mut idx = Vec::new();
    let mut valid = Vec::new();
    let mut xs = Vec::new();
    let mut acc = Vec::new();
    for p in 0..points_per_thread {
        let i = b.add(first, p * BLOCK);
        let ok = b.setp(Cmp::Lt, i, num_points);
        let x = [b.mov(zero), b.mov(zero), b.mov(zero)];
        b.guarded(ok, false, |b| {
            let a = b.index_addr(points, i, 3 * T::BYTES);
            for (k, xk) in x.iter().enumerate() {
                let v = b.ld::<T>(
                    Space::GlobalNc,
                    Addr::from(a).off(k as i64 * i64::from(T::BYTES)),
                );
                b.mov_to(*xk, v);
            }
        });
        idx.push(i);
        valid.push(ok);
        xs.push(x);
        acc.push(b.mov(zero));
    }

    let g_start = b.mul(chunk, chunk_len);
    let g_stop = b.add(g_start, chunk_len);
    let g_end = b.min(g_stop, n_pad);
    b.for_range(g_start, g_end, tile_len, |b, tile_start, _| {
        b.comment("tile: each thread stages one Gaussian's scaled constants");
        let left = b.sub(g_end, tile_start);
        let count = b.min(left, tile_len);
        b.bar_sync();
        for h in 0..tile_len / BLOCK {
            let t = if h == 0 { tid } else { b.add(tid, h * BLOCK) };
            let has = b.setp(Cmp::Lt, t, count);
            b.if_then(has, |b| {
                let j = b.add(tile_start, t);
                let src = b.index_addr(prep, j, PREP_STRIDE * T::BYTES);
                let v = load_prepared::<T>(b, Space::GlobalNc, src.into());
                let g = PairConsts::from_prepared(b, &v);
                let z = b.mov(zero);
                let slot = b.mul(t, PAIR_STRIDE);
                let dst = b.shared_index(&tile, slot);
                store_prepared::<T>(b, Space::Shared, dst.into(), &g.to_array(z));
            });
        }
        b.bar_sync();
        b.comment("pairs: the tile's Gaussians (broadcast) x this thread's points");
        // count is a multiple of CHUNK_ALIGN, so unrolling by two needs no remainder.
        b.for_range(0u32, count, 2u32, |b, k, _| {
            for u in 0..2u32 {
                let kk = b.add(k, u);
                let slot = b.mul(kk, PAIR_STRIDE);
                let a = b.shared_index(&tile, slot);
                let pr = load_prepared::<T>(b, Space::Shared, a.into());
                let g = PairConsts::from_array(&pr);
                for p in 0..points_per_thread as usize {
                    let (_, t) = solve_scaled(b, &g, xs[p]);
                    let e = exp.eval(b, t);
                    let s = b.fma(g.weight_norm, e, acc[p]);
                    b.mov_to(acc[p], s);
                }
            }
        });
    });

    b.comment("store this chunk's sums");
    for p in 0..points_per_thread as usize {
        let (ok, i, v) = (valid[p], idx[p], acc[p]);
        b.guarded(ok, false, |b| {
            let a = addr2d(b, out, chunk, num_points, i, T::BYTES);
            b.st(Space::Global, a, v);
        });
    }
    Module::single(target, b.finish())
}
