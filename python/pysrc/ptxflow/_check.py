"""Argument checks shared by the numpy API: wrong types are TypeError, wrong shapes or layouts
ValueError, before anything reaches the compiled extension."""

import numpy as np

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def array(name, a, ndim, last=None, dtypes=FLOATS):
    """`a` as it is, after checking it is a C-contiguous ndarray of `ndim` dimensions, one of
    `dtypes`, with last dimension `last` (when given)."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(a).__name__}")
    if a.dtype not in dtypes:
        names = " or ".join(str(d) for d in dtypes)
        raise TypeError(f"{name} must have dtype {names}, got {a.dtype}")
    if a.ndim != ndim or (last is not None and a.shape[-1] != last):
        want = ", ".join(["N"] * (ndim - 1) + [str(last) if last is not None else "M"])
        raise ValueError(f"{name} must have shape ({want}), got {a.shape}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (use numpy.ascontiguousarray)")
    return a


def same_dtype(**arrays):
    dtypes = {k: a.dtype for k, a in arrays.items()}
    if len(set(dtypes.values())) > 1:
        desc = ", ".join(f"{k} {d}" for k, d in dtypes.items())
        raise TypeError(f"arrays must share one dtype, got {desc}")


def device(d):
    if not isinstance(d, str):
        raise TypeError(f"device must be a str (\"cpu\", \"gpu\" or \"auto\"), got {type(d).__name__}")
    return d


def byteslike(name, data):
    """A 1-D uint8 view of any bytes-like object (bytes, bytearray, memoryview, numpy uint8),
    without a copy."""
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8:
            raise TypeError(f"{name} as an ndarray must have dtype uint8, got {data.dtype}")
        if not data.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous")
        return data.reshape(-1)
    if isinstance(data, str):
        raise TypeError(f"{name} must be bytes-like, got str (encode it first)")
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(f"{name} must be bytes-like (bytes, bytearray, memoryview, numpy uint8), "
                        f"got {type(data).__name__}") from None
    if not view.c_contiguous:
        raise ValueError(f"{name} must be a contiguous buffer")
    return np.frombuffer(view.cast("B") if view.format != "B" or view.ndim != 1 else view,
                         dtype=np.uint8)
