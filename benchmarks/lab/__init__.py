"""The credit lab: a toy multi-turn agent trained end to end with each credit method.

``python -m benchmarks.lab`` (``make demo``) trains a small Flax NNX agent on a code-breaking
task (``env.py``) with every credit method of ``methods.py`` — GRPO, Dr. GRPO, RLOO, MT-GRPO, GiGPO,
a learned value baseline, a scalar process reward, TRIAGE with four judges (``judges.py``), and the
TCPO ablation rungs — through one jitted loop (``train.py``: rollout, credax credit,
``credax.nnx.policy_loss_fn``, optax adamw), and reports held-out success, final and best-turn
scores and turns to success over seeds (``report.py``).
"""
