//! The learned-correction kernels on the GPU against the f64 CPU references: dense (f32 and
//! f16 storage), GRU step / rollout / ensemble (layer norm, dropout), randomized SVD (error
//! against the optimal rank-k error from a full CPU SVD, orthonormality), corrections, the
//! whole chain (eager, CUDA graph, concurrent streams), and no allocations in steady loops.
//! Outputs are poisoned before launches where the API allows. `PTXFLOW_SANITIZE=1` shrinks the
//! large cases for compute-sanitizer (the GRU tests then run one short case per kernel and mode). Every test skips without a GPU.
//!
//! One test binary; the bodies live in the modules (`dense_chain`, `gru`, `gru_held`,
//! `gru_sanitize`, `rsvd`), the test functions here keep their names.

#[path = "../common/mod.rs"]
mod common;
mod dense_chain;
mod gru;
mod gru_held;
mod gru_sanitize;
mod rsvd;

/// Whether the run is under compute-sanitizer (small cases only).
pub fn sanitize() -> bool {
    std::env::var("PTXFLOW_SANITIZE").is_ok_and(|v| v == "1")
}

/// max |got - want| / max |want|.
pub fn rel_inf(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    assert!(got.iter().all(|v| v.is_finite()), "non-finite output");
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    got.iter()
        .zip(want)
        .fold(0.0f64, |m, (&g, w)| m.max((f64::from(g) - w).abs()))
        / scale
}

#[test]
fn gpu_dense_matches_f64_reference() {
    dense_chain::gpu_dense_matches_f64_reference();
}

#[test]
fn gpu_gru_held_kernels_match_f64_reference_and_their_twins() {
    gru_held::gpu_gru_held_kernels_match_f64_reference_and_their_twins();
}

#[test]
fn gpu_gru_step_and_rollout_match_f64_reference() {
    gru::gpu_gru_step_and_rollout_match_f64_reference();
}

#[test]
fn gpu_gru_cluster_exchanges_match_f64_reference() {
    gru::gpu_gru_cluster_exchanges_match_f64_reference();
}

#[test]
fn gpu_gru_ensemble_matches_f64_reference() {
    gru::gpu_gru_ensemble_matches_f64_reference();
}

#[test]
fn gpu_rsvd_reaches_the_optimal_error() {
    rsvd::gpu_rsvd_reaches_the_optimal_error();
}

#[test]
fn gpu_rsvd_split_plans_reach_the_optimal_error() {
    rsvd::gpu_rsvd_split_plans_reach_the_optimal_error();
}

#[test]
fn gpu_corrections_match_f64_reference() {
    dense_chain::gpu_corrections_match_f64_reference();
}

#[test]
fn gpu_chain_matches_f64_reference_eager_graph_and_streams() {
    dense_chain::gpu_chain_matches_f64_reference_eager_graph_and_streams();
}

#[test]
fn gpu_steady_loops_allocate_nothing() {
    dense_chain::gpu_steady_loops_allocate_nothing();
}
