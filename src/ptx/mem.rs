//! Loads and stores in every state space, vector forms, byte/half-word forms, and the generic to
//! global address conversion. Addresses are [`Addr`]: a register or a symbol plus a byte offset.

use super::kernel::KernelBuilder;
use super::reg::{Addr, Operand, Reg};
use super::types::*;

/// A state space for `ld`/`st`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    /// `.global`.
    Global,
    /// `.global.nc`: read-only data cache; only for data no thread writes during the kernel.
    GlobalNc,
    /// `.shared`.
    Shared,
    /// `.local`.
    Local,
    /// `.param`.
    Param,
    /// `.const`.
    Const,
}

impl Space {
    fn name(self) -> &'static str {
        match self {
            Space::Global => "global",
            Space::GlobalNc => "global.nc",
            Space::Shared => "shared",
            Space::Local => "local",
            Space::Param => "param",
            Space::Const => "const",
        }
    }
    fn writable(self) -> bool {
        matches!(self, Space::Global | Space::Shared | Space::Local)
    }
}

fn vec_list<T: PtxType>(regs: &[Reg<T>]) -> String {
    let names: Vec<String> = regs.iter().map(|r| r.to_string()).collect();
    format!("{{{}}}", names.join(", "))
}

impl KernelBuilder {
    /// `ld.<space>.<T>`.
    pub fn ld<T: PtxType>(&mut self, space: Space, addr: impl Into<Addr>) -> Reg<T> {
        self.ensure(T::BITS > 1, "ld", "predicates cannot be loaded");
        let d = self.reg::<T>();
        self.instr(format!(
            "ld.{}.{} {d}, {}",
            space.name(),
            data_name::<T>(),
            addr.into()
        ));
        d
    }

    /// `st.<space>.<T>`.
    pub fn st<T: PtxType>(&mut self, space: Space, addr: impl Into<Addr>, v: impl Operand<T>) {
        self.ensure(
            space.writable(),
            "st",
            &format!("cannot store to .{}", space.name()),
        );
        self.ensure(T::BITS > 1, "st", "predicates cannot be stored");
        self.instr(format!(
            "st.{}.{} {}, {}",
            space.name(),
            data_name::<T>(),
            addr.into(),
            v.ptx()
        ));
    }

    /// `ld.acquire.gpu.global.<T>`: a load that orders every later memory access of this thread
    /// after it (the consumer side of a release/acquire handshake, e.g. a grid barrier's spin).
    pub fn ld_acquire_gpu<T: PtxType>(&mut self, addr: impl Into<Addr>) -> Reg<T> {
        self.ensure(
            T::BITS >= 32,
            "ld_acquire_gpu",
            "acquire loads take 32- or 64-bit values",
        );
        self.need(70, 6, 0);
        let d = self.reg::<T>();
        self.instr(format!(
            "ld.acquire.gpu.global.{} {d}, {}",
            T::NAME,
            addr.into()
        ));
        d
    }

    /// `ld.acquire.sys.global.<T>`: [`KernelBuilder::ld_acquire_gpu`] at system scope, for
    /// polling a word the host writes into mapped (page-locked) host memory with a release
    /// store: every later access of this thread sees what the host wrote before it.
    pub fn ld_acquire_sys<T: PtxType>(&mut self, addr: impl Into<Addr>) -> Reg<T> {
        self.ensure(
            T::BITS >= 32,
            "ld_acquire_sys",
            "acquire loads take 32- or 64-bit values",
        );
        self.need(70, 6, 0);
        let d = self.reg::<T>();
        self.instr(format!(
            "ld.acquire.sys.global.{} {d}, {}",
            T::NAME,
            addr.into()
        ));
        d
    }

    /// `ld.relaxed.sys.global.<T>`: a strong load at system scope (never a stale cached copy),
    /// for data the host writes into mapped host memory while the kernel runs.
    pub fn ld_relaxed_sys<T: PtxType>(&mut self, addr: impl Into<Addr>) -> Reg<T> {
        self.ensure(
            T::BITS >= 32,
            "ld_relaxed_sys",
            "relaxed loads take 32- or 64-bit values",
        );
        self.need(70, 6, 0);
        let d = self.reg::<T>();
        self.instr(format!(
            "ld.relaxed.sys.global.{} {d}, {}",
            T::NAME,
            addr.into()
        ));
        d
    }

    /// `st.release.sys.global.<T>`: a store that the host (or another device) sees only after
    /// every earlier access of this thread (the producer side of a host-polled flag).
    pub fn st_release_sys<T: PtxType>(&mut self, addr: impl Into<Addr>, v: impl Operand<T>) {
        self.ensure(
            T::BITS >= 32,
            "st_release_sys",
            "release stores take 32- or 64-bit values",
        );
        self.need(70, 6, 0);
        self.instr(format!(
            "st.release.sys.global.{} {}, {}",
            T::NAME,
            addr.into(),
            v.ptx()
        ));
    }

