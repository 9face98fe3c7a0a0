//! A finished kernel: [`KernelBuilder::finish`] assembles the `.entry` text (parameters, launch
//! bounds, register declarations in a fixed class order, the body) and the launch contract.

use super::error::BuildError;
use super::kernel::{Decl, KernelBuilder};
use super::signature::Signature;
use super::target::PtxVersion;
use super::types::*;

/// A finished kernel: its entry point text plus what it needs from the module.
#[derive(Clone, Debug)]
pub struct Kernel {
    pub(crate) name: String,
    pub(crate) decls: Vec<Decl>,
    pub(crate) text: String,
    pub(crate) needs_sm: u32,
    pub(crate) needs_ptx: PtxVersion,
    pub(crate) signature: Signature,
    pub(crate) error: Option<BuildError>,
}

impl Kernel {
    /// The launch contract the builder recorded (parameters, block bounds, dynamic shared).
    pub fn signature(&self) -> &Signature {
        &self.signature
    }
    /// Entry point name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The first misuse the builder recorded, if any ([`Module::emit`](super::Module::emit)
    /// returns it).
    pub fn error(&self) -> Option<&BuildError> {
        self.error.as_ref()
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

impl KernelBuilder {
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
        let signature = Signature {
            name: self.name.clone(),
            params: self.param_sigs,
            reqntid: self.attrs.reqntid,
            maxntid: self.attrs.maxntid,
            dynamic_shared: self.dynamic_shared,
        };
        Kernel {
            name: self.name,
            decls: self.decls,
            text: t,
            needs_sm: self.needs_sm,
            needs_ptx: self.needs_ptx,
            signature,
            error: self.error,
        }
    }
}
