"""NDT scan matching: align a source cloud to a target cloud (T_target_source)."""

import numpy as np

from . import _check, _native

__all__ = ["align", "align_hypotheses"]


def _cloud(name, a):
    a = _check.array(name, a, 2, 3)
    return a if a.dtype == np.float32 else a.astype(np.float32)


def _transforms(name, a, ndim):
    a = _check.array(name, a, ndim, 4)
    if a.shape[-2] != 4:
        raise ValueError(f"{name} must be 4x4 transforms, got shape {a.shape}")
    return np.ascontiguousarray(a, dtype=np.float64)


def align(target, source, init=None, resolution=1.0, leaf=0.1, search="direct7",
          device="auto", max_iters=35):
    """Aligns ``source`` (N, 3) to ``target`` (M, 3) (float32 or float64, metres).

    ``init``: 4x4 initial T_target_source (identity when None). ``leaf``: voxel-grid leaf (m)
    applied to both clouds first (0 keeps every point). ``search``: "direct1", "direct7",
    "direct27" or "radius". ``device``: "cpu", "gpu" or "auto".

    Returns a dict: ``transform`` (4x4 float64, T_target_source), ``stop`` (why it stopped),
    ``converged``, ``iterations``, ``score``, ``device`` ("cpu" or "gpu"), and
    ``evaluations``, ``likelihood_per_point``, ``correspondences``, ``source_points``.
    Non-convergence is data (``converged`` False), not an error.
    """
    init = np.eye(4) if init is None else _transforms("init", init, 2)
    return _native.ndt_align(_cloud("target", target), _cloud("source", source),
                             [float(v) for v in init.reshape(-1)], float(resolution),
                             float(leaf), str(search), _check.device(device), int(max_iters))


def align_hypotheses(target, source, inits, resolution=1.0, leaf=0.1, search="direct7",
                     device="auto", max_iters=35):
    """Aligns ``source`` to ``target`` from every 4x4 initial guess in ``inits`` (K, 4, 4), all
    in lockstep against one map. Returns ``{"results": [dict per guess, as align()],
    "best": index}``: the converged result with the highest score (the highest score overall
    when none converged)."""
    return _native.ndt_align_hypotheses(_cloud("target", target), _cloud("source", source),
                                        _transforms("inits", inits, 3), float(resolution),
                                        float(leaf), str(search), _check.device(device),
                                        int(max_iters))
