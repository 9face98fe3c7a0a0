//! The f64 kernel exponential e' = 2^-t from a table and a short polynomial (the kinds of
//! [`ExpF64`]; `super::exp::exp2_neg_f64` is the table-free one).
//!
//! # Method ([`ExpF64::Table`], 2^N entries, degree D)
//! Write t = k 2^-N + g with k = floor(2^N t) and g in [0, 2^-N), n = k >> N and j = k mod 2^N.
//! With the centred remainder f = g - 2^-(N+1) in [-2^-(N+1), 2^-(N+1)),
//!
//!   2^-t = 2^-n * T_j * 2^-f,  T_j = 2^-((2j + 1) / 2^(N+1)),
//!
//! T_j from a table of 2^N correctly rounded f64 values in shared memory ([`TABLE_512`]:
//! 2^-(i/512), generated with Python's `decimal` at 60 digits, each entry checked to be the
//! nearest f64; T_j is entry (2j + 1) 2^(8-N)) and 2^-f = 1 + f Q(f) with Q the degree D - 1
//! Taylor polynomial of (2^-f - 1) / f. The kernel forms e' = T' + (T' f) Q(f) with T' = T_j 2^-n
//! (n subtracted from T_j's exponent field).
//!
//! Range reduction on t's bits (`int_reduce`, no FP64 operation): t >= 0, so with E = t's biased
//! exponent, q = 1042 - N - E is the bit of the high word worth 2^-(N+1) (for 2^-N <= t <
//! 2^(20-N)); clearing the high word's bits below q, setting bit q and the whole low word to 0
//! gives kh = k 2^-N + 2^-(N+1) exactly, and k = (mantissa | 2^20) >> (q + 1) of the high word
//! (t < 2^-N: k = 0 as q + 1 > 20, and kh is selected as 2^-(N+1)). Then f =
//! t - kh is one exact subtraction (Sterbenz: kh / 2 <= t <= 2 kh; for t < 2^-(N+2) it rounds at
//! 2^-(N+54) absolute, a relative error of 2^-(N+54) ln 2 in e'). Without `int_reduce`, k and
//! f come from rounding 2^N t to an integer by adding 1.5 2^(52-N) (three FP64 additions; the
//! table then holds 2^-(j/2^N), f is centred by the rounding).
//!
//! # Error bound (t within the cutoff)
//! Relative to 2^-t, with u = 2^-53: T_j rounded, <= u; Taylor remainder of 2^-f at |f ln 2| <=
//! x = 2^-(N+1) ln 2, <= x^(D+1) / (D+1)! (N = 8, D = 4: 3.8e-17 = 0.34 u; N = 6, D = 5: 3.5e-17;
//! N = 4, D = 7: 1.2e-18); the product T' f and Q(f) rounded, each <= u relative on a term of at
//! most x = 1.4e-3 (N = 8) of e', so <= 2 x u; the final multiply-add rounded, <= u. In all,
//! |e' / 2^-t - 1| <= 2.4 u = 2.7e-16 for N = 8 (against 2e-15 of the degree-10 polynomial).
//! 2^-n keeps T' normal: within the cutoff n <= 1021 and T_j > 1/2. Beyond [`F64_CUT_T`] (inf
//! and NaN included: their bits compare higher) e' is 0 by a final select; the table index is
//! masked to [0, 2^N) for every t, so any input stays in bounds.
//!
//! # Cost per exponential
//! FP64 operations: 1 subtraction, D - 1 multiply-adds for Q, 1 product, 1 multiply-add (D + 2;
//! D + 4 without `int_reduce`), against 13 for `exp2_neg_f64`; one 8-byte shared load.
//!
//! # Table fill
//! [`Exp2::setup`] declares the table `exp2_table` (2^N f64, 16-byte aligned) and has thread 0
//! of the block store it from immediates; the kernel's next barrier (the forward's tile barrier,
//! the backward's warp sync after staging) orders the stores before the first read.

use super::common::KFloat;
use super::exp::F64_CUT_T;
use super::exp_table::TABLE_512;
use crate::ptx::*;

/// The f64 exponential of a kernel (f32 kernels ignore it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExpF64 {
    /// `super::exp::exp2_neg_f64`: degree-10 polynomial on [-1/2, 1/2] (13 FP64 operations).
    #[default]
    Poly10,
    /// 2^`bits` table entries times a degree-`degree` polynomial (module docs).
    Table {
        /// N: log2 of the table length (4..=8).
        bits: u32,
        /// D: the polynomial's degree.
        degree: u32,
        /// Range reduction on integer bits (else three FP64 additions).
        int_reduce: bool,
    },
}

impl ExpF64 {
    /// The kinds by number (variant names `e<code>`): 0 [`ExpF64::Poly10`]; 1..=3 N = 8, 6, 4
    /// with D = 4, 5, 7 and integer range reduction; 4, 5 N = 8, 6 with FP64 rounding.
    pub fn from_code(code: u32) -> Option<Self> {
        let t = |bits, degree, int_reduce| ExpF64::Table {
            bits,
            degree,
            int_reduce,
        };
        Some(match code {
            0 => ExpF64::Poly10,
            1 => t(8, 4, true),
            2 => t(6, 5, true),
            3 => t(4, 7, true),
            4 => t(8, 4, false),
            5 => t(6, 5, false),
            _ => return None,
        })
    }
}

/// What a kernel's exponentials read: nothing, or the f64 table's shared-window address.
#[derive(Clone, Copy)]
pub struct Exp2 {
    kind: ExpF64,
    base: Option<Reg<U32>>,
}

