//! [`super::newton_eigen`] in the PTX interpreter against the host's `newton_increment`.

use super::*;
use crate::ndt::newton_step::newton_increment;
use crate::rng::Rng;
use crate::sim::{Grid, Memory, Program};
use nalgebra::{Matrix6, Vector6};

#[test]
fn rounds_cover_every_pair_once() {
    let mut seen = std::collections::BTreeSet::new();
    for pairs in rounds() {
        let mut rows: Vec<usize> = pairs.iter().flat_map(|&(p, q)| [p, q]).collect();
        rows.sort();
        assert_eq!(rows, vec![0, 1, 2, 3, 4, 5]);
        for (p, q) in pairs {
            assert!(p < q && seen.insert((p, q)));
        }
    }
    assert_eq!(seen.len(), 15);
}

/// One warp: `a` (21 lower-triangle f64, row by row) and `g` (6) in, lane 0 stores `Δ`,
/// `pd` and `singular` (as 1.0 / 0.0).
fn program(all_lanes: bool, f32_angle: bool) -> Program {
    let mut kb = KernelBuilder::new("eigen_test");
    let (ap, gp, op) = (
        kb.global_arg::<F64>("a"),
        kb.global_arg::<F64>("g"),
        kb.global_arg::<F64>("out"),
    );
    let b = &mut kb;
    let mut a: Lower = [[None; 6]; 6];
    let mut k = 0u32;
    for (i, row) in a.iter_mut().enumerate() {
        for v in row.iter_mut().take(i + 1) {
            *v = Some(b.load_at(ap, k));
            k += 1;
        }
    }
    let g: [Reg<F64>; 6] = std::array::from_fn(|i| b.load_at(gp, i as u32));
    let lane = b.special(Special::TidX);
    let e = newton_eigen(b, &a, &g, lane, all_lanes, f32_angle);
    let lane0 = b.setp(Cmp::Eq, lane, 0u32);
    b.when(lane0, |b| {
        for (i, d) in e.delta.iter().enumerate() {
            b.store_at(op, i as u32, *d);
        }
        let pd = b.selp(1.0f64, 0.0f64, e.pd);
        b.store_at(op, 6u32, pd);
        let s = b.selp(1.0f64, 0.0f64, e.singular);
        b.store_at(op, 7u32, s);
        let n = b.cvt::<F64, U32>(e.sweeps);
        b.store_at(op, 8u32, n);
    });
    let m = Module::single(Target::Sm90, kb.finish());
    Program::parse(&m.emit().unwrap()).unwrap()
}

fn run(prog: &Program, a: &Matrix6<f64>, g: &Vector6<f64>) -> (Vector6<f64>, bool, bool) {
    let (d, pd, sing, _) = run_counted(prog, a, g);
    (d, pd, sing)
}

/// [`run`] and the sweeps.
fn run_counted(
    prog: &Program,
    a: &Matrix6<f64>,
    g: &Vector6<f64>,
) -> (Vector6<f64>, bool, bool, f64) {
    let mut mem = Memory::new();
    let mut low = Vec::new();
    for i in 0..6 {
        for j in 0..=i {
            low.push(a[(i, j)]);
        }
    }
    let aa = mem.upload("a", &low);
    let ga = mem.upload("g", g.as_slice());
    let oa = mem.upload("out", &[f64::NAN; 9]);
    prog.run(Grid::linear(1, 32), &[aa, ga, oa], &mut mem)
        .unwrap();
    let o = mem.download::<f64>("out").unwrap();
    (
        Vector6::from_column_slice(&o[..6]),
        o[6] == 1.0,
        o[7] == 1.0,
        o[8],
    )
}

#[test]
fn jacobi_matches_the_host_eigen_path() {
    for (all_lanes, f32_angle) in [(false, false), (true, false), (false, true)] {
        jacobi_matches(&program(all_lanes, f32_angle));
    }
}

fn jacobi_matches(prog: &Program) {
    let mut rng = Rng::new(11);
    let mut sweeps = [0usize; MAX_SWEEPS as usize + 1];
    for k in 0..120 {
        let m = Matrix6::from_fn(|_, _| rng.normal());
        let q = m.qr().q();
        let lam = Vector6::from_fn(|i, _| match k % 4 {
            0 => rng.range(-1.0, 10.0),
            1 => 10f64.powf(rng.range(-12.0, 3.0)) * if i % 2 == 0 { 1.0 } else { -1.0 },
            2 => rng.range(-5.0, 5.0) * 1e4,
            _ => {
                if i < 2 {
                    3.0
                } else {
                    rng.range(-2.0, 2.0)
                }
            }
        });
        let a = q * Matrix6::from_diagonal(&lam) * q.transpose();
        let a = (a + a.transpose()) * 0.5;
        let g = Vector6::from_fn(|_, _| rng.normal());
        let (want, pd) = newton_increment(&-a, &g).expect("non-zero spectrum");
        let (got, gpd, sing, n) = run_counted(prog, &a, &g);
        sweeps[n as usize] += 1;
        assert!(!sing, "case {k}");
        assert_eq!(gpd, pd, "case {k}: {lam:?}");
        let rel = (got - want).norm() / want.norm();
        let cond = lam.amax()
            / lam
                .iter()
                .map(|l| l.abs())
                .fold(f64::INFINITY, f64::min)
                .max(1e-9 * lam.amax());
        assert!(
            rel <= 1e-14 * cond.max(1.0),
            "case {k}: rel {rel:e}, cond {cond:e}"
        );
    }
    eprintln!("sweeps (count of cases by sweeps run): {sweeps:?}");
    assert_eq!(sweeps[MAX_SWEEPS as usize], 0, "never at the cap");
}

#[test]
fn diagonal_and_zero_matrices() {
    let prog = program(true, true);
    let g = Vector6::new(1.0, -2.0, 3.0, 0.5, -0.25, 2.0);
    let a = Matrix6::from_diagonal(&Vector6::new(4.0, -2.0, 1.0, 8.0, -0.5, 3.0));
    let (want, pd) = newton_increment(&-a, &g).unwrap();
    let (got, gpd, sing) = run(&prog, &a, &g);
    assert!(!sing && gpd == pd);
    assert!((got - want).norm() <= 1e-15 * want.norm(), "{got} {want}");
    let (_, _, sing) = run(&prog, &Matrix6::zeros(), &g);
    assert!(sing);
}
