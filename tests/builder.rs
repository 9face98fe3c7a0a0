//! The PTX builder on its own: typing, predication, labels, shared symbols, immediates, and the
//! ISA bookkeeping. ptxas itself checks every table kernel in CI (.ci/ptxas-gate).

use ptxflow::ptx::*;

fn emit(b: KernelBuilder, t: Target) -> String {
    Module::single(t, b.finish()).emit().unwrap()
}

#[test]
fn float_immediates_are_hex_bit_patterns() {
    let mut b = KernelBuilder::new("imm");
    let x = b.mov(1.0f32);
    let y = b.mov(-0.5f64);
    let _ = b.add(x, 0.1f32);
    let _ = b.mul(y, 2.0f64);
    let ptx = emit(b, Target::Sm75);
    assert!(ptx.contains("mov.f32 %f0, 0f3F800000;"), "{ptx}");
    assert!(ptx.contains("mov.f64 %fd0, 0dBFE0000000000000;"), "{ptx}");
    assert!(ptx.contains("add.rn.f32 %f1, %f0, 0f3DCCCCCD;"), "{ptx}");
}

#[test]
fn any_instruction_can_be_predicated() {
    let mut b = KernelBuilder::new("pred");
    let out = b.param::<U64>("out");
    let out = b.global_ptr(&out);
    let t = b.special(Special::TidX);
    let p = b.setp(Cmp::Lt, t, 4u32);
    b.guarded(p, false, |b| b.st(Space::Global, out, t));
    b.guarded(p, true, |b| b.red(Space::Global, AtomOp::Add, out, 1u32));
    let ptx = emit(b, Target::Sm75);
    assert!(ptx.contains("@%p0 st.global.u32 [%rd1], %r0;"), "{ptx}");
    assert!(ptx.contains("@!%p0 red.global.add.u32 [%rd1], 1;"), "{ptx}");
}

#[test]
fn when_and_when_not_predicate_like_guarded() {
    let mut b = KernelBuilder::new("when");
    let out = b.param::<U64>("out");
    let out = b.global_ptr(&out);
    let t = b.special(Special::TidX);
    let p = b.setp(Cmp::Lt, t, 4u32);
    b.when(p, |b| b.st(Space::Global, out, t));
    b.when_not(p, |b| b.red(Space::Global, AtomOp::Add, out, 1u32));
    let ptx = emit(b, Target::Sm75);
    assert!(ptx.contains("@%p0 st.global.u32 [%rd1], %r0;"), "{ptx}");
    assert!(ptx.contains("@!%p0 red.global.add.u32 [%rd1], 1;"), "{ptx}");
}

#[test]
fn uniform_loops_branch_with_bra_uni() {
    let mut b = KernelBuilder::new("uniform");
    let n = b.arg::<U32>("n");
    b.for_range_with(LoopBranch::Uniform, 0u32, n, 32u32, |b, _, _| {
        b.comment("body")
    });
    b.loop_with(LoopBranch::Uniform, |b, exit, _| {
        let t = b.special(Special::TidX);
        let done = b.setp(Cmp::Ge, t, n);
        b.bra_uni_if(done, exit);
    });
    b.for_range(0u32, n, 1u32, |b, _, _| b.comment("divergent"));
    let ptx = emit(b, Target::Sm75);
    for needle in [
        "$L__ufor_1:",
        "@%p0 bra.uni $L__ufor_end_2;",
        "bra.uni $L__ufor_1;",
        "$L__uloop_3:",
        "@%p1 bra.uni $L__uloop_end_4;",
        "bra.uni $L__uloop_3;",
        "@%p2 bra $L__loop_end_6;",
        "\tbra $L__loop_5;",
    ] {
        assert!(ptx.contains(needle), "missing {needle:?} in\n{ptx}");
    }
}