impl Exp2 {
    /// The exponential of `kind` for a kernel of type `T`: for f64 table kinds declares the
    /// table and stores it from thread `tid` == 0 (module docs); nothing otherwise.
    pub fn setup<T: KFloat>(b: &mut KernelBuilder, kind: ExpF64, tid: Reg<U32>) -> Self {
        let base = match kind {
            ExpF64::Table {
                bits, int_reduce, ..
            } if T::BYTES == 8 => {
                let entries = table_entries(bits, int_reduce);
                let tab = b.shared_array::<F64>("exp2_table", entries.len() as u32);
                let base = b.shared_base(&tab);
                let first = b.setp(Cmp::Eq, tid, 0u32);
                b.if_then(first, |b| {
                    for (j, v) in entries.iter().enumerate() {
                        let r = b.mov(f64::from_bits(*v));
                        b.st(Space::Shared, Addr::from(base).off(8 * j as i64), r);
                    }
                });
                Some(base)
            }
            _ => None,
        };
        Exp2 { kind, base }
    }

    /// The kind.
    pub fn kind(&self) -> ExpF64 {
        self.kind
    }

    /// e' = 2^-t (0 beyond the type's cutoff).
    pub fn eval<T: KFloat>(&self, b: &mut KernelBuilder, t: Reg<T>) -> Reg<T> {
        T::exp2_neg_in(b, t, self)
    }

    /// The f64 exponential of this kind.
    pub fn eval_f64(&self, b: &mut KernelBuilder, t: Reg<F64>) -> Reg<F64> {
        match (self.kind, self.base) {
            (
                ExpF64::Table {
                    bits,
                    degree,
                    int_reduce,
                },
                Some(base),
            ) => exp2_neg_f64_table(b, t, base, bits, degree, int_reduce),
            _ => super::exp::exp2_neg_f64(b, t),
        }
    }
}

/// The table's entries (bit patterns): T_j = 2^-((2j + 1) / 2^(N+1)) with integer range
/// reduction, 2^-(j / 2^N) without.
pub fn table_entries(bits: u32, int_reduce: bool) -> Vec<u64> {
    assert!((1..=8).contains(&bits), "table bits {bits} outside 1..=8");
    (0..1usize << bits)
        .map(|j| {
            let i = if int_reduce {
                (2 * j + 1) << (8 - bits)
            } else {
                j << (9 - bits)
            };
            TABLE_512[i]
        })
        .collect()
}

/// Coefficients c_1..c_D of Q(f) = sum c_k f^(k-1), c_k = (-ln 2)^k / k! (Taylor).
pub fn poly_coefficients(degree: u32) -> Vec<f64> {
    let mut c = Vec::new();
    let mut term = 1.0f64;
    for k in 1..=degree {
        term *= -std::f64::consts::LN_2 / f64::from(k);
        c.push(term);
    }
    c
}

/// 2^-t for t >= 0 by the table at shared address `base` (module docs), 0 beyond [`F64_CUT_T`].
pub fn exp2_neg_f64_table(
    b: &mut KernelBuilder,
    t: Reg<F64>,
    base: Reg<U32>,
    bits: u32,
    degree: u32,
    int_reduce: bool,
) -> Reg<F64> {
    let (f, k) = if int_reduce {
        let (_, th) = b.unpack64(t);
        let e = b.shr(th, 20u32);
        let q = b.sub(1042 - bits, e);
        let q1 = b.sub(1043 - bits, e);
        let a = b.shr(th, q);
        let a = b.or(a, 1u32);
        let kh = b.shl(a, q);
        // t < 2^-N: k = 0 and kh = 2^-(N+1) (the shifts above left exponent bits in kh).
        let small = b.setp(Cmp::Lt, th, (1023 - bits) << 20);
        let kh = b.selp((1022 - bits) << 20, kh, small);
        let zero = b.mov(0u32);
        let khf = b.pack64::<F64>(zero, kh);
        let f = b.sub(t, khf);
        let m = b.and(th, 0x000F_FFFFu32);
        let m = b.or(m, 0x0010_0000u32);
        (f, b.shr(m, q1))
    } else {
        let shift = 1.5 * ((52 - bits) as f64).exp2();
        let m = b.add(t, shift);
        let kf = b.sub(m, shift);
        let f = b.sub(t, kf);
        let (k, _) = b.unpack64(m);
        (f, k)
    };
    let j = b.and(k, (1u32 << bits) - 1);
    let n = b.shr(k, bits);
    let at = b.mad(j, 8u32, base);
    let tab = b.ld::<F64>(Space::Shared, Addr::from(at));
    let (t_lo, t_hi) = b.unpack64(tab);
    let s_hi = b.mad(n, (-(1i64 << 20)) as u32, t_hi);
    let ts = b.pack64::<F64>(t_lo, s_hi);
    let c = poly_coefficients(degree);
    let mut q = b.mov(c[c.len() - 1]);
    for &ck in c[..c.len() - 1].iter().rev() {
        q = b.fma(q, f, ck);
    }
    let tf = b.mul(ts, f);
    let e = b.fma(tf, q, ts);
    let (e_lo, e_hi) = b.unpack64(e);
    let t_bits = b.bitcast::<U64, F64>(t);
    let far = b.setp(Cmp::Gt, t_bits, F64_CUT_T.to_bits());
    let e_hi = b.selp(0u32, e_hi, far);
    let e_lo = b.selp(0u32, e_lo, far);
    b.pack64::<F64>(e_lo, e_hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_exp2_within_an_ulp() {
        for (i, &bits) in TABLE_512.iter().enumerate() {
            let v = f64::from_bits(bits);
            let r = (-(i as f64) / 512.0).exp2();
            assert!(
                (v - r).abs() <= r * f64::EPSILON,
                "entry {i}: {v:e} vs {r:e}"
            );
        }
    }
}
