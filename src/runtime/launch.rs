//! Checked launches. A [`LoadedKernel`] pairs a loaded CUDA function with its launch contract
//! ([`Signature`]: parameter types, `.reqntid`/`.maxntid`, dynamic shared memory). A [`Launch`]
//! records the type of every argument pushed and, before anything reaches the driver, checks the
//! argument count and types against the parameters and the block shape against the bounds;
//! a mismatch is an [`Error::Launch`] naming the kernel and the parameter.
//!
//! The check costs a compare per argument (the contract is parsed once, when the module loads):
//! nothing next to the driver's own launch cost.
//!
//! ```no_run
//! # fn main() -> ptxflow::Result<()> {
//! use ptxflow::kernels::KernelId;
//! use ptxflow::runtime::{Gpu, LaunchConfig};
//! let gpu = Gpu::open_default()?;
//! let k = gpu.kernel(KernelId::CoreReduceSum)?;
//! let x = gpu.stream().clone_htod(&[1.0f32; 1024]).unwrap();
//! let mut total = gpu.stream().alloc_zeros::<f64>(1).unwrap();
//! let n = 1024u32;
//! let cfg = LaunchConfig { grid_dim: (4, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
//! // SAFETY: x holds n floats and total one f64; the kernel touches only those.
//! unsafe { k.launch(gpu.stream(), cfg).arg(&x).arg(&n).arg(&mut total).launch() }?;
//! # Ok(()) }
//! ```

use super::cluster::RawArg;
use crate::ptx::{ParamType, ScalarType, Signature};
use crate::{Error, Result};
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DeviceRepr, LaunchArgs,
    LaunchConfig, PushKernelArg,
};
use std::sync::Arc;

/// A loaded kernel and its launch contract; cheap to clone.
#[derive(Clone, Debug)]
pub struct LoadedKernel {
    func: CudaFunction,
    sig: Arc<Signature>,
    pub(super) call: &'static str,
}

impl LoadedKernel {
    pub(crate) fn new(func: CudaFunction, sig: Signature, call: &'static str) -> Self {
        LoadedKernel {
            func,
            sig: Arc::new(sig),
            call,
        }
    }

    /// The launch contract the arguments and block shape are checked against.
    pub fn signature(&self) -> &Signature {
        &self.sig
    }

    /// The raw CUDA function (unchecked launches through cudarc).
    pub fn function(&self) -> &CudaFunction {
        &self.func
    }

    /// Starts a launch of this kernel on `stream` with `cfg`; push the arguments with
    /// [`Launch::arg`] in parameter order, then call [`Launch::launch`].
    pub fn launch<'a>(&'a self, stream: &'a CudaStream, cfg: LaunchConfig) -> Launch<'a> {
        Launch {
            args: stream.launch_builder(&self.func),
            kernel: self,
            cfg,
            kinds: [ArgKind::Scalar(ScalarType::U8); MAX_ARGS],
            n: 0,
            stream,
            raw: [None; MAX_ARGS],
        }
    }
}

/// The most arguments one launch may take (ptxflow's largest kernel takes 29).
pub const MAX_ARGS: usize = 48;

/// What a launch argument is, as the contract check sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// A value of this PTX type.
    Scalar(ScalarType),
    /// A device buffer of elements of this type.
    Buffer(ScalarType),
}

impl ArgKind {
    /// Whether an argument of this kind may be passed for a parameter of type `p`. A raw `u64`
    /// is accepted for a pointer (a device address), any buffer for an untyped `.u64` pointer
    /// parameter; otherwise types must match exactly (a `u16` carries an `.f16` bit pattern).
    pub fn fits(self, p: ParamType) -> bool {
        use ScalarType as S;
        match (p, self) {
            (ParamType::Scalar(S::U64), ArgKind::Buffer(_)) => true,
            (ParamType::Scalar(S::F16), ArgKind::Scalar(S::U16)) => true,
            (ParamType::Scalar(t), ArgKind::Scalar(a)) => t == a,
            (ParamType::GlobalPtr(_), ArgKind::Scalar(S::U64)) => true,
            (ParamType::GlobalPtr(t), ArgKind::Buffer(a)) => t == a,
            _ => false,
        }
    }
}

