//! The short way to write a kernel: typed global pointers (element type and address space in
//! the type), a grid-stride loop, read-modify-write of an element, and warp and block
//! reductions. Everything here is built from the lower-level builder calls, so it mixes freely
//! with them.
//!
//! SAXPY (`y[i] = a * x[i] + y[i]`):
//! ```
//! use ptxflow::ptx::*;
//! let mut b = KernelBuilder::new("saxpy");
//! let (n, a) = (b.arg::<U32>("n"), b.arg::<F32>("a"));
//! let (x, y) = (b.global_arg::<F32>("x"), b.global_arg::<F32>("y"));
//! b.grid_stride_x(n, |b, i| {
//!     let xi = b.load_at(x, i);
//!     b.update_at(y, i, |b, yi| b.fma(a, xi, yi));
//! });
//! let ptx = Module::single(Target::Sm75, b.finish()).emit().unwrap();
//! assert!(ptx.contains("fma.rn.f32"));
//! ```
//!
//! Loading an `f64` through an `f32` pointer does not compile:
//! ```compile_fail
//! use ptxflow::ptx::*;
//! let mut b = KernelBuilder::new("bad");
//! let x = b.global_arg::<F32>("x");
//! let v: Reg<F64> = b.load_at(x, 0u32);
//! ```

use super::arith::Cmp;
use super::kernel::KernelBuilder;
use super::reg::{Operand, Reg};
use super::sync::{Shfl, Special};
use super::types::*;
use std::marker::PhantomData;

/// A pointer into global memory to elements of `T`.
pub struct GlobalPtr<T: PtxType> {
    base: Reg<U64>,
    _t: PhantomData<T>,
}

impl<T: PtxType> Clone for GlobalPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: PtxType> Copy for GlobalPtr<T> {}

impl<T: PtxType> GlobalPtr<T> {
    /// The global-space address register (for the untyped `ld`/`st` calls).
    pub fn reg(&self) -> Reg<U64> {
        self.base
    }
}

/// The global address of one element of `T` (from [`KernelBuilder::elem`]).
pub struct GlobalElem<T: PtxType> {
    addr: Reg<U64>,
    _t: PhantomData<T>,
}

impl<T: PtxType> Clone for GlobalElem<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: PtxType> Copy for GlobalElem<T> {}

impl<T: PtxType> GlobalElem<T> {
    /// The address register.
    pub fn reg(&self) -> Reg<U64> {
        self.addr
    }
}

/// Reduction operators for [`KernelBuilder::warp_reduce`] and [`KernelBuilder::block_reduce`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    /// Sum (floats: rounded at each step, in a fixed order).
    Sum,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
}

fn zero_text<T: PtxType>() -> &'static str {
    match T::NAME {
        "f32" => "0f00000000",
        "f64" => "0d0000000000000000",
        _ => "0",
    }
}

impl KernelBuilder {
    /// Declares a scalar parameter and reads it (`.param` + `ld.param`).
    pub fn arg<T: PtxType>(&mut self, name: &str) -> Reg<T> {
        let p = self.param::<T>(name);
        self.ld_param(&p)
    }

    /// Declares a parameter that points to global memory holding `T`s and converts it to a
    /// global address (`ld.param.u64` + `cvta.to.global.u64`).
    pub fn global_arg<T: PtxType>(&mut self, name: &str) -> GlobalPtr<T> {
        let p = self.pointer_param::<T>(name);
        let base = self.global_ptr(&p);
        GlobalPtr {
            base,
            _t: PhantomData,
        }
    }

    /// The address of element `i` (`mad.wide.u32 i, sizeof(T), base`).
    pub fn elem<T: PtxType>(&mut self, p: GlobalPtr<T>, i: impl Operand<U32>) -> GlobalElem<T> {
        let addr = self.index_addr(p.base, i, T::BITS.div_ceil(8));
        GlobalElem {
            addr,
            _t: PhantomData,
        }
    }

    /// `ld.global` of one element.
    pub fn load<T: PtxType>(&mut self, e: GlobalElem<T>) -> Reg<T> {
        self.ld::<T>(super::mem::Space::Global, e.addr)
    }

    /// `st.global` of one element.
    pub fn store<T: PtxType>(&mut self, e: GlobalElem<T>, v: impl Operand<T>) {
        self.st::<T>(super::mem::Space::Global, e.addr, v);
    }

    /// Loads element `i`.
    pub fn load_at<T: PtxType>(&mut self, p: GlobalPtr<T>, i: impl Operand<U32>) -> Reg<T> {
        let e = self.elem(p, i);
        self.load(e)
    }

    /// Stores `v` into element `i`.
    pub fn store_at<T: PtxType>(
        &mut self,
        p: GlobalPtr<T>,
        i: impl Operand<U32>,
        v: impl Operand<T>,
    ) {
        let e = self.elem(p, i);
        self.store(e, v);
    }

