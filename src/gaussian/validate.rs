//! Input and output checks shared by every Gaussian field (CPU and GPU), so that both reject the
//! same inputs with the same errors. Gaussian and point checks live in [`super::layout`]; these
//! are the options, call-order, shape and finiteness checks around them.

use super::ops::FieldOptions;
use super::real::Real;
use crate::{Error, Result};

/// `diag_eps` must be finite and >= 0 ([`Error::Input`] otherwise).
pub fn check_options(options: &FieldOptions) -> Result<()> {
    if !(options.diag_eps.is_finite() && options.diag_eps >= 0.0) {
        return Err(Error::input(format!(
            "diag_eps must be finite and >= 0, got {}",
            options.diag_eps
        )));
    }
    Ok(())
}

/// A field needs Gaussians before it can be evaluated ([`Error::Input`] when `n` is 0).
pub fn require_gaussians(n: usize) -> Result<()> {
    if n == 0 {
        return Err(Error::input("no Gaussians set: call set_gaussians first"));
    }
    Ok(())
}

/// The distance matrix output must hold exactly `b * n` scalars ([`Error::Shape`]).
pub fn check_distance_out(b: usize, n: usize, out_len: usize) -> Result<()> {
    let need = crate::size::product("distance matrix (points x Gaussians)", &[b, n])?;
    if out_len != need {
        return Err(Error::Shape {
            what: "distance matrix".into(),
            expected: format!("{b} x {n} = {need} scalars"),
            got: format!("{out_len} scalars"),
        });
    }
    Ok(())
}

/// Every field value must be finite ([`Error::Input`] naming the first bad point).
pub fn check_values<T: Real>(values: &[T]) -> Result<()> {
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        return Err(Error::input(format!(
            "field value at point {i} is not finite ({}): inputs exceed the range of {}",
            values[i],
            T::NAME
        )));
    }
    Ok(())
}

/// `backward` needs a forward with the current Gaussians ([`Error::Input`]), one finite
/// dLoss/df per point of that forward ([`Error::Shape`] / [`Error::Input`]).
pub fn check_grad_values<T: Real>(
    forward_valid: bool,
    forward_points: usize,
    grad_values: &[T],
) -> Result<()> {
    if !forward_valid {
        return Err(Error::input(
            "backward needs a forward with the current Gaussians first",
        ));
    }
    if grad_values.len() != forward_points {
        return Err(Error::Shape {
            what: "grad_values".into(),
            expected: format!("{forward_points} (points of the last forward)"),
            got: grad_values.len().to_string(),
        });
    }
    if let Some(i) = grad_values.iter().position(|v| !v.is_finite()) {
        return Err(Error::input(format!(
            "grad_values[{i}] is not finite ({})",
            grad_values[i]
        )));
    }
    Ok(())
}

/// Every gradient must be finite ([`Error::Input`] naming the first bad entries).
pub fn check_gradients<T: Real>(grad_points: &[T], grad_gaussians: &[T]) -> Result<()> {
    let bad_point = grad_points.iter().position(|v| !v.is_finite());
    let bad_gauss = grad_gaussians.iter().position(|v| !v.is_finite());
    if bad_point.is_some() || bad_gauss.is_some() {
        return Err(Error::input(format!(
            "backward produced a non-finite gradient (point index {bad_point:?}, Gaussian scalar \
             index {bad_gauss:?}): inputs exceed the range of {}",
            T::NAME
        )));
    }
    Ok(())
}
