//! Per-lane instruction semantics: integer and float arithmetic, comparisons, conversions.

use super::parse::{Cmp, Kind, Op, Round, Ty};

pub(crate) fn mask(bits: u32, v: u64) -> u64 {
    if bits >= 64 {
        v
    } else {
        v & ((1u64 << bits) - 1)
    }
}

pub(crate) fn sext(bits: u32, v: u64) -> i64 {
    if bits >= 64 {
        v as i64
    } else {
        let s = 64 - bits;
        ((v << s) as i64) >> s
    }
}

fn f_in(bits: u32, v: u64) -> f64 {
    if bits == 32 {
        f64::from(f32::from_bits(v as u32))
    } else {
        f64::from_bits(v)
    }
}

fn f_out(bits: u32, x: f64) -> u64 {
    if bits == 32 {
        u64::from((x as f32).to_bits())
    } else {
        x.to_bits()
    }
}

/// Float ops in the instruction's own precision (f32 arithmetic rounds like the GPU's `.rn`).
fn float(op: &Op, bits: u32, s: &[u64]) -> Result<u64, String> {
    if bits == 32 {
        let a: Vec<f32> = s.iter().map(|&v| f32::from_bits(v as u32)).collect();
        let r = match op {
            Op::Add => a[0] + a[1],
            Op::Sub => a[0] - a[1],
            Op::MulLo => a[0] * a[1],
            Op::Fma => a[0].mul_add(a[1], a[2]),
            Op::Div => a[0] / a[1],
            Op::Min => a[0].min(a[1]),
            Op::Max => a[0].max(a[1]),
            Op::Neg => -a[0],
            Op::Abs => a[0].abs(),
            Op::Rcp => 1.0 / a[0],
            Op::Sqrt => a[0].sqrt(),
            Op::Rsqrt => 1.0 / a[0].sqrt(),
            Op::Ex2 => a[0].exp2(),
            Op::Lg2 => a[0].log2(),
            Op::Sin => a[0].sin(),
            Op::Cos => a[0].cos(),
            _ => return Err(format!("{op:?} is not modelled on f32")),
        };
        return Ok(u64::from(r.to_bits()));
    }
    let a: Vec<f64> = s.iter().map(|&v| f64::from_bits(v)).collect();
    let r = match op {
        Op::Add => a[0] + a[1],
        Op::Sub => a[0] - a[1],
        Op::MulLo => a[0] * a[1],
        Op::Fma => a[0].mul_add(a[1], a[2]),
        Op::Div => a[0] / a[1],
        Op::Min => a[0].min(a[1]),
        Op::Max => a[0].max(a[1]),
        Op::Neg => -a[0],
        Op::Abs => a[0].abs(),
        Op::Rcp => 1.0 / a[0],
        Op::Sqrt => a[0].sqrt(),
        Op::Rsqrt => 1.0 / a[0].sqrt(),
        _ => return Err(format!("{op:?} is not modelled on f64")),
    };
    Ok(r.to_bits())
}

