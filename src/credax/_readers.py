"""Rollout files: credax's own JSONL schema, and the rollout dump verl writes.

**credax rollouts JSONL, version 1.** One rollout per line, a JSON object (UTF-8; blank lines are
skipped). Unknown keys are an error, so a misspelt field never reads as a default:

==================  ========================================  ==================================
key                 value                                     meaning
==================  ========================================  ==================================
``prompt_id``       string, integer, or array of those        required; same id = same group
``turns``           non-empty array of turn objects           required, in order
``prompt``          array of token ids (ints in [0, 2**31))   optional, default ``[]``
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
Token ids are ints in ``[0, 2**31)`` (every batch holds them in int32). Text must be valid
Unicode: a lone surrogate escape (``"\\ud800"`` without its pair) is refused, as UTF-8 cannot
carry it. :func:`write_rollouts` writes this schema, each line checked by :func:`read_rollouts`'s
own rules, and replaces a file atomically; :func:`read_rollouts` reads it.

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

**Tunix trajectories** (``google-tunix`` 0.1.7's agentic learner): one Tunix ``TrajectoryItem``
per line, as Tunix serializes its dataclasses (``dataclasses.asdict``, or
``tunix.utils.trajectory_logger``'s JSON-able form): ``group_id`` (the prompt: same id = same
group), ``traj`` (the ``Trajectory``: ``steps``, ``reward``, ``status``, and ``prompt_tokens``
where the engine set it), ``pair_index`` and the rest. Each step becomes a :class:`~credax.Turn`:
``assistant_tokens`` is the action, ``env_tokens`` the observation, ``reward`` the reward,
``logprobs`` the sampler's log-probs; its ``score`` is the running total of the rewards so far
(the progress TCPO reads, as :func:`credax.tunix.turns_from_steps` gives it) and
``outcome`` is Tunix's ``traj.reward`` (the sum of the step rewards). Other keys are carried in
``meta`` (``pair_index``, ``status``); a ``Trajectory`` of no step is an error, as is a step with
no ``reward``. :func:`rollouts_from_tunix` reads the same from Tunix's objects in memory. Read
from ``tunix/rl/agentic/agents/agent_types.py`` (``Step``, ``Trajectory``, ``TrajectoryItem``)
and ``trajectory/trajectory_collect_engine.py`` of ``google-tunix`` 0.1.7.

Errors: a bad file raises :class:`RolloutFormatError` (a ``ValueError``) naming the file, the
1-based line and the field (``turns[2].score``); nothing is returned from a file that has an error.
That includes what Python's JSON parser itself refuses: nesting deeper than its recursion limit,
integer literals beyond its digit limit (4300), and integers too large for a float as a number.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from ._rollouts import Rollout, Turn

FORMATS = ("credax", "verl", "tunix")
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


_TOKEN_LIMIT = 2**31  # token ids are int32 in every batch (pad_rollouts refuses larger ones)


def _number(value, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Bad(field, f"expected a number; got {type(value).__name__} {value!r}.")
    try:
        value = float(value)
    except OverflowError:  # an integer literal of hundreds of digits
        raise _Bad(field, "expected a finite number; got an integer too large for a float.") from None
    if not math.isfinite(value):
        raise _Bad(field, f"expected a finite number; got {value}.")
    return value


def _token_list(value, field: str) -> list:
    if not isinstance(value, list):
        raise _Bad(field, f"expected an array of token ids; got {type(value).__name__}.")
    for j, x in enumerate(value):
        # bool is an int subclass: `type(x) is int` refuses it
        if type(x) is not int or x < 0 or x >= _TOKEN_LIMIT:
            shown = x if type(x) is not int or x < 10**30 else f"an integer of {len(str(x))} digits"
            raise _Bad(f"{field}[{j}]", f"expected a token id (an int in [0, 2**31)); got {shown!r}.")
    return value


def _surrogate_path(value, path: str):
    """The path of the first string (or mapping key) in ``value`` holding a lone surrogate, or
    ``None``. Lone surrogates are not Unicode scalar values: UTF-8 cannot encode them."""
    if isinstance(value, str):
        return path if any("\ud800" <= c <= "\udfff" for c in value) else None
    if isinstance(value, dict):
        for k, v in value.items():
            sub = f"{path}.{k}" if path else str(k)
            if isinstance(k, str) and _surrogate_path(k, "x") is not None:
                return (path or "") + " (a key)"
            found = _surrogate_path(v, sub)
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for j, v in enumerate(value):
            found = _surrogate_path(v, f"{path}[{j}]")
            if found is not None:
                return found
    return None


# A JSON escape of a surrogate code point: the only way a lone surrogate gets into parsed text
# (raw bytes are checked by the UTF-8 decoder). Pairs are valid and are looked at only here.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


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
    if unknown and {"input", "output", "score"} <= set(obj):
        raise _Bad(None, "this is a line of verl's rollout dump (`trainer.rollout_data_dir`: keys "
                   "`input`, `output`, `score`), not credax's schema: read it with "
                   "`read_rollouts(path, format='verl')` (`python -m credax.explain PATH "
                   "--format verl`).")
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


def _tunix_tokens(value, field: str) -> list:
    return [] if value is None else _token_list(value, field)


def _tunix_line(obj: Any) -> Rollout:
    if not isinstance(obj, dict):
        raise _Bad(None, f"expected a JSON object (one Tunix TrajectoryItem); got {type(obj).__name__}.")
    for required in ("group_id", "traj"):
        if required not in obj:
            raise _Bad(required, "missing (a Tunix TrajectoryItem has group_id and traj).")
    prompt_id = _key(obj["group_id"], "group_id", nullable=False)
    traj = obj["traj"]
    if not isinstance(traj, dict):
        raise _Bad("traj", f"expected the Trajectory as an object; got {type(traj).__name__}.")
    steps = traj.get("steps")
    if not isinstance(steps, list) or not steps:
        raise _Bad("traj.steps", "expected a non-empty array of steps (a Trajectory of no step has "
                                 "no turn to credit).")
    turns, total = [], 0.0
    for k, step in enumerate(steps):
        f = f"traj.steps[{k}]"
        if not isinstance(step, dict):
            raise _Bad(f, f"expected a step object; got {type(step).__name__}.")
        if "reward" not in step:
            raise _Bad(f"{f}.reward", "missing (every Tunix step has a reward).")
        reward = _number(step["reward"], f"{f}.reward")
        action = _tunix_tokens(step.get("assistant_tokens"), f"{f}.assistant_tokens")
        total += reward
        turns.append(Turn(action=action, score=total, reward=reward,
                          observation=_tunix_tokens(step.get("env_tokens"), f"{f}.env_tokens"),
                          logprobs=_logprobs(step.get("logprobs"), len(action), f"{f}.logprobs")))
    outcome = traj.get("reward")
    outcome = total if outcome is None else _number(outcome, "traj.reward")
    meta = {k: v for k, v in obj.items() if k not in ("group_id", "traj")}
    if "status" in traj:
        meta["status"] = traj["status"]
    return Rollout(prompt_id, turns, prompt=_tunix_tokens(traj.get("prompt_tokens"), "traj.prompt_tokens"),
                   outcome=outcome, meta=meta)


def _plain(value):
    """Tunix's objects as the JSON-able values its trajectory logger writes (dataclasses as dicts,
    arrays as lists, NumPy scalars as Python numbers, enums by name)."""
    import dataclasses
    import enum

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        for extra in ("prompt_tokens",):  # set on the Trajectory by Tunix's engine, not a field
            if hasattr(value, extra) and extra not in out:
                out[extra] = _plain(getattr(value, extra))
        return out
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def rollouts_from_tunix(items: Iterable[Any]) -> list[Rollout]:
    """Tunix's agentic trajectories, in memory, as :class:`~credax.Rollout` s (one per trajectory).

    ``items`` are Tunix ``TrajectoryItem`` s (``tunix.rl.agentic.agents.agent_types``; the
    ``group_id`` is the prompt, ``traj`` the ``Trajectory``) or their dicts; each is read by the
    rules of ``read_rollouts(..., format="tunix")`` (the module docstring): one turn per step,
    ``assistant_tokens`` the action, ``env_tokens`` the observation, ``reward`` the reward, the
    running total of the rewards the score, ``traj.reward`` the outcome.

    Args:
      items: an iterable of ``TrajectoryItem`` objects or dicts.

    Returns:
      ``list[Rollout]`` in order; ``meta["source"]`` is ``"items[i]"``.

    Raises:
      RolloutFormatError: an item that breaks the format, naming ``items[i]`` and the field
        (``traj.steps[1].reward``).

    Examples:
      >>> import credax
      >>> item = {"group_id": 7, "pair_index": 0, "traj": {"reward": 1.0, "steps": [
      ...     {"assistant_tokens": [5, 6], "env_tokens": [9], "reward": 0.25},
      ...     {"assistant_tokens": [7], "env_tokens": None, "reward": 0.75}]}}
      >>> (r,) = credax.rollouts_from_tunix([item])
      >>> r.prompt_id, [t.score for t in r.turns], [t.reward for t in r.turns], r.outcome
      (7, [0.25, 1.0], [0.25, 0.75], 1.0)
    """
    out = []
    for i, item in enumerate(items):
        try:
            rollout = _tunix_line(_plain(item))
        except _Bad as bad:
            raise RolloutFormatError(f"items[{i}]", i + 1, bad.field, bad.message) from None
        rollout.meta["source"] = f"items[{i}]"
        out.append(rollout)
    return out


_PARSERS = {"credax": _credax_line, "verl": _verl_line, "tunix": _tunix_line}


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
        wanted = "{global_step}.jsonl, verl's names" if fmt == "verl" else "*.jsonl"
        inside = sorted(n for n in os.listdir(path) if os.path.isdir(os.path.join(path, n))
                        and any(f.endswith(".jsonl") for f in os.listdir(os.path.join(path, n))))
        hint = (f"; its subdirectories {inside[:3]} hold some: pass one of them (a directory is "
                "read one level deep)" if inside else "")
        raise FileNotFoundError(f"`path`: no rollout files ({wanted}) in the directory {path}{hint}")
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
      format: ``"credax"`` (the schema of this module), ``"verl"`` (``trainer.rollout_data_dir``)
        or ``"tunix"`` (Tunix ``TrajectoryItem`` s, one a line).
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
                except RecursionError:
                    raise RolloutFormatError(name, number, None, "not readable JSON: arrays or "
                                             "objects nested too deeply.") from None
                except ValueError as err:  # Python's limit on the digits of an integer literal
                    raise RolloutFormatError(name, number, None, f"not readable JSON: an integer "
                                             f"literal with too many digits ({err}).") from None
                if _SURROGATE_ESCAPE.search(line):
                    field = _surrogate_path(obj, "")
                    if field is not None:
                        raise RolloutFormatError(name, number, field, "text with a lone surrogate "
                                                 "escape (\\ud800-\\udfff without its pair) is not "
                                                 "valid Unicode.")
                try:
                    rollout = parse(obj)
                except _Bad as bad:
                    raise RolloutFormatError(name, number, bad.field, bad.message) from None
                except RecursionError:  # a deeply nested prompt_id
                    raise RolloutFormatError(name, number, None, "not a rollout: arrays nested "
                                             "too deeply.") from None
                rollout.meta["source"] = f"{name}:{number}"
                out.append(rollout)
    if progress is not None:
        progress(total, total)
    return out


def _jsonable_key(value, field: str, *, tuples: bool):
    """A prompt id (``tuples``: strings, ints or a non-empty flat tuple of those) or an anchor
    (strings or ints) as the JSON value :func:`read_rollouts` reads back as the same id."""
    if isinstance(value, str):
        return str(value)  # np.str_ too
    if isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_):
        return int(value)
    if tuples and isinstance(value, tuple):
        if not value:
            raise ValueError(f"`{field}`: an empty tuple cannot be written (read_rollouts needs a "
                             "non-empty array of strings and ints).")
        return [_jsonable_key(v, f"{field}[{j}]", tuples=False) for j, v in enumerate(value)]
    allowed = "strings, ints or non-empty tuples of those" if tuples else "strings or ints"
    raise TypeError(f"`{field}`: ids written to credax JSONL must be {allowed}; got "
                    f"{type(value).__name__} {value!r}.")


def _json_number(value, field: str) -> float:
    """A score, reward or outcome as a finite float: JSON has no NaN or inf."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer |
                                                            np.floating):
        raise TypeError(f"`{field}` must be a number to be written; got {type(value).__name__} "
                        f"{value!r}.")
    try:
        value = float(value)
    except OverflowError:
        raise ValueError(f"`{field}` must be finite to be written; got an integer too large for a "
                         "float.") from None
    if not math.isfinite(value):
        raise ValueError(f"`{field}` must be finite to be written (JSON has no NaN or inf); got "
                         f"{value}.")
    return value


