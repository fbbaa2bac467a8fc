"""credax: pure-functional JAX credit assignment for reinforcement learning of LLM agents.

Every public name is re-exported here, one line each. Where the math lives:

* ``_api``      the public-entry plumbing (jit with static options, pre-trace checks)
* the one grouping primitive, in four modules: ``_group_ids`` (ids → ``Groups``: ``groups``),
  ``_normalization`` (``Normalization``, the one options value of every normalising estimator),
  ``_group_stats`` (the statistics engine) and ``_grouping`` (``group_normalize``, ``group_mean``,
  ``group_count``, ``peer_mean``)
* ``_outcome``  one reward per trajectory: GRPO, Dr. GRPO, RLOO, GDPO, degenerate groups
* ``_turns``    turn-space tools: best prior, future best, discounts, returns, token broadcast
* ``_tcpo``     TCPO retrospective / hindsight / counterfactual credit and its composition
* ``_triage``   TRIAGE role credit, role fitting, judge windows
* ``_roles``    TRIAGE's roles on the host: ``Role``, judge labels (``parse_roles``), ``validate_roles``
* ``_stepwise`` MT-GRPO and GiGPO baselines
* ``_faca``     FACA: the next user turn's reaction, normalised per segment, added to the outcome
* ``_turn_baseline`` the turn baseline unbiased under variable turn counts (verl #7244)
* ``_reinforce`` REINFORCE++, REINFORCE++-baseline and GPG (verl's batch-whitened estimators)
* ``_g2po``     G2PO: the per-prompt state graph's edge advantages
* ``_hgpo``     HGPO: hierarchical history groups nested in the prompt
* ``_pgpo``     PGPO: anchor-group potentials, credited as their difference
* ``_tree``     tree credit over parent links: TreeRPO, Tree-GRPO, AReaL's tree discount
* ``_redistribute`` a trajectory advantage redistributed over turns by per-turn weights
  (DRACO, VICT, IAPO, TASPO, FACTOR)
* ``_shrinkage`` James–Stein shrinkage baselines for GRPO and RLOO
* ``_diagnostics`` dead groups vs p^G + (1-p)^G, anchor hit ratio, credit by turn and role
* ``_gae``      value-based credit: token- and turn-level GAE, VAPO's λ, the clipped value loss
* ``_vetta``    VETTA: turn GAE plus the within-response-centred token GAE residual
* ``_logprobs`` token log-probs without a full log-softmax (custom VJP, chunked from hidden states)
* ``_loss_options`` ``LossOptions``, the one options value of the policy loss (``options=``)
* ``_losses``   KL estimators, aggregation modes, the clipped policy loss
* ``_checks``   the one check vocabulary (dtype, shape and mask rules for traced and host arrays,
  host value checks); ``_validate`` the eager ``validate_*`` built on it
* ``_readers``  rollout files: credax's JSONL schema, verl's ``rollout_data_dir`` dump, Tunix's trajectories
* ``_rollouts`` ragged rollouts → padded, bucketed arrays (exact group ids) and credit back
* ``_credit``   ``credit``: any credit method on one ``TurnBatch``, per-turn output (the registry's call)
* ``_batch``, ``_registry`` the turn batch and the method registry: how to call each public
  function on a batch (what explain, verl, the bench and the lab read)
* ``presets``   verl / TRL parity presets; ``nnx`` the Flax NNX wrapper; ``testing`` (import it
  explicitly; its checkers need hypothesis) strategies and invariant checkers for your own credit
  code, and the tests' call table built on the registry (``credax.testing.calls``).
"""

