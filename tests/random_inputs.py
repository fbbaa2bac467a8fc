"""Random test inputs drawn with NumPy, returned as JAX arrays.

The tests need random values, not JAX's generator: every new shape of a ``jax.random`` draw
compiles its own threefry program (about half a CPU-second each on the 2-core CI machine), while a
NumPy draw compiles nothing. ``seed`` is an int or a stream from :func:`streams`.
"""

import jax.numpy as jnp
import numpy as np


def streams(seed, n):
    """``n`` independent generators derived from ``seed`` (what ``jax.random.split`` gave)."""
    return [np.random.default_rng([seed, i]) for i in range(n)]


def normal(seed, shape, dtype=np.float32):
    """Standard normal values (float32 unless ``dtype`` says otherwise)."""
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape).astype(np.dtype(dtype)))


def randint(seed, shape, low, high):
    """int32 integers in ``[low, high)``."""
    return jnp.asarray(np.random.default_rng(seed).integers(low, high, size=shape, dtype=np.int32))


def bernoulli(seed, p, shape):
    """Booleans that are ``True`` with probability ``p``."""
    return jnp.asarray(np.random.default_rng(seed).random(shape) < p)
