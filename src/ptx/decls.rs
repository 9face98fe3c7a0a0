//! Module-scope and per-thread declarations (shared arrays, const tables, local arrays) and
//! the launch-bound attributes of a kernel.

use super::kernel::{Decl, KernelBuilder};
use super::reg::Addr;
use super::types::*;
use std::marker::PhantomData;

/// A named array in shared memory (static, or dynamic when declared `.extern` with no length).
/// It is always addressed through its symbol, never through a raw offset: on sm_90 shared
/// address 0 is not the start of the block's array.
#[derive(Clone, Debug)]
pub struct SharedArray<T: PtxType> {
    pub(crate) name: String,
    /// Number of elements; 0 for dynamic shared memory (sized at launch).
    pub len: u32,
    _t: PhantomData<T>,
}

impl<T: PtxType> SharedArray<T> {
    /// Address of element `index` (a constant): `[name+index*size]`. An index past the end
    /// of a static array is reported as an error by the instruction that uses the address.
    pub fn at(&self, index: u32) -> Addr {
        let base = if self.len == 0 || index < self.len {
            Addr::symbol(&self.name)
        } else {
            Addr::symbol(&format!("{}{}", self.name, super::reg::TAG_OOB))
        };
        base.off(i64::from(index) * i64::from(T::BITS / 8))
    }

    /// Address of the first element.
    pub fn base(&self) -> Addr {
        Addr::symbol(&self.name)
    }

    /// The symbol name as declared in the module.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Launch-bound attributes of a kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    /// `.maxntid x, y, z`: the largest block the kernel may be launched with.
    pub maxntid: Option<[u32; 3]>,
    /// `.reqntid x, y, z`: the exact block shape the kernel must be launched with.
    pub reqntid: Option<[u32; 3]>,
    /// `.minnctapersm n`: blocks per SM the register allocation must allow.
    pub minnctapersm: Option<u32>,
    /// `.maxnreg n`: registers per thread at most.
    pub maxnreg: Option<u32>,
}

impl KernelBuilder {
    /// `.maxntid x, y, z`: the most threads a block may have.
    pub fn maxntid(&mut self, x: u32, y: u32, z: u32) {
        if self.attrs.reqntid.is_some() {
            self.fail(
                format!(".maxntid {x}, {y}, {z}"),
                "ptxas rejects .maxntid together with .reqntid",
            );
        }
        self.attrs.maxntid = Some([x, y, z]);
    }

    /// `.reqntid x, y, z`: the exact block shape every launch must use.
    pub fn reqntid(&mut self, x: u32, y: u32, z: u32) {
        if self.attrs.maxntid.is_some() {
            self.fail(
                format!(".reqntid {x}, {y}, {z}"),
                "ptxas rejects .reqntid together with .maxntid",
            );
        }
        self.attrs.reqntid = Some([x, y, z]);
    }

    /// `.minnctapersm n`: ask ptxas to fit at least `n` blocks per SM.
    pub fn minnctapersm(&mut self, n: u32) {
        self.attrs.minnctapersm = Some(n);
    }

    /// `.maxnreg n`: at most `n` registers per thread (ptxas may use fewer; with `.maxntid` alone
    /// it picks its own bound, which can leave more registers than an SM's occupancy wants).
    pub fn maxnreg(&mut self, n: u32) {
        self.attrs.maxnreg = Some(n);
    }

    fn declare(&mut self, name: &str, text: String) {
        if self.decl_names.iter().any(|n| n == name) {
            self.fail(text.clone(), format!("duplicate symbol `{name}`"));
        }
        self.decl_names.push(name.to_string());
        self.decls.push(Decl { text });
    }

    /// A static shared array of `len` elements of `T`, aligned to 16 bytes so vector accesses work.
    pub fn shared_array<T: PtxType>(&mut self, name: &str, len: u32) -> SharedArray<T> {
        if len == 0 {
            self.fail(
                format!("shared_array({name:?}, 0)"),
                "a static shared array needs a length (dynamic_shared is sized at launch)",
            );
        }
        let bytes = len * (T::BITS / 8);
        self.declare(name, format!(".shared .align 16 .b8 {name}[{bytes}];"));
        SharedArray {
            name: name.to_string(),
            len,
            _t: PhantomData,
        }
    }

    /// The block's dynamic shared memory (`.extern .shared`), sized by the launch.
    pub fn dynamic_shared<T: PtxType>(&mut self, name: &str) -> SharedArray<T> {
        self.declare(name, format!(".extern .shared .align 16 .b8 {name}[];"));
        self.dynamic_shared = true;
        SharedArray {
            name: name.to_string(),
            len: 0,
            _t: PhantomData,
        }
    }

    /// A constant-memory table of 32-bit words (bit patterns), addressed by its symbol.
    pub fn const_words(&mut self, name: &str, words: &[u32]) -> Addr {
        if words.is_empty() {
            self.fail(
                format!("const_words({name:?}, [])"),
                "a const table needs words",
            );
        }
        let list: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        self.declare(
            name,
            format!(
                ".const .align 4 .u32 {name}[{}] = {{{}}};",
                words.len(),
                list.join(", ")
            ),
        );
        Addr::symbol(name)
    }

    /// A per-thread local array of `bytes` bytes (`.local`), addressed by its symbol.
    pub fn local_array(&mut self, name: &str, bytes: u32) -> Addr {
        if self.locals.iter().any(|l| l.contains(&format!(" {name}["))) {
            self.fail(
                format!(".local {name}"),
                format!("duplicate local `{name}`"),
            );
        }
        self.locals
            .push(format!("\t.local .align 16 .b8 {name}[{bytes}];"));
        Addr::symbol(name)
    }
}
