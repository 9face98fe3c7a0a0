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

    /// Nearest value of this type to `x`.
    fn from_f64(x: f64) -> Self;
    /// Exact widening (f32) or identity (f64).
    fn to_f64(self) -> f64;
    /// e^self.
    fn exp(self) -> Self;
    /// Neither infinite nor NaN.
    fn is_finite(self) -> bool;
}

macro_rules! impl_real {
    ($t:ty, $name:literal) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const EPSILON: Self = <$t>::EPSILON;
            const NAME: &'static str = $name;

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
        }
    };
}

impl_real!(f32, "f32");
impl_real!(f64, "f64");
