//! One kernel node of a [`crate::graphs`] recording: its parameters read back from the driver,
//! with the arguments copied into cells this crate owns, and which arguments are slice addresses.

use crate::graphs::{check, Skip};
use cudarc::driver::sys::{self, CUgraphNode, CUgraphNodeType, CUDA_KERNEL_NODE_PARAMS};
use std::ffi::{c_char, c_void, CStr};

/// One kernel node of a recording: its parameters with owned argument storage.
pub(crate) struct Node {
    pub(crate) node: CUgraphNode,
    pub(crate) params: CUDA_KERNEL_NODE_PARAMS,
    /// One 8-byte cell per kernel argument (every argument of these kernels is at most 8 bytes).
    pub(crate) cells: Box<[u64]>,
    /// `kernelParams`: pointers to the cells.
    pub(crate) ptrs: Box<[*mut c_void]>,
    /// (argument, slice) pairs: the argument is the address of that slice.
    pub(crate) relocs: Vec<(usize, usize)>,
}

/// A kernel node's parameters with its arguments copied into owned cells, and which of them are
/// slice addresses.
pub(crate) fn read_node(node: CUgraphNode, bases: &[u64]) -> Result<Node, Skip> {
    let mut ty = CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
    // SAFETY: `node` is a node of a live graph; `ty` is a valid out pointer.
    check("cuGraphNodeGetType", unsafe {
        sys::cuGraphNodeGetType(node, &mut ty)
    })?;
    if ty != CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL {
        return Err(Skip::Layout);
    }
    // SAFETY: an all-zero parameter block is a valid value of this plain C struct.
    let mut params: CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
    // SAFETY: `node` is a kernel node; `params` is a valid out pointer.
    check("cuGraphKernelNodeGetParams", unsafe {
        sys::cuGraphKernelNodeGetParams_v2(node, &mut params)
    })?;
    if params.kernelParams.is_null() || !params.extra.is_null() || params.func.is_null() {
        return Err(Skip::Layout);
    }
    let count = param_count(params.func)?;
    let mut cells = Vec::new();
    let mut relocs = Vec::new();
    for arg in 0..count {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: `params.func` is the node's function and `arg` one of its parameters; the out
        // pointers are valid.
        check("cuFuncGetParamInfo", unsafe {
            sys::cuFuncGetParamInfo(params.func, arg, &mut offset, &mut size)
        })?;
        if size == 0 || size > 8 {
            return Err(Skip::Layout);
        }
        let mut cell = 0u64;
        // SAFETY: the driver's `kernelParams` holds one pointer per parameter, each to `size`
        // bytes of that argument; the cell has room for 8.
        unsafe {
            let src = *params.kernelParams.add(arg) as *const u8;
            std::ptr::copy_nonoverlapping(src, (&mut cell as *mut u64).cast::<u8>(), size);
        }
        if size == 8 && cell != 0 {
            if let Some(slice) = bases.iter().position(|&b| b == cell) {
                relocs.push((arg, slice));
            }
        }
        cells.push(cell);
    }
    if cells.is_empty() {
        return Err(Skip::Layout);
    }
    let mut cells = cells.into_boxed_slice();
    let ptrs: Box<[*mut c_void]> = cells
        .iter_mut()
        .map(|c| (c as *mut u64).cast::<c_void>())
        .collect();
    Ok(Node {
        node,
        params,
        cells,
        ptrs,
        relocs,
    })
}

/// How many parameters `func` takes: its entry name (`cuFuncGetName`) found in the kernel table,
/// whose embedded PTX declares them. (Asking the driver for parameter after parameter until it
/// refused made compute-sanitizer report one API error per node.)
fn param_count(func: sys::CUfunction) -> Result<usize, Skip> {
    let mut name: *const c_char = std::ptr::null();
    // SAFETY: `func` is a loaded function; `name` is a valid out pointer.
    check("cuFuncGetName", unsafe {
        sys::cuFuncGetName(&mut name, func)
    })?;
    if name.is_null() {
        return Err(Skip::Layout);
    }
    // SAFETY: the driver returned a NUL-terminated name that lives as long as the function.
    let name = unsafe { CStr::from_ptr(name) }
        .to_str()
        .map_err(|_| Skip::Layout)?;
    let id = ptxflow::kernels::ALL_KERNELS
        .iter()
        .find(|k| k.name() == name)
        .ok_or(Skip::Layout)?;
    let ptx = ptxflow::embedded::ptx(*id, id.targets()[0]).ok_or(Skip::Layout)?;
    let sig = ptxflow::ptx::Signature::from_ptx(ptx, name).map_err(|_| Skip::Layout)?;
    Ok(sig.params.len())
}
