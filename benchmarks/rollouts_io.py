"""Reader and padding throughput on a generated rollouts file (issue 16's figure).

    python -m benchmarks.rollouts_io [--turns 100000]

Writes a credax-schema JSONL file of ``--turns`` turns (5 per rollout on average: 1-9 turns, 8-40
action tokens and 0-30 observation tokens per turn, a judge label, an anchor, an env reward) to a
temporary directory, then times ``credax.read_rollouts`` and ``credax.pad_rollouts`` (median of
three runs each) and prints rollouts/s and turns/s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

import credax


def generate(num_turns: int, seed: int = 0) -> list[credax.Rollout]:
    rng = np.random.default_rng(seed)
    out, total = [], 0
    while total < num_turns:
        n = min(int(rng.integers(1, 10)), num_turns - total)
        turns = [credax.Turn(rng.integers(0, 150_000, int(rng.integers(8, 41))).tolist(),
                             float(rng.integers(0, 5)) / 4,
                             observation=rng.integers(0, 150_000, int(rng.integers(0, 31))).tolist(),
                             role="DENR"[int(rng.integers(4))], reward=float(rng.random() < 0.1),
                             anchor=f"s{int(rng.integers(50))}")
                 for _ in range(n)]
        out.append(credax.Rollout(f"task-{len(out) // 8}", turns,
                                  prompt=rng.integers(0, 150_000, 64).tolist()))
        total += n
    return out


def _median_time(fn, repeats: int = 3):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main(num_turns: int = 100_000) -> dict:
    rollouts = generate(num_turns)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rollouts.jsonl")
        credax.write_rollouts(path, rollouts)
        size = os.path.getsize(path)
        read_s, got = _median_time(lambda: credax.read_rollouts(path))
    pad_s, _ = _median_time(lambda: credax.pad_rollouts(got, buckets=credax.Buckets()))
    n, turns = len(got), sum(len(r.turns) for r in got)
    result = {"rollouts": n, "turns": turns, "file_MiB": round(size / 2**20, 1),
              "read_s": round(read_s, 2), "read_rollouts_per_s": round(n / read_s),
              "read_turns_per_s": round(turns / read_s), "pad_s": round(pad_s, 2),
              "pad_rollouts_per_s": round(n / pad_s), "pad_turns_per_s": round(turns / pad_s)}
    for key, value in result.items():
        print(f"{key:>22}: {value}")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=100_000)
    main(parser.parse_args().turns)
