"""credax from torch: every advantage and credit function, torch tensors in and out.

``import credax.torch`` (``import credax`` never imports torch) gives the same functions as
``credax`` — :func:`grpo_advantages`, :func:`tcpo_advantages`, :func:`triage_advantages`,
:func:`gigpo_advantages`, the turn tools, ... — taking torch tensors wherever credax takes arrays
and returning torch tensors on the inputs' device (NamedTuples keep their fields). Each call:

1. hands every tensor to JAX through DLPack: CPU tensors and CUDA tensors alike are *aliased*,
   not copied, when they are contiguous and aligned (a non-contiguous tensor is made contiguous
   first — DLPack refuses strided views — and JAX copies an unaligned one);
2. densifies 64-bit ids (``group_ids``, ``anchor_ids``) exactly before JAX sees them (``np.unique``
   on the host for CPU tensors, ``torch.unique`` on the device for CUDA tensors): without
   ``jax_enable_x64`` JAX would cast them to int32 and merge ids that differ only above bit 32.
   Other int64 and uint32 / uint64 tensors (``token_turn``, ``roles``) are checked to fit in
   int32 and narrowed; float64 tensors (x64 off) are checked to hold no finite value beyond
   float32 (JAX would make it inf); meta-device tensors (no data) are refused by name;
3. runs credax's compiled function on that device;
4. waits for the results (``block_until_ready``) and hands them back through DLPack, again
   without a copy. The wait is what makes it safe for the caller to overwrite its input buffers
   as soon as the call returns: JAX dispatches asynchronously, and a computation still reading an
   aliased input would otherwise see the new values.

Dtypes follow credax's convention: float32 stays float32; bfloat16/float16 are computed in
float32 and returned in their own dtype; float64 needs ``jax.config.update("jax_enable_x64",
True)`` (without it, JAX computes in float32, as for a float64 NumPy array). Results carry no
autograd history: advantages are constants of the policy-gradient loss. A tensor that requires
grad is detached.

CUDA stream ordering. JAX reads an input on its own stream. ``jax.dlpack.from_dlpack`` passes
that stream to ``tensor.__dlpack__(stream=...)``, and torch then makes it wait for the work queued
on torch's *current* stream, so a tensor produced on the current stream is complete when JAX reads
it. A tensor produced on a side stream must be synchronised with the current stream by the caller
first (``torch.cuda.current_stream().wait_stream(side)``), as for any torch consumer. Outputs are
ready before they are returned (step 4), so any torch stream may read them.

GPU memory. On a GPU JAX preallocates 75% of device memory on first use, which leaves a torch
trainer in the same process almost nothing. Set ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` (allocate
on demand) or ``XLA_PYTHON_CLIENT_MEM_FRACTION=0.1`` before JAX initialises its backend; see
``docs/guides/torch.md``.

The policy loss stays JAX: :func:`credax.policy_loss` is differentiated with respect to JAX
parameters, and there is no torch version of it here — a torch trainer keeps its own loss and
feeds it the advantages computed through this module.

Examples:
  >>> import torch, credax.torch as ct
  >>> rewards = torch.tensor([1.0, 0.0, 0.5, 0.5])
  >>> ids = torch.tensor([2**40, 2**40, 7, 7])  # int64: densified exactly, never truncated
  >>> ct.grpo_advantages(rewards, ids)
  tensor([ 0.7071, -0.7071,  0.0000,  0.0000])
"""

from __future__ import annotations

import functools
import inspect

import jax
import numpy as np
import torch  # the real torch: imports are absolute, this module's own name does not shadow it

import credax
from credax import _api, _checks

# Arguments that credax groups by (turned into a ``Groups`` once here) and integer keys compared
# only for equality (densified, never hashed by value).
_GROUP_ARGS = frozenset({"group_ids"})
_KEY_ARGS = frozenset({"anchor_ids"})
_INT32 = torch.iinfo(torch.int32)
_WIDE_INTS = (torch.int64, torch.uint32, torch.uint64)


def _x64() -> bool:
    return bool(jax.config.jax_enable_x64)


_UNSIGNED_WIDE = (torch.uint32, torch.uint64)


def check_tensor(tensor, name: str) -> None:
    """``ValueError`` for a meta-device tensor (a shape and a dtype, no data), naming it."""
    if isinstance(tensor, torch.Tensor) and tensor.device.type == "meta":
        raise ValueError(f"`{name}` is a meta tensor (shape and dtype only, no data): credax computes "
                         "on values; pass a tensor on a real device (cpu, cuda).")