    /// `p[i] = f(p[i])` with one address computation.
    pub fn update_at<T: PtxType>(
        &mut self,
        p: GlobalPtr<T>,
        i: impl Operand<U32>,
        f: impl FnOnce(&mut Self, Reg<T>) -> Reg<T>,
    ) {
        let e = self.elem(p, i);
        let v = self.load(e);
        let r = f(self, v);
        self.store(e, r);
    }

    /// `red.global.add`: atomically adds `v` to the element (no old value returned).
    pub fn atomic_add<T: Word>(&mut self, e: GlobalElem<T>, v: impl Operand<T>) {
        self.red::<T>(
            super::mem::Space::Global,
            super::atomic::AtomOp::Add,
            e.addr,
            v,
        );
    }

    /// `acc += v` on a loop-carried register.
    pub fn add_to<T: Num>(&mut self, acc: Reg<T>, v: impl Operand<T>) {
        let s = self.add(acc, v);
        self.mov_to(acc, s);
    }

    /// Runs `body(i)` for every `i < n` this thread owns in a 1-D grid-stride loop: `i` starts
    /// at the global thread index and steps by the grid's thread count.
    pub fn grid_stride_x(&mut self, n: impl Operand<U32>, body: impl FnOnce(&mut Self, Reg<U32>)) {
        let start = self.global_tid_x();
        let step = self.grid_size_x();
        self.for_range(start, n, step, |b, i, _| body(b, i));
    }

    /// Runs `f` in thread 0 of the block only (`tid.x == 0`, a branch around it).
    pub fn if_first_thread(&mut self, f: impl FnOnce(&mut Self)) {
        let tid = self.special(Special::TidX);
        let first = self.setp(Cmp::Eq, tid, 0u32);
        self.if_then(first, f);
    }

    fn combine<T: Word + Num>(&mut self, op: Reduce, a: Reg<T>, b: Reg<T>) -> Reg<T> {
        match op {
            Reduce::Sum => self.add(a, b),
            Reduce::Min => self.min(a, b),
            Reduce::Max => self.max(a, b),
        }
    }

    /// Reduces `v` over the full warp with xor shuffles; every lane gets the result. All 32
    /// lanes must be active.
    pub fn warp_reduce<T: Word + Num>(&mut self, v: Reg<T>, op: Reduce) -> Reg<T> {
        let mut acc = v;
        for k in [16u32, 8, 4, 2, 1] {
            let o = self.shfl(Shfl::Xor, acc, k);
            acc = self.combine(op, acc, o);
        }
        acc
    }

    /// Reduces `v` over the whole block; the result is valid in every thread of warp 0 (thread
    /// 0 included). Needs a 1-D `.reqntid` of whole warps (at most 1024 threads) so the number
    /// of partials is known; uses a static shared array of one value per warp and one
    /// `bar.sync`, so every thread of the block must reach it.
    pub fn block_reduce<T: Word + Num>(&mut self, v: Reg<T>, op: Reduce) -> Reg<T> {
        let threads = match self.attributes().reqntid {
            Some([x, 1, 1]) if x % 32 == 0 && (32..=1024).contains(&x) => x,
            other => {
                self.fail(
                    "block_reduce",
                    format!(
                        "needs a 1-D .reqntid of whole warps up to 1024 threads (set \
                         b.reqntid(256, 1, 1) first); got {other:?}"
                    ),
                );
                32
            }
        };
        let warp_total = self.warp_reduce(v, op);
        let warps = threads / 32;
        if warps == 1 {
            return warp_total;
        }
        let id = self.next_id();
        let name = format!("{}_partials_{id}", self.name());
        let partials = self.shared_array::<T>(&name, warps);
        let tid = self.special(Special::TidX);
        let lane = self.and(tid, 31u32);
        let warp = self.shr(tid, 5u32);
        let slot = self.shared_index(&partials, warp);
        let lane0 = self.setp(Cmp::Eq, lane, 0u32);
        self.when(lane0, |b| b.st(super::mem::Space::Shared, slot, warp_total));
        self.bar_sync();
        let mine = self.shared_index(&partials, lane);
        let x = self.reg::<T>();
        self.instr(format!(
            "mov.{} {x}, {}",
            data_name::<T>(),
            zero_text::<T>()
        ));
        let present = self.setp(Cmp::Lt, lane, warps);
        self.when(present, |b| {
            let ty = data_name::<T>();
            b.instr(format!("ld.shared.{ty} {x}, [{mine}]"));
        });
        self.warp_reduce(x, op)
    }

    /// [`KernelBuilder::block_reduce`] with [`Reduce::Sum`].
    pub fn block_sum<T: Word + Num>(&mut self, v: Reg<T>) -> Reg<T> {
        self.block_reduce(v, Reduce::Sum)
    }
}
