//! The f64 kernel exponentials e' = 2^-t (`kernels::gaussian::exp_f64`, every kind) run by the
//! library's PTX interpreter over the whole range of t the kernels form (t >= 0, inf and NaN
//! included), against the CPU's `exp2(-t)`:
//! - t <= `F64_CUT_T`: relative error <= 4.5e-16 for the table kinds (their bound 2.7e-16, plus
//!   libm's < 1 ulp), <= 2.5e-15 for the session-7 polynomial;
//! - t > `F64_CUT_T` (inf and NaN too): exactly 0.
//!
//! The t's: a fine grid of [0, cut], the table's breakpoints k 2^-8 (and 2^-6, 2^-4, each with
//! its neighbours), powers of two down to subnormals, and the cutoff's neighbours.

use ptxflow::kernels::gaussian::exp::F64_CUT_T;
use ptxflow::kernels::gaussian::exp_f64::{Exp2, ExpF64};
use ptxflow::ptx::*;
use ptxflow::rng::Rng;
use ptxflow::sim::{Arg, Grid, Memory, Program};

const BLOCK: u32 = 128;

fn program(kind: ExpF64) -> Program {
    let mut b = KernelBuilder::new("exp2_neg_f64");
    b.reqntid(BLOCK, 1, 1);
    let (t, n) = (b.global_arg::<F64>("t"), b.arg::<U32>("n"));
    let out = b.global_arg::<F64>("out");
    let tid = b.special(Special::TidX);
    let exp = Exp2::setup::<F64>(&mut b, kind, tid);
    b.bar_sync();
    b.grid_stride_x(n, |b, i| {
        let v = b.load_at(t, i);
        let e = exp.eval::<F64>(b, v);
        b.store_at(out, i, e);
    });
    let m = Module::single(Target::Sm75, b.finish());
    Program::parse(&m.emit().unwrap()).unwrap_or_else(|e| panic!("{e}"))
}

fn next_up(x: f64) -> f64 {
    f64::from_bits(x.to_bits() + 1)
}

fn next_down(x: f64) -> f64 {
    f64::from_bits(x.to_bits() - 1)
}

/// The t's to evaluate (module docs).
fn inputs() -> Vec<f64> {
    let mut t = vec![0.0, f64::from_bits(1), 1e-300, f64::MIN_POSITIVE];
    let steps = 20_000;
    t.extend((0..=steps).map(|i| F64_CUT_T * f64::from(i) / f64::from(steps)));
    for bits in [4, 6, 8] {
        let h = (-f64::from(bits)).exp2();
        for k in [1u32, 2, 3, 255, 256, 257, 1000, 4096, 65_535, 261_000] {
            let x = h * f64::from(k);
            if x < F64_CUT_T {
                t.extend([next_down(x), x, next_up(x)]);
            }
        }
    }
    for e in -1070..10 {
        let x = f64::from(e).exp2();
        t.extend([next_down(x), x, next_up(x)]);
    }
    let mut rng = Rng::new(0xE2);
    t.extend((0..4000).map(|_| rng.range(0.0, F64_CUT_T)));
    t.extend((0..1000).map(|_| rng.range(-60.0, 10.0).exp2()));
    t.extend([next_down(F64_CUT_T), F64_CUT_T]);
    t.extend([
        next_up(F64_CUT_T),
        1021.5,
        1100.0,
        4095.9,
        4096.0,
        65_536.0,
        1e10,
        1e300,
        f64::MAX,
        f64::INFINITY,
        f64::NAN,
    ]);
    t
}

/// Largest relative error over t <= cut (and every t beyond giving exactly 0).
fn worst_error(kind: ExpF64) -> f64 {
    let t = inputs();
    let mut mem = Memory::new();
    let ta = mem.upload("t", &t);
    let oa = mem.upload("out", &vec![f64::NAN; t.len()]);
    let prog = program(kind);
    prog.run(
        Grid::linear(8, BLOCK),
        &[ta, Arg::U32(t.len() as u32), oa],
        &mut mem,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let got = mem.download::<f64>("out").unwrap();
    let mut worst = (0.0f64, 0.0f64);
    for (&x, &e) in t.iter().zip(&got) {
        if x <= F64_CUT_T {
            let want = (-x).exp2();
            assert!(e.is_normal(), "{kind:?}: 2^-{x:e} gave {e:e}");
            let err = (e - want).abs() / want;
            if err > worst.0 {
                worst = (err, x);
            }
        } else {
            assert_eq!(
                e.to_bits(),
                0,
                "{kind:?}: 2^-{x:e} beyond the cutoff gave {e:e}"
            );
        }
    }
    eprintln!(
        "{kind:?}: worst relative error {:.3e} at t = {:e} ({} t's)",
        worst.0,
        worst.1,
        t.len()
    );
    worst.0
}

#[test]
fn table_exponentials_match_exp2_over_the_whole_range() {
    for code in 1..=5 {
        let kind = ExpF64::from_code(code).expect("a table kind");
        let err = worst_error(kind);
        assert!(err <= 4.5e-16, "{kind:?}: {err:e}");
    }
}

#[test]
fn session_7_polynomial_matches_exp2_within_its_bound() {
    let err = worst_error(ExpF64::Poly10);
    assert!(err <= 2.5e-15, "{err:e}");
}
