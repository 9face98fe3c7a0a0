//! The learned-correction CPU side: references against independent computations, the accuracy
//! an f32 implementation of the GPU kernels' arithmetic can reach (which justifies the GPU
//! tolerances), the GPU rSVD algorithm run on the CPU, and input validation.

use ptxflow::rng::Rng;
use ptxflow::rnn::chain::chain_cpu;
use ptxflow::rnn::mathf;
use ptxflow::rnn::reference::{dense_relu, gru_ensemble_rollout, gru_rollout, lowrank_correct};
use ptxflow::rnn::rsvd::{rsvd_cpu, rsvd_model, rsvd_model_gram_route};
use ptxflow::rnn::testmat::*;
use ptxflow::rnn::*;
use ptxflow::Error;

fn rel_inf(got: &[f64], want: &[f64]) -> f64 {
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    got.iter()
        .zip(want)
        .fold(0.0f64, |m, (g, w)| m.max((g - w).abs()))
        / scale
}

/// The GRU step with the kernels' f32 operations (fma dot products, `h' = fma(z, h - n, n)`,
/// layer norm as the kernel does it) and the transcendentals `sig`, `th`: the IEEE `mathf`
/// mirrors, or the model of the cell's SFU forms with their errors pushed one way.
fn gru_rollout_f32(
    w: &GruWeights,
    x: &[f32],
    h0: &[f32],
    shape: RolloutShape,
    sig: &dyn Fn(f32) -> f32,
    th: &dyn Fn(f32) -> f32,
) -> Vec<f64> {
    let (ni, nh, nb) = (w.input(), w.hidden(), shape.batch);
    let mut h = h0.to_vec();
    let mut out = Vec::new();
    let dot = |m: &[f32], row: usize, cols: usize, v: &[f32]| {
        m[row * cols..(row + 1) * cols]
            .iter()
            .zip(v)
            .fold(0.0f32, |a, (&p, &q)| p.mul_add(q, a))
    };
    for t in 0..shape.steps {
        let mut next = h.clone();
        for b in 0..nb {
            let xr = &x[(t * nb + b) * ni..(t * nb + b + 1) * ni];
            let hr = &h[b * nh..(b + 1) * nh];
            for j in 0..nh {
                let gi = |g: usize| dot(w.w_ih(), g * nh + j, ni, xr) + w.b_ih()[g * nh + j];
                let gh = |g: usize| dot(w.w_hh(), g * nh + j, nh, hr);
                let r = sig(gi(0) + gh(0) + w.b_hh()[j]);
                let z = sig(gi(1) + gh(1) + w.b_hh()[nh + j]);
                let n = th(r.mul_add(gh(2) + w.b_hh()[2 * nh + j], gi(2)));
                next[b * nh + j] = z.mul_add(hr[j] - n, n);
            }
            if let Some(ln) = w.layer_norm() {
                let row = &mut next[b * nh..(b + 1) * nh];
                let mean = row.iter().sum::<f32>() / nh as f32;
                let var = row
                    .iter()
                    .fold(0.0f32, |a, &v| (v - mean).mul_add(v - mean, a))
                    / nh as f32;
                let rstd = 1.0 / (var + ln.eps).sqrt();
                for (k, v) in row.iter_mut().enumerate() {
                    *v = ((*v - mean) * rstd).mul_add(ln.gain[k], ln.bias[k]);
                }
            }
        }
        h = next;
        out.extend(h.iter().map(|&v| f64::from(v)));
    }
    out
}

