"""TRIAGE's turn roles on the host: the codes, the judge's labels parsed into them, their checks.

The roles a judge gives turns are integer codes ``int[B, K]`` (:class:`Role`; ``-1`` =
unlabeled). This module is the host-side half of TRIAGE, below both the rollouts (``Turn.role``
is parsed here when :func:`credax.pad_rollouts` pads a batch) and the credit functions of
``_triage`` (which check ``roles`` with the same :func:`check_roles` at trace time): it imports
only ``_checks``, so neither of them has to import the other.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import numpy as np

from . import _checks


class Role(enum.IntEnum):
    """The four TRIAGE turn roles; the integer code ``-1`` means unlabeled.

    * ``DECISIVE`` (0): verifiable progress toward the goal.
    * ``EXPLORATION`` (1): changes the information state without completing anything yet.
    * ``NO_PROGRESS`` (2): harmless infrastructure (listing, re-reading, formatting).
    * ``REGRESSION`` (3): damages the state, or repeats without gaining information.
    """

    DECISIVE = 0
    EXPLORATION = 1
    NO_PROGRESS = 2
    REGRESSION = 3


NUM_ROLES = len(Role)
UNLABELED = -1
ROLE_CODES = "an integer array of Role codes"


def check_roles(roles, shape: tuple[int, ...] | None = None) -> None:
    """``roles`` (NumPy or JAX, concrete or traced) is an integer ``[B, K]`` array, of exactly
    ``shape`` when given: the rule of the compiled TRIAGE functions and of :func:`validate_roles`.
    Its values are checked by :func:`validate_roles` only (under ``jit`` a code outside
    ``[-1, 4)`` counts as unlabeled)."""
    _checks.check_int(roles, "roles", ROLE_CODES)
    _checks.check_ndim(roles, "roles", 2, "[B, K]")
    if shape is not None:
        _checks.check_shape(roles, "roles", shape, "[B, K]")


# Normalised spelling -> code. Labels are normalised by stripping, case-folding and reading "-" and
# "_" as spaces (runs of spaces collapse), so "No-Progress", " no_progress " and "NO PROGRESS" meet.
_SPELLINGS = {
    "d": Role.DECISIVE,
    "decisive": Role.DECISIVE,
    "decisive progress": Role.DECISIVE,
    "e": Role.EXPLORATION,
    "exploration": Role.EXPLORATION,
    "useful exploration": Role.EXPLORATION,
    "n": Role.NO_PROGRESS,
    "no progress": Role.NO_PROGRESS,
    "no progress infrastructure": Role.NO_PROGRESS,
    "r": Role.REGRESSION,
    "regression": Role.REGRESSION,
}
_ON_UNKNOWN = ("raise", "unlabeled")


def _normalise_label(label: str) -> str:
    return " ".join(label.replace("-", " ").replace("_", " ").split()).casefold()


def _label_code(label, row: int, turn: int, on_unknown: str) -> int:
    if label is None:
        return UNLABELED
    code = None
    # bool is an int subclass: True must not silently become EXPLORATION.
    if isinstance(label, int | np.integer) and not isinstance(label, bool | np.bool_):
        if UNLABELED <= int(label) < NUM_ROLES:
            code = int(label)
    elif isinstance(label, str):
        role = _SPELLINGS.get(_normalise_label(label))
        code = None if role is None else int(role)
    if code is not None:
        return code
    if on_unknown == "unlabeled":
        return UNLABELED
    raise ValueError(
        f"`labels`: unknown role label {label!r} at row {row}, turn {turn}. Expected D/E/N/R, "
        "decisive [progress], [useful] exploration, no progress [infrastructure], regression "
        "(any case; '-', '_' or spaces), an integer code in [-1, 4), a Role, or None for "
        "unlabeled. Pass on_unknown='unlabeled' to map unknown labels to -1."
    )


def parse_roles(
    labels,
    *,
    num_turns: int | None = None,
    on_unknown: str = "raise",
) -> np.ndarray:
    """Judge outputs to role codes, on the host: ``int32[B, num_turns]``, ``-1`` = unlabeled.

    ``labels`` holds one sequence of labels per trajectory (rows may be ragged). Each label is
    stripped of surrounding whitespace, case-folded, and ``-``/``_`` read as spaces (runs of
    spaces collapse), then matched against these spellings:

    ========================  =============================================================
    code                      accepted spellings (after normalisation)
    ========================  =============================================================
    ``0`` DECISIVE            ``d``, ``decisive``, ``decisive progress``
    ``1`` EXPLORATION         ``e``, ``exploration``, ``useful exploration``
    ``2`` NO_PROGRESS         ``n``, ``no progress``, ``no progress infrastructure``
    ``3`` REGRESSION          ``r``, ``regression``
    ``-1`` unlabeled          ``None``
    ========================  =============================================================

    So ``"D"``, ``" decisive "``, ``"Decisive progress"``, ``"decisive_progress"``,
    ``"DECISIVE-PROGRESS"``, ``"useful exploration"``, ``"No progress"``, ``"no-progress"``,
    ``"no_progress"``, ``"no-progress infrastructure"``, ``"NO_PROGRESS"`` (the :class:`Role` names)
    and ``"Regression"`` all parse. Integers in ``[-1, 4)`` (Python or NumPy ints, and :class:`Role`
    members) pass through. Nothing else is guessed: other strings (including ``""``, digit strings
    and trailing punctuation such as ``"D."``), booleans, floats (NaN included) and integers outside
    ``[-1, 4)`` are unknown labels.

    Rows shorter than the width are padded with ``-1`` at the end (pair the result with your
    ``turn_mask``: labels at padded turns are ignored by every function).

    Args:
      labels: a sequence of rows (lists, tuples or 1-D arrays; a 2-D array works too), each a
        sequence of labels. A row given as a bare string is refused (it would be read character by
        character): wrap a single trajectory as ``[labels]``.
      num_turns: width ``K`` of the result; ``None``: the longest row.
      on_unknown: ``"raise"`` (default) raises on an unknown label; ``"unlabeled"`` maps it to
        ``-1`` (plain ``A_i`` for that turn, as a missing judge answer).

    Returns:
      ``np.ndarray`` of dtype int32 and shape ``[B, num_turns]`` (``[B, longest row]``).

    Raises:
      ValueError: an unknown label (naming row, turn and label) with ``on_unknown="raise"``; a row
        longer than ``num_turns``; an unknown ``on_unknown``; a negative ``num_turns``.
      TypeError: ``labels`` or one of its rows is a string or not a sequence; ``num_turns`` is not
        an int.

    Examples:
      >>> import credax
      >>> credax.parse_roles([["D", " exploration", "No-Progress infrastructure"], ["regression", None]])
      array([[ 0,  1,  2],
             [ 3, -1, -1]], dtype=int32)
      >>> credax.parse_roles([["E", "maybe?"]], num_turns=3, on_unknown="unlabeled")
      array([[ 1, -1, -1]], dtype=int32)
      >>> credax.parse_roles([["E", "maybe?"]])
      Traceback (most recent call last):
      ...
      ValueError: `labels`: unknown role label 'maybe?' at row 0, turn 1. Expected D/E/N/R, ...
    """
    _checks.check_option(on_unknown, "on_unknown", _ON_UNKNOWN)
    if num_turns is not None:
        num_turns = _checks.check_static_int(num_turns, "num_turns")
    if isinstance(labels, str | bytes) or not _is_sequence(labels):
        raise TypeError(f"`labels` must be a sequence of rows (one per trajectory); got "
                        f"{type(labels).__name__}.")
    if not isinstance(labels, Sequence | np.ndarray):
        labels = np.asarray(labels)  # e.g. a JAX array of codes: its elements become NumPy ints
    codes = []
    for b, row in enumerate(labels):
        if isinstance(row, str | bytes) or not _is_sequence(row):
            raise TypeError(
                f"`labels` row {b} must be a sequence of labels; got {type(row).__name__} "
                f"{row!r}. Wrap a single trajectory as [labels]."
            )
        codes.append([_label_code(label, b, k, on_unknown) for k, label in enumerate(row)])
    width = num_turns if num_turns is not None else max((len(r) for r in codes), default=0)
    out = np.full((len(codes), width), UNLABELED, dtype=np.int32)
    for b, row in enumerate(codes):
        if len(row) > width:
            raise ValueError(f"`labels` row {b} has {len(row)} labels, more than "
                             f"num_turns={width}.")
        out[b, : len(row)] = row
    return out


def _is_sequence(x) -> bool:
    if isinstance(x, Sequence):
        return True
    # NumPy (and JAX) arrays of labels or codes: rows are their first axis.
    return hasattr(x, "__array__") and np.ndim(x) >= 1