def _json_tokens(values, field: str) -> list[int]:
    """Token ids as a list of Python ints in ``[0, 2**31)``, as :func:`read_rollouts` accepts."""
    if isinstance(values, np.ndarray) and values.ndim == 1 and values.dtype.kind in "iu":
        bad = np.flatnonzero((values < 0) | (values >= _TOKEN_LIMIT))
        if bad.size:
            j = int(bad[0])
            raise ValueError(f"`{field}[{j}]`: token ids must lie in [0, 2**31); got {values[j]}.")
        return values.tolist()
    out = []
    for j, x in enumerate(values):
        if isinstance(x, bool | np.bool_) or not isinstance(x, int | np.integer):
            raise TypeError(f"`{field}[{j}]`: expected a token id (an int in [0, 2**31)); got "
                            f"{type(x).__name__} {x!r}.")
        if not 0 <= x < _TOKEN_LIMIT:
            raise ValueError(f"`{field}[{j}]`: token ids must lie in [0, 2**31); got {x}.")
        out.append(int(x))
    return out


def _rollout_json(rollout: Rollout, where: str) -> dict:
    """One rollout as the JSON object of the credax schema (the inverse of reading a line)."""
    obj: dict[str, Any] = {"prompt_id": _jsonable_key(rollout.prompt_id, f"{where}.prompt_id",
                                                      tuples=True)}
    if len(rollout.prompt):
        obj["prompt"] = _json_tokens(rollout.prompt, f"{where}.prompt")
    raw_turns = rollout.turns
    if isinstance(raw_turns, str | bytes | Turn) or not hasattr(raw_turns, "__iter__"):
        raise TypeError(f"`{where}.turns` must be a sequence of credax.Turn; got "
                        f"{type(raw_turns).__name__}.")
    turns = []
    for k, t in enumerate(raw_turns):
        tw = f"{where}.turns[{k}]"
        if not isinstance(t, Turn):
            raise TypeError(f"`{tw}` must be a credax.Turn; got {type(t).__name__}.")
        turn: dict[str, Any] = {"action": _json_tokens(t.action, f"{tw}.action"),
                                "score": _json_number(t.score, f"{tw}.score")}
        if len(t.observation):
            turn["observation"] = _json_tokens(t.observation, f"{tw}.observation")
        if t.role is not None:
            if isinstance(t.role, str):
                turn["role"] = str(t.role)
            elif isinstance(t.role, int | np.integer) and not isinstance(t.role, bool | np.bool_):
                turn["role"] = int(t.role)  # credax.Role (an IntEnum) too
            else:
                raise TypeError(f"`{tw}.role` must be a label string, an integer or None to be "
                                f"written; got {type(t.role).__name__} {t.role!r}.")
        reward = _json_number(t.reward, f"{tw}.reward")
        if reward:
            turn["reward"] = reward
        if t.anchor is not None:
            turn["anchor"] = _jsonable_key(t.anchor, f"{tw}.anchor", tuples=False)
        if t.logprobs is not None:
            values = [_json_number(v, f"{tw}.logprobs[{j}]") for j, v in enumerate(t.logprobs)]
            if len(values) != len(turn["action"]):
                raise ValueError(f"`{tw}.logprobs` has {len(values)} values for "
                                 f"{len(turn['action'])} action tokens.")
            turn["logprobs"] = values
        turns.append(turn)
    if not turns:
        raise ValueError(f"`{where}.turns`: a rollout needs at least one turn (read_rollouts "
                         "refuses an empty one).")
    obj["turns"] = turns
    if rollout.outcome is not None:
        obj["outcome"] = _json_number(rollout.outcome, f"{where}.outcome")
    if not isinstance(rollout.meta, Mapping):
        raise TypeError(f"`{where}.meta` must be a mapping (a JSON object) to be written; got "
                        f"{type(rollout.meta).__name__}.")
    meta = {k: v for k, v in rollout.meta.items() if k != "source"}
    if meta:
        try:
            json.dumps(meta, allow_nan=False)
        except (TypeError, ValueError) as err:
            raise type(err)(f"`{where}.meta` must be JSON with finite numbers to be written: "
                            f"{err}.") from None
        obj["meta"] = meta
    return obj


