"""One test per row of the "What is checked where" table of docs/guides/conventions.md.

The rows are read from the guide: a row without a test here, or a test without a row, fails.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import credax

GUIDE = Path(__file__).parents[1] / "docs" / "guides" / "conventions.md"
IDS = jnp.array([0, 0, 1, 1])
R = jnp.array([1.0, 0.0, 0.5, 0.5])
M = jnp.ones((1, 3), bool)


def _rows() -> list[str]:
    text = GUIDE.read_text().split("## What is checked where", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z_.]+)` \|", text, flags=re.M)


def host_range():
    with pytest.raises(ValueError, match="`rewards` holds 1e\\+39 at index 0"):
        credax.grpo_advantages(np.array([1e39, 0.0, 0.0, 0.0]), IDS)
    with pytest.raises(ValueError, match="`token_turn` holds 4294967296"):
        credax.turn_surprisal(jnp.zeros((1, 2)), np.array([[0, 2**32]]), num_turns=2)
    # ids are exempt: two 64-bit ids equal in their low 32 bits stay two groups.
    out = credax.grpo_advantages(R, np.array([2**32, 2**32, 0, 0]))
    np.testing.assert_allclose(out, credax.grpo_advantages(R, IDS))


def host_byte_order():
    big = np.array([1.0, 0.0, 0.5, 0.5], ">f8")
    np.testing.assert_array_equal(credax.grpo_advantages(big, IDS), credax.grpo_advantages(R, IDS))


def host_kind():
    for bad in (np.array(["a"] * 4), np.array([1 + 0j] * 4), ["a", "b", "c", "d"]):
        with pytest.raises(TypeError, match="`rewards` is an? (string|complex) array"):
            credax.grpo_advantages(bad, IDS)


def host_bool_mix():
    with pytest.raises(TypeError, match="`rewards` mixes bools with numbers"):
        credax.grpo_advantages([1.0, True, 0.0, 0.0], IDS)
    # bools only are a bool array (0/1 rewards): accepted.
    np.testing.assert_allclose(credax.grpo_advantages([True, False, True, True], IDS),
                               credax.grpo_advantages(jnp.array([1.0, 0.0, 1.0, 1.0]), IDS))


def host_hyperparameter():
    class Big(float):
        pass

    for bad in (2.0, Big(2.0), np.float16(2), ml_dtypes.bfloat16(2), np.array(2.0), jnp.asarray(2.0)):
        with pytest.raises(ValueError, match="`gamma` must lie in \\[0, 1\\]"):
            credax.discounted_returns(jnp.ones((1, 3)), M, gamma=bad)


def host_static():
    with pytest.raises(TypeError, match="`num_turns` is static"):
        jax.jit(lambda k: credax.turn_surprisal(jnp.zeros((1, 2)), jnp.zeros((1, 2), jnp.int32),
                                                num_turns=k))(2)
    with pytest.raises(ValueError, match="`num_turns` = 2147483648 is outside int32"):
        credax.discount_weights(2**31, 0.5)
    # a concrete 0-d integer array is the Python int it holds
    np.testing.assert_allclose(credax.discount_weights(jnp.asarray(3), 0.5), [1.0, 0.5, 0.25])


def host_ids():
    # Hand-worked: ids [7, 7, 2**40, 2**40] are two groups of a pair each, as [0, 0, 1, 1].
    out = credax.grpo_advantages(R, [7, 7, 2**40, 2**40])
    np.testing.assert_allclose(out, credax.grpo_advantages(R, IDS))


def host_options():
    eps = np.array(1e-3)
    norm = credax.Normalization(eps=eps)
    eps[...] = -1.0
    assert float(norm.eps) == 1e-3
    with pytest.raises(ValueError, match="`clip_low` must lie in"):
        credax.LossOptions(clip_low=ml_dtypes.bfloat16(2))
    for cls in (credax.Normalization, credax.LossOptions):
        with pytest.raises(TypeError, match="cannot be subclassed"):
            type("Sub", (cls,), {})
    rebuilt = jax.tree.map(lambda _: -1.0, credax.Normalization())
    with pytest.raises(ValueError, match="`eps` must be >= 0"):
        credax.grpo_advantages(R, IDS, normalization=rebuilt)


def program_types():
    with pytest.raises(TypeError, match="`mask` must be a boolean array"):
        credax.group_normalize(R, IDS, jnp.ones(4))
    with pytest.raises(ValueError, match="mask"):
        credax.group_normalize(R, IDS, jnp.ones(3, bool))


def program_jax_ids():
    np.testing.assert_allclose(credax.grpo_advantages(R, jnp.array([9, 9, -4, -4])),
                               credax.grpo_advantages(R, credax.groups(IDS)))
    with pytest.raises(TypeError, match="`group_ids`: a Groups needs an integer `index`"):
        credax.grpo_advantages(R, credax.Groups(jnp.zeros(4), 1))


def trusted_traced():
    # A traced eps of -1 cannot be seen before tracing: NaN at every scaled output, not garbage.
    f = jax.jit(lambda e: credax.grpo_advantages(R, IDS, normalization=credax.Normalization(eps=e)))
    assert np.isnan(np.asarray(f(-1.0))[:2]).all()


def trusted_device_values():
    # A NaN reward in a JAX array is not read back on the host: NaN exactly in its group.
    out = np.asarray(credax.grpo_advantages(jnp.array([np.nan, 0.0, 0.5, 0.5]), IDS))
    assert np.isnan(out[:2]).all() and (out[2:] == 0).all()


def error_diagnosis():
    with pytest.raises(TypeError, match="unexpected keyword argument 'scale'.*normalization="):
        credax.grpo_advantages(R, IDS, scale="none")
    with pytest.raises(TypeError, match="`mask` got a credax.Normalization.*`normalization=`"):
        credax.grpo_advantages(R, IDS, credax.presets.VERL)
    with pytest.raises(TypeError, match="`gamma` must be a number; got None"):
        credax.discount_weights(3, None)
    if "torch" in sys.modules or pytest.importorskip("torch"):
        import torch

        with pytest.raises(TypeError, match="`rewards` is a torch.Tensor.*credax.torch"):
            credax.grpo_advantages(torch.ones(4), IDS)


TESTS = {name.replace("_", ".", 1): fn for name, fn in dict(globals()).items()
         if callable(fn) and name.split("_")[0] in ("host", "program", "trusted", "error")}


def test_every_row_has_a_test_and_every_test_a_row():
    assert sorted(_rows()) == sorted(TESTS)


@pytest.mark.parametrize("row", _rows())
def test_row(row):
    TESTS[row]()