from . import nnx as nnx  # the Flax NNX wrapper; imports no flax, so it costs nothing
from . import presets as presets
from ._batch import TurnBatch as TurnBatch
from ._credit import credit as credit
from ._credit import credit_methods as credit_methods
from ._diagnostics import CreditSummary as CreditSummary
from ._diagnostics import DeadGroups as DeadGroups
from ._diagnostics import anchor_hit_ratio as anchor_hit_ratio
from ._diagnostics import credit_by_role as credit_by_role
from ._diagnostics import credit_by_turn as credit_by_turn
from ._diagnostics import dead_groups as dead_groups
from ._faca import faca_advantages as faca_advantages
from ._g2po import G2PO as G2PO
from ._g2po import g2po_advantages as g2po_advantages
from ._gae import GAE as GAE
from ._gae import TurnGAE as TurnGAE
from ._gae import TurnValues as TurnValues
from ._gae import ValueLoss as ValueLoss
from ._gae import gae_advantages as gae_advantages
from ._gae import turn_gae_advantages as turn_gae_advantages
from ._gae import turn_values as turn_values
from ._gae import value_loss as value_loss
from ._gae import vapo_lambda as vapo_lambda
from ._group_ids import Groups as Groups
from ._group_ids import groups as groups
from ._grouping import PeerMean as PeerMean
from ._grouping import group_count as group_count
from ._grouping import group_mean as group_mean
from ._grouping import group_normalize as group_normalize
from ._grouping import peer_mean as peer_mean
from ._head import policy_loss_from_hidden as policy_loss_from_hidden
from ._hgpo import HGPO as HGPO
from ._hgpo import hgpo_advantages as hgpo_advantages
from ._logprobs import LogprobsEntropy as LogprobsEntropy
from ._logprobs import token_entropy as token_entropy
from ._logprobs import token_logprobs as token_logprobs
from ._logprobs import token_logprobs_from_hidden as token_logprobs_from_hidden
from ._loss_options import LossOptions as LossOptions
from ._losses import PolicyLoss as PolicyLoss
from ._losses import PolicyMetrics as PolicyMetrics
from ._losses import aggregate as aggregate
from ._losses import kl_divergence as kl_divergence
from ._losses import policy_loss as policy_loss
from ._normalization import Normalization as Normalization
from ._outcome import degenerate_groups as degenerate_groups
from ._outcome import gdpo_advantages as gdpo_advantages
from ._outcome import grpo_advantages as grpo_advantages
from ._outcome import rloo_advantages as rloo_advantages
from ._pgpo import PGPO as PGPO
from ._pgpo import pgpo_advantages as pgpo_advantages
from ._readers import RolloutFormatError as RolloutFormatError
from ._readers import read_rollouts as read_rollouts
from ._readers import rollouts_from_tunix as rollouts_from_tunix
from ._readers import write_rollouts as write_rollouts
from ._redistribute import redistribute_advantages as redistribute_advantages
from ._reinforce import gpg_advantages as gpg_advantages
from ._reinforce import reinforce_pp_advantages as reinforce_pp_advantages
from ._reinforce import reinforce_pp_baseline_advantages as reinforce_pp_baseline_advantages
from ._roles import Role as Role
from ._roles import parse_roles as parse_roles
from ._rollouts import Buckets as Buckets
from ._rollouts import PaddedRollouts as PaddedRollouts
from ._rollouts import Rollout as Rollout
from ._rollouts import RolloutBatch as RolloutBatch
from ._rollouts import RolloutLayout as RolloutLayout
from ._rollouts import Turn as Turn
from ._rollouts import pad_rollouts as pad_rollouts
from ._shrinkage import Shrinkage as Shrinkage
from ._shrinkage import shrinkage_advantages as shrinkage_advantages
from ._shrinkage import shrinkage_baseline as shrinkage_baseline
from ._stepwise import gigpo_advantages as gigpo_advantages
from ._stepwise import mt_grpo_advantages as mt_grpo_advantages
from ._tcpo import TCPO as TCPO
from ._tcpo import Counterfactual as Counterfactual
from ._tcpo import Hindsight as Hindsight
from ._tcpo import Retrospective as Retrospective
from ._tcpo import adjacent_delta_credit as adjacent_delta_credit
from ._tcpo import counterfactual_credit as counterfactual_credit
from ._tcpo import hindsight_credit as hindsight_credit
from ._tcpo import raw_score_credit as raw_score_credit
from ._tcpo import retrospective_credit as retrospective_credit
from ._tcpo import select_top_surprisal as select_top_surprisal
from ._tcpo import tcpo_advantages as tcpo_advantages
from ._tree import TreeCredit as TreeCredit
from ._tree import tree_advantages as tree_advantages
from ._tree import validate_tree as validate_tree
from ._triage import TRIAGE_ROLE_CONSTANTS as TRIAGE_ROLE_CONSTANTS
from ._triage import RoleFit as RoleFit
from ._triage import Windows as Windows
from ._triage import fit_role_constants as fit_role_constants
from ._triage import judge_windows as judge_windows
from ._triage import optimal_mixing_weight as optimal_mixing_weight
from ._triage import role_credit as role_credit
from ._triage import scalar_process_advantages as scalar_process_advantages
from ._triage import triage_advantages as triage_advantages
from ._turn_baseline import unbiased_turn_advantages as unbiased_turn_advantages
from ._turns import best_prior as best_prior
from ._turns import broadcast_to_tokens as broadcast_to_tokens
from ._turns import broadcast_to_turns as broadcast_to_turns
from ._turns import discount_weights as discount_weights
from ._turns import discounted_returns as discounted_returns
from ._turns import future_best as future_best
from ._turns import token_turn_from_layout as token_turn_from_layout
from ._turns import turn_surprisal as turn_surprisal
from ._validate import validate_alternatives as validate_alternatives
from ._validate import validate_rewards as validate_rewards
from ._validate import validate_roles as validate_roles
from ._validate import validate_turns as validate_turns
from ._vetta import VETTA as VETTA
from ._vetta import vetta_advantages as vetta_advantages

__version__ = "0.1.0"

__all__ = sorted(
    name for name in dir() if not name.startswith("_") and name not in {"annotations"}
)
