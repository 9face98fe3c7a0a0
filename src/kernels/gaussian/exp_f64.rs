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

/// 2^-(i / 512) for i in 0..512, each the f64 nearest to the value at 60 digits.
pub const TABLE_512: [u64; 512] = [
    0x3FF0_0000_0000_0000,
    0x3FEF_F4EA_CA43_91B6,
    0x3FEF_E9D9_6B2A_23D9,
    0x3FEF_DECB_E15F_6314,
    0x3FEF_D3C2_2B8F_71F1,
    0x3FEF_C8BC_4866_E8AD,
    0x3FEF_BDBA_3692_D514,
    0x3FEF_B2BB_F4C0_BA54,
    0x3FEF_A7C1_819E_90D8,
    0x3FEF_9CCA_DBDA_C61D,
    0x3FEF_91D8_0224_3C89,
    0x3FEF_86E8_F32A_4B45,
    0x3FEF_7BFD_AD9C_BE14,
    0x3FEF_7116_302B_D526,
    0x3FEF_6632_7988_44F8,
    0x3FEF_5B52_8863_3625,
    0x3FEF_5076_5B6E_4540,
    0x3FEF_459D_F15B_82AC,
    0x3FEF_3AC9_48DD_7274,
    0x3FEF_2FF8_60A7_0C22,
    0x3FEF_252B_376B_BA97,
    0x3FEF_1A61_CBDF_5BE7,
    0x3FEF_0F9C_1CB6_412A,
    0x3FEF_04DA_28A5_2E59,
    0x3FEE_FA1B_EE61_5A27,
    0x3FEE_EF61_6CA0_6DD6,
    0x3FEE_E4AA_A218_8510,
    0x3FEE_D9F7_8D80_2DC2,
    0x3FEE_CF48_2D8E_67F1,
    0x3FEE_C49C_80FA_A594,
    0x3FEE_B9F4_867C_CA6E,
    0x3FEE_AF50_3CCD_2BE5,
    0x3FEE_A4AF_A2A4_90DA,
    0x3FEE_9A12_B6BC_3181,
    0x3FEE_8F79_77CD_B740,
    0x3FEE_84E3_E493_3C7E,
    0x3FEE_7A51_FBC7_4C83,
    0x3FEE_6FC3_BC24_E350,
    0x3FEE_6539_2467_6D76,
    0x3FEE_5AB2_334A_C7EE,
    0x3FEE_502E_E78B_3FF6,
    0x3FEE_45AF_3FE5_92E8,
    0x3FEE_3B33_3B16_EE12,
    0x3FEE_30BA_D7DC_EE90,
    0x3FEE_2646_14F5_A129,
    0x3FEE_1BD4_F11F_8220,
    0x3FEE_1167_6B19_7D17,
    0x3FEE_06FD_81A2_ECE1,
    0x3FED_FC97_337B_9B5F,
    0x3FED_F234_7F63_C159,
    0x3FED_E7D5_641C_0658,
    0x3FED_DD79_E065_807D,
    0x3FED_D321_F301_B460,
    0x3FED_C8CD_9AB2_94E4,
    0x3FED_BE7C_D63A_8315,
    0x3FED_B42F_A45C_4DFD,
    0x3FED_A9E6_03DB_3285,
    0x3FED_9F9F_F37A_DB4A,
    0x3FED_955D_71FF_6075,
    0x3FED_8B1E_7E2D_479D,
    0x3FED_80E3_16C9_8398,
    0x3FED_76AB_3A99_745B,
    0x3FED_6C76_E862_E6D3,
    0x3FED_6246_1EEC_14BE,
    0x3FED_5818_DCFB_A487,
    0x3FED_4DEF_2158_A91F,
    0x3FED_43C8_EACA_A1D6,
    0x3FED_39A6_3819_7A3C,
    0x3FED_2F87_080D_89F2,
    0x3FED_256B_596F_948C,
    0x3FED_1B53_2B08_C968,
    0x3FED_113E_7BA2_C38C,
    0x3FED_072D_4A07_897C,
    0x3FEC_FD1F_9501_8D17,
    0x3FEC_F315_5B5B_AB74,
    0x3FEC_E90E_9BE1_2CB9,
    0x3FEC_DF0B_555D_C3FA,
    0x3FEC_D50B_869D_8F0F,
    0x3FEC_CB0F_2E6D_1675,
    0x3FEC_C116_4B99_4D23,
    0x3FEC_B720_DCEF_9069,
    0x3FEC_AD2E_E13D_A7CB,
    0x3FEC_A340_5751_C4DB,
    0x3FEC_9955_3DFA_8313,
    0x3FEC_8F6D_9406_E7B5,
    0x3FEC_8589_5846_61A1,
    0x3FEC_7BA8_8988_C933,
    0x3FEC_71CB_269E_601F,
    0x3FEC_67F1_2E57_D14B,
    0x3FEC_5E1A_9F86_30AD,
    0x3FEC_5447_78FA_FB22,
    0x3FEC_4A77_B988_1650,
    0x3FEC_40AB_5FFF_D07A,
    0x3FEC_36E2_6B34_E065,
    0x3FEC_2D1C_D9FA_652C,
    0x3FEC_235A_AB23_E61E,
    0x3FEC_199B_DD85_529C,
    0x3FEC_0FE0_6FF3_01F4,
    0x3FEC_0628_6141_B33D,
    0x3FEB_FC73_B046_8D30,
    0x3FEB_F2C2_5BD7_1E09,
    0x3FEB_E914_62C9_5B60,
    0x3FEB_DF69_C3F3_A207,
    0x3FEB_D5C2_7E2C_B5E5,
    0x3FEB_CC1E_904B_C1D2,
    0x3FEB_C27D_F928_5775,
    0x3FEB_B8E0_B79A_6F1F,
    0x3FEB_AF46_CA7A_67A7,
    0x3FEB_A5B0_30A1_064A,
    0x3FEB_9C1C_E8E7_7680,
    0x3FEB_928C_F227_49E4,
    0x3FEB_8900_4B3A_7804,
    0x3FEB_7F76_F2FB_5E47,
    0x3FEB_75F0_E844_BFC6,
    0x3FEB_6C6E_29F1_C52A,
    0x3FEB_62EE_B6DD_FC87,
    0x3FEB_5972_8DE5_593A,
    0x3FEB_4FF9_ADE4_33C6,
    0x3FEB_4684_15B7_49B1,
    0x3FEB_3D11_C43B_BD62,
    0x3FEB_33A2_B84F_15FB,
    0x3FEB_2A36_F0CF_3F3A,
    0x3FEB_20CE_6C9A_8952,
    0x3FEB_1769_2A8F_A8CD,
    0x3FEB_0E07_298D_B666,
    0x3FEB_04A8_6874_2EE4,
    0x3FEA_FB4C_E622_F2FF,
    0x3FEA_F1F4_A17A_4735,
    0x3FEA_E89F_995A_D3AD,
    0x3FEA_DF4D_CCA5_A413,
    0x3FEA_D5FF_3A3C_2774,
    0x3FEA_CCB3_E100_301E,
    0x3FEA_C36B_BFD3_F37A,
    0x3FEA_BA26_D59A_09EE,
    0x3FEA_B0E5_2135_6EBA,
    0x3FEA_A7A6_A189_7FD2,
    0x3FEA_9E6B_5579_FDBF,
    0x3FEA_9533_3BEB_0B7E,
    0x3FEA_8BFE_53C1_2E59,
    0x3FEA_82CC_9BE1_4DCA,
    0x3FEA_799E_1330_B358,
    0x3FEA_7072_B895_0A73,
    0x3FEA_674A_8AF4_6052,
    0x3FEA_5E25_8935_23D4,
    0x3FEA_5503_B23E_255D,
    0x3FEA_4BE5_04F6_96B1,
    0x3FEA_42C9_8046_0AD8,
    0x3FEA_39B1_2314_75F7,
    0x3FEA_309B_EC4A_2D33,
    0x3FEA_2789_DACF_E68C,
    0x3FEA_1E7A_ED8E_B8BB,
    0x3FEA_156F_2370_1B15,
    0x3FEA_0C66_7B5D_E565,
    0x3FEA_0360_F442_4FCB,
    0x3FE9_FA5E_8D07_F29E,
    0x3FE9_F15F_4499_C647,
    0x3FE9_E863_19E3_2323,
    0x3FE9_DF6A_0BCF_C15E,
    0x3FE9_D674_194B_B8D5,
    0x3FE9_CD81_4143_80F2,
    0x3FE9_C491_82A3_F090,
    0x3FE9_BBA4_DC5A_3DD3,
    0x3FE9_B2BB_4D53_FE0D,
    0x3FE9_A9D4_D47F_2598,
    0x3FE9_A0F1_70CA_07BA,
    0x3FE9_9811_2123_5681,
    0x3FE9_8F33_E47A_22A2,
    0x3FE9_8659_B9BD_DB5B,
    0x3FE9_7D82_9FDE_4E50,
    0x3FE9_74AE_95CB_A768,
    0x3FE9_6BDD_9A76_70B3,
    0x3FE9_630F_ACCF_9243,
    0x3FE9_5A44_CBC8_520F,
    0x3FE9_517C_F652_53D1,
    0x3FE9_48B8_2B5F_98E5,
    0x3FE9_3FF6_69E2_802B,
    0x3FE9_3737_B0CD_C5E5,
    0x3FE9_2E7B_FF14_8396,
    0x3FE9_25C3_53AA_2FE2,
    0x3FE9_1D0D_AD82_9E70,
    0x3FE9_145B_0B91_FFC6,
    0x3FE9_0BAB_6CCC_E12C,
    0x3FE9_02FE_D028_2C8A,
    0x3FE8_FA55_3499_284B,
    0x3FE8_F1AE_9915_7736,
    0x3FE8_E90A_FC93_1857,
    0x3FE8_E06A_5E08_66D9,
    0x3FE8_D7CC_BC6C_19E6,
    0x3FE8_CF32_16B5_448C,
    0x3FE8_C69A_6BDB_5598,
    0x3FE8_BE05_BAD6_1778,
    0x3FE8_B574_029D_B01E,
    0x3FE8_ACE5_422A_A0DB,
    0x3FE8_A459_7875_C644,
    0x3FE8_9BD0_A478_580F,
    0x3FE8_934A_C52B_E8F7,
    0x3FE8_8AC7_D98A_6699,
    0x3FE8_8247_E08E_1957,
    0x3FE8_79CA_D931_A436,
    0x3FE8_7150_C270_04C2,
    0x3FE8_68D9_9B44_92ED,
    0x3FE8_6065_62AB_00EC,
    0x3FE8_57F4_179F_5B21,
    0x3FE8_4F85_B91E_07F1,
    0x3FE8_471A_4623_C7AD,
    0x3FE8_3EB1_BDAD_B46D,
    0x3FE8_364C_1EB9_41F7,
    0x3FE8_2DE9_6844_3D9A,
    0x3FE8_2589_994C_CE13,
    0x3FE8_1D2C_B0D1_736A,
    0x3FE8_14D2_ADD1_06D9,
    0x3FE8_0C7B_8F4A_BAA9,
    0x3FE8_0427_543E_1A12,
    0x3FE7_FBD5_FBAB_091F,
    0x3FE7_F387_8491_C491,
    0x3FE7_EB3B_EDF2_E1B9,
    0x3FE7_E2F3_36CF_4E62,
    0x3FE7_DAAD_5E28_50AC,
    0x3FE7_D26A_62FF_86F0,
    0x3FE7_CA2A_4456_E7A3,
    0x3FE7_C1ED_0130_C132,
    0x3FE7_B9B2_988F_B9EC,
    0x3FE7_B17B_0976_CFDB,
    0x3FE7_A946_52E9_58AA,
    0x3FE7_A114_73EB_0187,
    0x3FE7_98E5_6B7F_CF03,
    0x3FE7_90B9_38AC_1CF6,
    0x3FE7_888F_DA74_9E5D,
    0x3FE7_8069_4FDE_5D3F,
    0x3FE7_7845_97EE_BA8F,
    0x3FE7_7024_B1AB_6E09,
    0x3FE7_6806_9C1A_861D,
    0x3FE7_5FEB_5642_67C9,
    0x3FE7_57D2_DF29_CE7C,
    0x3FE7_4FBD_35D7_CBFD,
    0x3FE7_47AA_5953_C849,
    0x3FE7_3F9A_48A5_8174,
    0x3FE7_378D_02D5_0B8F,
    0x3FE7_2F82_86EA_D08A,
    0x3FE7_277A_D3EF_9011,
    0x3FE7_1F75_E8EC_5F74,
    0x3FE7_1773_C4EA_A988,
    0x3FE7_0F74_66F4_2E87,
    0x3FE7_0777_CE13_03F6,
    0x3FE6_FF7D_F951_9484,
    0x3FE6_F786_E7BA_9FEF,
    0x3FE6_EF92_9859_3AE5,
    0x3FE6_E7A1_0A38_CEE8,
    0x3FE6_DFB2_3C65_1A2F,
    0x3FE6_D7C6_2DEA_2F8A,
    0x3FE6_CFDC_DDD4_7645,
    0x3FE6_C7F6_4B30_AA09,
    0x3FE6_C012_750B_DABF,
    0x3FE6_B831_5A73_6C75,
    0x3FE6_B052_FA75_173E,
    0x3FE6_A877_541E_E718,
    0x3FE6_A09E_667F_3BCD,
    0x3FE6_98C8_30A4_C8D4,
    0x3FE6_90F4_B19E_9538,
    0x3FE6_8923_E87B_FB7A,
    0x3FE6_8155_D44C_A973,
    0x3FE6_798A_7420_A036,
    0x3FE6_71C1_C708_33F6,
    0x3FE6_69FB_CC14_0BE7,
    0x3FE6_6238_8255_2225,
    0x3FE6_5A77_E8DC_C390,
    0x3FE6_52B9_FEBC_8FB7,
    0x3FE6_4AFE_C306_78B7,
    0x3FE6_4346_34CC_C320,
    0x3FE6_3B90_5322_05D8,
    0x3FE6_33DD_1D19_29FD,
    0x3FE6_2C2C_91C5_6ACD,
    0x3FE6_247E_B03A_5585,
    0x3FE6_1CD3_778B_C944,
    0x3FE6_152A_E6CD_F6F4,
    0x3FE6_0D84_FD15_612A,
    0x3FE6_05E1_B976_DC09,
    0x3FE5_FE41_1B07_8D26,
    0x3FE5_F6A3_20DC_EB71,
    0x3FE5_EF07_CA0C_BF0F,
    0x3FE5_E76F_15AD_2148,
    0x3FE5_DFD9_02D4_7C65,
    0x3FE5_D845_9099_8B93,
    0x3FE5_D0B4_BE13_5ACC,
    0x3FE5_C926_8A59_46B7,
    0x3FE5_C19A_F482_FC8F,
    0x3FE5_BA11_FBA8_7A03,
    0x3FE5_B28B_9EE2_0D1E,
    0x3FE5_AB07_DD48_5429,
    0x3FE5_A386_B5F4_3D92,
    0x3FE5_9C08_27FF_07CC,
    0x3FE5_948C_3282_4135,
    0x3FE5_8D12_D497_C7FD,
    0x3FE5_859C_0D59_CA07,
    0x3FE5_7E27_DBE2_C4CF,
    0x3FE5_76B6_3F4D_854C,
    0x3FE5_6F47_36B5_27DA,
    0x3FE5_67DA_C135_1819,
    0x3FE5_6070_DDE9_10D2,
    0x3FE5_5909_8BED_1BDF,
    0x3FE5_51A4_CA5D_920F,
    0x3FE5_4A42_9857_1B06,
    0x3FE5_42E2_F4F6_AD27,
    0x3FE5_3B85_DF59_8D78,
    0x3FE5_342B_569D_4F82,
    0x3FE5_2CD3_59DF_D53D,
    0x3FE5_257D_E83F_4EEF,
    0x3FE5_1E2B_00DA_3B14,
    0x3FE5_16DA_A2CF_6642,
    0x3FE5_0F8C_CD3D_EB0D,
    0x3FE5_0841_7F45_31EE,
    0x3FE5_00F8_B804_F127,
    0x3FE4_F9B2_769D_2CA7,
    0x3FE4_F26E_BA2E_35F0,
    0x3FE4_EB2D_81D8_ABFF,
    0x3FE4_E3EE_CCBD_7B2A,
    0x3FE4_DCB2_99FD_DD0D,
    0x3FE4_D578_E8BB_586B,
    0x3FE4_CE41_B817_C114,
    0x3FE4_C70D_0735_37CA,
    0x3FE4_BFDA_D536_2A27,
    0x3FE4_B8AB_213D_5283,
    0x3FE4_B17D_EA6D_B7D7,
    0x3FE4_AA53_2FEA_ADA6,
    0x3FE4_A32A_F0D7_D3DE,
    0x3FE4_9C05_2C59_16C4,
    0x3FE4_94E1_E192_AED2,
    0x3FE4_8DC1_0FA9_20A1,
    0x3FE4_86A2_B5C1_3CD0,
    0x3FE4_7F86_D300_1FE5,
    0x3FE4_786D_668B_3237,
    0x3FE4_7156_6F88_27D0,
    0x3FE4_6A41_ED1D_0057,
    0x3FE4_632F_DE70_06F4,
    0x3FE4_5C20_42A7_D232,
    0x3FE4_5513_18EB_43EC,
    0x3FE4_4E08_6061_892D,
    0x3FE4_4700_1832_1A1A,
    0x3FE4_3FFA_3F84_B9D4,
    0x3FE4_38F6_D581_7663,
    0x3FE4_31F5_D950_A897,
    0x3FE4_2AF7_4A1A_F3F1,
    0x3FE4_23FB_2709_468A,
    0x3FE4_1D01_6F44_D8F5,
    0x3FE4_160A_21F7_2E2A,
    0x3FE4_0F15_3E4A_136A,
    0x3FE4_0822_C367_A024,
    0x3FE4_0132_B07A_35DF,
    0x3FE3_FA45_04AC_801C,
    0x3FE3_F359_BF29_743F,
    0x3FE3_EC70_DF1C_5175,
    0x3FE3_E58A_63B0_A09B,
    0x3FE3_DEA6_4C12_3422,
    0x3FE3_D7C4_976D_27FA,
    0x3FE3_D0E5_44ED_E173,
    0x3FE3_CA08_53C1_0F28,
    0x3FE3_C32D_C313_A8E5,
    0x3FE3_BC55_9212_EF89,
    0x3FE3_B57F_BFEC_6CF4,
    0x3FE3_AEAC_4BCD_F3EA,
    0x3FE3_A7DB_34E5_9FF7,
    0x3FE3_A10C_7A61_D55B,
    0x3FE3_9A40_1B71_40EF,
    0x3FE3_9376_1742_D808,
    0x3FE3_8CAE_6D05_D866,
    0x3FE3_85E9_1BE9_C811,
    0x3FE3_7F26_231E_754A,
    0x3FE3_7865_81D3_F669,
    0x3FE3_71A7_373A_A9CB,
    0x3FE3_6AEB_4283_35B4,
    0x3FE3_6431_A2DE_883B,
    0x3FE3_5D7A_577D_D72B,
    0x3FE3_56C5_5F92_9FF1,
    0x3FE3_5012_BA4E_A77D,
    0x3FE3_4962_66E3_FA2D,
    0x3FE3_42B4_6484_EBB4,
    0x3FE3_3C08_B264_16FF,
    0x3FE3_355F_4FB4_5E20,
    0x3FE3_2EB8_3BA8_EA32,
    0x3FE3_2813_7575_2B40,
    0x3FE3_2170_FC4C_D831,
    0x3FE3_1AD0_CF63_EEAC,
    0x3FE3_1432_EDEE_B2FD,
    0x3FE3_0D97_5721_B004,
    0x3FE3_06FE_0A31_B715,
    0x3FE3_0067_0653_DFE4,
    0x3FE2_F9D2_4ABD_886B,
    0x3FE2_F33F_D6A4_54D2,
    0x3FE2_ECAF_A93E_2F56,
    0x3FE2_E621_C1C1_4833,
    0x3FE2_DF96_1F64_1589,
    0x3FE2_D90C_C15D_5346,
    0x3FE2_D285_A6E4_030B,
    0x3FE2_CC00_CF2F_6C18,
    0x3FE2_C57E_3977_1B2F,
    0x3FE2_BEFD_E4F2_E280,
    0x3FE2_B87F_D0DA_D990,
    0x3FE2_B203_FC67_5D1F,
    0x3FE2_AB8A_66D1_0F13,
    0x3FE2_A513_0F50_D65C,
    0x3FE2_9E9D_F51F_DEE1,
    0x3FE2_982B_1777_9965,
    0x3FE2_91BA_7591_BB70,
    0x3FE2_8B4C_0EA8_3F36,
    0x3FE2_84DF_E1F5_6381,
    0x3FE2_7E75_EEB3_AB98,
    0x3FE2_780E_341D_DF29,
    0x3FE2_71A8_B16F_0A30,
    0x3FE2_6B45_65E2_7CDD,
    0x3FE2_64E4_50B3_CB82,
    0x3FE2_5E85_711E_CE75,
    0x3FE2_5828_C65F_A1FF,
    0x3FE2_51CE_4FB2_A63F,
    0x3FE2_4B76_0C54_7F15,
    0x3FE2_451F_FB82_140A,
    0x3FE2_3ECC_1C78_903A,
    0x3FE2_387A_6E75_6238,
    0x3FE2_322A_F0B6_3BFF,
    0x3FE2_2BDD_A279_12D1,
    0x3FE2_2592_82FC_1F27,
    0x3FE2_1F49_917D_DC96,
    0x3FE2_1902_CD3D_09B9,
    0x3FE2_12BE_3578_A819,
    0x3FE2_0C7B_C96F_FC18,
    0x3FE2_063B_8862_8CD6,
    0x3FE1_FFFD_7190_241E,
    0x3FE1_F9C1_8438_CE4D,
    0x3FE1_F387_BF9C_DA38,
    0x3FE1_ED50_22FC_D91D,
    0x3FE1_E71A_AD99_9E82,
    0x3FE1_E0E7_5EB4_4027,
    0x3FE1_DAB6_358E_15E8,
    0x3FE1_D487_3168_B9AA,
    0x3FE1_CE5A_5186_0746,
    0x3FE1_C82F_9528_1C6B,
    0x3FE1_C206_FB91_588F,
    0x3FE1_BBE0_8404_5CD4,
    0x3FE1_B5BC_2DC4_0BF0,
    0x3FE1_AF99_F813_8A1C,
    0x3FE1_A979_E236_3CF8,
    0x3FE1_A35B_EB6F_CB75,
    0x3FE1_9D40_1304_1DC2,
    0x3FE1_9726_5837_5D2F,
    0x3FE1_910E_BA4D_F41F,
    0x3FE1_8AF9_388C_8DEA,
    0x3FE1_84E5_D238_16C9,
    0x3FE1_7ED4_8695_BBC0,
    0x3FE1_78C5_54EA_EA89,
    0x3FE1_72B8_3C7D_517B,
    0x3FE1_6CAD_3C92_DF73,
    0x3FE1_66A4_5471_C3C2,
    0x3FE1_609D_8360_6E12,
    0x3FE1_5A98_C8A5_8E51,
    0x3FE1_5496_2388_149E,
    0x3FE1_4E95_934F_312E,
    0x3FE1_4897_1742_5438,
    0x3FE1_429A_AEA9_2DE0,
    0x3FE1_3CA0_58CB_AE1E,
    0x3FE1_36A8_14F2_04AB,
    0x3FE1_30B1_E264_A0E9,
    0x3FE1_2ABD_C06C_31CC,
    0x3FE1_24CB_AE51_A5C8,
    0x3FE1_1EDB_AB5E_2AB6,
    0x3FE1_18ED_B6DB_2DC1,
    0x3FE1_1301_D012_5B51,
    0x3FE1_0D17_F64D_9EF1,
    0x3FE1_0730_28D7_233E,
    0x3FE1_014A_66F9_51CE,
    0x3FE0_FB66_AFFE_D31B,
    0x3FE0_F585_0332_8E6D,
    0x3FE0_EFA5_5FDF_A9C5,
    0x3FE0_E9C7_C551_89C6,
    0x3FE0_E3EC_32D3_D1A2,
    0x3FE0_DE12_A7B2_6300,
    0x3FE0_D83B_2339_5DEC,
    0x3FE0_D265_A4B5_20BA,
    0x3FE0_CC92_2B72_47F7,
    0x3FE0_C6C0_B6BD_AE53,
    0x3FE0_C0F1_45E4_6C85,
    0x3FE0_BB23_D833_D93F,
    0x3FE0_B558_6CF9_890F,
    0x3FE0_AF8F_0383_4E52,
    0x3FE0_A9C7_9B1F_3919,
    0x3FE0_A402_331B_9715,
    0x3FE0_9E3E_CAC6_F383,
    0x3FE0_987D_6170_1716,
    0x3FE0_92BD_F666_07E0,
    0x3FE0_8D00_88F8_093F,
    0x3FE0_8745_1875_9BC8,
    0x3FE0_818B_A42E_7D30,
    0x3FE0_7BD4_2B72_A836,
    0x3FE0_761E_AD92_5493,
    0x3FE0_706B_29DD_F6DE,
    0x3FE0_6AB9_9FA6_407C,
    0x3FE0_650A_0E3C_1F89,
    0x3FE0_5F5C_74F0_BEC2,
    0x3FE0_59B0_D315_8574,
    0x3FE0_5407_27FC_1762,
    0x3FE0_4E5F_72F6_54B1,
    0x3FE0_48B9_B356_59D8,
    0x3FE0_4315_E86E_7F85,
    0x3FE0_3D74_1191_5A8A,
    0x3FE0_37D4_2E11_BBCC,
    0x3FE0_3236_3D42_B027,
    0x3FE0_2C9A_3E77_8061,
    0x3FE0_2700_3103_B10E,
    0x3FE0_2168_143B_0281,
    0x3FE0_1BD1_E771_70B4,
    0x3FE0_163D_A9FB_3335,
    0x3FE0_10AB_5B2C_BD11,
    0x3FE0_0B1A_FA5A_BCBF,
    0x3FE0_058C_86DA_1C0A,
];

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
