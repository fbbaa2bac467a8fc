"""Rollout files: credax's own JSONL schema, and the rollout dump verl writes.

**credax rollouts JSONL, version 1.** One rollout per line, a JSON object (UTF-8; blank lines are
skipped). Unknown keys are an error, so a misspelt field never reads as a default:

==================  ========================================  ==================================
key                 value                                     meaning
==================  ========================================  ==================================
``prompt_id``       string, integer, or array of those        required; same id = same group
``turns``           non-empty array of turn objects           required, in order
``prompt``          array of token ids (ints ``>= 0``)        optional, default ``[]``
``outcome``         number or ``null``                        optional; ``null``: last score
``meta``            object                                    optional, carried along unread
==================  ========================================  ==================================

and each turn object:

==================  ========================================  ==================================
key                 value                                     meaning
==================  ========================================  ==================================
``action``          array of token ids                        required; generated, gets credit
``score``           finite number                             required; verifier score
``observation``     array of token ids                        optional; tool output, no credit
``role``            string, integer or ``null``               optional judge label (parse_roles)
``reward``          finite number                             optional environment reward, 0
``anchor``          string, integer or ``null``               optional state key (GiGPO)
``logprobs``        array of finite numbers or ``null``       optional; sampler log-prob of each
                                                              action token (``old_logp``)
==================  ========================================  ==================================

A JSON array ``prompt_id`` becomes a tuple (hashable); integers of any size are kept exactly.
:func:`write_rollouts` writes this schema, :func:`read_rollouts` reads it.

**verl's rollout dump** (``trainer.rollout_data_dir``): verl's ``RayPPOTrainer`` writes one file
``{global_step}.jsonl`` per training step into that directory, one line per response with the keys
``input`` (the decoded prompt), ``output`` (the decoded response), ``gts`` (ground truth, may be
``null``; absent in older versions), ``score`` (the summed token-level score), ``step``, and every
extra reward field of the step (``acc``, ``pred``, ``request_id``, ...). It holds text, not token
ids, and no group uid: a verl rollout is read as a one-turn :class:`~credax.Rollout` whose
``prompt_id`` is ``(step, input)`` (the responses to one prompt at one step form a group; verl
repeats each prompt ``rollout.n`` times with the same text), ``score`` = ``outcome`` = verl's
score, no tokens, and the text and extras in ``meta``. Read from the writer
``verl/trainer/ppo/ray_trainer.py`` (``_dump_generations``, called from ``fit``) of
volcengine/verl at commit 3d9df73353a546a98235b38653c2c163efb51420.

Errors: a bad file raises :class:`RolloutFormatError` (a ``ValueError``) naming the file, the
1-based line and the field (``turns[2].score``); nothing is returned from a file that has an error.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterable
from typing import Any

from ._rollouts import Rollout, Turn

FORMATS = ("credax", "verl")
_ROLLOUT_KEYS = {"prompt_id", "turns", "prompt", "outcome", "meta"}
_TURN_KEYS = {"action", "score", "observation", "role", "reward", "anchor", "logprobs"}
_VERL_REQUIRED = ("input", "output", "score", "step")
_VERL_FILE = re.compile(r"^(\d+)\.jsonl$")
# Report progress about every this many bytes (a callback per line would cost more than parsing).
_PROGRESS_EVERY = 1 << 20


class RolloutFormatError(ValueError):
    """A rollouts file does not follow its format. ``path``, ``line`` (1-based) and ``field``
    (``None`` for a line that is not JSON) say where."""

    def __init__(self, path: str, line: int, field: str | None, message: str):
        self.path, self.line, self.field = path, line, field
        where = f"{path}:{line}" + (f": field `{field}`" if field else "")
        super().__init__(f"{where}: {message}")


class _Bad(Exception):
    """Raised while validating one line; turned into a RolloutFormatError with file and line."""

    def __init__(self, field: str | None, message: str):
        super().__init__(message)
        self.field, self.message = field, message


def _number(value, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Bad(field, f"expected a number; got {type(value).__name__} {value!r}.")
    value = float(value)
    if not math.isfinite(value):
        raise _Bad(field, f"expected a finite number; got {value}.")
    return value


def _token_list(value, field: str) -> list:
    if not isinstance(value, list):
        raise _Bad(field, f"expected an array of token ids; got {type(value).__name__}.")
    for j, x in enumerate(value):
        if type(x) is not int or x < 0:  # bool is an int subclass: `type(x) is int` refuses it
            raise _Bad(f"{field}[{j}]", f"expected a token id (an int >= 0); got {x!r}.")
    return value


def _logprobs(value, n_action: int, field: str) -> list | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != n_action:
        got = f"{len(value)} numbers" if isinstance(value, list) else type(value).__name__
        raise _Bad(field, f"expected an array of {n_action} numbers (one per action token) or "
                          f"null; got {got}.")
    return [_number(x, f"{field}[{j}]") for j, x in enumerate(value)]


def _key(value, field: str, *, nullable: bool):
    if value is None and nullable:
        return None
    if isinstance(value, str) or (type(value) is int):
        return value
    if isinstance(value, list) and field == "prompt_id" and value:
        return tuple(_key(v, f"{field}[{j}]", nullable=False) for j, v in enumerate(value))
    allowed = "a string, an integer" + (" or null" if nullable else "")
    if field == "prompt_id":
        allowed += " or an array of those"
    raise _Bad(field, f"expected {allowed}; got {type(value).__name__} {value!r}.")


def _credax_line(obj: Any) -> Rollout:
    if not isinstance(obj, dict):
        raise _Bad(None, f"expected a JSON object (one rollout); got {type(obj).__name__}.")
    unknown = set(obj) - _ROLLOUT_KEYS
    if unknown:
        raise _Bad(sorted(unknown)[0], f"unknown key; a rollout has {sorted(_ROLLOUT_KEYS)}.")
    for required in ("prompt_id", "turns"):
        if required not in obj:
            raise _Bad(required, "missing (required).")
    prompt_id = _key(obj["prompt_id"], "prompt_id", nullable=False)
    turns_raw = obj["turns"]
    if not isinstance(turns_raw, list) or not turns_raw:
        raise _Bad("turns", "expected a non-empty array of turn objects.")
    turns = []
    for k, t in enumerate(turns_raw):
        f = f"turns[{k}]"
        if not isinstance(t, dict):
            raise _Bad(f, f"expected a turn object; got {type(t).__name__}.")
        unknown = set(t) - _TURN_KEYS
        if unknown:
            raise _Bad(f"{f}.{sorted(unknown)[0]}", f"unknown key; a turn has {sorted(_TURN_KEYS)}.")
        for required in ("action", "score"):
            if required not in t:
                raise _Bad(f"{f}.{required}", "missing (required).")
        role = t.get("role")
        if role is not None and not isinstance(role, str) and type(role) is not int:
            raise _Bad(f"{f}.role", f"expected a label string, an integer or null; got {role!r}.")
        turns.append(Turn(
            action=_token_list(t["action"], f"{f}.action"),
            score=_number(t["score"], f"{f}.score"),
            observation=_token_list(t.get("observation", []), f"{f}.observation"),
            role=role,
            reward=_number(t.get("reward", 0.0), f"{f}.reward"),
            anchor=_key(t.get("anchor"), f"{f}.anchor", nullable=True),
            logprobs=_logprobs(t.get("logprobs"), len(t["action"]), f"{f}.logprobs"),
        ))
    outcome = obj.get("outcome")
    if outcome is not None:
        outcome = _number(outcome, "outcome")
    meta = obj.get("meta", {})
    if not isinstance(meta, dict):
        raise _Bad("meta", f"expected an object; got {type(meta).__name__}.")
    return Rollout(prompt_id, turns, prompt=_token_list(obj.get("prompt", []), "prompt"),
                   outcome=outcome, meta=meta)


def _verl_line(obj: Any) -> Rollout:
    if not isinstance(obj, dict):
        raise _Bad(None, f"expected a JSON object (one verl sample); got {type(obj).__name__}.")
    for required in _VERL_REQUIRED:
        if required not in obj:
            raise _Bad(required, "missing (verl writes input, output, score and step on every line).")
    for name in ("input", "output"):
        if not isinstance(obj[name], str):
            raise _Bad(name, f"expected the decoded text (a string); got {type(obj[name]).__name__}.")
    step = obj["step"]
    if type(step) is not int:
        raise _Bad("step", f"expected the integer global step; got {step!r}.")
    score = _number(obj["score"], "score")
    meta = dict(obj)
    return Rollout((step, obj["input"]), [Turn((), score)], outcome=score, meta=meta)


_PARSERS = {"credax": _credax_line, "verl": _verl_line}


def _files(path: str, fmt: str) -> list[str]:
    if not os.path.isdir(path):
        if not os.path.exists(path):
            raise FileNotFoundError(f"`path`: no such file or directory: {path}")
        return [path]
    if fmt == "verl":
        steps = sorted((int(m.group(1)), name) for name in os.listdir(path)
                       if (m := _VERL_FILE.match(name)))
        files = [os.path.join(path, name) for _, name in steps]
    else:
        files = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".jsonl"))
    if not files:
        raise FileNotFoundError(f"`path`: no rollout files (*.jsonl) in the directory {path}")
    return files


def read_rollouts(
    path: str | os.PathLike,
    *,
    format: str = "credax",
    progress: Callable[[int, int], None] | None = None,
) -> list[Rollout]:
    """Read a rollouts file (or a directory of them) into a list of :class:`~credax.Rollout`.

    See the module docstring for both formats. A directory reads every ``*.jsonl`` in it, in name
    order (verl: every ``{step}.jsonl``, in step order). The whole input is validated before
    anything is returned: a bad line raises and no partial list escapes.

    Args:
      path: a ``.jsonl`` file or a directory.
      format: ``"credax"`` (the schema of this module) or ``"verl"`` (``trainer.rollout_data_dir``).
      progress: optional ``callback(bytes_read, total_bytes)``, called about every MiB and once at
        the end (``credax.explain`` prints a progress line with it).

    Returns:
      ``list[Rollout]``, in file and line order; each rollout's ``meta`` gains ``"source"``:
      ``"file:line"`` (verl: the whole line's other keys are in ``meta`` too).

    Raises:
      RolloutFormatError: a line that is not JSON or breaks the format (file, line and field in
        the message and as attributes).
      FileNotFoundError: no such path, or a directory without rollout files.
      ValueError: an unknown ``format``.

    Examples:
      >>> import credax, tempfile, os
      >>> d = tempfile.mkdtemp()
      >>> path = os.path.join(d, "r.jsonl")
      >>> credax.write_rollouts(path, [credax.Rollout("p", [credax.Turn([4, 5], 1.0)])])
      >>> [r.turns[0].score for r in credax.read_rollouts(path)]
      [1.0]
      >>> with open(path, "a") as f:
      ...     _ = f.write('{"prompt_id": "p", "turns": [{"action": [1], "score": "high"}]}\\n')
      >>> credax.read_rollouts(path)
      Traceback (most recent call last):
      ...
      credax._readers.RolloutFormatError: .../r.jsonl:2: field `turns[0].score`: expected a number; ...
    """
    if format not in FORMATS:
        raise ValueError(f"`format` must be one of {list(FORMATS)}; got {format!r}.")
    parse = _PARSERS[format]
    files = _files(os.fspath(path), format)
    total = sum(os.path.getsize(f) for f in files)
    done = 0
    next_report = _PROGRESS_EVERY
    out: list[Rollout] = []
    for name in files:
        with open(name, "rb") as fh:  # bytes: progress counts what the file size counts
            for number, line in enumerate(fh, start=1):
                if progress is not None:
                    done += len(line)
                    if done >= next_report:
                        progress(min(done, total), total)
                        next_report = done + _PROGRESS_EVERY
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as err:
                    raise RolloutFormatError(name, number, None, f"not valid JSON ({err.msg} at "
                                                                 f"column {err.colno}).") from None
                except UnicodeDecodeError as err:
                    raise RolloutFormatError(name, number, None,
                                             f"not UTF-8 ({err.reason}).") from None
                try:
                    rollout = parse(obj)
                except _Bad as bad:
                    raise RolloutFormatError(name, number, bad.field, bad.message) from None
                rollout.meta["source"] = f"{name}:{number}"
                out.append(rollout)
    if progress is not None:
        progress(total, total)
    return out


def _jsonable_key(value, field: str):
    if isinstance(value, tuple):
        return [_jsonable_key(v, f"{field}[{j}]") for j, v in enumerate(value)]
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise TypeError(f"`{field}`: ids written to credax JSONL must be strings, ints or tuples of "
                    f"those; got {type(value).__name__} {value!r}.")


def _json_number(value, field: str) -> float:
    """A score, reward or outcome as a finite float: JSON has no NaN or inf."""
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"`{field}` must be finite to be written (JSON has no NaN or inf); got "
                         f"{value}.")
    return value


def _rollout_json(rollout: Rollout, where: str) -> dict:
    """One rollout as the JSON object of the credax schema (the inverse of reading a line)."""
    obj: dict[str, Any] = {"prompt_id": _jsonable_key(rollout.prompt_id, f"{where}.prompt_id")}
    if len(rollout.prompt):
        obj["prompt"] = [int(x) for x in rollout.prompt]
    turns = []
    for k, t in enumerate(rollout.turns):
        tw = f"{where}.turns[{k}]"
        turn: dict[str, Any] = {"action": [int(x) for x in t.action],
                                "score": _json_number(t.score, f"{tw}.score")}
        if len(t.observation):
            turn["observation"] = [int(x) for x in t.observation]
        if t.role is not None:
            turn["role"] = t.role if isinstance(t.role, str) else int(t.role)
        if t.reward:
            turn["reward"] = _json_number(t.reward, f"{tw}.reward")
        if t.anchor is not None:
            turn["anchor"] = _jsonable_key(t.anchor, f"{tw}.anchor")
        if t.logprobs is not None:
            turn["logprobs"] = [_json_number(x, f"{tw}.logprobs[{j}]")
                                for j, x in enumerate(t.logprobs)]
        turns.append(turn)
    obj["turns"] = turns
    if rollout.outcome is not None:
        obj["outcome"] = _json_number(rollout.outcome, f"{where}.outcome")
    meta = {k: v for k, v in rollout.meta.items() if k != "source"}
    if meta:
        try:
            json.dumps(meta, allow_nan=False)
        except (TypeError, ValueError) as err:
            raise type(err)(f"`{where}.meta` must be JSON with finite numbers to be written: "
                            f"{err}.") from None
        obj["meta"] = meta
    return obj


def write_rollouts(path: str | os.PathLike, rollouts: Iterable[Rollout]) -> None:
    """Write rollouts as credax JSONL (one line each; ``meta["source"]`` is not written).

    Every rollout is checked and serialised before the file is opened, so a rollout that cannot
    be written leaves no partial file behind.

    Raises:
      TypeError: an id that JSON cannot carry exactly (anything but strings, ints, tuples), a
        ``meta`` JSON cannot carry; the message names the field (``rollouts[i].prompt_id``).
      ValueError: a non-finite score, reward or outcome, or a NaN/inf in ``meta`` (JSON has no
        NaN); the message names the field (``rollouts[i].turns[k].score``).
    """
    lines = [json.dumps(_rollout_json(r, f"rollouts[{i}]"), ensure_ascii=False, allow_nan=False)
             for i, r in enumerate(rollouts)]
    with open(path, "w", encoding="utf-8") as fh:
        for line in lines:
            fh.write(line + "\n")
