//! Checked sizes for counts and shapes that come from callers (or files): a product or byte count
//! that overflows, or a host reservation the allocator refuses, becomes an [`Error`] before
//! anything is allocated, instead of a panic, an abort or a wrapped (too small) allocation.

use crate::{Error, Result};

/// `dims[0] · dims[1] · …`, or [`Error::Input`] naming `what` and every factor when the product
/// overflows `usize`.
pub fn product(what: &str, dims: &[usize]) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            let shown: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
            Error::input(format!(
                "{what}: {} overflows the address space",
                shown.join(" x ")
            ))
        })
}

/// Bytes of `n` values of `T`, or [`Error::Capacity`] naming `what` when they exceed
/// `isize::MAX` (the most any host or device allocation can hold).
pub fn bytes_of<T>(what: &str, n: usize) -> Result<usize> {
    let size = std::mem::size_of::<T>();
    match n.checked_mul(size) {
        Some(b) if b <= isize::MAX as usize => Ok(b),
        _ => Err(Error::Capacity {
            what: format!("{what} ({size}-byte elements)"),
            needed: n,
            capacity: isize::MAX as usize / size.max(1),
        }),
    }
}

/// An empty vector with room for `n` values of `T`, or [`Error::Capacity`] naming `what` when the
/// size overflows or the host allocator refuses it (instead of aborting the process).
pub fn vec_with_capacity<T>(what: &str, n: usize) -> Result<Vec<T>> {
    bytes_of::<T>(what, n)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|e| Error::Capacity {
        what: format!("{what} (host allocation failed: {e})"),
        needed: n,
        capacity: 0,
    })?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_and_bytes_overflow_into_errors() {
        assert_eq!(product("m", &[3, 4, 5]).unwrap(), 60);
        assert_eq!(product("m", &[]).unwrap(), 1);
        let e = product("matrix", &[usize::MAX, 2]).unwrap_err().to_string();
        assert!(
            e.contains("matrix") && e.contains(&usize::MAX.to_string()),
            "{e}"
        );
        assert_eq!(bytes_of::<u32>("b", 10).unwrap(), 40);
        assert!(bytes_of::<u32>("b", usize::MAX / 2).is_err());
        assert!(bytes_of::<u8>("b", isize::MAX as usize + 1).is_err());
    }

    #[test]
    fn impossible_reservations_are_errors() {
        assert!(vec_with_capacity::<u64>("v", usize::MAX / 4).is_err());
        // Representable but more than any machine has: the allocator refuses, we report it.
        assert!(vec_with_capacity::<u8>("v", isize::MAX as usize).is_err());
        assert!(vec_with_capacity::<u8>("v", 100).unwrap().capacity() >= 100);
    }
}
