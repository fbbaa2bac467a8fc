"""NumPy float64 loop reference for ``credax.redistribute_advantages``.

Written from the formulas of its docstring, one row at a time over the list of valid turns;
values at masked turns are never read. Nothing here imports credax or JAX.
"""

from __future__ import annotations

import math

import numpy as np


def redistribute(advantages, weights, turn_mask, mode="mean_preserving") -> np.ndarray:
    """Row by row: ``A_i · w_k / Σ w`` (telescoping) or ``n · A_i · w_k / Σ w`` (mean-preserving)
    over the valid turns; all-zero weights: uniform; a negative or non-finite valid weight: NaN."""
    a, w, m = (np.asarray(advantages, np.float64), np.asarray(weights, np.float64),
               np.asarray(turn_mask, bool))
    out = np.zeros(w.shape)
    for i in range(w.shape[0]):
        turns = [k for k in range(w.shape[1]) if m[i, k]]
        if not turns:
            continue
        ws = [float(w[i, k]) for k in turns]
        if any(not (math.isfinite(v) and v >= 0) for v in ws):
            out[i, turns] = np.nan
            continue
        if math.fsum(ws) == 0:
            ws = [1.0] * len(turns)
        total = math.fsum(ws)
        scale = len(turns) if mode == "mean_preserving" else 1
        for k, v in zip(turns, ws, strict=True):
            out[i, k] = scale * a[i] * v / total
    return out
