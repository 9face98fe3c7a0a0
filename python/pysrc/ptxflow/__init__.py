"""ptxflow: NDT scan matching, LZ4 frames and a differentiable Gaussian field on CUDA GPUs, from
PTX generated in Rust (no nvcc, no CUDA toolkit: the driver JIT-compiles the kernels), with CPU
references when there is no GPU.

- ``ptxflow.read_cloud(path)``: PCD/PLY to an (N, 3) float32 array.
- ``ptxflow.ndt``: ``align``, ``align_hypotheses``.
- ``ptxflow.lz4``: ``compress``, ``decompress`` (standard LZ4 frames).
- ``ptxflow.gaussian``: ``forward``, ``backward`` on numpy arrays.
- ``ptxflow.torch`` (needs PyTorch): ``gaussian_field`` and ``LearnableGaussianField``.
"""

import os as _os

from . import _native
from . import gaussian, lz4, ndt
from ._native import PtxflowError

__all__ = ["read_cloud", "gpu_available", "ndt", "lz4", "gaussian", "PtxflowError"]
__version__ = "0.1.0"


def read_cloud(path):
    """Reads a point cloud (PCD in ascii, binary or binary_compressed encoding, or PLY) and
    returns its finite points as an (N, 3) float32 array (metres)."""
    return _native.read_cloud(_os.fspath(path))


def gpu_available():
    """``(True, device name)`` when CUDA device 0 can run ptxflow kernels, else
    ``(False, reason)``."""
    return _native.gpu_available()