#[test]
fn f32_gru_arithmetic_is_within_1e5_of_f64() {
    for ln in [false, true] {
        let mut rng = Rng::new(11 + u64::from(ln));
        let w = GruWeights::random(&mut rng, 128, 256, ln);
        let shape = RolloutShape {
            steps: 10,
            batch: 8,
        };
        let x = rng.vec_f32(10 * 8 * 128, -1.0, 1.0);
        let h0 = rng.vec_f32(8 * 256, -0.5, 0.5);
        let want = gru_rollout(&w, &x, &h0, shape, None, 0).unwrap();
        let got = gru_rollout_f32(&w, &x, &h0, shape, &mathf::sigmoid, &mathf::tanh);
        let e = rel_inf(&got, &want);
        eprintln!("f32 GRU arithmetic, layer norm {ln}: max rel error {e:.2e}");
        assert!(e < 1e-5, "f32 arithmetic error {e:e} (layer norm {ln})");
        // The cell's SFU forms (what the kernels run), their errors pushed each way.
        for dir in [1.0, -1.0] {
            let sig = |v: f32| mathf::sfu_model::sigmoid(v, dir);
            let th = |v: f32| mathf::sfu_model::tanh(v, dir);
            let got = gru_rollout_f32(&w, &x, &h0, shape, &sig, &th);
            let e = rel_inf(&got, &want);
            eprintln!("f32 GRU arithmetic with SFU sigmoid/tanh pushed {dir:+} x {} ulp, layer norm {ln}: max rel error {e:.2e}", mathf::sfu_model::SFU_ULPS);
            assert!(
                e < 1e-5,
                "SFU model error {e:e} (layer norm {ln}, direction {dir})"
            );
        }
    }
}

#[test]
fn gru_reference_matches_a_hand_computed_step() {
    // I = H = 1: every gate is a scalar formula.
    let w = GruWeights::new(
        1,
        1,
        vec![0.5, -0.25, 1.0],
        vec![0.1, 0.2, -0.3],
        vec![0.01, 0.02, 0.03],
        vec![0.04, 0.05, 0.06],
        None,
    )
    .unwrap();
    let (x, h) = (0.7f64, -0.4f64);
    let s = |v: f64| 1.0 / (1.0 + (-v).exp());
    let r = s(0.5 * x + 0.01 + 0.1 * h + 0.04);
    let z = s(-0.25 * x + 0.02 + 0.2 * h + 0.05);
    let n = (1.0 * x + 0.03 + r * (-0.3 * h + 0.06)).tanh();
    let want = (1.0 - z) * n + z * h;
    let got = gru_rollout(
        &w,
        &[0.7],
        &[-0.4],
        RolloutShape { steps: 1, batch: 1 },
        None,
        0,
    )
    .unwrap();
    assert!((got[0] - want).abs() < 1e-7, "{} vs {want}", got[0]);
}

#[test]
fn dropout_is_seeded_and_keeps_the_right_fraction() {
    let mut rng = Rng::new(3);
    let w = GruWeights::random(&mut rng, 16, 128, false);
    let shape = RolloutShape { steps: 4, batch: 8 };
    let x = rng.vec_f32(4 * 8 * 16, -1.0, 1.0);
    let h0 = vec![0.1f32; 8 * 128];
    let d = Dropout { p: 0.25, seed: 99 };
    let a = gru_rollout(&w, &x, &h0, shape, Some(&d), 0).unwrap();
    let b = gru_rollout(&w, &x, &h0, shape, Some(&d), 0).unwrap();
    assert_eq!(a, b, "same seed, same mask");
    let c = gru_rollout(&w, &x, &h0, shape, Some(&Dropout { seed: 100, ..d }), 0).unwrap();
    assert_ne!(a, c);
    let zeros = a.iter().filter(|v| **v == 0.0).count() as f64 / a.len() as f64;
    assert!((zeros - 0.25).abs() < 0.03, "dropped fraction {zeros}");
    assert!(matches!(
        gru_rollout(&w, &x, &h0, shape, Some(&Dropout { p: 1.0, seed: 1 }), 0),
        Err(Error::Input { .. })
    ));
}