impl std::fmt::Display for ArgKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ArgKind::Scalar(t) => write!(f, "{t}"),
            ArgKind::Buffer(t) => write!(f, "buffer of {t}"),
        }
    }
}

/// Rust element types of device buffers, with their PTX type.
pub trait ArgElem {
    /// The PTX type of one element.
    const TYPE: ScalarType;
}

macro_rules! arg_elem {
    ($($rust:ty => $t:ident),+) => {$(
        impl ArgElem for $rust {
            const TYPE: ScalarType = ScalarType::$t;
        }
    )+};
}

/// Something that can be pushed as a kernel argument: a reference to a scalar (`&n`) or to a
/// device buffer (`&slice`, `&mut slice`, `&view`, `&mut view_mut`).
pub trait KernelArg<'a> {
    /// How the contract check sees this argument.
    const KIND: ArgKind;
    /// Pushes it onto cudarc's launch arguments.
    fn push(self, args: &mut LaunchArgs<'a>);
    /// The argument as `cuLaunchKernelEx` takes it ([`Launch::launch_cluster`]); `None`: not
    /// available for this argument type.
    fn raw(&self, _stream: &CudaStream) -> Option<RawArg> {
        None
    }
}

arg_elem!(u8 => U8, i8 => S8, u16 => U16, i16 => S16, u32 => U32, i32 => S32, u64 => U64,
    i64 => S64, f32 => F32, f64 => F64);

impl<'a, T: ArgElem + DeviceRepr> KernelArg<'a> for &'a T {
    const KIND: ArgKind = ArgKind::Scalar(T::TYPE);
    #[inline(always)]
    fn push(self, args: &mut LaunchArgs<'a>) {
        args.arg(self);
    }
    fn raw(&self, _stream: &CudaStream) -> Option<RawArg> {
        Some(RawArg::Ref(*self as *const T as *const std::ffi::c_void))
    }
}

impl<'a, T: ArgElem> KernelArg<'a> for &'a CudaSlice<T> {
    const KIND: ArgKind = ArgKind::Buffer(T::TYPE);
    #[inline(always)]
    fn push(self, args: &mut LaunchArgs<'a>) {
        args.arg(self);
    }
    fn raw(&self, stream: &CudaStream) -> Option<RawArg> {
        Some(RawArg::Value(DevicePtr::device_ptr(&**self, stream).0))
    }
}

impl<'a, T: ArgElem> KernelArg<'a> for &'a mut CudaSlice<T> {
    const KIND: ArgKind = ArgKind::Buffer(T::TYPE);
    #[inline(always)]
    fn push(self, args: &mut LaunchArgs<'a>) {
        args.arg(self);
    }
    fn raw(&self, stream: &CudaStream) -> Option<RawArg> {
        Some(RawArg::Value(DevicePtr::device_ptr(&**self, stream).0))
    }
}

impl<'a, 'b: 'a, T: ArgElem> KernelArg<'a> for &'a CudaView<'b, T> {
    const KIND: ArgKind = ArgKind::Buffer(T::TYPE);
    #[inline(always)]
    fn push(self, args: &mut LaunchArgs<'a>) {
        args.arg(self);
    }
    fn raw(&self, stream: &CudaStream) -> Option<RawArg> {
        Some(RawArg::Value(DevicePtr::device_ptr(&**self, stream).0))
    }
}

