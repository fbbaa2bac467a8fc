"""``--credit`` refuses, in seconds and naming the problem, a user function whose output the lab
cannot train on (checked on the first batch, before any method compiles)."""

import jax.numpy as jnp
import pytest

from benchmarks.lab import __main__ as cli
from benchmarks.lab import example_credit
from benchmarks.lab.methods import Method

CFG = cli.PRESETS["smoke"]["configs"]["refine"]  # B = 4 prompts x 4 = 16 rollouts, K = 5 turns


def _method(fn, name="mine"):
    return Method(name, f"yours: {name}", fn)


def test_the_example_passes():
    cli.check_credit(_method(example_credit.progress_credit), CFG)


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (lambda ctx, s: [ctx.outcome], "returned a list"),
        (lambda ctx, s: ctx.outcome, "returned shape (16,); expected [B, K] = (16, 5)"),
        (lambda ctx, s: ctx.rollout.scores.T, "returned shape (5, 16)"),
        (lambda ctx, s: ctx.rollout.turn_mask.astype(jnp.int32), "returned dtype int32"),
        (lambda ctx, s: jnp.where(ctx.rollout.turn_mask, jnp.log(ctx.rollout.scores * 0.0), 0.0),
         "non-finite values on real turns"),
        (lambda ctx, s: ctx.no_such_field, "raised AttributeError"),
    ],
    ids=["list", "vector", "transposed", "int", "nan", "raises"],
)
def test_bad_output_is_refused_naming_the_problem(fn, message):
    with pytest.raises(ValueError, match="--credit mine: on the first batch") as e:
        cli.check_credit(_method(fn), CFG)
    assert message in str(e.value)


def test_nan_on_padded_turns_is_allowed():
    # The lab masks padded turns; only the real turns must be finite.
    fn = lambda ctx, s: jnp.where(ctx.rollout.turn_mask, 0.0, jnp.nan)
    cli.check_credit(_method(fn), CFG)


def test_cli_fails_fast_with_the_reason(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("def mine(ctx, settings):\n    return [ctx.outcome]\n")
    with pytest.raises(SystemExit) as e:
        cli.main(["--tiny", "--tasks", "refine", "--out", str(tmp_path / "o"), "--credit", f"{bad}:mine"])
    assert e.value.code == 2
    assert "returned a list" in capsys.readouterr().err


def test_a_shape_change_on_the_training_trace_is_refused_there():
    # The first-batch check passes (first call: [B, K]); every later trace returns [B, K - 1]:
    # the training program's trace refuses it by name (issue 44 item 6), at trace time, for free.
    import jax
    from flax import nnx

    from benchmarks.lab import train as T

    calls = []

    def drifting(ctx, settings):
        calls.append(1)
        s = ctx.rollout.scores
        return s if len(calls) == 1 else s[:, :-1]

    m = _method(drifting)
    cli.check_credit(m, CFG)  # passes: the one call it makes has the right shape
    graphdef, state = T.init(CFG, jax.random.key(0))
    model, _ = nnx.merge(graphdef, state)
    pool, _ = T.E.split_targets(CFG.task)
    ctx = T.make_context(model, jax.random.key(0), pool, CFG)._replace(model=None)
    with pytest.raises(ValueError, match=r"--credit mine: in the training trace .* returned shape "
                       r"\(16, 4\); expected \[B, K\] = \(16, 5\)"):
        jax.eval_shape(lambda st, c: T.credit_phase(graphdef, st, c, m, CFG), state, ctx)
