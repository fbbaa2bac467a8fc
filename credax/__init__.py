"""credax: pure-functional JAX credit assignment for reinforcement learning of LLM agents.

Every public name is re-exported here, one line each; the module that defines it says where the
math lives (``_groups`` statistics, ``_outcome`` outcome advantages, ``_turns`` turn-space tools,
``_validate`` eager checks). See SPEC.md for the contract.
"""

from . import presets as presets
from ._groups import Groups as Groups
from ._groups import PeerMean as PeerMean
from ._groups import group_count as group_count
from ._groups import group_mean as group_mean
from ._groups import group_normalize as group_normalize
from ._groups import groups as groups
from ._groups import peer_mean as peer_mean
from ._outcome import degenerate_groups as degenerate_groups
from ._outcome import gdpo_advantages as gdpo_advantages
from ._outcome import grpo_advantages as grpo_advantages
from ._outcome import rloo_advantages as rloo_advantages
from ._turns import best_prior as best_prior
from ._turns import broadcast_to_tokens as broadcast_to_tokens
from ._turns import discount_weights as discount_weights
from ._turns import discounted_returns as discounted_returns
from ._turns import future_best as future_best
from ._turns import turn_surprisal as turn_surprisal
from ._validate import validate_turns as validate_turns

__version__ = "0.1.0"

__all__ = sorted(
    name for name in dir() if not name.startswith("_") and name not in {"annotations"}
)
