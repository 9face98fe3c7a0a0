//! `rnn_small_eig` (the randomized SVD's small step on the device) run by the PTX interpreter
//! (`ptxflow::sim`, no GPU needed) against its CPU mirror `ptxflow::rnn::jacobi::small_step`,
//! bit for bit: graded Gram matrices like the rSVD's at several widths, one whose ratio test
//! fails, and one that is not finite.

use ptxflow::kernels::rnn::small::THREADS;
use ptxflow::kernels::KernelId;
use ptxflow::rng::Rng;
use ptxflow::rnn::jacobi::{
    small_step, SmallStep, OUT_DEFECT, OUT_LEN, OUT_ROUNDS, OUT_STATUS, OUT_SWEEPS,
    SMALL_NOT_FINITE, SMALL_OK, SMALL_RATIO, SMALL_W,
};
use ptxflow::sim::{Arg, Grid, Memory, Program};

const W: usize = SMALL_W;

/// A Gram matrix with graded columns (`rate^j`) of `3 l` random rows, padded to W x W.
fn graded(rng: &mut Rng, l: usize, rate: f64) -> Vec<f64> {
    let rows = 3 * l;
    let b: Vec<f64> = (0..rows * l)
        .map(|i| rng.normal() * rate.powi((i % l) as i32))
        .collect();
    let mut g = vec![0.0f64; W * W];
    for r in 0..rows {
        for i in 0..l {
            for j in 0..l {
                g[i * W + j] += b[r * l + i] * b[r * l + j];
            }
        }
    }
    g
}

fn run_kernel(gram: &[f64], l: usize, k: usize) -> SmallStep {
    let id = KernelId::RnnSmallEig;
    let ptx = id.build(id.targets()[0]).emit().expect("emit");
    let prog = Program::parse(&ptx).expect("the interpreter models rnn_small_eig");
    let mut mem = Memory::new();
    let args = vec![
        mem.upload("gram", gram),
        Arg::U32(l as u32),
        Arg::U32(k as u32),
        mem.upload("zw", &vec![f64::NAN; 2 * W * W]),
        mem.upload("out", &vec![f64::NAN; OUT_LEN]),
    ];
    prog.run(Grid::linear(1, THREADS), &args, &mut mem)
        .expect("rnn_small_eig runs");
    let out = mem.download::<f64>("out").expect("out");
    let zw = mem.download::<f64>("zw").expect("zw");
    let status = out[OUT_STATUS] as u32;
    let ok = status == SMALL_OK;
    let keep = |v: &[f64]| if ok { v.to_vec() } else { vec![0.0; v.len()] };
    SmallStep {
        status,
        sweeps: out[OUT_SWEEPS] as u32,
        rounds: out[OUT_ROUNDS] as u32,
        defect: out[OUT_DEFECT],
        s: keep(&out[..k]),
        zk: keep(&zw[..W * W]),
        xk: keep(&zw[W * W..]),
    }
}

fn same(a: &SmallStep, b: &SmallStep, what: &str) {
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        (a.status, a.sweeps, a.rounds),
        (b.status, b.sweeps, b.rounds),
        "{what}"
    );
    assert_eq!(a.defect.to_bits(), b.defect.to_bits(), "{what}: defect");
    assert!(bits(&a.s) == bits(&b.s), "{what}: S {:?} vs {:?}", a.s, b.s);
    assert!(bits(&a.zk) == bits(&b.zk), "{what}: Z_k");
    assert!(bits(&a.xk) == bits(&b.xk), "{what}: Z_k Sigma^-1");
}

#[test]
fn small_eig_matches_its_cpu_mirror_in_the_interpreter() {
    let mut rng = Rng::new(5);
    for (l, k, rate) in [
        (42usize, 32usize, 0.7f64),
        (13, 8, 0.6),
        (48, 40, 0.8),
        (1, 1, 1.0),
    ] {
        let g = graded(&mut rng, l, rate);
        let cpu = small_step(&g, l, k);
        assert_eq!(cpu.status, SMALL_OK, "l {l}");
        let gpu = run_kernel(&g, l, k);
        same(&gpu, &cpu, &format!("l {l} k {k}"));
    }
    // sigma_k below EIGEN_MIN_RATIO sigma_1: the host route takes over.
    let mut g = vec![0.0f64; W * W];
    g[0] = 1.0;
    g[W + 1] = 1e-20;
    let (gpu, cpu) = (run_kernel(&g, 3, 2), small_step(&g, 3, 2));
    assert_eq!(cpu.status, SMALL_RATIO);
    same(&gpu, &cpu, "ratio");
    g[W] = f64::INFINITY;
    let (gpu, cpu) = (run_kernel(&g, 3, 2), small_step(&g, 3, 2));
    assert_eq!(cpu.status, SMALL_NOT_FINITE);
    same(&gpu, &cpu, "not finite");
}
