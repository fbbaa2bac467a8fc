"""Step-level baselines from the literature: MT-GRPO and GiGPO.

Both compare turns (steps) across the trajectories of one prompt through the shared grouping
primitive in ``_groups``: MT-GRPO per (prompt, turn index), GiGPO per (prompt, anchor state) at any
turn index.
"""

from __future__ import annotations

# --- MT-GRPO ---------------------------------------------------------------------------------

# --- GiGPO -----------------------------------------------------------------------------------
