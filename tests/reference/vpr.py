"""NumPy restatement of VPR's state-group advantage (``thu-nics/VPR``, ``gigpo/core_gigpo.py``,
``compute_vpr_turn_level_advantage`` with ``state_group_uid``), written from reading it: one row per
candidate response, ``rewards`` the oracle reward plus the terminal bonus, ``state`` the state group
the candidate was sampled from. float32 as the code's arrays; plain loops. Nothing here imports
credax or JAX.

Returns the advantages and the rows that train (the code zeroes the response mask of the others).
"""

from __future__ import annotations

import numpy as np


def vpr_state_group(rewards, state, *, eps=1e-8, mode="group_whiten"):
    r = np.asarray(rewards, np.float32)
    state = np.asarray(state)
    adv = np.zeros(r.shape, np.float32)
    skip = np.zeros(r.shape, bool)
    for gid in dict.fromkeys(state.tolist()):
        rows = [i for i in range(len(r)) if state[i] == gid]
        group = r[rows]
        std = group.std() if len(group) >= 2 else 0.0  # population std, as np.std
        if len(group) >= 2 and std > eps:
            centred = group - group.mean()
            adv[rows] = centred if mode == "mean_then_batch_whiten" else centred / (std + eps)
        else:
            skip[rows] = True  # a group of one, or of equal rewards: no preference signal
    train = ~skip
    if mode == "mean_then_batch_whiten" and train.any():
        raw = adv[train]
        std = raw.std()
        adv[train] = (raw - raw.mean()) / (std + eps) if std > eps else 0.0
    return adv, train
