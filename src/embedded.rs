//! The PTX that build.rs emitted for every kernel and target, embedded in the library.

use crate::kernels::KernelId;
use crate::ptx::Target;

include!(concat!(env!("OUT_DIR"), "/embedded_ptx.rs"));

/// The embedded PTX of `id` for `target`, if the kernel ships that target.
pub fn ptx(id: KernelId, target: Target) -> Option<&'static str> {
    EMBEDDED
        .iter()
        .find(|(k, t, _)| *k == id && *t == target)
        .map(|(_, _, p)| *p)
}

/// Every embedded (kernel, target, PTX) triple, in table order.
pub fn all() -> &'static [(KernelId, Target, &'static str)] {
    EMBEDDED
}
