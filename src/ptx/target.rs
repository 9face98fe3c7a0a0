//! Compilation targets and PTX ISA versions. A module's `.target` is the lowest SM its kernel
//! supports; its `.version` is the lowest ISA that both the target and every instruction used
//! need (the builder records each instruction's needs while it is emitted).

use std::fmt;

/// An NVIDIA SM architecture we ship PTX for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// Turing (T4, RTX 20xx): the lowest target ptxflow supports.
    Sm75,
    /// Ampere A100.
    Sm80,
    /// Ampere consumer (RTX 30xx, A10).
    Sm86,
    /// Ada (L4, L40, RTX 40xx).
    Sm89,
    /// Hopper (H100, H200).
    Sm90,
}

/// Every target the ptxas gate assembles for.
pub const ALL_TARGETS: [Target; 5] = [
    Target::Sm75,
    Target::Sm80,
    Target::Sm86,
    Target::Sm89,
    Target::Sm90,
];

/// A PTX ISA version, `major.minor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PtxVersion(pub u32, pub u32);

impl fmt::Display for PtxVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

impl Target {
    /// SM number, e.g. 75.
    pub fn sm(self) -> u32 {
        match self {
            Target::Sm75 => 75,
            Target::Sm80 => 80,
            Target::Sm86 => 86,
            Target::Sm89 => 89,
            Target::Sm90 => 90,
        }
    }

    /// `sm_75` etc.
    pub fn name(self) -> &'static str {
        match self {
            Target::Sm75 => "sm_75",
            Target::Sm80 => "sm_80",
            Target::Sm86 => "sm_86",
            Target::Sm89 => "sm_89",
            Target::Sm90 => "sm_90",
        }
    }

    /// The first PTX ISA version that knows this target.
    pub fn min_ptx(self) -> PtxVersion {
        match self {
            Target::Sm75 => PtxVersion(6, 3),
            Target::Sm80 => PtxVersion(7, 0),
            Target::Sm86 => PtxVersion(7, 1),
            Target::Sm89 | Target::Sm90 => PtxVersion(7, 8),
        }
    }

    /// Parses `sm_90`, `sm90` or `90`.
    pub fn parse(s: &str) -> Option<Target> {
        let digits = s.trim().trim_start_matches("sm").trim_start_matches('_');
        ALL_TARGETS
            .into_iter()
            .find(|t| t.sm().to_string() == digits)
    }

    /// The highest target in `shipped` that a device of compute capability `major.minor` runs.
    pub fn best_for(shipped: &[Target], major: i32, minor: i32) -> Option<Target> {
        let sm = (major.max(0) * 10 + minor.max(0)) as u32;
        shipped.iter().copied().filter(|t| t.sm() <= sm).max()
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
