"""Property tests for credit-assignment code: hypothesis strategies and invariant checkers.

credax tests itself with these; they are public so that a researcher can test their own credit
function the same way, in a few lines::

    import credax.testing as ct

    ct.check_padding_invariance(my_advantages)      # my_advantages(scores, turn_mask, group_ids)
    ct.check_permutation_equivariance(my_advantages)
    ct.check_group_isolation(my_advantages)

Each ``check_<invariant>`` draws batches with :func:`turn_batches`, runs the function under test
(hypothesis drives it, derandomized by default so a failure reproduces), and on a violation raises
an ``AssertionError`` whose message names the invariant and shows the minimal counterexample
hypothesis shrank to: the batch, the perturbation, and the entries that moved. The checkers and
strategies need ``hypothesis`` (``pip install hypothesis``, or a clone's extra:
``pip install '/path/to/credax[testing]'``), imported on their first use; ``import credax`` does
not import it, and neither do :class:`TurnBatch` and the call table ``credax.testing.calls``
(how to call each public function on a batch).

The function under test
-----------------------

By default a checker calls ``fn(scores, turn_mask, group_ids)`` with ``scores: float32[B, K]``,
``turn_mask: bool[B, K]`` and ``group_ids: int32[B]``, and expects an array of shape ``[B, K]``
(masked by ``turn_mask``) or ``[B]`` (one value per trajectory, masked by
:attr:`TurnBatch.row_mask`). Any other signature goes through ``adapter``: a function that takes
``fn`` and returns a function of a whole :class:`TurnBatch`, which also carries outcome
``rewards``, per-turn ``roles`` and a ``token_turn`` map::

    ct.check_group_isolation(credax.grpo_advantages,
                             adapter=lambda fn: lambda b: fn(b.rewards, b.group_ids, b.row_mask))
    ct.check_masked_zero(credax.best_prior, adapter=lambda fn: lambda b: fn(b.scores, b.turn_mask))

Every perturbation a checker makes is applied to all fields of the batch consistently (rows are
permuted, padded or regrouped together), so whatever fields the adapter reads stay coherent. Pass
the same ``fn`` and ``adapter`` objects to several checkers (a module-level adapter, not a fresh
lambda each time) and they share one ``jax.jit`` and its compilations.

The invariants
--------------

=================================  ==============================================================
checker                            what must hold (on valid entries unless stated)
=================================  ==============================================================
``check_padding_invariance``       new values at masked entries (NaN, inf, anything), 2 appended
                                   padded rows (joining existing or new groups) or 2 appended
                                   padded turns change no real output
``check_permutation_equivariance`` permuting the rows permutes the outputs, nothing else
``check_group_isolation``          new values in one group leave every other group's outputs
                                   unchanged; renaming the ids (a bijection onto other arbitrary
                                   ints) changes nothing: ids are labels, not indices
``check_masked_zero``              the output is exactly ``0`` at every masked entry (also on
                                   appended padded rows)
``check_finite_gradients``         ``grad(sum of valid outputs)`` with respect to every float field
                                   is finite everywhere and exactly ``0`` at masked entries
``check_jit_matches_eager``        ``jax.jit(fn)`` traces and agrees with ``fn`` under
                                   ``jax.disable_jit()``
``check_group_zero_mean``          (opt-in) outputs average to ``0`` over each (group, turn) set,
                                   or each group, with at least ``min_size`` valid entries
=================================  ==============================================================

The checks are deliberately independent: a masked entry that holds garbage fails
``check_masked_zero`` but not ``check_padding_invariance``, which compares real entries only. Not
every function should satisfy every invariant: a batch-level whitening (TRL's ``scale="batch"``)
breaks group isolation by design, and only normalised advantages have zero mean.

Sizes and compilation
---------------------

Batches take their shape from ``shapes``, a short list of ``(B, K)`` or ``(B, K, T)``, so a jitted
function compiles a bounded number of times: at most three shapes per entry (the shape itself, and
the padding variants ``(B + 2, K)`` and ``(B, K + 2)``). The checkers run ``fn`` under ``jax.jit``
(``jit=False`` for functions that cannot be traced). Hypothesis settings come from the arguments:
``max_examples``, ``derandomize`` (default ``True``: a failure repeats exactly), ``shrink``
(default ``True``; shrinking reruns ``fn`` hundreds of times, ``False`` reports the first failure
found, for fast CI); deadlines and the example database are off. Do not call a checker inside a
``@given`` test: each checker is a complete property test already.
"""


from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from . import calls as calls  # the call table: no hypothesis needed
from .batch import DEFAULT_SHAPES as DEFAULT_SHAPES
from .batch import TurnBatch as TurnBatch
from .batch import describe_batch as describe_batch

# The checkers and strategies need hypothesis: imported on first use, so that the batch and the
# call table (``credax.testing.calls``, built on the core registry ``credax._registry``) import without it.
_NEEDS_HYPOTHESIS = {
    "check_finite_gradients": "invariants",
    "check_group_isolation": "invariants",
    "check_group_zero_mean": "invariants",
    "check_jit_matches_eager": "invariants",
    "check_masked_zero": "invariants",
    "check_padding_invariance": "invariants",
    "check_permutation_equivariance": "invariants",
    "token_layouts": "strategies",
    "turn_batches": "strategies",
}


if TYPE_CHECKING:  # what a type checker and the API pages see; at run time, __getattr__ below
    from .invariants import check_finite_gradients as check_finite_gradients
    from .invariants import check_group_isolation as check_group_isolation
    from .invariants import check_group_zero_mean as check_group_zero_mean
    from .invariants import check_jit_matches_eager as check_jit_matches_eager
    from .invariants import check_masked_zero as check_masked_zero
    from .invariants import check_padding_invariance as check_padding_invariance
    from .invariants import check_permutation_equivariance as check_permutation_equivariance
    from .strategies import token_layouts as token_layouts
    from .strategies import turn_batches as turn_batches


def __getattr__(name: str):
    module = _NEEDS_HYPOTHESIS.get(name)
    if module is None:
        raise AttributeError(f"module 'credax.testing' has no attribute {name!r}")
    try:
        import hypothesis  # noqa: F401
    except ImportError as err:
        raise ImportError(
            f"credax.testing.{name} needs hypothesis: pip install hypothesis "
            "(or, from a clone, pip install '/path/to/credax[testing]')"
        ) from err
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "DEFAULT_SHAPES",
    "TurnBatch",
    "calls",
    "check_finite_gradients",
    "check_group_isolation",
    "check_group_zero_mean",
    "check_jit_matches_eager",
    "check_masked_zero",
    "check_padding_invariance",
    "check_permutation_equivariance",
    "describe_batch",
    "token_layouts",
    "turn_batches",
]