def _fits_int32(t: torch.Tensor, name: str) -> None:
    """``t`` (a 64-bit or unsigned 32-bit integer tensor) holds only int32 values, else raise.

    torch implements neither ``aminmax`` nor comparisons for uint32 / uint64, so unsigned values
    are checked on their bits: ``v`` fits in int32 iff ``v >> 31 == 0`` (read as int64: uint32
    widens exactly, uint64 is reinterpreted, and a top bit set makes it negative, never 0)."""
    if not t.numel():
        return
    if t.dtype in _UNSIGNED_WIDE:
        wide = t.to(torch.int64) if t.dtype == torch.uint32 else t.view(torch.int64)
        if bool(((wide >> 31) != 0).any()):
            flat = int(torch.nonzero(((wide >> 31) != 0).reshape(-1))[0])
            value = int(np.asarray(t.reshape(-1)[flat:flat + 1].cpu().numpy())[0])
            raise ValueError(f"`{name}` holds {value} ({t.dtype}), outside int32: JAX without x64 "
                             "would wrap it. Ids belong in `group_ids`/`anchor_ids` (densified "
                             "exactly), other integer inputs must fit in int32.")
        return
    lo, hi = torch.aminmax(t)
    if int(lo) < _INT32.min or int(hi) > _INT32.max:
        raise ValueError(
            f"`{name}` holds values in [{int(lo)}, {int(hi)}], outside int32: JAX without "
            "x64 would wrap them. Ids belong in `group_ids`/`anchor_ids` (densified "
            "exactly), other integer inputs must fit in int32."
        )


def _fits_float32(t: torch.Tensor, name: str) -> None:
    """A float64 tensor (x64 off) holds no finite value beyond float32 (JAX would make it inf)."""
    bad = torch.isfinite(t) & torch.isinf(t.to(torch.float32))
    if bool(bad.any()):
        flat = int(torch.nonzero(bad.reshape(-1))[0])
        value = float(t.reshape(-1)[flat])
        raise ValueError(f"`{name}` holds {value:g} at flat index {flat}: finite in float64 but "
                         f"beyond float32's range (±{_checks.F32_MAX:.4g}); without `jax_enable_x64` JAX "
                         "computes in float32 and would make it inf. Rescale, or enable x64.")


