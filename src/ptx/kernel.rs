//! The kernel builder: registers, parameters, labels, predication, shared arrays, attributes, and
//! the instruction stream. Instruction families live in sibling files as further `impl` blocks.
//!
//! Determinism: registers are numbered per class in creation order and declared in a fixed class
//! order; labels are numbered by one counter; nothing is iterated out of a hash map. The same
//! builder calls therefore always produce the same bytes.

use super::decls::Attributes;
use super::error::BuildError;
use super::reg::{Label, Operand, Reg};
use super::signature::{ParamSig, ParamType, ScalarType};
use super::target::PtxVersion;
use super::types::*;
use std::marker::PhantomData;

/// A kernel parameter of type `T`, read with [`KernelBuilder::ld_param`].
#[derive(Clone, Debug)]
pub struct Param<T: PtxType> {
    pub(crate) name: String,
    _t: PhantomData<T>,
}

/// A module-scope declaration (shared or const memory).
#[derive(Clone, Debug)]
pub(crate) struct Decl {
    pub(crate) text: String,
}

/// Builds one `.entry` kernel.
pub struct KernelBuilder {
    pub(super) id: u32,
    pub(super) error: Option<BuildError>,
    pub(super) name: String,
    pub(super) params: Vec<(String, String)>,
    pub(super) param_sigs: Vec<ParamSig>,
    pub(super) dynamic_shared: bool,
    pub(super) reg_counts: [u32; NUM_CLASSES],
    pub(super) body: Vec<String>,
    pub(super) locals: Vec<String>,
    pub(super) labels: u32,
    pub(super) guard: Option<(Reg<Pred>, bool)>,
    pub(super) decls: Vec<Decl>,
    pub(super) decl_names: Vec<String>,
    pub(super) attrs: Attributes,
    pub(super) needs_sm: u32,
    pub(super) needs_ptx: PtxVersion,
}

