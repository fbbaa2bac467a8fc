"""The batch every checker generates and reports: :class:`TurnBatch` and :func:`describe_batch`
(defined in the package core, ``credax._batch``, re-exported here), and the checkers' sizes."""

from __future__ import annotations

import math

import numpy as np

from .._batch import TurnBatch as TurnBatch
from .._batch import describe_batch as describe_batch
from .._batch import fmt as fmt

# B = 8 holds two or more blocks of 2 or 4 rows: a grouping by position, x.reshape(-1, G, K), is
# then wrong on a permuted batch (with 7 rows it failed inside the reshape, with 4 it is one block)
DEFAULT_SHAPES: tuple[tuple[int, int], ...] = ((4, 3), (8, 4))
DEFAULT_MAX_EXAMPLES = 50
PAD_ROWS = 2  # rows / turns appended by the padding variants (fixed: bounded compilation)
PAD_TURNS = 2
INT32 = np.iinfo(np.int32)

# Values that padding holds. The first is what a shrunk counterexample shows, so generated batches
# shrink to NaN padding (the value that exposes a mask that multiplies) and refills to 0.
PAD_NONFINITE = (math.nan, math.inf, -math.inf, 1e30, -3.5, 0.0)
PAD_FINITE = (1e30, -3.5, 0.0, 7.0)
