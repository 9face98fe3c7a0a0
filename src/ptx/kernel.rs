//! The kernel builder: registers, parameters, labels, predication, shared arrays, attributes, and
//! the instruction stream. Instruction families live in sibling files as further `impl` blocks.
//!
//! Determinism: registers are numbered per class in creation order and declared in a fixed class
//! order; labels are numbered by one counter; nothing is iterated out of a hash map. The same
//! builder calls therefore always produce the same bytes.

use super::reg::{Addr, Label, Operand, Reg};
use super::target::PtxVersion;
use super::types::*;
use std::marker::PhantomData;

/// A kernel parameter of type `T`, read with [`KernelBuilder::ld_param`].
#[derive(Clone, Debug)]
pub struct Param<T: PtxType> {
    pub(crate) name: String,
    _t: PhantomData<T>,
}

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
    /// Address of element `index` (a constant): `[name+index*size]`.
    pub fn at(&self, index: u32) -> Addr {
        assert!(
            self.len == 0 || index < self.len,
            "shared array `{}` index {index} out of bounds",
            self.name
        );
        Addr::symbol(&self.name).off(i64::from(index) * i64::from(T::BITS / 8))
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

/// A module-scope declaration (shared or const memory).
#[derive(Clone, Debug)]
pub(crate) struct Decl {
    pub(crate) text: String,
}

/// A finished kernel: its entry point text plus what it needs from the module.
#[derive(Clone, Debug)]
pub struct Kernel {
    pub(crate) name: String,
    pub(crate) decls: Vec<Decl>,
    pub(crate) text: String,
    pub(crate) needs_sm: u32,
    pub(crate) needs_ptx: PtxVersion,
}

impl Kernel {
    /// Entry point name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Lowest SM the kernel's instructions need.
    pub fn needs_sm(&self) -> u32 {
        self.needs_sm
    }
    /// Lowest PTX ISA the kernel's instructions need.
    pub fn needs_ptx(&self) -> PtxVersion {
        self.needs_ptx
    }
}

/// Builds one `.entry` kernel.
pub struct KernelBuilder {
    name: String,
    params: Vec<(String, String)>,
    reg_counts: [u32; NUM_CLASSES],
    body: Vec<String>,
    locals: Vec<String>,
    labels: u32,
    guard: Option<String>,
    decls: Vec<Decl>,
    decl_names: Vec<String>,
    attrs: Attributes,
    needs_sm: u32,
    needs_ptx: PtxVersion,
}

impl KernelBuilder {
    /// A new kernel with entry point `name` (a PTX identifier).
    pub fn new(name: &str) -> Self {
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "kernel name `{name}` is not a plain PTX identifier"
        );
        KernelBuilder {
            name: name.to_string(),
            params: Vec::new(),
            reg_counts: [0; NUM_CLASSES],
            body: Vec::new(),
            locals: Vec::new(),
            labels: 0,
            guard: None,
            decls: Vec::new(),
            decl_names: Vec::new(),
            attrs: Attributes::default(),
            needs_sm: 0,
            needs_ptx: PtxVersion(1, 0),
        }
    }

    /// Records that an instruction needs at least `sm` and PTX ISA `ptx`.
    pub fn require(&mut self, sm: u32, ptx: PtxVersion) {
        self.needs_sm = self.needs_sm.max(sm);
        self.needs_ptx = self.needs_ptx.max(ptx);
    }

    /// A fresh register of type `T`.
    pub fn reg<T: PtxType>(&mut self) -> Reg<T> {
        let c = &mut self.reg_counts[T::CLASS];
        let r = Reg::new(*c);
        *c += 1;
        r
    }

    /// Declares the next kernel parameter.
    pub fn param<T: PtxType>(&mut self, name: &str) -> Param<T> {
        assert!(
            T::BITS >= 16,
            "parameters of type .{} are not supported",
            T::NAME
        );
        let full = format!("{}_param_{}", self.name, name);
        assert!(
            !self.params.iter().any(|(_, n)| *n == full),
            "duplicate parameter `{name}`"
        );
        self.params.push((T::NAME.to_string(), full.clone()));
        Param {
            name: full,
            _t: PhantomData,
        }
    }

    /// Emits one instruction line (predicated when inside [`KernelBuilder::guarded`]).
    pub fn instr(&mut self, text: impl AsRef<str>) {
        let line = match &self.guard {
            Some(g) => format!("\t{g} {};", text.as_ref()),
            None => format!("\t{};", text.as_ref()),
        };
        self.body.push(line);
    }

    /// A comment line in the emitted PTX (kept short; it ends up in snapshots).
    pub fn comment(&mut self, text: &str) {
        assert!(!text.contains('\n'), "comments are single lines");
        self.body.push(format!("\t// {text}"));
    }

    /// Runs `f` with every instruction it emits predicated on `p` (or on `!p` when `negate`).
    /// Any instruction can be predicated this way, stores and branches included.
    pub fn guarded(&mut self, p: Reg<Pred>, negate: bool, f: impl FnOnce(&mut Self)) {
        assert!(
            self.guard.is_none(),
            "predicated regions do not nest; combine predicates with and_pred"
        );
        self.guard = Some(format!("@{}{}", if negate { "!" } else { "" }, p));
        f(self);
        self.guard = None;
    }

    /// A fresh label; `hint` only makes the PTX readable, uniqueness comes from a counter.
    pub fn label(&mut self, hint: &str) -> Label {
        assert!(
            hint.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "label hint `{hint}` is not an identifier"
        );
        self.labels += 1;
        Label(format!("$L__{}_{}", hint, self.labels))
    }

    /// Places `label` at the current position.
    pub fn place(&mut self, label: &Label) {
        assert!(
            self.guard.is_none(),
            "a label cannot be placed inside a predicated region"
        );
        self.body.push(format!("{label}:"));
    }

    /// `.maxntid x, y, z`: the most threads a block may have.
    pub fn maxntid(&mut self, x: u32, y: u32, z: u32) {
        assert!(
            self.attrs.reqntid.is_none(),
            "ptxas rejects .maxntid together with .reqntid"
        );
        self.attrs.maxntid = Some([x, y, z]);
    }

    /// `.reqntid x, y, z`: the exact block shape every launch must use.
    pub fn reqntid(&mut self, x: u32, y: u32, z: u32) {
        assert!(
            self.attrs.maxntid.is_none(),
            "ptxas rejects .reqntid together with .maxntid"
        );
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
        assert!(
            !self.decl_names.iter().any(|n| n == name),
            "duplicate symbol `{name}`"
        );
        self.decl_names.push(name.to_string());
        self.decls.push(Decl { text });
    }

    /// A static shared array of `len` elements of `T`, aligned to 16 bytes so vector accesses work.
    pub fn shared_array<T: PtxType>(&mut self, name: &str, len: u32) -> SharedArray<T> {
        assert!(len > 0, "static shared array `{name}` needs a length");
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
        SharedArray {
            name: name.to_string(),
            len: 0,
            _t: PhantomData,
        }
    }

    /// A constant-memory table of 32-bit words (bit patterns), addressed by its symbol.
    pub fn const_words(&mut self, name: &str, words: &[u32]) -> Addr {
        assert!(!words.is_empty(), "const table `{name}` is empty");
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
        assert!(
            !self.locals.iter().any(|l| l.contains(&format!(" {name}["))),
            "duplicate local `{name}`"
        );
        self.locals
            .push(format!("\t.local .align 16 .b8 {name}[{bytes}];"));
        Addr::symbol(name)
    }

    /// Finishes the kernel (appends `ret` so every path ends).
    pub fn finish(mut self) -> Kernel {
        self.body.push("\tret;".to_string());
        let mut t = String::new();
        t.push_str(&format!(".visible .entry {}(", self.name));
        if self.params.is_empty() {
            t.push_str(")\n");
        } else {
            t.push('\n');
            let ps: Vec<String> = self
                .params
                .iter()
                .map(|(ty, n)| format!("\t.param .{ty} {n}"))
                .collect();
            t.push_str(&ps.join(",\n"));
            t.push_str("\n)\n");
        }
        if let Some([x, y, z]) = self.attrs.maxntid {
            t.push_str(&format!(".maxntid {x}, {y}, {z}\n"));
        }
        if let Some([x, y, z]) = self.attrs.reqntid {
            t.push_str(&format!(".reqntid {x}, {y}, {z}\n"));
        }
        if let Some(n) = self.attrs.minnctapersm {
            t.push_str(&format!(".minnctapersm {n}\n"));
        }
        if let Some(n) = self.attrs.maxnreg {
            t.push_str(&format!(".maxnreg {n}\n"));
        }
        t.push_str("{\n");
        for (class, (ty, prefix)) in CLASS_DECLS.iter().enumerate() {
            let n = self.reg_counts[class];
            if n > 0 {
                t.push_str(&format!("\t.reg .{ty} {prefix}<{n}>;\n"));
            }
        }
        for l in &self.locals {
            t.push_str(l);
            t.push('\n');
        }
        t.push('\n');
        for line in &self.body {
            t.push_str(line);
            t.push('\n');
        }
        t.push_str("}\n");
        Kernel {
            name: self.name,
            decls: self.decls,
            text: t,
            needs_sm: self.needs_sm,
            needs_ptx: self.needs_ptx,
        }
    }

    /// `ld.param`: reads a kernel parameter.
    pub fn ld_param<T: PtxType>(&mut self, p: &Param<T>) -> Reg<T> {
        let d = self.reg::<T>();
        self.instr(format!("ld.param.{} {d}, [{}]", T::NAME, p.name));
        d
    }

    /// `mov`: a new register holding `a`.
    pub fn mov<T: PtxType>(&mut self, a: impl Operand<T>) -> Reg<T> {
        let d = self.reg::<T>();
        self.mov_to(d, a);
        d
    }

    /// `mov` into an existing register: how loop-carried values are updated.
    pub fn mov_to<T: PtxType>(&mut self, d: Reg<T>, a: impl Operand<T>) {
        self.instr(format!(
            "mov.{} {d}, {}",
            super::types::data_name::<T>(),
            a.ptx()
        ));
    }
}
