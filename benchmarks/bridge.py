"""The cost of ``credax.torch``: DLPack in, the jitted call, DLPack out, against the jitted call alone
and the pure-torch peers of the speed benchmark, side by side in one run.

    python -m benchmarks.bridge                     # CPU, the speed benchmark's GRPO and TCPO sizes
    python -m benchmarks.bridge --preset targets    # only GRPO B=4096, 65536 and TCPO B=4096, K=16
    python -m benchmarks.bridge --preset quick      # toy sizes (the test suite's smoke run)
    python -m benchmarks.bridge --device gpu        # JAX on its GPU, torch tensors on CUDA

Implementations per case (all checked against the float64 reference before timing):

* ``credax_jit``: the jitted credax function on JAX arrays already on the device, with the
  ``Groups`` the bridge would build — the work the bridge wraps, and nothing else;
* ``bridge_int64``: ``credax.torch`` from torch tensors with int64 ids, as a torch trainer holds
  them: ids densified exactly (``torch.unique``), DLPack in, the same jitted call, wait, DLPack out;
* ``bridge_groups``: the same with the ids densified once per step (``credax.torch.groups``) and
  reused, as a step that calls several estimators does;
* the torch peers of the speed benchmark (verl-style vectorised GRPO and per-sample loop, the
  TCPO per-turn loop), on the same device.

The harness (interleaved repetitions, paired ratios, agreement checks), the data and the peers are
the speed benchmark's (``credax.bench``); this file only adds the bridged implementations.
Ratios are from one run on one machine; absolute times on a shared machine are not comparable
across runs. ``--torch-threads N`` sets torch's intra-op threads for the whole run (bridge and
peers alike; on a loaded machine torch's default thread count oversubscribes the cores).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def _speed_modules():
    """(harness, cases, peers) of the speed benchmark (``credax.bench``)."""
    from credax.bench import cases, harness, peers

    peers.load_torch()
    return harness, cases, peers


def _config(cases, preset: str, device: str):
    if preset == "targets":  # the two sizes whose bridge overhead is reported
        cfg = cases.make_config("default", device)
        cfg.grpo_sizes, cfg.tcpo_sizes = [4096, 65536], [(4096, 16)]
        return cfg
    return cases.make_config(preset, device)


class Bench:
    """The speed benchmark's ``Env`` (devices, ``put``, ``t``, ``jax_run``, ``torch_run``) plus
    ``credax.torch``."""

    def __init__(self, cfg):
        harness, cases, peers = _speed_modules()
        self.harness, self.cases, self.peers = harness, cases, peers
        self.env = cases.Env(cfg)
        if self.env.torch is None:
            raise SystemExit(f"the bridge benchmark needs torch: {self.env.torch_note}")
        import credax.torch as ct

        self.ct = ct
        self.as_numpy = harness.as_numpy
        self.t, self.put = self.env.t, self.env.put
        self.jax_run, self.torch_run = self.env.jax_run, self.env.torch_run

    def dense_groups(self, ids_t):
        """The Groups the bridge builds from int64 ids, on the JAX side (outside the timing)."""
        g = self.ct.groups(ids_t)
        return type(g)(self.put(g.index), g.num_groups)


def case_grpo(bench: Bench, runner, batch: int) -> None:
    import credax

    cases, peers, ct, Impl = bench.cases, bench.peers, bench.ct, bench.harness.Impl
    rng = np.random.default_rng(batch)
    ids = cases.make_ids(rng, batch).astype(np.int64) + 2**33  # int64 uids, as torch code has them
    rewards = rng.random(batch, dtype=np.float32)
    reference = peers.reference_grpo(rewards, ids, eps=cases.EPS)
    opts = dict(normalization=credax.presets.VERL)
    r_t, ids_t = bench.t(rewards), bench.t(ids)
    g_t = ct.groups(ids_t)
    g_j = bench.dense_groups(ids_t)
    r_j = bench.put(rewards)
    impls = [
        Impl("credax_jit", bench.jax_run(credax.grpo_advantages, r_j, g_j, **opts),
             "credax.grpo_advantages, JAX arrays + Groups (the jitted call alone)", bench.as_numpy),
        Impl("bridge_int64", lambda: ct.grpo_advantages(r_t, ids_t, **opts),
             "credax.torch, int64 ids densified every call", bench.as_numpy),
        Impl("bridge_groups", lambda: ct.grpo_advantages(r_t, g_t, **opts),
             "credax.torch, ids densified once (credax.torch.groups)", bench.as_numpy),
        Impl("torch_vectorized", bench.torch_run(peers.torch_grpo_vectorized, r_t, ids_t, cases.EPS),
             "torch unique+index_add (verl grpo_vectorized)", bench.as_numpy),
    ]
    if batch <= 4096:  # the per-sample loop takes seconds per call beyond this
        uids = np.array([f"uid-{i}" for i in ids.tolist()], dtype=object)
        impls.append(Impl("torch_loop", bench.torch_run(peers.torch_grpo_loop, r_t, uids, cases.EPS),
                          "torch per-sample loop over uid dict (verl default)", bench.as_numpy))
    ratios = [("bridge_int64", "credax_jit"), ("bridge_groups", "credax_jit"),
              ("torch_vectorized", "bridge_int64"), ("torch_vectorized", "bridge_groups"),
              ("torch_loop", "bridge_int64")]
    runner.run_case("grpo", {"B": batch, "ids": "int64, shuffled"}, batch, "B", reference, impls,
                    ratios)


def case_tcpo(bench: Bench, runner, batch: int, num_turns: int) -> None:
    import credax

    cases, peers, ct, Impl = bench.cases, bench.peers, bench.ct, bench.harness.Impl
    rng = np.random.default_rng(1000 * batch + num_turns)
    ids = cases.make_ids(rng, batch).astype(np.int64) + 2**33
    scores, turn_mask = cases.make_turns(rng, batch, num_turns)
    gamma, eps = cases.TCPO_GAMMA, cases.EPS
    reference = peers.reference_tcpo(scores, turn_mask, ids, gamma=gamma, eps=eps)
    opts = dict(normalization=credax.Normalization(**cases.TCPO_NORMALIZATION), gamma=gamma)
    s_t, m_t, ids_t = bench.t(scores), bench.t(turn_mask), bench.t(ids)
    g_t = ct.groups(ids_t)
    g_j = bench.dense_groups(ids_t)
    s_j, m_j = bench.put(scores), bench.put(turn_mask)
    adv = lambda out: bench.as_numpy(out.advantages)
    impls = [
        Impl("credax_jit", bench.jax_run(credax.tcpo_advantages, s_j, m_j, g_j, **opts),
             "credax.tcpo_advantages, JAX arrays + Groups (the jitted call alone)", adv),
        Impl("bridge_int64", lambda: ct.tcpo_advantages(s_t, m_t, ids_t, **opts),
             "credax.torch, int64 ids densified every call", adv),
        Impl("bridge_groups", lambda: ct.tcpo_advantages(s_t, m_t, g_t, **opts),
             "credax.torch, ids densified once (credax.torch.groups)", adv),
        Impl("torch_turn_loop", bench.torch_run(peers.torch_tcpo_loop, s_t, m_t, ids_t, gamma=gamma,
                                                eps=eps),
             "torch per-turn loop, cummax + scatter_add (TCPO reimplementations)", bench.as_numpy),
    ]
    ratios = [("bridge_int64", "credax_jit"), ("bridge_groups", "credax_jit"),
              ("torch_turn_loop", "bridge_int64"), ("torch_turn_loop", "bridge_groups")]
    runner.run_case("tcpo", {"B": batch, "K": num_turns, "gamma": gamma}, batch * num_turns, "B·K",
                    reference, impls, ratios)


def render(cases: list[dict]) -> str:
    lines = ["| case | size | bridge_int64 / credax_jit | bridge_groups / credax_jit | "
             "torch peer (vectorised GRPO, TCPO turn loop) / bridge_int64 |", "|---|---|---|---|---|"]
    for rec in cases:
        size = ", ".join(f"{k}={v}" for k, v in rec["params"].items() if k in ("B", "K"))
        r = rec["ratios"]
        peer = r.get("torch_vectorized/bridge_int64") or r.get("torch_turn_loop/bridge_int64")

        def cell(v):
            return f"{v['median']:.2f} [{v['min']:.2f}, {v['max']:.2f}]" if v else "n/a"

        lines.append(f"| {rec['case']} | {size} | {cell(r.get('bridge_int64/credax_jit'))} | "
                     f"{cell(r.get('bridge_groups/credax_jit'))} | {cell(peer)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=("quick", "default", "targets"), default="default")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--out", type=Path, default=None, help="directory for bridge-<device>.json")
    parser.add_argument("--torch-threads", type=int, default=None)
    args = parser.parse_args(argv)
    cfg = _config(_speed_modules()[1], args.preset, args.device)
    bench = Bench(cfg)
    if args.torch_threads:
        bench.env.torch.set_num_threads(args.torch_threads)
    runner = bench.harness.Runner(cfg)
    for batch in cfg.grpo_sizes:
        case_grpo(bench, runner, batch)
    for batch, num_turns in cfg.tcpo_sizes:
        case_tcpo(bench, runner, batch, num_turns)
    table = render(runner.cases)
    print("\nmedian of paired ratios [min, max] (one run, same process)\n" + table)
    out_dir = args.out or (Path(tempfile.mkdtemp()) if args.preset == "quick" else RESULTS_DIR)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"bridge-{args.device}.json"
    path.write_text(json.dumps({"preset": args.preset, "device": args.device,
                                "torch_threads": bench.env.torch.get_num_threads(),
                                "cases": runner.cases,
                                "failures": runner.failures}, indent=1, default=str))
    print(f"wrote {path}")
    return 1 if runner.failures else 0


if __name__ == "__main__":
    sys.exit(main())
