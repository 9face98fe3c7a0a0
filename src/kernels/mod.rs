//! The kernel table: every kernel ptxflow ships, one line each. `build.rs` emits every entry to
//! `OUT_DIR` (one module per kernel and target), the snapshot test checks each against
//! `ptx_snapshots/`, and the runtime's module cache is indexed by [`KernelId`].
//!
//! Adding a kernel: write `src/kernels/<domain>/<kernel>.rs` with `pub fn build(Target) -> Module`
//! and add one line below. This module uses only the builder (build.rs compiles it too).

#![allow(clippy::module_inception)]

pub mod core_ops;
pub mod gaussian;
pub mod lz4;
pub mod ndt;
pub mod rnn;

use crate::ptx::{Module, Target};

macro_rules! kernel_table {
    ($( $(#[$doc:meta])* $id:ident => $build:path, $name:literal, [$($t:ident),+]; )+) => {
        /// Every kernel in ptxflow.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum KernelId {
            $( $(#[$doc])* $id, )+
        }

        /// The whole table, in a fixed order.
        pub const ALL_KERNELS: &[KernelId] = &[ $( KernelId::$id, )+ ];

        impl KernelId {
            /// The PTX entry point name (`<domain>_<kernel>`).
            pub fn name(self) -> &'static str {
                match self { $( KernelId::$id => $name, )+ }
            }

            /// The targets this kernel ships PTX for (the lowest first). The runtime loads the
            /// highest one the device supports; the driver JITs it for the device.
            pub fn targets(self) -> &'static [Target] {
                match self { $( KernelId::$id => &[ $( Target::$t, )+ ], )+ }
            }

            /// What a failed launch of this kernel reports (`launching <name>`).
            pub fn launch_call(self) -> &'static str {
                match self { $( KernelId::$id => concat!("launching ", $name), )+ }
            }

            /// Builds the kernel's module for `target`.
            pub fn build(self, target: Target) -> Module {
                match self { $( KernelId::$id => $build(target), )+ }
            }
        }
    };
}