pub(crate) fn alu(op: &Op, ty: Ty, s: &[u64]) -> Result<u64, String> {
    let bits = ty.bits;
    let m = |v: u64| mask(bits, v);
    let signed = ty.kind == Kind::S;
    let need = |n: usize| -> Result<(), String> {
        if s.len() < n {
            Err("missing operands".into())
        } else {
            Ok(())
        }
    };
    match op {
        Op::Setp(cmp) => {
            need(2)?;
            return Ok(u64::from(compare(*cmp, ty, s[0], s[1])));
        }
        Op::Selp => {
            need(3)?;
            return Ok(if s[2] != 0 { s[0] } else { s[1] });
        }
        Op::Cvt {
            from,
            round,
            int_round,
        } => {
            need(1)?;
            return convert(ty, *from, *round, *int_round, s[0]);
        }
        Op::Mov | Op::Cvta => {
            need(1)?;
            return Ok(m(s[0]));
        }
        Op::Pack => {
            need(2)?;
            return Ok((s[0] & 0xffff_ffff) | (s[1] << 32));
        }
        _ => {}
    }
    if ty.kind == Kind::F {
        if bits != 32 && bits != 64 {
            return Err("only f32 and f64 arithmetic is modelled".into());
        }
        let n = match op {
            Op::Fma => 3,
            Op::Neg
            | Op::Abs
            | Op::Rcp
            | Op::Sqrt
            | Op::Rsqrt
            | Op::Ex2
            | Op::Lg2
            | Op::Sin
            | Op::Cos => 1,
            _ => 2,
        };
        need(n)?;
        return float(op, bits, s);
    }
    let u = |i: usize| m(s[i]);
    let i = |k: usize| sext(bits, s[k]);
    let n = match op {
        Op::MadLo | Op::MadWide | Op::Prmt | Op::PrmtF4e | Op::Bfe => 3,
        Op::Not | Op::Neg | Op::Abs | Op::Brev | Op::Clz | Op::Popc => 1,
        _ => 2,
    };
    need(n)?;
    Ok(match op {
        Op::Add => m(s[0].wrapping_add(s[1])),
        Op::Sub => m(s[0].wrapping_sub(s[1])),
        Op::MulLo => m(s[0].wrapping_mul(s[1])),
        Op::MulHi if signed => m(((i128::from(i(0)) * i128::from(i(1))) >> bits) as u64),
        Op::MulHi => m(((u128::from(u(0)) * u128::from(u(1))) >> bits) as u64),
        Op::MulWide if signed => (i(0).wrapping_mul(i(1))) as u64,
        Op::MulWide => u(0).wrapping_mul(u(1)),
        Op::MadLo => m(s[0].wrapping_mul(s[1]).wrapping_add(s[2])),
        Op::MadWide if signed => (i(0).wrapping_mul(i(1))).wrapping_add(s[2] as i64) as u64,
        Op::MadWide => u(0).wrapping_mul(u(1)).wrapping_add(s[2]),
        Op::Div | Op::Rem if u(1) == 0 => return Err("integer division by zero".into()),
        Op::Div if signed => m(i(0).wrapping_div(i(1)) as u64),
        Op::Div => u(0) / u(1),
        Op::Rem if signed => m(i(0).wrapping_rem(i(1)) as u64),
        Op::Rem => u(0) % u(1),
        Op::Min if signed => m(i(0).min(i(1)) as u64),
        Op::Min => u(0).min(u(1)),
        Op::Max if signed => m(i(0).max(i(1)) as u64),
        Op::Max => u(0).max(u(1)),
        Op::Neg => m(i(0).wrapping_neg() as u64),
        Op::Abs => m(i(0).wrapping_abs() as u64),
        Op::And => s[0] & s[1],
        Op::Or => s[0] | s[1],
        Op::Xor => s[0] ^ s[1],
        Op::Not => m(!s[0]),
        Op::Shl if s[1] as u32 as u64 >= u64::from(bits) => 0,
        Op::Shl => m(s[0] << s[1]),
        Op::Shr if signed => {
            let sh = (s[1] as u32).min(bits - 1);
            m((i(0) >> sh) as u64)
        }
        Op::Shr if s[1] as u32 as u64 >= u64::from(bits) => 0,
        Op::Shr => u(0) >> s[1],
        Op::Brev if bits == 64 => s[0].reverse_bits(),
        Op::Brev => u64::from((s[0] as u32).reverse_bits()),
        Op::Clz if bits == 64 => u64::from(s[0].leading_zeros()),
        Op::Clz => u64::from((s[0] as u32).leading_zeros()),
        Op::Popc => u64::from(u(0).count_ones()),
        Op::Prmt => {
            let bytes = ((s[1] as u32 as u64) << 32) | s[0] as u32 as u64;
            let sel = s[2] as u32;
            (0..4).fold(0u64, |acc, k| {
                let nib = (sel >> (4 * k)) & 7;
                acc | (((bytes >> (8 * nib)) & 0xff) << (8 * k))
            })
        }
        Op::PrmtF4e => {
            let bytes = ((s[1] as u32 as u64) << 32) | s[0] as u32 as u64;
            (bytes >> (8 * (s[2] & 3))) & 0xffff_ffff
        }
        Op::Bfe => {
            // `len` bits from `pos` (each 0..255); bits past the msb read as the sign (signed)
            // or 0, and a signed result is sign-extended from its top bit.
            let (pos, len) = ((s[1] & 0xff) as u32, (s[2] & 0xff) as u32);
            let bit = |k: u32| match k {
                k if k < bits => (s[0] >> k) & 1,
                _ if signed => (s[0] >> (bits - 1)) & 1,
                _ => 0,
            };
            let len = len.min(bits);
            let r = (0..len).fold(0u64, |acc, k| acc | (bit(pos + k) << k));
            if signed && len > 0 && len < bits && bit(pos + len - 1) == 1 {
                m(r | (!0u64 << len))
            } else {
                r
            }
        }
        Op::Bmsk { wrap } => {
            // PTX ISA's semantics: the mask from bit `a` on, `b` bits wide.
            let (a, b) = (s[0] as u32, s[1] as u32);
            let (a1, b1) = (a & 31, b & 31);
            let sum = a1 + b1;
            let mask0 = if !wrap && a >= 32 { 0 } else { u32::MAX << a1 };
            let mask1 = if sum >= 32 || (!wrap && b >= 32) {
                0
            } else if b1 == 0 {
                u32::MAX
            } else {
                u32::MAX << sum
            };
            u64::from(mask0 & !mask1)
        }
        other => return Err(format!("{other:?} is not modelled on integers")),
    })
}

