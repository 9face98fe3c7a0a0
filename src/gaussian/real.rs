//! The float types the Gaussian field runs in (`f32` and `f64`), behind one small trait so that the
//! CPU reference is written once. Only what the field maths needs is here: arithmetic, `exp`,
//! finiteness, and conversions through `f64` for constants and test comparisons.

use std::fmt::{Debug, Display};
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub, SubAssign};

/// A floating-point scalar the Gaussian field can be evaluated in.
pub trait Real:
    Copy
    + Send
    + Sync
    + Default
    + PartialOrd
    + Debug
    + Display
    + 'static
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
{
    /// 0.
    const ZERO: Self;
    /// 1.
    const ONE: Self;
    /// Unit roundoff scale: the gap between 1 and the next representable value.
    const EPSILON: Self;
    /// `"f32"` or `"f64"`, used in bench and report names.
    const NAME: &'static str;
    /// The squared distance d beyond which the field treats exp(-d/2) as exactly 0: there the
    /// exponential is below the smallest normal number (f32: e^-87 > 1.18e-38 > e^-88; f64:
    /// e^-708 > 2.23e-308 > e^-709). Flushing these subnormal values to zero is what a GPU's
    /// `.ftz` exponential does, avoids the CPU's slow subnormal arithmetic, and changes each term
    /// by less than the smallest normal number times w c.
    const EXP_CUTOFF_D: Self;

    /// Nearest value of this type to `x`.
    fn from_f64(x: f64) -> Self;
    /// Exact widening (f32) or identity (f64).
    fn to_f64(self) -> f64;
    /// e^self.
    fn exp(self) -> Self;
    /// Neither infinite nor NaN.
    fn is_finite(self) -> bool;
    /// `self * a + b` with one rounding (fused multiply-add, as a GPU's `fma.rn`): the compensated
    /// pair maths needs it to recover exact products and remainders.
    fn mul_add(self, a: Self, b: Self) -> Self;
}

macro_rules! impl_real {
    ($t:ty, $name:literal, $zero_d:literal) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const EPSILON: Self = <$t>::EPSILON;
            const NAME: &'static str = $name;
            const EXP_CUTOFF_D: Self = $zero_d;

            #[inline(always)]
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline(always)]
            fn is_finite(self) -> bool {
                <$t>::is_finite(self)
            }
            #[inline(always)]
            fn mul_add(self, a: Self, b: Self) -> Self {
                <$t>::mul_add(self, a, b)
            }
        }
    };
}

impl_real!(f32, "f32", 174.0);
impl_real!(f64, "f64", 1416.0);

#[cfg(test)]
mod tests {
    use super::Real;

    #[test]
    fn exp_cutoff_is_where_exp_leaves_the_normal_range() {
        assert!((-0.5 * f32::EXP_CUTOFF_D).exp() >= f32::MIN_POSITIVE);
        assert!((-0.5 * (f32::EXP_CUTOFF_D + 2.0)).exp() < f32::MIN_POSITIVE);
        assert!((-0.5 * f64::EXP_CUTOFF_D).exp() >= f64::MIN_POSITIVE);
        assert!((-0.5 * (f64::EXP_CUTOFF_D + 2.0)).exp() < f64::MIN_POSITIVE);
    }
}