def to_jax(tensor: torch.Tensor, name: str = "tensor") -> jax.Array:
    """A torch tensor as a JAX array on the same device, through DLPack without a copy.

    The tensor is detached and made contiguous (no-op when it already is). A 64-bit integer
    tensor is narrowed to int32 after checking that it fits (without ``jax_enable_x64`` JAX would
    wrap it silently); use :func:`dense_ids` for ids, which may not fit.

    Raises:
      TypeError: ``tensor`` is not a torch tensor.
      ValueError: a 64-bit integer tensor holds values outside int32 (x64 off).
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"`{name}` must be a torch.Tensor; got {type(tensor).__name__}.")
    check_tensor(tensor, name)
    t = tensor.detach()
    if t.dtype in _WIDE_INTS and not _x64():
        _fits_int32(t, name)
        t = t.to(torch.int32)
    elif t.dtype == torch.float64 and not _x64():
        _fits_float32(t, name)
    return jax.dlpack.from_dlpack(t.contiguous())


def to_torch(array: jax.Array) -> torch.Tensor:
    """A (single-device) JAX array as a torch tensor on the same device, without a copy."""
    return torch.from_dlpack(array)


def dense_ids(ids: torch.Tensor, name: str = "ids") -> torch.Tensor:
    """Integer ids as dense int32 ids with the same equalities, computed exactly on their device.

    64-bit ids are densified by a sort, exact at any width: ``np.unique`` on the host for CPU
    tensors, ``torch.unique`` on the device for CUDA tensors. Ids of 32 bits or fewer are returned
    as they are.

    Raises:
      TypeError: ``ids`` is not an integer tensor.
    """
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"`{name}` must be a torch.Tensor; got {type(ids).__name__}.")
    check_tensor(ids, name)
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"`{name}` must be an integer tensor; got dtype {ids.dtype}.")
    ids = ids.detach()
    if ids.dtype not in _WIDE_INTS:
        return ids
    if ids.device.type == "cpu":
        # NumPy's single-threaded sort: torch.unique's parallel sort was 10-20x slower on a
        # loaded 2-core machine (thread oversubscription); both are exact.
        _, inverse = np.unique(ids.numpy(), return_inverse=True)
        return torch.from_numpy(inverse.astype(np.int32).reshape(ids.shape))
    if ids.dtype in _UNSIGNED_WIDE:  # torch.unique may not take them: equal bits, equal ids
        ids = ids.to(torch.int64) if ids.dtype == torch.uint32 else ids.view(torch.int64)
    _, inverse = torch.unique(ids, return_inverse=True)
    return inverse.to(torch.int32).reshape(ids.shape)


def groups(group_ids) -> credax.Groups:
    """:func:`credax.groups` for torch ids: densify once per batch, reuse in every call.

    64-bit ids are densified exactly (:func:`dense_ids`); the result is a :class:`credax.Groups`
    with ``num_groups = B`` (static shapes: a new batch of the same size does not recompile).
    A ``Groups`` passes through; NumPy or JAX ids go to :func:`credax.groups` unchanged.

    Examples:
      >>> import torch, credax.torch as ct
      >>> g = ct.groups(torch.tensor([5, 2**33 + 5, 5]))  # equal in their low 32 bits
      >>> bool(g.index[0] == g.index[2]), bool(g.index[0] == g.index[1])
      (True, False)
    """
    if isinstance(group_ids, credax.Groups):
        return group_ids
    if not isinstance(group_ids, torch.Tensor):
        return credax.groups(group_ids)
    ids = dense_ids(group_ids, "group_ids")
    if ids.ndim != 1:
        raise ValueError(f"`group_ids` must be 1-D, shape [B]; got shape {tuple(ids.shape)}.")
    if group_ids.dtype in _WIDE_INTS:  # dense in [0, B): no hashing needed
        return credax.groups(to_jax(ids, "group_ids"), num_groups=max(ids.shape[0], 1))
    return credax.groups(to_jax(ids, "group_ids"))


def _convert(name: str, value, group_as_ids: bool):
    if isinstance(value, torch.Tensor):
        if name in _GROUP_ARGS and not group_as_ids:
            return groups(value)
        if name in _GROUP_ARGS or name in _KEY_ARGS:
            return to_jax(dense_ids(value, name), name)
        return to_jax(value, name)
    return value


def _check_devices(arguments: dict, function: str) -> None:
    """All tensors on one device, checked before any conversion (JAX's error would name none)."""
    devices: dict = {}
    for name, value in arguments.items():
        if isinstance(value, torch.Tensor):
            check_tensor(value, name)
            devices.setdefault(value.device, name)
    if len(devices) > 1:
        found = ", ".join(f"`{name}` on {device}" for device, name in devices.items())
        raise ValueError(f"credax.torch.{function}: all tensors must be on one device; got {found}.")


def _leaf_to_torch(x):
    return to_torch(x) if isinstance(x, jax.Array) else x


def _bridge(fn, *, group_as_ids: bool = False):
    """The torch version of the credax function ``fn`` (see the module docstring).

    ``group_as_ids``: hand ``group_ids`` over as dense ids rather than a ``Groups`` (the eager
    ``validate_*`` checks inspect the ids themselves).
    """
    signature = inspect.signature(fn)
    name = fn.__name__

    hints = getattr(fn, "_hints", {})  # a public entry's hints for removed keywords
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()):
        hints = {}  # every keyword is known

    def wrapper(*args, **kwargs):
        unknown = kwargs.keys() - signature.parameters.keys()
        if unknown and hints:  # the entry's error, hint included (where the keyword went)
            raise _api.unexpected_keyword(f"credax.torch.{name}", sorted(unknown)[0], hints)
        bound = signature.bind(*args, **kwargs)
        flat = {}  # argument name -> value, ``**kwargs`` spread out
        for arg, value in bound.arguments.items():
            if signature.parameters[arg].kind is inspect.Parameter.VAR_KEYWORD:
                flat.update(value)
            else:
                flat[arg] = value
        _check_devices(flat, name)
        for arg, value in bound.arguments.items():
            if signature.parameters[arg].kind is inspect.Parameter.VAR_KEYWORD:
                bound.arguments[arg] = {k: _convert(k, v, group_as_ids) for k, v in value.items()}
            else:
                bound.arguments[arg] = _convert(arg, value, group_as_ids)
        out = jax.block_until_ready(fn(*bound.args, **bound.kwargs))
        return jax.tree_util.tree_map(_leaf_to_torch, out)

    functools.update_wrapper(wrapper, fn, assigned=("__name__", "__qualname__"))
    wrapper.__module__ = __name__
    wrapper.__doc__ = (
        f"Torch version of :func:`credax.{name}`: torch tensors in (any argument credax takes as "
        "an array), torch tensors out on the same device, via DLPack without copies; 64-bit ids "
        "are densified exactly. See the ``credax.torch`` module docstring; the math, arguments "
        f"and raises are those of ``credax.{name}``."
    )
    return wrapper


# Functions credax.torch does not bridge. The policy and value losses and their parts are
# differentiated w.r.t. JAX parameters and stay JAX (a torch trainer keeps its own loss and feeds it
# these advantages); groups has its own torch version above.
JAX_ONLY = frozenset({
    "aggregate", "kl_divergence", "policy_loss", "token_logprobs", "token_logprobs_from_hidden",
    "value_loss", "groups",
})
# Host-side already, no arrays in: parse_roles (labels in, an int32 NumPy array out, which
# torch.from_numpy takes without a copy) and the rollout file tools.
HOST_SIDE = frozenset({"parse_roles", "pad_rollouts", "read_rollouts", "rollouts_from_tunix",
                       "write_rollouts"})
_GROUP_AS_IDS = frozenset({"validate_turns"})

# Every other public function of credax, bridged: a function added to credax is available here
# at once, under its own name (tests/test_torch.py checks each one against credax).
_BRIDGED = sorted(
    name for name in credax.__all__
    if inspect.isroutine(getattr(credax, name)) and name not in JAX_ONLY | HOST_SIDE
)
for _name in _BRIDGED:
    globals()[_name] = _bridge(getattr(credax, _name), group_as_ids=_name in _GROUP_AS_IDS)
del _name

__all__ = sorted([*_BRIDGED, "HOST_SIDE", "JAX_ONLY", "check_tensor", "dense_ids", "groups", "to_jax",
                  "to_torch"])