#[test]
fn labels_never_collide() {
    let mut b = KernelBuilder::new("labels");
    let t = b.special(Special::TidX);
    let p = b.setp(Cmp::Eq, t, 0u32);
    for _ in 0..3 {
        b.if_then(p, |b| b.if_else(p, |b| b.comment("a"), |b| b.comment("b")));
        b.for_range(0u32, 4u32, 1u32, |b, _, _| b.comment("loop"));
    }
    let ptx = emit(b, Target::Sm75);
    let labels: Vec<&str> = ptx.lines().filter(|l| l.starts_with("$L")).collect();
    let unique: std::collections::BTreeSet<&&str> = labels.iter().collect();
    assert_eq!(labels.len(), unique.len(), "duplicate labels in\n{ptx}");
    assert_eq!(labels.len(), 3 * (1 + 2 + 2));
}

#[test]
fn shared_arrays_are_addressed_through_their_symbol() {
    let mut b = KernelBuilder::new("shared");
    let s = b.shared_array::<F32>("tile", 64);
    let d = b.dynamic_shared::<F64>("dyn");
    let t = b.special(Special::TidX);
    let a = b.shared_index(&s, t);
    let v = b.ld::<F32>(Space::Shared, a);
    let w = b.cvt::<F64, F32>(v);
    b.st(Space::Shared, d.at(3), w);
    let ptx = emit(b, Target::Sm90);
    assert!(ptx.contains(".shared .align 16 .b8 tile[256];"), "{ptx}");
    assert!(
        ptx.contains(".extern .shared .align 16 .b8 dyn[];"),
        "{ptx}"
    );
    assert!(ptx.contains("mov.u32 %r1, tile;"), "{ptx}");
    assert!(ptx.contains("st.shared.f64 [dyn+24], %fd0;"), "{ptx}");
}

#[test]
fn version_is_the_lowest_needed() {
    let mut b = KernelBuilder::new("ver");
    let x = b.mov(1u32);
    let _ = b.add(x, 1u32);
    assert!(emit(b, Target::Sm75).contains(".version 6.3\n.target sm_75"));
    let mut b = KernelBuilder::new("ver90");
    b.reqntid(128, 1, 1);
    assert!(emit(b, Target::Sm90).contains(".version 7.8\n.target sm_90"));
    // match.any needs sm_70: fine on sm_75, rejected by a module for a lower need check.
    let mut b = KernelBuilder::new("needs");
    b.require(90, PtxVersion(8, 0));
    let err = Module::single(Target::Sm80, b.finish()).emit().unwrap_err();
    assert!(err.to_string().contains("needs sm_90"), "{err}");
}

#[test]
fn sixty_four_bit_shuffles_split_into_halves() {
    let mut b = KernelBuilder::new("shfl64");
    let v = b.mov(1.5f64);
    let _ = b.shfl(Shfl::Down, v, 1u32);
    let ptx = emit(b, Target::Sm75);
    assert_eq!(ptx.matches("shfl.sync.down.b32").count(), 2, "{ptx}");
    assert!(ptx.contains("mov.b64 {%r0, %r1}, %fd0;"), "{ptx}");
}

#[test]
fn registers_are_declared_in_fixed_class_order() {
    let mut b = KernelBuilder::new("order");
    let f = b.mov(1.0f64);
    let p = b.setp(Cmp::Gt, f, 0.0f64);
    let _ = b.selp(1u32, 2u32, p);
    let ptx = emit(b, Target::Sm75);
    let pred = ptx.find(".reg .pred").unwrap();
    let u32_ = ptx.find(".reg .u32").unwrap();
    let f64_ = ptx.find(".reg .f64").unwrap();
    assert!(pred < u32_ && u32_ < f64_, "{ptx}");
}

#[test]
fn flush_to_zero_exponential_is_one_instruction() {
    let mut b = KernelBuilder::new("ex2ftz");
    let x = b.mov(-130.0f32);
    let _ = b.ex2_approx_ftz(x);
    let ptx = emit(b, Target::Sm75);
    assert!(ptx.contains("ex2.approx.ftz.f32 %f1, %f0;"), "{ptx}");
}