#[test]
fn dense_and_lowrank_match_explicit_products() {
    let mut rng = Rng::new(4);
    let layer = DenseLayer::random(&mut rng, 64, 128);
    let x = rng.vec_f32(5 * 64, -1.0, 1.0);
    let y = dense_relu(&layer, &x, 5).unwrap();
    for b in 0..5 {
        for o in 0..128 {
            let s: f64 = (0..64)
                .map(|i| f64::from(x[b * 64 + i]) * f64::from(layer.w()[i * 128 + o]))
                .sum::<f64>()
                + f64::from(layer.b()[o]);
            assert!((y[b * 128 + o] - s.max(0.0)).abs() < 1e-12);
        }
    }
    let a = matrix_with_spectrum(&mut rng, 40, 30, Spectrum::Harmonic);
    let lr = rsvd_cpu(&a, 40, 30, &RsvdOptions::rank(8)).unwrap();
    let pred = rng.vec_f32(3 * 40, -1.0, 1.0);
    let xin = rng.vec_f32(3 * 30, -1.0, 1.0);
    let got = lowrank_correct(&lr, &pred, &xin, 3).unwrap();
    for b in 0..3 {
        for i in 0..40 {
            // Form the product explicitly: sum_j U[i][j] S[j] sum_c V^T[j][c] x[c].
            let mut s = f64::from(pred[b * 40 + i]);
            for c in 0..30 {
                let m: f64 = (0..8)
                    .map(|j| {
                        f64::from(lr.u()[i * 8 + j])
                            * f64::from(lr.s()[j])
                            * f64::from(lr.vt()[j * 30 + c])
                    })
                    .sum();
                s += m * f64::from(xin[b * 30 + c]);
            }
            assert!((got[b * 40 + i] - s).abs() < 1e-12);
        }
    }
}

#[test]
fn rsvd_reference_and_gpu_algorithm_reach_the_optimal_error() {
    let (m, n, k) = (300, 220, 20);
    let opts = RsvdOptions::rank(k);
    for (i, spec) in [
        Spectrum::Exponential { rate: 0.8 },
        Spectrum::Harmonic,
        Spectrum::LowRank { rank: 6 },
    ]
    .into_iter()
    .enumerate()
    {
        let a = matrix_with_spectrum(&mut Rng::new(20 + i as u64), m, n, spec);
        let opt = optimal_error(&a, m, n, k).unwrap();
        // The factors are f32: their rounding alone costs about eps32 sqrt(k) ||A||_F.
        let floor = 4.0 * f64::from(f32::EPSILON) * (k as f64).sqrt() * frobenius(&a);
        for (name, lr) in [
            ("f64 reference", rsvd_cpu(&a, m, n, &opts).unwrap()),
            ("GPU algorithm", rsvd_model(&a, m, n, &opts, 1, 2).unwrap()),
            (
                "GPU algorithm, Gram route",
                rsvd_model_gram_route(&a, m, n, &opts, 1, 2).unwrap(),
            ),
        ] {
            let e = reconstruction_error(&a, &lr).unwrap();
            let (ou, ov) = (
                column_orthonormality(lr.u(), m, k),
                row_orthonormality(lr.vt(), k, n),
            );
            eprintln!("{spec:?} {name}: error {e:.3e} = {:.5} x optimal {opt:.3e}; ortho U {ou:.1e} V {ov:.1e}", e / opt);
            assert!(
                e <= 1.01 * opt + floor,
                "{spec:?} {name}: {e} vs optimal {opt}"
            );
            assert!(
                ou < 1e-5 && ov < 1e-5,
                "{spec:?} {name}: orthonormality {ou} {ov}"
            );
            assert!(
                lr.s().windows(2).all(|w| w[0] >= w[1]),
                "singular values descend"
            );
        }
    }
}