    /// `st.release.gpu.global.<T>`: a store that other blocks see only after every earlier
    /// access of this thread (the producer side of [`KernelBuilder::ld_acquire_gpu`]).
    pub fn st_release_gpu<T: PtxType>(&mut self, addr: impl Into<Addr>, v: impl Operand<T>) {
        self.ensure(
            T::BITS >= 32,
            "st_release_gpu",
            "release stores take 32- or 64-bit values",
        );
        self.need(70, 6, 0);
        self.instr(format!(
            "st.release.gpu.global.{} {}, {}",
            T::NAME,
            addr.into(),
            v.ptx()
        ));
    }

    /// `ld.relaxed.gpu.global.<T>`: a strong load at GPU scope (never a stale L1 copy), for
    /// polling a word that other blocks store; no ordering (follow it with a fence to acquire).
    pub fn ld_relaxed_gpu<T: PtxType>(&mut self, addr: impl Into<Addr>) -> Reg<T> {
        self.ensure(
            T::BITS >= 32,
            "ld_relaxed_gpu",
            "relaxed loads take 32- or 64-bit values",
        );
        self.need(70, 6, 0);
        let d = self.reg::<T>();
        self.instr(format!(
            "ld.relaxed.gpu.global.{} {d}, {}",
            T::NAME,
            addr.into()
        ));
        d
    }

    /// `st.relaxed.sys.global.<T>`: a strong store at system scope (after a fence, the producer
    /// side of a host-polled flag).
    pub fn st_relaxed_sys<T: PtxType>(&mut self, addr: impl Into<Addr>, v: impl Operand<T>) {
        self.ensure(
            T::BITS >= 32,
            "st_relaxed_sys",
            "relaxed stores take 32- or 64-bit values",
        );
        self.need(70, 6, 0);
        self.instr(format!(
            "st.relaxed.sys.global.{} {}, {}",
            T::NAME,
            addr.into(),
            v.ptx()
        ));
    }

    /// `ld.relaxed.gpu.global.v2.<T>`: two consecutive values, each element a single-copy atomic
    /// strong load at GPU scope (it never returns a stale L1 copy), for polling words that other
    /// blocks store with [`KernelBuilder::st_relaxed_gpu`]. No ordering of other accesses.
    pub fn ld_relaxed_gpu_v2<T: PtxType>(&mut self, addr: impl Into<Addr>) -> [Reg<T>; 2] {
        let d = [self.reg::<T>(), self.reg::<T>()];
        self.ld_relaxed_gpu_v2_to(d, addr);
        d
    }

    /// [`KernelBuilder::ld_relaxed_gpu_v2`] into existing registers (loop-carried values, like
    /// [`KernelBuilder::mov_to`]). Predicated (`guarded`), the registers keep their values when
    /// the predicate is false, with no copy through fresh registers that the assembler would
    /// have to keep alive.
    pub fn ld_relaxed_gpu_v2_to<T: PtxType>(&mut self, d: [Reg<T>; 2], addr: impl Into<Addr>) {
        self.ensure(
            T::BITS >= 32,
            "ld_relaxed_gpu_v2",
            "relaxed loads take 32- or 64-bit values",
        );
        self.need(70, 6, 0);
        self.instr(format!(
            "ld.relaxed.gpu.global.v2.{} {}, {}",
            T::NAME,
            vec_list(&d),
            addr.into()
        ));
    }

    /// `st.relaxed.gpu.global.<T>`: a single-copy atomic strong store at GPU scope (the producer
    /// side of [`KernelBuilder::ld_relaxed_gpu_v2`] polling).
    pub fn st_relaxed_gpu<T: PtxType>(&mut self, addr: impl Into<Addr>, v: impl Operand<T>) {
        self.ensure(
            T::BITS >= 32,
            "st_relaxed_gpu",
            "relaxed stores take 32- or 64-bit values",
        );
        self.need(70, 6, 0);
        self.instr(format!(
            "st.relaxed.gpu.global.{} {}, {}",
            T::NAME,
            addr.into(),
            v.ptx()
        ));
    }

    /// A byte or half-word load widened into an integer register (zero- or sign-extended).
    pub fn ld_narrow<T: Int>(
        &mut self,
        space: Space,
        width: Narrow,
        addr: impl Into<Addr>,
    ) -> Reg<T> {
        let d = self.reg::<T>();
        self.instr(format!(
            "ld.{}.{} {d}, {}",
            space.name(),
            width.name(),
            addr.into()
        ));
        d
    }

    /// [`ld_narrow`](Self::ld_narrow) into an existing register `d` (under
    /// [`when`](Self::when) it keeps its value where the predicate is false, so ptxas needs no
    /// register of its own for the loaded value).
    pub fn ld_narrow_to<T: Int>(
        &mut self,
        d: Reg<T>,
        space: Space,
        width: Narrow,
        addr: impl Into<Addr>,
    ) {
        self.instr(format!(
            "ld.{}.{} {d}, {}",
            space.name(),
            width.name(),
            addr.into()
        ));
    }

