//! The GRU rollout kernels run by the PTX interpreter (`ptxflow::sim`, no GPU needed) against the
//! f64 reference: a small rollout (H = 256, input 100 padded to 128, batch 4, 3 steps, 13 unit
//! slices exchanging their states through the tagged words) on `rnn_gru_stationary` in both
//! projection modes and on `rnn_gru_shared`, with 16 slices on `rnn_gru_stationary48`,
//! `rnn_gru_held48`, `rnn_gru_held48s`, `rnn_gru_held48w`, `rnn_gru_held48sw` and
//! `rnn_gru_held48swxc`, and with 13 on `rnn_gru_held64`, `rnn_gru_held64o` and
//! `rnn_gru_held64s` (W_ih held too, gi step by step): one GRU with and without layer norm, an
//! ensemble of 2 with dropout. The interpreter runs the whole grid interleaved (the blocks poll
//! each other as on a device); its `%clock64` is 0, so a late block is never given up on.

use ptxflow::kernels::rnn::gru::stationary::held;
use ptxflow::kernels::rnn::gru::{shared, stationary};
use ptxflow::kernels::KernelId;
use ptxflow::rng::Rng;
use ptxflow::rnn::gpu::gru::pack_members;
use ptxflow::rnn::reference::gru_ensemble_rollout;
use ptxflow::rnn::{Dropout, GruWeights, RolloutShape};
use ptxflow::sim::{Arg, Grid, Memory, Program};

const INPUT: usize = 100;
const INPUT_PAD: usize = 128;
const HIDDEN: usize = 256;
const BATCH: usize = 4;
const STEPS: usize = 3;
const SLICES: u32 = 13;

/// The rollout's inputs: the members' weights, `x` (`T x B x I`), `h0` (`E x B x H`), dropout.
struct Case {
    members: Vec<GruWeights>,
    x: Vec<f32>,
    h0: Vec<f32>,
    dropout: Option<Dropout>,
}

/// Pads the rows of `rows` (`width` wide) to `INPUT_PAD` columns.
fn pad_rows(rows: &[f32], width: usize, out: &mut Vec<f32>) {
    for row in rows.chunks_exact(width) {
        out.extend_from_slice(row);
        out.extend(std::iter::repeat_n(0.0f32, INPUT_PAD - width));
    }
}

/// One launch of `id` (the case's members, one batch group of 4 rows each, `slices` unit slices)
/// with `chunk`; returns `out` (`E x T x B x H`).
fn run_sliced(id: KernelId, case: &Case, chunk: u32, slices: u32) -> Vec<f32> {
    // The largest slice: 2 ceil(128 / slices) units (`gru`'s even split).
    let units = 2 * 128u32.div_ceil(slices);
    let ptx = id.build(id.targets()[0]).emit().expect("emit");
    let prog = Program::parse(&ptx).expect("the interpreter models the GRU kernel");
    let (h, e) = (HIDDEN, case.members.len());
    let mut mem = Memory::new();
    let mut xp = Vec::new();
    pad_rows(&case.x, INPUT, &mut xp);
    let w = pack_members(&case.members, INPUT_PAD);
    let ln = case.members[0].layer_norm();
    let seq = e * STEPS * BATCH * h;
    let mut args = vec![
        mem.upload("x", &xp),
        mem.upload("h0", &case.h0),
        mem.upload("w_ih", &w.w_ih),
        mem.upload("w_hh", &w.w_hh),
        mem.upload("b_ih", &w.b_ih),
        mem.upload("b_hh", &w.b_hh),
        mem.upload("ln_gain", &w.ln_gain),
        mem.upload("ln_bias", &w.ln_bias),
        mem.upload("hx", &vec![0u64; seq]),
        mem.upload("out", &vec![0.0f32; seq]),
        mem.upload("state", &vec![0u32; 4 * e]),
    ];
    let (steps, batch) = (STEPS as u32, BATCH as u32);
    let (drop, threshold, scale, seed) = match case.dropout {
        Some(d) => (1, d.threshold(), 1.0 / (1.0 - d.p), d.seed),
        None => (0, 0, 1.0, 0),
    };
    let sizes = [
        0,
        steps,
        batch,
        batch,
        128,
        256,
        slices,
        batch,
        chunk,
        u32::from(ln.is_some()),
        drop,
        threshold,
        seed as u32,
        (seed >> 32) as u32,
    ];
    args.extend(sizes.map(Arg::U32));
    args.extend([Arg::F32(ln.map_or(1e-5, |l| l.eps)), Arg::F32(scale)]);
    let floats = if id == KernelId::RnnGruShared {
        shared::smem_floats(batch, 128, 256, units, chunk)
    } else if matches!(
        id,
        KernelId::RnnGruHeld48
            | KernelId::RnnGruHeld48s
            | KernelId::RnnGruHeld64
            | KernelId::RnnGruHeld64o
            | KernelId::RnnGruHeld64s
    ) {
        args.push(Arg::U64(0));
        held::smem_floats(batch, 128, 256, chunk)
    } else if matches!(
        id,
        KernelId::RnnGruHeld48w
            | KernelId::RnnGruHeld48sw
            | KernelId::RnnGruHeld48swxc
            | KernelId::RnnGruHeld48swxcp
    ) {
        args.push(Arg::U64(0));
        held::smem_floats_staged(batch, 128, 256, chunk, 3)
    } else {
        args.push(Arg::U64(0));
        stationary::smem_floats(batch, 128, 256, units, chunk)
    };
    let grid = Grid::linear(e as u32 * slices, 256).with_dyn_shared(4 * floats);
    prog.run(grid, &args, &mut mem).expect("the rollout runs");
    let state = mem.download::<u32>("state").expect("state");
    for m in state.chunks_exact(4) {
        assert_eq!(m[2], 0, "{}: a block gave up waiting", id.name());
        assert_eq!(m[0], steps, "{}: the epoch advances by T", id.name());
    }
    mem.download::<f32>("out").expect("out")
}