impl<'a, 'b: 'a, T: ArgElem> KernelArg<'a> for &'a mut CudaViewMut<'b, T> {
    const KIND: ArgKind = ArgKind::Buffer(T::TYPE);
    #[inline(always)]
    fn push(self, args: &mut LaunchArgs<'a>) {
        args.arg(self);
    }
    fn raw(&self, stream: &CudaStream) -> Option<RawArg> {
        Some(RawArg::Value(DevicePtr::device_ptr(&**self, stream).0))
    }
}

/// One launch being assembled; see the module docs.
pub struct Launch<'a> {
    args: LaunchArgs<'a>,
    pub(super) kernel: &'a LoadedKernel,
    pub(super) cfg: LaunchConfig,
    kinds: [ArgKind; MAX_ARGS],
    pub(super) n: usize,
    pub(super) stream: &'a CudaStream,
    pub(super) raw: [Option<RawArg>; MAX_ARGS],
}

impl<'a> Launch<'a> {
    /// Pushes the next argument (checked against the parameter list at launch).
    #[inline]
    pub fn arg<A: KernelArg<'a>>(&mut self, a: A) -> &mut Self {
        if let Some(k) = self.kinds.get_mut(self.n) {
            *k = A::KIND;
        }
        if let Some(r) = self.raw.get_mut(self.n) {
            *r = a.raw(self.stream);
        }
        self.n += 1;
        a.push(&mut self.args);
        self
    }

    /// Checks the arguments and the block shape against the kernel's contract.
    pub fn check(&self) -> Result<()> {
        let sig = &*self.kernel.sig;
        check_launch(sig, &self.kinds[..self.n.min(MAX_ARGS)], self.n, &self.cfg).map_err(
            |problem| Error::Launch {
                kernel: sig.name.clone(),
                problem,
            },
        )
    }

    /// Checks the launch ([`Launch::check`]) and enqueues it on the stream.
    ///
    /// # Safety
    /// The contract check covers argument count, types and block shape, not memory: every
    /// buffer must hold what the kernel reads and writes for this grid, and a raw `u64` address
    /// must point at such memory.
    #[inline]
    pub unsafe fn launch(&mut self) -> Result<()> {
        self.check()?;
        // SAFETY: the arguments fit the kernel's parameters (checked above); memory validity is
        // this function's own contract, passed to the caller.
        unsafe { self.args.launch(self.cfg) }
            .map(|_| ())
            .map_err(Error::driver(self.kernel.call))
    }

    /// As [`Launch::launch`], as a cooperative launch (the grid must be co-resident).
    ///
    /// # Safety
    /// As [`Launch::launch`].
    #[inline]
    pub unsafe fn launch_cooperative(&mut self) -> Result<()> {
        self.check()?;
        // SAFETY: as in `launch`.
        unsafe { self.args.launch_cooperative(self.cfg) }
            .map(|_| ())
            .map_err(Error::driver(self.kernel.call))
    }
}

impl super::Gpu {
    /// The built-in kernel `id` with its launch contract, loading its module on first use.
    pub fn kernel(&self, id: crate::kernels::KernelId) -> Result<LoadedKernel> {
        self.modules.kernel(id)
    }

    /// User kernel `entry` from PTX text (for instance embedded with `include_str!` from a
    /// build script's output), loaded once per distinct text through the same module cache as
    /// ptxflow's own kernels. Its contract is parsed from the text.
    pub fn load_ptx(&self, entry: &str, ptx: &str) -> Result<LoadedKernel> {
        self.modules.user(entry, ptx, None)
    }

    /// User kernel `entry` of a builder [`Module`](crate::ptx::Module) (built at run time),
    /// checked against the contract the builder recorded (typed pointers included).
    pub fn load_module(&self, module: &crate::ptx::Module, entry: &str) -> Result<LoadedKernel> {
        self.modules.module(module, entry)
    }
}