fn compare(cmp: Cmp, ty: Ty, a: u64, b: u64) -> bool {
    use std::cmp::Ordering;
    let ord = match ty.kind {
        Kind::F => {
            let (x, y) = (f_in(ty.bits, a), f_in(ty.bits, b));
            let unordered = x.is_nan() || y.is_nan();
            return match cmp {
                Cmp::Num => !unordered,
                Cmp::Nan => unordered,
                Cmp::Equ | Cmp::Neu | Cmp::Ltu | Cmp::Leu | Cmp::Gtu | Cmp::Geu if unordered => {
                    true
                }
                _ if unordered => false,
                Cmp::Eq | Cmp::Equ => x == y,
                Cmp::Ne | Cmp::Neu => x != y,
                Cmp::Lt | Cmp::Ltu => x < y,
                Cmp::Le | Cmp::Leu => x <= y,
                Cmp::Gt | Cmp::Gtu => x > y,
                Cmp::Ge | Cmp::Geu => x >= y,
            };
        }
        Kind::S => sext(ty.bits, a).cmp(&sext(ty.bits, b)),
        _ => mask(ty.bits, a).cmp(&mask(ty.bits, b)),
    };
    match cmp {
        Cmp::Eq | Cmp::Equ => ord == Ordering::Equal,
        Cmp::Ne | Cmp::Neu => ord != Ordering::Equal,
        Cmp::Lt | Cmp::Ltu => ord == Ordering::Less,
        Cmp::Le | Cmp::Leu => ord != Ordering::Greater,
        Cmp::Gt | Cmp::Gtu => ord == Ordering::Greater,
        Cmp::Ge | Cmp::Geu => ord != Ordering::Less,
        Cmp::Num => true,
        Cmp::Nan => false,
    }
}

fn convert(to: Ty, from: Ty, round: Option<Round>, int_round: bool, v: u64) -> Result<u64, String> {
    if to.kind == Kind::Pred || from.kind == Kind::Pred {
        return Err("cvt does not take predicates".into());
    }
    if (to.kind == Kind::F || from.kind == Kind::F) && (to.bits == 16 || from.bits == 16) {
        return Err("f16 conversions are not modelled".into());
    }
    match (from.kind == Kind::F, to.kind == Kind::F) {
        (true, true) => Ok(f_out(to.bits, f_in(from.bits, v))),
        (false, true) => {
            let x = if from.kind == Kind::S {
                sext(from.bits, v) as f64
            } else {
                mask(from.bits, v) as f64
            };
            // Exact for every integer up to 2^53; u64/s64 beyond that round once more.
            Ok(f_out(to.bits, x))
        }
        (true, false) => {
            let x = f_in(from.bits, v);
            let r = match (round, int_round) {
                (Some(Round::Near), _) => x.round_ties_even(),
                (Some(Round::Down), _) => x.floor(),
                (Some(Round::Up), _) => x.ceil(),
                _ => x.trunc(),
            };
            if r.is_nan() {
                return Ok(0);
            }
            Ok(if to.kind == Kind::S {
                let lo = -(2f64.powi(to.bits as i32 - 1));
                let hi = 2f64.powi(to.bits as i32 - 1) - 1.0;
                mask(to.bits, r.clamp(lo, hi) as i64 as u64)
            } else {
                let hi = 2f64.powi(to.bits as i32) - 1.0;
                mask(to.bits, r.clamp(0.0, hi) as u64)
            })
        }
        (false, false) => {
            let x = if from.kind == Kind::S {
                sext(from.bits, v) as u64
            } else {
                mask(from.bits, v)
            };
            Ok(mask(to.bits, x))
        }
    }
}
