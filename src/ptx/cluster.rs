//! Thread-block clusters (sm_90): the block's rank in its cluster, distributed shared memory
//! (`mapa` to another block's shared window, `st.shared::cluster`, `st.async` that completes
//! bytes on the destination's mbarrier), the cluster barrier, and the mbarrier operations a
//! consumer needs (init, arm with an expected byte count, wait for a phase by parity).
//!
//! Addresses are 32-bit shared-window addresses: `shared::cta` ones from
//! [`KernelBuilder::shared_index`], `shared::cluster` ones from [`KernelBuilder::mapa`].

use super::kernel::KernelBuilder;
use super::reg::{Operand, Reg};
use super::types::*;

impl KernelBuilder {
    /// `%cluster_ctarank`: the block's rank in its cluster (0 .. cluster size).
    pub fn cluster_ctarank(&mut self) -> Reg<U32> {
        self.need(90, 7, 8);
        let d = self.reg::<U32>();
        self.instr(format!("mov.u32 {d}, %cluster_ctarank"));
        d
    }

    /// `mapa.shared::cluster.u32`: the `shared::cluster` address of the variable at `addr` (this
    /// block's `shared::cta` address) in the block of cluster rank `rank`.
    pub fn mapa(&mut self, addr: Reg<U32>, rank: impl Operand<U32>) -> Reg<U32> {
        self.need(90, 7, 8);
        let d = self.reg::<U32>();
        self.instr(format!(
            "mapa.shared::cluster.u32 {d}, {addr}, {}",
            rank.ptx()
        ));
        d
    }

    /// `st.shared::cluster.v4.b32`: four words to a `shared::cluster` address (16-byte aligned),
    /// made visible to the destination block by a later cluster barrier (release/acquire).
    pub fn st_cluster_v4(&mut self, addr: Reg<U32>, v: [Reg<U32>; 4]) {
        self.need(90, 7, 8);
        self.instr(format!(
            "st.shared::cluster.v4.b32 [{addr}], {{{}, {}, {}, {}}}",
            v[0], v[1], v[2], v[3]
        ));
    }

    /// `st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32`: four words to a
    /// `shared::cluster` address (16-byte aligned) of another block; when they land, 16 bytes of
    /// the destination mbarrier `mbar` (same block as `addr`) complete.
    pub fn st_async_v4(&mut self, addr: Reg<U32>, v: [Reg<U32>; 4], mbar: Reg<U32>) {
        self.need(90, 8, 1);
        self.instr(format!(
            "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [{addr}], {{{}, {}, {}, {}}}, [{mbar}]",
            v[0], v[1], v[2], v[3]
        ));
    }

    /// `barrier.cluster.arrive.aligned` (release): this thread's writes so far, distributed
    /// shared memory included, are published to the cluster. Every thread of every block of the
    /// cluster must arrive (warp-uniform).
    pub fn cluster_arrive(&mut self) {
        self.need(90, 7, 8);
        self.instr("barrier.cluster.arrive.aligned");
    }

    /// `barrier.cluster.wait.aligned` (acquire): waits until every thread of the cluster has
    /// arrived at the current phase.
    pub fn cluster_wait(&mut self) {
        self.need(90, 7, 8);
        self.instr("barrier.cluster.wait.aligned");
    }

    /// `mbarrier.init.shared::cta.b64 [addr], count` (8-byte aligned shared address).
    pub fn mbarrier_init(&mut self, addr: Reg<U32>, count: impl Operand<U32>) {
        self.need(80, 7, 8);
        self.instr(format!(
            "mbarrier.init.shared::cta.b64 [{addr}], {}",
            count.ptx()
        ));
    }

    /// `fence.mbarrier_init.release.cluster`: earlier mbarrier inits of this thread become
    /// visible to the cluster (before a cluster barrier that precedes remote arrivals).
    pub fn fence_mbarrier_init(&mut self) {
        self.need(90, 8, 0);
        self.instr("fence.mbarrier_init.release.cluster");
    }

    /// `mbarrier.arrive.expect_tx.shared::cta.b64`: raises the current phase's expected
    /// transaction bytes by `bytes`, then arrives once (the phase completes when every expected
    /// arrival and byte has come).
    pub fn mbarrier_arrive_expect_tx(&mut self, addr: Reg<U32>, bytes: impl Operand<U32>) {
        self.need(90, 8, 0);
        let state = self.reg::<U64>();
        self.instr(format!(
            "mbarrier.arrive.expect_tx.shared::cta.b64 {state}, [{addr}], {}",
            bytes.ptx()
        ));
    }

    /// `mbarrier.try_wait.parity.shared::cta.b64` (acquire, CTA scope): whether the phase with
    /// parity `parity` (0 or 1) has completed; may wait a while in hardware before answering
    /// false. Call it in a loop.
    pub fn mbarrier_try_wait_parity(
        &mut self,
        addr: Reg<U32>,
        parity: impl Operand<U32>,
    ) -> Reg<Pred> {
        self.need(90, 7, 8);
        let d = self.reg::<Pred>();
        self.instr(format!(
            "mbarrier.try_wait.parity.shared::cta.b64 {d}, [{addr}], {}",
            parity.ptx()
        ));
        d
    }
}