kernel_table! {
    /// `out[i] = prediction[i] + correction[i]` over f32, vectorised when aligned.
    CoreCorrectAdd => core_ops::correct_add::build, "core_correct_add", [Sm75];
    /// Sum of f32 values into an f64 total (block reduction, one atomic per block).
    CoreReduceSum => core_ops::reduce_sum::build, "core_reduce_sum", [Sm75];
    /// Gaussian field: squared Mahalanobis distance matrix (B x N), f32.
    GaussianDistancesF32 => gaussian::distances::build_f32, "gaussian_distances_f32", [Sm75];
    /// Gaussian field: squared Mahalanobis distance matrix (B x N), f64.
    GaussianDistancesF64 => gaussian::distances::build_f64, "gaussian_distances_f64", [Sm75];
    /// Gaussian field: fused forward partial sums per Gaussian chunk, f32.
    GaussianForwardF32 => gaussian::forward::build_f32, "gaussian_forward_f32", [Sm75];
    /// Gaussian field: fused forward partial sums per Gaussian chunk, f64.
    GaussianForwardF64 => gaussian::forward::build_f64, "gaussian_forward_f64", [Sm75];
    /// Gaussian field: fused forward with the expanded per-pair solve (11 instructions per pair), f32.
    GaussianForwardFastF32 => gaussian::forward_fast::build_f32, "gaussian_forward_fast_f32", [Sm75];
    /// Gaussian field: fused backward (per-point and per-Gaussian partial sums), f32.
    GaussianBackwardF32 => gaussian::backward::build_f32, "gaussian_backward_f32", [Sm75];
    /// Gaussian field: fused backward (per-point and per-Gaussian partial sums), f64.
    GaussianBackwardF64 => gaussian::backward::build_f64, "gaussian_backward_f64", [Sm75];
    /// Gaussian field: fused backward with the expanded per-pair solve and deferred transforms, f32.
    GaussianBackwardFastF32 => gaussian::backward::build_fast_f32, "gaussian_backward_fast_f32", [Sm75];
    /// Gaussian field: fused backward with points in lanes and Gaussians broadcast (per-Gaussian sums reduced once per warp), f32.
    GaussianBackwardLanesF32 => gaussian::backward::build_lanes_f32, "gaussian_backward_lanes_f32", [Sm75];
    /// Gaussian field: ordered sum of partial rows, scaled, f32.
    GaussianReduceRowsF32 => gaussian::reduce::build_rows_f32, "gaussian_reduce_rows_f32", [Sm75];
    /// Gaussian field: ordered sum of partial rows, scaled, f64.
    GaussianReduceRowsF64 => gaussian::reduce::build_rows_f64, "gaussian_reduce_rows_f64", [Sm75];
    /// Gaussian field: per-Gaussian gradient from the backward's chunk sums, f32.
    GaussianFinishF32 => gaussian::reduce::build_finish_f32, "gaussian_finish_f32", [Sm75];
    /// Gaussian field: per-Gaussian gradient from the backward's chunk sums, f64.
    GaussianFinishF64 => gaussian::reduce::build_finish_f64, "gaussian_finish_f64", [Sm75];
    /// Gaussian field: prepared device layout and compensation records from packed Gaussians, f32.
    GaussianPrepareF32 => gaussian::prepare::build_f32, "gaussian_prepare_f32", [Sm75];
    /// Gaussian field: prepared device layout and compensation records from packed Gaussians, f64.
    GaussianPrepareF64 => gaussian::prepare::build_f64, "gaussian_prepare_f64", [Sm75];
    /// NDT score, gradient and Hessian of many (source, pose) requests: fused per point, f64 reduction.
    NdtDerivatives => ndt::derivatives::build, "ndt_derivatives", [Sm75];
    /// NDT derivatives over the dense cell table: compacted hits, accumulators in shared memory.
    NdtDerivativesDense => ndt::derivatives::build_dense, "ndt_derivatives_dense", [Sm75];
    /// `ndt_derivatives_dense` with the next hit loaded ahead, for rounds of one block per SM.
    NdtDerivativesDenseSmall => ndt::derivatives::build_dense_small, "ndt_derivatives_dense_small", [Sm75];
    /// `ndt_derivatives_dense` with cross-product angular derivatives, for every round of a batch.
    NdtDerivativesDenseCross => ndt::derivatives::build_dense_cross, "ndt_derivatives_dense_cross", [Sm75];
    /// `ndt_derivatives_dense_cross` for Direct7 launches only, the seven probes at fixed offsets.
    NdtDerivativesDenseCross7 => ndt::derivatives::build_dense_cross7, "ndt_derivatives_dense_cross7", [Sm75];
    /// `ndt_derivatives_dense_small` as a persistent cooperative kernel serving one alignment's evaluations.
    NdtDerivativesServer => ndt::derivatives::build_server, "ndt_derivatives_server", [Sm75];
    /// `ndt_derivatives_server` running one alignment's whole Newton solve on the device.
    NdtAlignDevice => ndt::derivatives::build_align_device, "ndt_align_device", [Sm75];
    /// One Newton / More-Thuente step of every alignment of a batch round, one warp each (the batch device solve).
    NdtBatchSolve => ndt::solve::batch::build_batch_solve, "ndt_batch_solve", [Sm75];
    /// LZ4 page compression, one warp per page (byte-identical to the CPU reference).
    Lz4Compress => lz4::compress::build, "lz4_compress", [Sm75];
    /// LZ4 page decompression, two pages per warp (one per half-warp), every access bounds-checked.
    Lz4Decompress => lz4::decompress::build, "lz4_decompress", [Sm75];
    /// LZ4 page decompression, one warp per page, for pages above 32 KiB.
    Lz4DecompressWide => lz4::decompress::build_wide, "lz4_decompress_wide", [Sm75];
    /// Dense encoder `relu(x W + b)`, f32 weights.
    RnnDenseF32 => rnn::dense::build_f32, "rnn_dense_f32", [Sm75];
    /// Dense encoder `relu(x W + b)`, f16 weight storage, f32 accumulation.
    RnnDenseF16 => rnn::dense::build_f16, "rnn_dense_f16", [Sm75];
    /// GRU rollout (single or ensemble), one persistent cooperative kernel, weights in shared memory.
    RnnGruShared => rnn::gru::shared::build, "rnn_gru_shared", [Sm75];
    /// GRU rollout (single or ensemble), one persistent cooperative kernel, W_hh in registers
    /// (H = 256, padded input 128).
    RnnGruStationary => rnn::gru::stationary::kernel::build, "rnn_gru_stationary", [Sm75];
    /// `rnn_gru_stationary` for blocks of at most 16 units (48 gate rows: a quarter fewer held
    /// registers and fmas), gi of every step first only.
    RnnGruStationary48 => rnn::gru::stationary::rows48::build, "rnn_gru_stationary48", [Sm75];
    /// `rnn_gru_stationary48` with W_ih held in registers too and gi computed step by step in the
    /// exchange's shadow (one block per SM; `cp.async` staging, sm_80 and later).
    RnnGruHeld48 => rnn::gru::stationary::held::build48, "rnn_gru_held48", [Sm80];
    /// `rnn_gru_held48` with lanes holding 64 gate rows (blocks of up to 21 units).
    RnnGruHeld64 => rnn::gru::stationary::held::build64, "rnn_gru_held64", [Sm80];
    /// `rnn_gru_held64` with the partials of `W_ih x_{t+2}` inside the gather's first L2 round
    /// trip (the 64-row default, e.g. the ensemble of 5; bit-identical).
    RnnGruHeld64o => rnn::gru::stationary::held::build64o, "rnn_gru_held64o", [Sm80];
    /// `rnn_gru_held48` with W_ih held by the upper four warps only: they take the partials of
    /// `W_ih x_{t+2}` while the lower four take the cells, gi sums and gather (bit-identical).
    RnnGruHeld48s => rnn::gru::stationary::held::build48s, "rnn_gru_held48s", [Sm80];
    /// `rnn_gru_held64` with W_ih held by the upper four warps only: they take the gi sums of
    /// step t + 1 and the partials of `W_ih x_{t+2}` while the lower four take the cells and the
    /// gather (bit-identical).
    RnnGruHeld64s => rnn::gru::stationary::held::build64s, "rnn_gru_held64s", [Sm80];
    /// `rnn_gru_held48` with the weights staged through shared memory by coalesced `cp.async`
    /// (bit-identical).
    RnnGruHeld48w => rnn::gru::stationary::held::build48w, "rnn_gru_held48w", [Sm80];
    /// `rnn_gru_held48s` with the weights staged as in `rnn_gru_held48w` (bit-identical).
    RnnGruHeld48sw => rnn::gru::stationary::held::build48sw, "rnn_gru_held48sw", [Sm80];
    /// `rnn_gru_held48sw` with x of steps 3 .. copied during the steps and the threads with a
    /// cell taking their gi sums in the gather's first round trip (the rollout default for
    /// blocks of at most 16 units and 128 cells; bit-identical).
    RnnGruHeld48swxc => rnn::gru::stationary::held::build48swxc, "rnn_gru_held48swxc", [Sm80];
    /// `rnn_gru_held48swxc` with thread 0's gather timed (bench instrumentation, opt-in).
    RnnGruHeld48swxcp => rnn::gru::stationary::held::build48swxcp, "rnn_gru_held48swxcp", [Sm80];
    /// `rnn_gru_stationary` with the per-step exchange in distributed shared memory: one
    /// thread-block cluster of 16 per (member, batch group); sm_90 and later.
    RnnGruCluster => rnn::gru::stationary::cluster::build, "rnn_gru_cluster", [Sm90];
    /// `rnn_gru_cluster` with x streamed one step at a time (small enough for two blocks of up
    /// to 16 rows per SM); sm_90 and later.
    RnnGruClusterStreamed => rnn::gru::stationary::cluster::build_streamed, "rnn_gru_cluster_streamed", [Sm90];
    /// `C = A B`, tiled f32 GEMM with split-K (randomized SVD).
    RnnGemmNn => rnn::gemm::kernel::build_nn, "rnn_gemm_nn", [Sm75];
    /// `C = A^T B`, tiled f32 GEMM with split-K (randomized SVD).
    RnnGemmTn => rnn::gemm::kernel::build_tn, "rnn_gemm_tn", [Sm75];
    /// `rnn_gemm_nn` with 128 threads of 8 x 6 (half the shared-memory reads per FMA).
    RnnGemmNnR8 => rnn::gemm::kernel::build_nn_r8, "rnn_gemm_nn_r8", [Sm75];
    /// `rnn_gemm_tn` with 128 threads of 8 x 6 (sm_90: `.minnctapersm 4`, 4 blocks per SM).
    RnnGemmTnR8 => rnn::gemm::kernel::build_tn_r8, "rnn_gemm_tn_r8", [Sm75, Sm90];
    /// `C = A B` on tensor cores in split-precision TF32 (3xTF32; randomized SVD, opt-in).
    RnnGemmNnTc => rnn::gemm::tc::build_nn, "rnn_gemm_nn_tc", [Sm80];
    /// `C = A^T B` on tensor cores in split-precision TF32 (3xTF32; randomized SVD, opt-in).
    RnnGemmTnTc => rnn::gemm::tc::build_tn, "rnn_gemm_tn_tc", [Sm80];
    /// `rnn_gemm_nn_tc` with A streamed through a `cp.async` ring (opt-in).
    RnnGemmNnTca => rnn::gemm::tca::build_nn, "rnn_gemm_nn_tca", [Sm80];
    /// `rnn_gemm_tn_tc` with A streamed through a `cp.async` ring (opt-in).
    RnnGemmTnTca => rnn::gemm::tca::build_tn, "rnn_gemm_tn_tca", [Sm80];
    /// Gaussian sketch matrix from a counter-based hash.
    RnnGaussian => rnn::gaussian::build, "rnn_gaussian", [Sm75];
    /// CholeskyQR passes of a tall f32 matrix (persistent cooperative kernel).
    RnnOrth => rnn::orth::kernel::build, "rnn_orth", [Sm75];
    /// `rnn_orth` that skips a later pass when its Gram is the identity to f32 epsilon.
    RnnOrthSkip => rnn::orth::kernel::build_skip, "rnn_orth_skip", [Sm75];
    /// The randomized SVD's small step: Jacobi eigenproblem of B^T's Gram and the checked
    /// factors, one block (opt-in).
    RnnSmallEig => rnn::small::build, "rnn_small_eig", [Sm75];
    /// Tall f32 matrix times a small f64 matrix.
    RnnApplySmall => rnn::apply::build, "rnn_apply_small", [Sm75];
    /// `pred + U S V^T x` without forming the product.
    RnnLowrankCorrect => rnn::lowrank::build, "rnn_lowrank_correct", [Sm75];
}

impl KernelId {
    /// Position in [`ALL_KERNELS`] (dense index for caches).
    pub fn index(self) -> usize {
        ALL_KERNELS
            .iter()
            .position(|k| *k == self)
            .expect("every KernelId is in ALL_KERNELS")
    }

    /// Snapshot / file stem: the entry name, plus `__sm90` etc. when the kernel ships several
    /// targets and `target` is not the lowest.
    pub fn file_stem(self, target: Target) -> String {
        if self.targets().first() == Some(&target) {
            self.name().to_string()
        } else {
            format!("{}__{}", self.name(), target.name().replace('_', ""))
        }
    }
}