#[test]
fn sfu_reciprocal_and_l1_prefetch_are_single_instructions() {
    let mut b = KernelBuilder::new("sfu");
    let x = b.mov(3.0f32);
    let _ = b.rcp_approx_ftz(x);
    let p = b.param::<U64>("p");
    let a = b.global_ptr(&p);
    b.prefetch_l1(a);
    let ptx = emit(b, Target::Sm75);
    assert!(ptx.contains("rcp.approx.ftz.f32 %f1, %f0;"), "{ptx}");
    assert!(ptx.contains("prefetch.global.L1 [%rd"), "{ptx}");
}

#[test]
fn relaxed_tagged_words_are_strong_gpu_scope_accesses() {
    let mut b = KernelBuilder::new("tagged");
    let p = b.param::<U64>("words");
    let p = b.global_ptr(&p);
    let w = b.ld_relaxed_gpu_v2::<U64>(p);
    b.st_relaxed_gpu(Addr::from(p).off(16), w[0]);
    let k = b.finish();
    assert_eq!(k.needs_sm(), 70);
    assert_eq!(k.needs_ptx(), PtxVersion(6, 0));
    let ptx = Module::single(Target::Sm75, k).emit().unwrap();
    assert!(
        ptx.contains("ld.relaxed.gpu.global.v2.u64 {%rd2, %rd3}, [%rd1];"),
        "{ptx}"
    );
    assert!(
        ptx.contains("st.relaxed.gpu.global.u64 [%rd1+16], %rd2;"),
        "{ptx}"
    );
}

#[test]
fn acquire_loads_record_their_isa_needs() {
    let mut b = KernelBuilder::new("acq");
    let p = b.param::<U64>("flag");
    let p = b.global_ptr(&p);
    let v = b.ld_acquire_gpu::<U32>(p);
    let _ = b.add(v, 1u32);
    let k = b.finish();
    assert_eq!(k.needs_sm(), 70);
    assert_eq!(k.needs_ptx(), PtxVersion(6, 0));
    let ptx = Module::single(Target::Sm75, k).emit().unwrap();
    assert!(
        ptx.contains("ld.acquire.gpu.global.u32 %r0, [%rd1];"),
        "{ptx}"
    );
}

#[test]
fn register_bound_is_a_directive_after_the_thread_bound() {
    let mut b = KernelBuilder::new("regs");
    b.maxntid(128, 1, 1);
    b.maxnreg(72);
    let _ = b.special(Special::TidX);
    let ptx = emit(b, Target::Sm75);
    assert!(ptx.contains(".maxntid 128, 1, 1\n.maxnreg 72\n{"), "{ptx}");
}

#[test]
fn a_comment_that_ptxas_would_reject_is_a_build_error() {
    let mut b = KernelBuilder::new("commented");
    let _ = b.special(Special::TidX);
    b.comment("x' \u{2212} mu");
    let e = emit_err(b);
    assert!(e.contains("`commented`") && e.contains("ASCII"), "{e}");
}

fn emit_err(b: KernelBuilder) -> String {
    let e = Module::single(Target::Sm75, b.finish()).emit().unwrap_err();
    assert!(matches!(e, ptxflow::Error::Build(_)), "{e:?}");
    e.to_string()
}