def _line(rollout, where: str) -> bytes:
    """One rollout as the UTF-8 bytes of its line, checked as :func:`read_rollouts` checks it."""
    if not isinstance(rollout, Rollout):
        raise TypeError(f"`{where}` must be a credax.Rollout; got {type(rollout).__name__}.")
    obj = _rollout_json(rollout, where)
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        field = _surrogate_path(obj, "") or "?"
        raise ValueError(f"`{where}.{field}`: text with a lone surrogate (\\ud800-\\udfff without its "
                         "pair) is not valid Unicode and cannot be written as UTF-8 (read_rollouts "
                         "refuses it too).") from None
    try:  # the reader's own checks on the line as written: what is written is what it reads
        _credax_line(json.loads(data))
    except _Bad as bad:
        raise ValueError(f"`{where}.{bad.field}`: {bad.message} (read_rollouts would refuse the "
                         "line).") from None
    return data + b"\n"


def _replace_atomically(path, data: bytes) -> None:
    """Write ``data`` to a new file beside ``path``, then rename it over ``path`` (atomic on POSIX
    and Windows): the old file is intact until the new one is complete, and a failure at any point
    removes the temporary file. A symlink's target is replaced; an existing file keeps its mode."""
    target = os.path.realpath(os.fspath(path))
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"`path`: no such directory: {directory}")
    tmp = os.path.join(directory, f".{os.path.basename(target)}.{os.getpid()}.{secrets.token_hex(6)}.tmp")
    try:
        with open(tmp, "xb") as fh:  # created with the default mode (umask applied)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
        except FileNotFoundError:
            pass  # a new file
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_rollouts(path: str | os.PathLike, rollouts: Iterable[Rollout]) -> None:
    """Write rollouts as credax JSONL (one line each; ``meta["source"]`` is not written).

    Every rollout is checked and serialised first, each line with :func:`read_rollouts`'s own
    checks, so a file written here is a file it reads back, value for value. The file is then
    replaced atomically (written beside it, then renamed over it): on any failure — a rollout that
    cannot be written, an iterator that raises, a full disk — an existing file is left exactly as it
    was and no partial or temporary file is left behind.

    Raises:
      TypeError: ``rollouts`` is not an iterable of :class:`~credax.Rollout`; an id that JSON cannot
        carry exactly (anything but strings, ints and, for ``prompt_id``, flat tuples of those), a
        token id that is not an int, a score that is not a number (``True``, ``"1.0"``), a role
        that is not a string or an int, a ``meta`` JSON cannot carry. The message names the field
        (``rollouts[i].turns[k].action[j]``).
      ValueError: a non-finite score, reward or outcome, a NaN/inf in ``meta`` (JSON has no NaN), a
        token id outside ``[0, 2**31)``, text with a lone surrogate (not valid Unicode), an empty
        tuple id or no turns; the message names the field (``rollouts[i].turns[k].score``).
      FileNotFoundError: the directory of ``path`` does not exist.
    """
    if isinstance(rollouts, Rollout | str | bytes) or not hasattr(rollouts, "__iter__"):
        raise TypeError(f"`rollouts` must be an iterable of credax.Rollout; got "
                        f"{type(rollouts).__name__}.")
    data = b"".join(_line(r, f"rollouts[{i}]") for i, r in enumerate(rollouts))
    _replace_atomically(path, data)
