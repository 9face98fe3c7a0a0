//! Warp-level matrix multiply-accumulate on tensor cores (`mma.sync`, sm_80) with TF32 inputs,
//! and the rounding that makes a TF32 operand from an f32 value. A TF32 operand is a 32-bit
//! register whose low 13 mantissa bits are zero ([`KernelBuilder::cvt_tf32`] rounds to it).

use super::kernel::KernelBuilder;
use super::reg::Reg;
use super::types::*;

impl KernelBuilder {
    /// `cvt.rna.tf32.f32`: `a` rounded to TF32 (10 mantissa bits, to nearest, ties away from
    /// zero), as the bits of an f32 with the low 13 mantissa bits zero.
    pub fn cvt_tf32(&mut self, a: Reg<F32>) -> Reg<B32> {
        self.need(80, 7, 0);
        let d = self.reg::<B32>();
        self.instr(format!("cvt.rna.tf32.f32 {d}, {a}"));
        d
    }

    /// `mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32`: `acc += A B` in place for the warp's
    /// 16 x 8 tile (`A` 16 x 8, `B` 8 x 8, f32 accumulation). Fragments (g = lane / 4,
    /// t = lane % 4): `a` = `A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]`; `b` = `B[t][g], B[t+4][g]`;
    /// `acc` = `C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1]`. Every lane of the warp executes it.
    pub fn mma_tf32_m16n8k8(&mut self, acc: [Reg<F32>; 4], a: [Reg<B32>; 4], b: [Reg<B32>; 2]) {
        self.need(80, 7, 0);
        let [c0, c1, c2, c3] = acc;
        let [a0, a1, a2, a3] = a;
        let [b0, b1] = b;
        self.instr(format!(
            "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {{{c0}, {c1}, {c2}, {c3}}}, \
             {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, {{{c0}, {c1}, {c2}, {c3}}}"
        ));
    }
}

impl KernelBuilder {
    /// `mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64`: `acc += A B` in place for the warp's
    /// 8 x 8 tile in f64 (`A` 8 x 4, `B` 4 x 8; the FP64 tensor cores of sm_80 and later).
    /// Fragments (g = lane / 4, t = lane % 4): `a` = `A[g][t]`; `b` = `B[t][g]`; `acc` =
    /// `C[g][2t], C[g][2t+1]`. Every lane of the warp executes it.
    pub fn mma_f64_m8n8k4(&mut self, acc: [Reg<F64>; 2], a: Reg<F64>, b: Reg<F64>) {
        self.need(80, 7, 0);
        let [c0, c1] = acc;
        self.instr(format!(
            "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {{{c0}, {c1}}}, {{{a}}}, {{{b}}}, \
             {{{c0}, {c1}}}"
        ));
    }
}

impl KernelBuilder {
    /// `mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64` (sm_90, PTX 7.8): `acc += A B` in
    /// place for the warp's 16 x 8 tile in f64 (`A` 16 x 4, `B` 4 x 8). Fragments (g = lane / 4,
    /// t = lane % 4): `a` = `A[g][t], A[g+8][t]`; `b` = `B[t][g]`; `acc` = `C[g][2t],
    /// C[g][2t+1], C[g+8][2t], C[g+8][2t+1]`. Every lane of the warp executes it.
    pub fn mma_f64_m16n8k4(&mut self, acc: [Reg<F64>; 4], a: [Reg<F64>; 2], b: Reg<F64>) {
        self.need(90, 7, 8);
        let [c0, c1, c2, c3] = acc;
        let [a0, a1] = a;
        self.instr(format!(
            "mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {{{c0}, {c1}, {c2}, {c3}}}, \
             {{{a0}, {a1}}}, {{{b}}}, {{{c0}, {c1}, {c2}, {c3}}}"
        ));
    }
}