#[test]
fn misuse_is_an_error_naming_the_kernel_and_the_instruction() {
    let b = KernelBuilder::new("my-kernel");
    let e = emit_err(b);
    assert!(
        e.contains("`my-kernel`") && e.contains("KernelBuilder::new"),
        "{e}"
    );
    assert!(emit_err(KernelBuilder::new("9lives")).contains("not starting with a digit"));

    let mut b = KernelBuilder::new("cmp");
    let x = b.mov(1u32);
    let _ = b.setp(Cmp::Ltu, x, 2u32);
    let e = emit_err(b);
    assert!(e.contains("`cmp`") && e.contains("setp.ltu.u32"), "{e}");
    assert!(e.contains("for floats only"), "{e}");

    let mut b = KernelBuilder::new("label_in_guard");
    let p = b.setp(Cmp::Eq, 1u32, 1u32);
    b.guarded(p, false, |b| b.if_then(p, |_| {}));
    assert!(emit_err(b).contains("cannot be placed inside a predicated region"));

    let mut b = KernelBuilder::new("oob");
    let arr = b.shared_array::<F32>("tile", 4);
    let _ = b.ld::<F32>(Space::Shared, arr.at(4));
    let e = emit_err(b);
    assert!(
        e.contains("ld.shared.f32 %f0, [tile+16]") && e.contains("past the end"),
        "{e}"
    );

    let mut b = KernelBuilder::new("bad_store");
    let a = b.mov(0u64);
    b.st::<U32>(Space::Const, a, 1u32);
    assert!(emit_err(b).contains("cannot store to .const"));
}

#[test]
fn a_register_of_another_builder_is_an_error_at_emit() {
    let mut other = KernelBuilder::new("other");
    let foreign = other.mov(7u32);
    let mut b = KernelBuilder::new("mine");
    let _ = b.add(foreign, 1u32);
    let e = emit_err(b);
    assert!(
        e.contains("`mine`") && e.contains("another kernel builder"),
        "{e}"
    );
    assert!(e.contains("add.u32 %r0, %r0, 1"), "{e}");
}

#[test]
fn predicated_regions_nest_as_a_conjunction() {
    let mut b = KernelBuilder::new("nested");
    let x = b.mov(3u32);
    let p = b.setp(Cmp::Gt, x, 1u32);
    let q = b.setp(Cmp::Lt, x, 5u32);
    b.guarded(p, false, |b| {
        b.guarded(q, true, |b| {
            let _ = b.add(x, 1u32);
        });
        let _ = b.add(x, 2u32);
    });
    let ptx = emit(b, Target::Sm75);
    assert!(
        ptx.contains("not.pred %p2, %p1;\n\tand.pred %p3, %p0, %p2;\n\t@%p3 add.u32"),
        "{ptx}"
    );
    assert!(ptx.contains("@%p0 add.u32 %r2, %r0, 2;"), "{ptx}");
}

#[test]
fn block_reduce_needs_a_known_block_shape() {
    let mut b = KernelBuilder::new("no_reqntid");
    let v = b.mov(1.0f32);
    let _ = b.block_sum(v);
    assert!(emit_err(b).contains("needs a 1-D .reqntid"));
}

#[test]
fn typed_pointer_parameters_are_in_the_contract() {
    let mut b = KernelBuilder::new("typed");
    b.maxntid(128, 1, 1);
    let (x, n) = (b.global_arg::<F64>("x"), b.arg::<U32>("n"));
    b.grid_stride_x(n, |b, i| b.update_at(x, i, |b, v| b.mul(v, 2.0f64)));
    let k = b.finish();
    let sig = k.signature().clone();
    assert_eq!(sig.params[0].ty, ParamType::GlobalPtr(ScalarType::F64));
    assert_eq!(sig.params[1].ty, ParamType::Scalar(ScalarType::U32));
    assert_eq!(sig.maxntid, Some([128, 1, 1]));
    let ptx = Module::single(Target::Sm75, k).emit().unwrap();
    assert!(
        ptx.contains(".param .u64 typed_param_x,")
            && ptx.contains("mad.wide.u32 %rd2, %r8, 8, %rd1;"),
        "{ptx}"
    );
    // The text alone gives the same contract, pointers as plain u64.
    let parsed = Signature::from_ptx(&ptx, "typed").unwrap();
    assert_eq!(parsed.params[0].ty, ParamType::Scalar(ScalarType::U64));
    assert_eq!(parsed.maxntid, sig.maxntid);
}
