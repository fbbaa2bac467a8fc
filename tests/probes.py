"""Bad-input probes, filed with the subject they test.

The rule, stated in every test file that holds probes: a probe of one function's or one value's
bad input lives in that subject's test file, in its table ``probe = Probes()``, run there by
``test_bad_input``; a table that sweeps one kind of bad input across many functions is a class of
rows of the one table-driven sweep, ``tests/test_bad_input.py``. A probe asserts a named error
(the message names the argument or field) or the documented value, worked by hand in the comment
next to it or compared with an independent NumPy computation; ``docs/guides/degenerate-input.md``
lists the behaviours.

``@probe(kind, name)`` registers a probe under the test id ``kind.name``. The kinds of bad input:

* ``nonfinite``: NaN / inf at valid entries make NaN of exactly the outputs whose formula
  includes them, nothing else changes;
* ``narrow``: int8 / int16 / uint8 / uint16 tokens and turn maps never wrap;
* ``hyper``: concrete hyperparameters of any type (Python, NumPy, JAX) are range-checked;
* ``neg_inf``: degenerate (``-inf``) log-probs;
* ``f32``: the float32 range (group statistics of huge and tiny values, float64 input beyond it);
* ``tie``: a ratio exactly on a clip bound gets the full gradient (``torch.clamp``);
* ``named``: errors that used to come from deep inside JAX are named errors;
* ``contract``: documented contracts;
* ``ids``: ids of every hashable kind, 64-bit ids, narrow integer ids;
* ``norm``: :class:`credax.Normalization` built or rebuilt through pytree operations, copies,
  the removed ``**preset`` forms;
* ``files``: the rollout files (never a destroyed or partial file; every reader failure names
  file and line);
* ``torch``: unsigned and meta-device tensors in the torch bridges;
* ``gae``: zero-length axes, per-row λ / γ;
* ``vocab``: V = 0, ``-inf`` and near one-hot logits, token ids outside ``[0, V)``;
* ``testing``: the checkers of ``credax.testing`` against a deliberately wrong function.

Shapes are small and repeated so a file compiles few programs.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

NAN, INF = float("nan"), float("inf")
# A turn batch with one NaN score (row 0, turn 1) in prompt group 0 (rows 0 and 1; group 1 is
# clean), its clean twin (0.5 there), and the rows of group 0: the non-finite probes of the turn
# estimators (TCPO, MT-GRPO, GiGPO) share it.
IDS4 = np.array([0, 0, 1, 1])
S4 = np.array([[0.0, NAN, 1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.5, 1.0]], np.float32)
S4_CLEAN = np.where(np.isnan(S4), 0.5, S4).astype(np.float32)
M43 = np.ones((4, 3), bool)
ROWS01 = np.array([[True] * 3, [True] * 3, [False] * 3, [False] * 3])


class Probes(dict):
    """A file's table of probes: ``{"kind.name": probe}``, filled by ``@probes(kind, name)``."""

    def __call__(self, kind: str, name: str):
        """Register a probe under the test id ``kind.name`` (unique in its file)."""

        def decorate(fn):
            key = f"{kind}.{name}"
            assert key not in self, key
            self[key] = fn
            return fn

        return decorate

    def raising(self, kind: str, prefix: str, calls: dict, exc, match: str) -> None:
        """One probe per entry of ``calls`` (label -> no-argument call) that must raise ``exc``."""
        for label, call in calls.items():

            def _p(call=call):
                raises(exc, match, call)

            self(kind, f"{prefix}_{label}")(_p)


def raises(exc, match: str, fn, *args, **kwargs):
    with pytest.raises(exc, match=match):
        fn(*args, **kwargs)


def deprecated(options):
    """``pytest.warns`` for an options dict holding a deprecated spelling (center=False,
    singleton="center": they still work, and warn), else a null context."""
    if options.get("center") is False or options.get("singleton") == "center":
        return pytest.warns(DeprecationWarning, match="is deprecated")
    return contextlib.nullcontext()


def nan_exactly(out, expected):
    """``out`` is NaN exactly where ``expected`` is true, finite elsewhere."""
    out = np.asarray(out, np.float64)
    expected = np.asarray(expected, bool)
    np.testing.assert_array_equal(np.isnan(out), expected)
    assert np.isfinite(out[~expected]).all()


def same_where(out, clean, where):
    """``out`` equals the clean run exactly at ``where`` (the entries the bad value cannot reach)."""
    out, clean = np.asarray(out), np.asarray(clean)
    np.testing.assert_array_equal(out[np.asarray(where, bool)], clean[np.asarray(where, bool)])