    /// A byte or half-word store of the low bits of an integer register.
    pub fn st_narrow<T: Int>(
        &mut self,
        space: Space,
        width: Narrow,
        addr: impl Into<Addr>,
        v: Reg<T>,
    ) {
        self.ensure(
            space.writable(),
            "st_narrow",
            &format!("cannot store to .{}", space.name()),
        );
        self.instr(format!(
            "st.{}.{} {}, {v}",
            space.name(),
            width.name(),
            addr.into()
        ));
    }

    /// `ld.<space>.v2.<T>`: two consecutive values; the address must be aligned to their size.
    pub fn ld_v2<T: PtxType>(&mut self, space: Space, addr: impl Into<Addr>) -> [Reg<T>; 2] {
        let d = [self.reg::<T>(), self.reg::<T>()];
        self.instr(format!(
            "ld.{}.v2.{} {}, {}",
            space.name(),
            T::NAME,
            vec_list(&d),
            addr.into()
        ));
        d
    }

    /// `ld.<space>.v4.<T>` (32-bit types; 16-byte aligned address).
    pub fn ld_v4<T: PtxType>(&mut self, space: Space, addr: impl Into<Addr>) -> [Reg<T>; 4] {
        self.ensure(
            T::BITS <= 32,
            "ld_v4",
            "v4 loads take at most 32-bit elements",
        );
        let d = [
            self.reg::<T>(),
            self.reg::<T>(),
            self.reg::<T>(),
            self.reg::<T>(),
        ];
        self.instr(format!(
            "ld.{}.v4.{} {}, {}",
            space.name(),
            T::NAME,
            vec_list(&d),
            addr.into()
        ));
        d
    }

    /// [`ld_v4`](Self::ld_v4) into existing registers `d` (under [`when`](Self::when) they keep
    /// their values where the predicate is false).
    pub fn ld_v4_to<T: PtxType>(&mut self, d: [Reg<T>; 4], space: Space, addr: impl Into<Addr>) {
        self.ensure(
            T::BITS <= 32,
            "ld_v4_to",
            "v4 loads take at most 32-bit elements",
        );
        self.instr(format!(
            "ld.{}.v4.{} {}, {}",
            space.name(),
            T::NAME,
            vec_list(&d),
            addr.into()
        ));
    }

    /// `prefetch.global.L1 [a]`: brings the line holding `a` into L1 (no register, no wait).
    pub fn prefetch_l1(&mut self, addr: impl Into<Addr>) {
        self.instr(format!("prefetch.global.L1 {}", addr.into()));
    }

    /// `st.<space>.v2.<T>`.
    pub fn st_v2<T: PtxType>(&mut self, space: Space, addr: impl Into<Addr>, v: [Reg<T>; 2]) {
        self.ensure(
            space.writable(),
            "st_v2",
            &format!("cannot store to .{}", space.name()),
        );
        self.instr(format!(
            "st.{}.v2.{} {}, {}",
            space.name(),
            T::NAME,
            addr.into(),
            vec_list(&v)
        ));
    }

    /// `st.<space>.v4.<T>` (32-bit types; 16-byte aligned address).
    pub fn st_v4<T: PtxType>(&mut self, space: Space, addr: impl Into<Addr>, v: [Reg<T>; 4]) {
        self.ensure(
            space.writable(),
            "st_v4",
            &format!("cannot store to .{}", space.name()),
        );
        self.ensure(
            T::BITS <= 32,
            "st_v4",
            "v4 stores take at most 32-bit elements",
        );
        self.instr(format!(
            "st.{}.v4.{} {}, {}",
            space.name(),
            T::NAME,
            addr.into(),
            vec_list(&v)
        ));
    }

    /// `cvta.to.global.u64`: a kernel pointer parameter as a global-space address.
    #[allow(clippy::wrong_self_convention)] // named after the PTX instruction; emits into self
    pub fn to_global(&mut self, generic: Reg<U64>) -> Reg<U64> {
        let d = self.reg::<U64>();
        self.instr(format!("cvta.to.global.u64 {d}, {generic}"));
        d
    }

    /// Reads a pointer parameter and converts it to a global address in one step.
    pub fn global_ptr(&mut self, p: &super::kernel::Param<U64>) -> Reg<U64> {
        let g = self.ld_param(p);
        self.to_global(g)
    }

    /// `base + index * elem_bytes` for a u32 index (one `mad.wide.u32`).
    pub fn index_addr(
        &mut self,
        base: Reg<U64>,
        index: impl Operand<U32>,
        elem_bytes: u32,
    ) -> Reg<U64> {
        self.mad_wide(index, elem_bytes, base)
    }

    /// The 32-bit shared-window address of a shared array's first element (`mov.u32 %r, sym`).
    pub fn shared_base<T: PtxType>(&mut self, arr: &super::decls::SharedArray<T>) -> Reg<U32> {
        let d = self.reg::<U32>();
        self.instr(format!("mov.u32 {d}, {}", arr.name()));
        d
    }

    /// Shared-window address of element `index` of a shared array (through its symbol).
    pub fn shared_index<T: PtxType>(
        &mut self,
        arr: &super::decls::SharedArray<T>,
        index: impl Operand<U32>,
    ) -> Reg<U32> {
        let base = self.shared_base(arr);
        self.mad(index, T::BITS / 8, base)
    }
}
