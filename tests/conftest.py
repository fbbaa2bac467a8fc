"""Test configuration for the whole suite: strict JAX numerics and hypothesis profiles.

Strict rank and dtype promotion turn silent broadcasting or float64 leaks inside credax into
errors (rlax sets these only under ``__main__``, which pytest never runs — here they always apply).
Hypothesis: ``ci`` (default) is derandomized so CI is reproducible; ``dev`` is faster. Select with
``HYPOTHESIS_PROFILE=dev``.
"""

import os

import jax
from hypothesis import HealthCheck, settings

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=40,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev",
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