/// The contract check of one launch: `n` arguments pushed, the first `kinds` of them recorded.
pub fn check_launch(
    sig: &Signature,
    kinds: &[ArgKind],
    n: usize,
    cfg: &LaunchConfig,
) -> std::result::Result<(), String> {
    if n != sig.params.len() {
        return Err(format!(
            "{n} arguments given, the kernel takes {}",
            sig.params.len()
        ));
    }
    for (i, (p, k)) in sig.params.iter().zip(kinds).enumerate() {
        if !k.fits(p.ty) {
            return Err(format!(
                "argument {i} (`{}`) is a {k}, the parameter is {}",
                p.name, p.ty
            ));
        }
    }
    let (gx, gy, gz) = cfg.grid_dim;
    if gx == 0 || gy == 0 || gz == 0 {
        return Err(format!("grid ({gx}, {gy}, {gz}) has no blocks"));
    }
    sig.check_block(cfg.block_dim, cfg.shared_mem_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{KernelId, ALL_KERNELS};
    use crate::ptx::Target;
    use ScalarType as S;

    fn cfg(block: u32, shared: u32) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (4, 1, 1),
            block_dim: (block, 1, 1),
            shared_mem_bytes: shared,
        }
    }

    #[test]
    fn parsed_contract_matches_the_builders_for_every_kernel() {
        for &id in ALL_KERNELS {
            for &t in id.targets() {
                let m = id.build(t);
                let k = &m.kernels()[0];
                let parsed = Signature::from_ptx(&m.emit().unwrap(), id.name()).unwrap();
                assert_eq!(&parsed, k.signature(), "{id:?} for {t}");
            }
        }
    }

    #[test]
    fn reduce_sum_contract_is_checked() {
        let src = crate::embedded::ptx(KernelId::CoreReduceSum, Target::Sm75).unwrap();
        let sig = Signature::from_ptx(src, "core_reduce_sum").unwrap();
        let good = [
            ArgKind::Buffer(S::F32),
            ArgKind::Scalar(S::U32),
            ArgKind::Buffer(S::F64),
        ];
        check_launch(&sig, &good, 3, &cfg(256, 0)).unwrap();
        let e = check_launch(&sig, &good[..2], 2, &cfg(256, 0)).unwrap_err();
        assert!(e.contains("2 arguments given, the kernel takes 3"), "{e}");
        let wrong = [
            ArgKind::Buffer(S::F32),
            ArgKind::Scalar(S::U64),
            ArgKind::Buffer(S::F64),
        ];
        let e = check_launch(&sig, &wrong, 3, &cfg(256, 0)).unwrap_err();
        assert!(
            e.contains("argument 1 (`n`) is a u64, the parameter is u32"),
            "{e}"
        );
        let e = check_launch(&sig, &good, 3, &cfg(1024, 0)).unwrap_err();
        assert!(e.contains(".reqntid 256, 1, 1"), "{e}");
        let e = check_launch(&sig, &good, 3, &cfg(256, 1024)).unwrap_err();
        assert!(e.contains("declares none"), "{e}");
    }

    #[test]
    fn typed_pointers_check_the_element_type() {
        let sig = Signature {
            name: "k".into(),
            params: vec![crate::ptx::ParamSig {
                name: "x".into(),
                ty: ParamType::GlobalPtr(S::F32),
            }],
            reqntid: None,
            maxntid: Some([128, 1, 1]),
            dynamic_shared: false,
        };
        check_launch(&sig, &[ArgKind::Buffer(S::F32)], 1, &cfg(128, 0)).unwrap();
        check_launch(&sig, &[ArgKind::Scalar(S::U64)], 1, &cfg(64, 0)).unwrap();
        let e = check_launch(&sig, &[ArgKind::Buffer(S::F64)], 1, &cfg(128, 0)).unwrap_err();
        assert!(
            e.contains("buffer of f64, the parameter is pointer to f32"),
            "{e}"
        );
        let e = check_launch(&sig, &[ArgKind::Buffer(S::F32)], 1, &cfg(256, 0)).unwrap_err();
        assert!(e.contains("above .maxntid"), "{e}");
    }
}
