//! A kernel that uses every instruction family of the builder, assembled by NVIDIA's ptxas for
//! every target (warnings are errors). Finds ptxas through `PTXAS` or the cache `.ci/ptxas-gate`
//! installs into; skips, saying why, when there is none.

use ptxflow::ptx::*;
use std::path::PathBuf;
use std::process::Command;

fn ptxas() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PTXAS") {
        return Some(PathBuf::from(p));
    }
    let home = std::env::var_os("HOME")?;
    let cached = PathBuf::from(home).join(".cache/ptxflow/ptxas-13.5.37/nvidia/cu13/bin/ptxas");
    cached.exists().then_some(cached)
}

fn kitchen_sink(target: Target) -> String {
    let mut b = KernelBuilder::new("kitchen_sink");
    b.maxntid(256, 1, 1);
    b.minnctapersm(2);
    let out = b.param::<U64>("out");
    let n = b.param::<U32>("n");
    let out = b.global_ptr(&out);
    let n = b.ld_param(&n);
    let sh = b.shared_array::<U32>("sh_u32", 64);
    let dy = b.dynamic_shared::<F64>("dyn_f64");
    let table = b.const_words("table", &[1, 2, 3, 4]);
    let scratch = b.local_array("scratch", 16);
    let tid = b.global_tid_x();
    let lane = b.special(Special::LaneId);
    let _warp = b.special(Special::WarpId);
    let _clock = b.clock64();
    // integer arithmetic and bits
    let a = b.add(tid, 3u32);
    let c = b.mul(a, a);
    let c = b.mad(c, 2u32, a);
    let _ = b.mul_hi(c, a);
    let w = b.mul_wide(c, 8u32);
    let _ = b.mad_wide(c, 4u32, w);
    let one = b.max(a, 1u32);
    let q = b.div(c, one);
    let r = b.rem(c, one);
    let m = b.min(q, r);
    let s = b.cvt::<S32, U32>(m);
    let s = b.neg(s);
    let s = b.abs(s);
    let _ = b.shr(s, 1u32);
    let x = b.xor(c, 0x5555u32);
    let x = b.and(x, 0xffu32);
    let x = b.or(x, 1u32);
    let x = b.not(x);
    let x = b.shl(x, 2u32);
    let _ = b.bfe(x, 4u32, 8u32);
    let _ = b.bfi(x, c, 8u32, 4u32);
    let _ = b.popc(x);
    let _ = b.clz(x);
    let _ = b.ffs(x);
    let _ = b.prmt(x, c, 0x3210u32);
    let x64 = b.cvt::<U64, U32>(x);
    let _ = b.popc(x64);
    // floats, both widths
    let f = b.cvt::<F32, U32>(tid);
    let g = b.fma(f, 0.5f32, 1.0f32);
    let g = b.div(g, 3.0f32);
    let _ = b.div_approx(g, 3.0f32);
    let g = b.sqrt(g);
    let _ = b.sqrt_approx(g);
    let _ = b.rsqrt(g);
    let _ = b.rcp(g);
    let _ = b.rcp_approx(g);
    let _ = b.rcp_approx_ftz(g);
    let _ = b.sin_approx(g);
    let _ = b.cos_approx(g);
    let _ = b.exp_approx(g);
    let _ = b.lg2_approx(g);
    let d = b.cvt::<F64, F32>(g);
    let d = b.fma(d, d, 1.0f64);
    let d = b.div(d, 7.0f64);
    let d = b.sqrt(d);
    let _ = b.rsqrt(d);
    let _ = b.rcp_approx(d);
    let d = b.min(d, 2.0f64);
    let d = b.max(d, -2.0f64);
    let d = b.abs(d);
    let d = b.neg(d);
    let back = b.cvt::<F32, F64>(d);
    let _ = b.cvt_round::<S32, F32>(Round::Rni, back);
    let h = b.cvt::<F16, F32>(back);
    let _ = b.cvt::<F32, F16>(h);
    let bits = b.bitcast::<U32, F32>(back);
    let (lo, hi) = b.unpack64(d);
    let _ = b.pack64::<U64>(lo, hi);
    // comparisons, selection, predication, control flow
    let p = b.setp(Cmp::Lt, tid, n);
    let pf = b.setp(Cmp::Gtu, back, 0.0f32);
    let pn = b.setp(Cmp::Nan, d, d);
    let both = b.and(p, pf);
    let either = b.or(both, pn);
    let v = b.selp(bits, 0u32, either);
    b.for_range(0u32, 4u32, 1u32, |b, i, _| {
        let slot = b.shared_index(&sh, i);
        b.st(Space::Shared, slot, v);
    });
    b.loop_forever(|b, brk, _| b.bra(brk));
    b.bar_sync();
    b.membar(Scope::Gpu);
    b.fence_acq_rel(Scope::Cta);
    b.warp_sync(FULL_MASK);
    // memory: every space, narrow and vector forms
    let k = b.ld::<U32>(Space::Const, table.off(4));
    b.st(Space::Local, scratch.clone(), k);
    let _ = b.ld::<U32>(Space::Local, scratch);
    let dyn_slot = dy.at(1);
    b.st(Space::Shared, dyn_slot.clone(), d);
    let _ = b.ld::<F64>(Space::Shared, dyn_slot);
    let addr = b.index_addr(out, tid, 16);
    b.guarded(p, false, |b| {
        let q = b.ld_v4::<F32>(Space::GlobalNc, addr);
        b.st_v4(Space::Global, addr, q);
        let q2 = b.ld_v2::<F64>(Space::Global, addr);
        b.st_v2(Space::Global, addr, q2);
        let tagged = b.ld_relaxed_gpu_v2::<U64>(addr);
        b.st_relaxed_gpu(addr, tagged[1]);
        b.prefetch_l1(addr);
        let byte = b.ld_narrow::<U32>(Space::Global, Narrow::U8, addr);
        b.st_narrow(Space::Global, Narrow::U8, addr, byte);
        let half = b.ld_narrow::<U16>(Space::Global, Narrow::U16, addr);
        b.st_narrow(Space::Global, Narrow::U16, addr, half);
    });
    // atomics and reductions, global and shared, every type
    let _ = b.atom(Space::Global, AtomOp::Add, addr, 1u32);
    let _ = b.atom(Space::Global, AtomOp::Add, addr, 1u64);
    let _ = b.atom(Space::Global, AtomOp::Add, addr, 1.0f32);
    let _ = b.atom(Space::Global, AtomOp::Add, addr, 1.0f64);
    let _ = b.atom(Space::Global, AtomOp::Min, addr, 1u32);
    let _ = b.atom(Space::Global, AtomOp::Max, addr, 1u64);
    let _ = b.atom(Space::Shared, AtomOp::Exch, sh.at(0), 7u32);
    let _ = b.atom(Space::Global, AtomOp::Exch, addr, 7u64);
    let _ = b.atom_cas(Space::Global, addr, 1u32, 2u32);
    let _ = b.atom_cas(Space::Shared, sh.at(2), 1u64, 2u64);
    let _ = b.atom_float(Space::Global, AtomOp::Max, addr, back);
    let _ = b.atom_float_minmax(Space::Shared, false, dy.at(0), d);
    b.red(Space::Global, AtomOp::Add, addr, d);
    b.red(Space::Shared, AtomOp::Add, sh.at(1), 1u32);
    b.red(Space::Global, AtomOp::Or, addr, 1u32);
    // warp: shuffles of every mode and width, votes, match
    let _ = b.shfl(Shfl::Up, v, 1u32);
    let _ = b.shfl(Shfl::Down, d, 2u32);
    let _ = b.shfl(Shfl::Xor, back, 4u32);
    let _ = b.shfl(Shfl::Idx, x64, lane);
    let _ = b.warp_sum(d);
    let _ = b.ballot(p);
    let _ = b.vote_any(p);
    let _ = b.vote_all(p);
    let _ = b.vote_uni(p);
    let _ = b.match_any(v);
    Module::single(target, b.finish()).emit().unwrap()
}

#[test]
fn every_instruction_family_assembles_for_every_target() {
    let Some(ptxas) = ptxas() else {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "SKIPPED every_instruction_family_assembles_for_every_target: no ptxas (set PTXAS or run .ci/ptxas-gate)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("ptxflow-sink-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for target in ALL_TARGETS {
        let ptx = kitchen_sink(target);
        assert_eq!(ptx, kitchen_sink(target), "emission is deterministic");
        let path = dir.join(format!("sink_{}.ptx", target.name()));
        std::fs::write(&path, &ptx).unwrap();
        let o = Command::new(&ptxas)
            .args([
                "--warning-as-error",
                &format!("-arch={}", target.name()),
                path.to_str().unwrap(),
                "-o",
                "/dev/null",
            ])
            .output()
            .expect("run ptxas");
        assert!(
            o.status.success(),
            "ptxas rejected the kitchen sink for {target}:\n{}\n{ptx}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}
