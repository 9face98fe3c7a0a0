//! The field API contract as generic bodies, run against the CPU field (tests/gaussian_api.rs)
//! and the GPU field (tests/gaussian_gpu.rs): validation errors (never panics) and call order.
//! Each body takes a field holding [`one_gaussian`].

use ptxflow::gaussian::layout::pack;
use ptxflow::gaussian::GaussianFieldOps;
use ptxflow::Error;

/// One sheared Gaussian at the origin.
pub fn one_gaussian() -> Vec<f64> {
    pack([0.0, 0.0, 0.0], [0.5, 0.1, 0.4, -0.1, 0.2, 0.3], 1.0).to_vec()
}

/// Body of `set_gaussians_rejects_bad_shapes_and_values`.
pub fn set_gaussians_rejects_bad_shapes_and_values<F: GaussianFieldOps<Scalar = f64>>(f: &mut F) {
    f.set_gaussians(&one_gaussian()).unwrap();
    assert!(matches!(f.set_gaussians(&[]), Err(Error::Shape { .. })));
    assert!(matches!(
        f.set_gaussians(&[0.0; 11]),
        Err(Error::Shape { .. })
    ));
    for (k, bad) in [(0, f64::NAN), (4, f64::INFINITY), (9, f64::NEG_INFINITY)] {
        let mut g = one_gaussian();
        g[k] = bad;
        let err = f.set_gaussians(&g).unwrap_err();
        assert!(matches!(err, Error::Input { .. }), "index {k}: {err}");
    }
    for diag in [3, 5, 8] {
        for bad in [0.0, -0.1] {
            let mut g = one_gaussian();
            g[diag] = bad;
            let err = f.set_gaussians(&g).unwrap_err();
            assert!(err.to_string().contains("must be > 0"), "{err}");
        }
    }
    // A failed set leaves no Gaussians, so a stale field is never evaluated silently.
    assert_eq!(f.num_gaussians(), 0);
    assert!(matches!(f.forward(&[0.0; 3]), Err(Error::Input { .. })));
}

/// Body of `forward_and_distances_reject_bad_points`.
pub fn forward_and_distances_reject_bad_points<F: GaussianFieldOps<Scalar = f64>>(f: &mut F) {
    f.set_gaussians(&one_gaussian()).unwrap();
    assert!(matches!(f.forward(&[0.0; 4]), Err(Error::Shape { .. })));
    assert!(matches!(
        f.forward(&[0.0, f64::NAN, 0.0]),
        Err(Error::Input { .. })
    ));
    let mut out = vec![0.0; 3];
    assert!(matches!(
        f.distances_into(&[0.0; 6], &mut out),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        f.distances_into(&[0.0, 0.0, f64::INFINITY], &mut out[..1]),
        Err(Error::Input { .. })
    ));
    assert!(f.forward(&[]).unwrap().is_empty());
}

/// Body of `backward_checks_call_order_and_shapes`.
pub fn backward_checks_call_order_and_shapes<F: GaussianFieldOps<Scalar = f64>>(f: &mut F) {
    f.set_gaussians(&one_gaussian()).unwrap();
    assert!(
        matches!(f.backward(&[1.0]), Err(Error::Input { .. })),
        "backward before forward"
    );
    f.forward(&[0.1, 0.2, 0.3, 0.0, 0.0, 0.0]).unwrap();
    assert!(matches!(f.backward(&[1.0]), Err(Error::Shape { .. })));
    assert!(matches!(
        f.backward(&[1.0, f64::NAN]),
        Err(Error::Input { .. })
    ));
    f.backward(&[1.0, -1.0]).unwrap();
    // New Gaussians invalidate the forward.
    f.set_gaussians(&one_gaussian()).unwrap();
    assert!(matches!(f.backward(&[1.0, -1.0]), Err(Error::Input { .. })));
    // Zero points: gradients exist and are zero.
    f.forward(&[]).unwrap();
    let g = f.backward(&[]).unwrap();
    assert!(g.points.is_empty() && g.gaussians.iter().all(|&v| v == 0.0));
}