impl KernelBuilder {
    /// A new kernel with entry point `name`: letters, digits and `_`, not starting with a
    /// digit (otherwise [`Module::emit`](super::Module::emit) returns the error).
    pub fn new(name: &str) -> Self {
        static NEXT_ID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let valid = name.chars().next().is_some_and(|c| !c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let error = (!valid).then(|| BuildError {
            kernel: name.to_string(),
            instruction: format!("KernelBuilder::new({name:?})"),
            problem: "a kernel name is a PTX identifier: letters, digits and `_`, not starting \
                      with a digit (try `my_kernel`)"
                .into(),
        });
        KernelBuilder {
            id,
            error,
            name: name.to_string(),
            params: Vec::new(),
            param_sigs: Vec::new(),
            dynamic_shared: false,
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

    /// The launch bounds set so far.
    pub fn attributes(&self) -> &Attributes {
        &self.attrs
    }

    /// Declares the next parameter as a global pointer to `T` (emitted `.param .u64`; the
    /// contract records the element type, so a launch with a buffer of another type fails).
    pub(crate) fn pointer_param<T: PtxType>(&mut self, name: &str) -> Param<U64> {
        let p = self.param::<U64>(name);
        match ScalarType::parse(T::NAME) {
            Some(t) if T::BITS > 1 => {
                if let Some(last) = self.param_sigs.last_mut() {
                    last.ty = ParamType::GlobalPtr(t);
                }
            }
            _ => self.fail(
                format!("global_arg::<{}>({name:?})", T::NAME),
                "pointers to predicates do not exist",
            ),
        }
        p
    }

    /// A fresh number for builder-generated symbol names.
    pub(crate) fn next_id(&mut self) -> u32 {
        self.labels += 1;
        self.labels
    }

    /// The kernel's entry name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Records a misuse (the first one is kept and returned by `Module::emit`).
    pub fn fail(&mut self, instruction: impl Into<String>, problem: impl Into<String>) {
        if self.error.is_none() {
            self.error = Some(BuildError {
                kernel: self.name.clone(),
                instruction: instruction.into(),
                problem: problem.into(),
            });
        }
    }

    /// Records a misuse of `call` unless `ok`.
    pub(crate) fn ensure(&mut self, ok: bool, call: &str, problem: &str) {
        if !ok {
            self.fail(call, problem);
        }
    }

    /// The first misuse recorded so far.
    pub fn error(&self) -> Option<&BuildError> {
        self.error.as_ref()
    }

    /// Strips the owner tags registers print with, recording an error when one belongs to
    /// another builder (see [`Reg`]).
    pub(crate) fn resolve(&mut self, text: &str) -> String {
        if text.contains(super::reg::TAG_OOB) {
            let clean = text.replace(super::reg::TAG_OOB, "");
            let clean = self.resolve(&clean);
            self.fail(
                clean.trim().to_string(),
                "constant index past the end of a static shared array",
            );
            return clean;
        }
        if !text.contains(super::reg::TAG_START) {
            return text.to_string();
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        let mut foreign = false;
        while let Some(i) = rest.find(super::reg::TAG_START) {
            out.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            let j = after.find(super::reg::TAG_END).unwrap_or(after.len());
            foreign |= after[..j].parse::<u32>().ok() != Some(self.id);
            rest = after.get(j + 1..).unwrap_or("");
        }
        out.push_str(rest);
        if foreign {
            self.fail(
                out.trim().to_string(),
                "uses a register of another kernel builder (registers belong to the builder \
                 that created them)",
            );
        }
        out
    }

    /// Records that an instruction needs at least `sm` and PTX ISA `ptx`.
    pub fn require(&mut self, sm: u32, ptx: PtxVersion) {
        self.needs_sm = self.needs_sm.max(sm);
        self.needs_ptx = self.needs_ptx.max(ptx);
    }

    /// A fresh register of type `T`.
    pub fn reg<T: PtxType>(&mut self) -> Reg<T> {
        let c = &mut self.reg_counts[T::CLASS];
        let r = Reg::new(*c, self.id);
        *c += 1;
        r
    }

    /// Declares the next kernel parameter.
    pub fn param<T: PtxType>(&mut self, name: &str) -> Param<T> {
        let full = format!("{}_param_{}", self.name, name);
        let call = format!(".param .{} {full}", T::NAME);
        if T::BITS < 16 {
            self.fail(
                call,
                format!("parameters of type .{} are not supported", T::NAME),
            );
        } else if self.params.iter().any(|(_, n)| *n == full) {
            self.fail(call, format!("duplicate parameter `{name}`"));
        } else if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            self.fail(call, "a parameter name is letters, digits and `_`");
        }
        self.params.push((T::NAME.to_string(), full.clone()));
        if let Some(t) = ScalarType::parse(T::NAME) {
            self.param_sigs.push(ParamSig {
                name: name.to_string(),
                ty: ParamType::Scalar(t),
            });
        }
        Param {
            name: full,
            _t: PhantomData,
        }
    }

    /// Emits one instruction line (predicated when inside [`KernelBuilder::guarded`]).
    pub fn instr(&mut self, text: impl AsRef<str>) {
        let line = match &self.guard {
            Some((p, false)) => format!("\t@{p} {};", text.as_ref()),
            Some((p, true)) => format!("\t@!{p} {};", text.as_ref()),
            None => format!("\t{};", text.as_ref()),
        };
        let line = self.resolve(&line);
        self.body.push(line);
    }

    /// A comment line in the emitted PTX (kept short; it ends up in snapshots): one line of ASCII,
    /// as ptxas reads nothing else; anything else is a build error.
    pub fn comment(&mut self, text: &str) {
        if text.contains('\n') {
            self.fail(format!("// {text}"), "comments are single lines");
            return;
        }
        if !text.is_ascii() {
            self.fail(
                format!("// {}", text.escape_default()),
                "comments are ASCII (ptxas rejects other bytes anywhere in a module)",
            );
            return;
        }
        let line = self.resolve(&format!("\t// {text}"));
        self.body.push(line);
    }

    /// Runs `f` with every instruction it emits predicated on `p` (or on `!p` when `negate`).
    /// Any instruction can be predicated this way, stores and branches included. Regions nest:
    /// inside another region the predicate becomes the conjunction of both (`and.pred`).
    /// Labels cannot be placed inside a region.
    pub fn guarded(&mut self, p: Reg<Pred>, negate: bool, f: impl FnOnce(&mut Self)) {
        let outer = self.guard.take();
        let g = match outer {
            None => (p, negate),
            Some((q, q_neg)) => {
                let a = if q_neg { self.not_pred(q) } else { q };
                let b = if negate { self.not_pred(p) } else { p };
                let c = self.reg::<Pred>();
                self.instr(format!("and.pred {c}, {a}, {b}"));
                (c, false)
            }
        };
        self.guard = Some(g);
        f(self);
        self.guard = outer;
    }

    /// Runs `f` with every instruction it emits predicated on `p` (`guarded(p, false, f)`).
    pub fn when(&mut self, p: Reg<Pred>, f: impl FnOnce(&mut Self)) {
        self.guarded(p, false, f);
    }

    /// Runs `f` with every instruction it emits predicated on `!p` (`guarded(p, true, f)`).
    pub fn when_not(&mut self, p: Reg<Pred>, f: impl FnOnce(&mut Self)) {
        self.guarded(p, true, f);
    }

    fn not_pred(&mut self, p: Reg<Pred>) -> Reg<Pred> {
        let d = self.reg::<Pred>();
        self.instr(format!("not.pred {d}, {p}"));
        d
    }

    /// A fresh label; `hint` only makes the PTX readable, uniqueness comes from a counter.
    pub fn label(&mut self, hint: &str) -> Label {
        if !hint.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            self.fail(
                format!("label({hint:?})"),
                "a label hint is letters, digits and `_`",
            );
        }
        self.labels += 1;
        Label(format!("$L__{}_{}", hint, self.labels))
    }

    /// Places `label` at the current position.
    pub fn place(&mut self, label: &Label) {
        if self.guard.is_some() {
            self.fail(
                format!("{label}:"),
                "a label cannot be placed inside a predicated region (`guarded`); structured \
                 control flow (`if_then`, loops) goes outside it",
            );
        }
        self.body.push(format!("{label}:"));
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