#[test]
fn chain_reference_composes_its_parts() {
    let model = ChainModel::random(
        1,
        ChainDims {
            features: 16,
            input: 32,
            hidden: 24,
            rank: 4,
        },
    )
    .unwrap();
    let shape = RolloutShape { steps: 3, batch: 2 };
    let mut rng = Rng::new(2);
    let f = rng.vec_f32(3 * 2 * 16, -1.0, 1.0);
    let h0 = rng.vec_f32(2 * 24, -0.5, 0.5);
    let out = chain_cpu(&model, &f, &h0, shape).unwrap();
    let x = dense_relu(&model.encoder, &f, 6).unwrap();
    let xf: Vec<f32> = x.iter().map(|&v| v as f32).collect();
    let hs = gru_rollout(&model.gru, &xf, &h0, shape, None, 0).unwrap();
    let pred: Vec<f32> = hs[2 * 2 * 24..].iter().map(|&v| v as f32).collect();
    let want = lowrank_correct(&model.correction, &pred, &xf[2 * 2 * 32..], 2).unwrap();
    // The composition above rounds intermediates to f32; the chain keeps f64 throughout.
    assert!(rel_inf(&out, &want) < 1e-6, "{}", rel_inf(&out, &want));
}

#[test]
fn ensemble_reference_rolls_each_member() {
    let mut rng = Rng::new(5);
    let ws: Vec<GruWeights> = (0..3)
        .map(|_| GruWeights::random(&mut rng, 8, 16, true))
        .collect();
    let shape = RolloutShape { steps: 2, batch: 3 };
    let x = rng.vec_f32(2 * 3 * 8, -1.0, 1.0);
    let h0 = rng.vec_f32(3 * 3 * 16, -1.0, 1.0);
    let all = gru_ensemble_rollout(&ws, &x, &h0, shape, None).unwrap();
    for (e, w) in ws.iter().enumerate() {
        let one = gru_rollout(w, &x, &h0[e * 48..(e + 1) * 48], shape, None, e).unwrap();
        assert_eq!(&all[e * 96..(e + 1) * 96], &one[..]);
    }
}

#[test]
fn bad_inputs_are_errors_not_panics() {
    let mut rng = Rng::new(6);
    assert!(matches!(
        DenseLayer::new(4, 2, vec![0.0; 7], vec![0.0; 2]),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        DenseLayer::new(1, 1, vec![f32::NAN], vec![0.0]),
        Err(Error::Input { .. })
    ));
    assert!(matches!(
        DenseLayer::new(0, 1, vec![], vec![0.0]),
        Err(Error::Input { .. })
    ));
    let w = GruWeights::random(&mut rng, 4, 8, false);
    let shape = RolloutShape { steps: 2, batch: 1 };
    assert!(matches!(
        gru_rollout(&w, &[0.0; 7], &[0.0; 8], shape, None, 0),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        gru_rollout(&w, &[f32::INFINITY; 8], &[0.0; 8], shape, None, 0),
        Err(Error::Input { .. })
    ));
    assert!(matches!(
        gru_rollout(
            &w,
            &[],
            &[0.0; 8],
            RolloutShape { steps: 0, batch: 1 },
            None,
            0
        ),
        Err(Error::Input { .. })
    ));
    let ln = LayerNorm {
        gain: vec![1.0; 8],
        bias: vec![0.0; 8],
        eps: 0.0,
    };
    assert!(matches!(
        GruWeights::new(
            4,
            8,
            w.w_ih().to_vec(),
            w.w_hh().to_vec(),
            w.b_ih().to_vec(),
            w.b_hh().to_vec(),
            Some(ln)
        ),
        Err(Error::Input { .. })
    ));
    assert!(matches!(
        rsvd_cpu(&[0.0; 12], 3, 4, &RsvdOptions::rank(4)),
        Err(Error::Input { .. })
    ));
    assert!(matches!(
        rsvd_cpu(&[0.0; 11], 3, 4, &RsvdOptions::rank(2)),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        LowRank::new(3, 3, 1, vec![0.0; 3], vec![1.0], vec![0.0; 2]),
        Err(Error::Shape { .. })
    ));
}