fn rel_inf(got: &[f32], want: &[f64]) -> f64 {
    let scale = want.iter().fold(1e-3f64, |m, v| m.max(v.abs()));
    got.iter()
        .zip(want)
        .map(|(&g, &w)| (f64::from(g) - w).abs() / scale)
        .fold(0.0, f64::max)
}

#[test]
fn gru_kernels_match_the_f64_reference_in_the_interpreter() {
    let shape = RolloutShape {
        steps: STEPS,
        batch: BATCH,
    };
    // One GRU with and without layer norm; an ensemble of 2 with dropout.
    for (members, layer_norm, dropout) in [
        (1, false, None),
        (1, true, None),
        (2, false, Some(Dropout { p: 0.2, seed: 11 })),
    ] {
        let mut rng = Rng::new(7 + members as u64 + u64::from(layer_norm));
        let case = Case {
            members: (0..members)
                .map(|_| GruWeights::random(&mut rng, INPUT, HIDDEN, layer_norm))
                .collect(),
            x: rng.vec_f32(STEPS * BATCH * INPUT, -1.0, 1.0),
            h0: rng.vec_f32(members * BATCH * HIDDEN, -0.5, 0.5),
            dropout,
        };
        let want = gru_ensemble_rollout(&case.members, &case.x, &case.h0, shape, dropout.as_ref())
            .expect("reference");
        // Outputs by kernel (the first run of each: precompute mode for `rnn_gru_stationary`).
        let mut outs: Vec<(&str, Vec<f32>)> = Vec::new();
        for (id, chunk, slices, what) in [
            (
                KernelId::RnnGruStationary,
                STEPS as u32,
                SLICES,
                "gi of every step first",
            ),
            (KernelId::RnnGruStationary, 0, SLICES, "gi per step"),
            (
                KernelId::RnnGruShared,
                2,
                SLICES,
                "weights in shared memory",
            ),
            (
                KernelId::RnnGruStationary48,
                STEPS as u32,
                16,
                "48 gate rows, 16 slices of 16 units",
            ),
            (
                KernelId::RnnGruHeld48,
                STEPS as u32,
                16,
                "W_ih held too, 48 gate rows, 16 slices",
            ),
            (
                KernelId::RnnGruHeld48s,
                STEPS as u32,
                16,
                "W_ih held by the upper warps, 48 gate rows, 16 slices",
            ),
            (
                KernelId::RnnGruHeld48w,
                STEPS as u32,
                16,
                "W_ih held too, weights staged, 48 gate rows, 16 slices",
            ),
            (
                KernelId::RnnGruHeld48sw,
                STEPS as u32,
                16,
                "split roles, weights staged, 48 gate rows, 16 slices",
            ),
            (
                KernelId::RnnGruHeld48swxc,
                STEPS as u32,
                16,
                "rnn_gru_held48sw with x copied during the steps, the cells' gi sums in the gather",
            ),
            (
                KernelId::RnnGruHeld64,
                STEPS as u32,
                SLICES,
                "W_ih held too, 64 gate rows",
            ),
            (
                KernelId::RnnGruHeld64o,
                STEPS as u32,
                SLICES,
                "W_ih held too, 64 gate rows, W_ih partials in the gather",
            ),
            (
                KernelId::RnnGruHeld64s,
                STEPS as u32,
                SLICES,
                "W_ih held by the upper warps, 64 gate rows",
            ),
        ] {
            let got = run_sliced(id, &case, chunk, slices);
            // The held kernels sum the same partials in the same order as the precompute mode
            // of the kernel with the same lane rows: bit-identical states.
            let twin = match id {
                KernelId::RnnGruHeld48
                | KernelId::RnnGruHeld48s
                | KernelId::RnnGruHeld48w
                | KernelId::RnnGruHeld48sw
                | KernelId::RnnGruHeld48swxc
                | KernelId::RnnGruHeld48swxcp => Some("rnn_gru_stationary48"),
                KernelId::RnnGruHeld64 | KernelId::RnnGruHeld64o | KernelId::RnnGruHeld64s => {
                    Some("rnn_gru_stationary")
                }
                _ => None,
            };
            if let Some(twin) = twin {
                let (_, want_bits) = outs
                    .iter()
                    .find(|(n, _)| *n == twin)
                    .expect("the precompute twin ran first");
                assert!(
                    got.iter()
                        .zip(want_bits)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{} differs from {twin}",
                    id.name()
                );
            }
            if outs.iter().all(|(n, _)| *n != id.name()) {
                outs.push((id.name(), got.clone()));
            }
            let e = rel_inf(&got, &want);
            let label = format!(
                "{} ({what}), {members} member(s), layer norm {layer_norm}, dropout {}",
                id.name(),
                dropout.is_some()
            );
            eprintln!("{label}: rel. error {e:e}");
            assert!(e < 1e-5, "{label}: {e:e}");
        }
    }
}
