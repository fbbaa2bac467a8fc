"""One process of the two-process test (tests/test_multiprocess.py); not a test module itself.

    python tests/multiprocess_worker.py PROCESS_ID PORT OUT_DIR

Each process joins ``jax.distributed`` (coordinator on 127.0.0.1:PORT, CPU collectives over gloo,
4 CPU devices each through ``XLA_FLAGS``, set by the parent), builds the same global batch from one
seed, shards its rows over the 8 global devices — so each prompt's rollouts sit on both processes —
and computes GRPO, TCPO, TRIAGE and the policy loss with a global normalizer on the global arrays.
Process 0 writes the gathered results to ``OUT_DIR/multiprocess.npz``.

Then the recipe of docs/guides/reproducibility.md: the same computations on the same global batch
placed replicated on the 8 devices (``PartitionSpec()``) before the call. Every output must come
back fully replicated, each of this process's 4 copies with the same bits; each process writes its
copy to ``OUT_DIR/replicated_<PROCESS_ID>.npz``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

BATCH, TURNS, TOKENS, PROMPTS = 32, 4, 24, 8


def global_batch(seed: int = 0) -> dict[str, np.ndarray]:
    """The one global batch. Prompt ``j`` owns rows ``j, j + 8, j + 16, j + 24``: with 16 rows per
    process, every prompt has two rollouts on each process."""
    rng = np.random.default_rng(seed)
    ids = np.tile(np.arange(PROMPTS, dtype=np.int32) * 7 - 20, BATCH // PROMPTS)
    lengths = rng.integers(1, TURNS + 1, size=BATCH)
    turn_mask = np.arange(TURNS)[None, :] < lengths[:, None]
    scores = np.where(turn_mask, rng.integers(0, 5, size=(BATCH, TURNS)) / 4.0, 0.0)
    token_turn = np.full((BATCH, TOKENS), -1, np.int32)
    for b in range(BATCH):
        n = int(lengths[b])
        token_turn[b, 2 : 2 + 4 * n] = np.repeat(np.arange(n), 4)
    old = -rng.random((BATCH, TOKENS)) * 2
    return {
        "ids": ids,
        "rewards": rng.random(BATCH).astype(np.float32),
        "scores": scores.astype(np.float32),
        "turn_mask": turn_mask,
        "roles": rng.integers(-1, 4, size=(BATCH, TURNS)).astype(np.int32),
        "token_turn": token_turn,
        "old_logp": old.astype(np.float32),
        "logp": (old + 0.1 * rng.standard_normal((BATCH, TOKENS))).astype(np.float32),
    }


def compute(credax, arrays: dict) -> dict:
    """The four computations, on whatever arrays are given (global sharded or single-device)."""
    a = arrays
    grpo = credax.grpo_advantages(a["rewards"], a["ids"])
    tcpo = credax.tcpo_advantages(a["scores"], a["turn_mask"], a["ids"], gamma=0.9)
    triage = credax.triage_advantages(grpo, a["roles"], a["turn_mask"], lam=0.2, whiten=True)
    mask = a["token_turn"] >= 0
    loss = credax.policy_loss(a["logp"], a["old_logp"], tcpo.advantages, mask,
                              token_turn=a["token_turn"],
                              options=credax.LossOptions(normalizer=a["normalizer"]))
    # The contiguous layout promise on sharded rows: one block of all 32 rows, so the block spans
    # both processes (compared with the general path by the caller).
    block = credax.groups(np.zeros(BATCH, np.int32), layout="contiguous", group_size=BATCH)
    grpo_c = credax.grpo_advantages(a["rewards"], block)
    tcpo_c = credax.tcpo_advantages(a["scores"], a["turn_mask"], block, gamma=0.9)
    return {"grpo": grpo, "tcpo": tcpo.advantages, "tcpo_credit": tcpo.credit, "triage": triage,
            "loss": loss.loss, "grpo_contiguous": grpo_c, "tcpo_contiguous": tcpo_c.advantages}


def main(process_id: int, port: int, out_dir: Path) -> None:
    import jax

    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                               process_id=process_id, initialization_timeout=120)
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    import credax

    assert jax.process_count() == 2 and len(jax.local_devices()) == 4 and len(jax.devices()) == 8
    mesh = Mesh(np.array(jax.devices()), ("data",))
    rows = NamedSharding(mesh, PartitionSpec("data"))
    data = global_batch()
    arrays = {}
    for name, value in data.items():
        arrays[name] = jax.make_array_from_callback(value.shape, rows, lambda idx, v=value: v[idx])
        local = {int(s.index[0].start or 0) for s in arrays[name].addressable_shards}
        mine = range(16 * process_id, 16 * process_id + 16)
        assert local <= set(mine), (name, local)  # this process holds only its half of the rows
    # The global normalizer: valid tokens of the whole batch, as a trainer would psum them.
    arrays["normalizer"] = float((data["token_turn"] >= 0).sum())
    out = compute(credax, arrays)
    gathered = {k: np.asarray(multihost_utils.process_allgather(v, tiled=True)) for k, v in out.items()}
    if process_id == 0:
        np.savez(out_dir / "multiprocess.npz", **gathered)

    # The recipe: the inputs replicated on every device of both processes before the call.
    everywhere = NamedSharding(mesh, PartitionSpec())
    replicated = {name: jax.make_array_from_callback(value.shape, everywhere,
                                                     lambda idx, v=value: v[idx])
                  for name, value in data.items()}
    replicated["normalizer"] = arrays["normalizer"]
    mine = {}
    for name, value in compute(credax, replicated).items():
        assert value.is_fully_replicated, (name, value.sharding)
        copies = [np.asarray(s.data) for s in value.addressable_shards]
        assert len(copies) == 4 and all(c.tobytes() == copies[0].tobytes() for c in copies), name
        mine[name] = copies[0]
    np.savez(out_dir / f"replicated_{process_id}.npz", **mine)
    multihost_utils.sync_global_devices("credax multiprocess test done")
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))
