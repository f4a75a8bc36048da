"""The cartpole sample: its physics (the classic equations), episodes, returns and
advantages, its metric with hand-made policies, training to SUCCESS on the reference
backend, and `tgweb train cartpole` (the CLI hands the sample its policy)."""

from __future__ import annotations

import io
import math
import random

import numpy as np
import pytest
from conftest import train_to_success

from tgweb import cli, samples
from tgweb.samples import cartpole as cp


def test_one_step_from_rest_matches_the_classic_equations():
    # pushing right from rest: the cart speeds up to the right, the pole starts falling left
    s = cp.step_state([0.0, 0.0, 0.0, 0.0], 1)
    assert s[0] == 0.0 and s[2] == 0.0
    assert s[1] == pytest.approx(0.195122, abs=1e-6) and s[3] == pytest.approx(-0.292683, abs=1e-6)
    # mirror symmetry: the mirrored state under the other action gives the mirrored state
    state = [0.3, -0.2, 0.05, 0.4]
    right = cp.step_state(state, 1)
    left = cp.step_state([-v for v in state], 0)
    assert left == pytest.approx([-v for v in right], abs=1e-12)
    with pytest.raises(ValueError, match="action must be 0 or 1"):
        cp.step_state(state, 2)


def test_an_unpushed_tilted_pole_falls_by_gravity():
    # with no cart motion, the angular acceleration of a tilted pole is g sin / (l (4/3 - m cos^2 / M))
    theta = 0.1
    a1 = (cp.step_state([0, 0, theta, 0], 1)[3] + cp.step_state([0, 0, theta, 0], 0)[3]) / 2 / cp.TAU
    want = (
        cp.GRAVITY
        * math.sin(theta)
        / (cp.HALF_LENGTH * (4 / 3 - cp.POLE_MASS * math.cos(theta) ** 2 / cp.TOTAL_MASS))
    )
    assert a1 == pytest.approx(want, rel=1e-9)


def test_episode_ends():
    assert not cp.failed([2.4, 0, 0.2094, 0])
    assert cp.failed([2.41, 0, 0, 0]) and cp.failed([-2.41, 0, 0, 0])
    assert cp.failed([0, 0, math.radians(12.01), 0]) and cp.failed([0, 0, -math.radians(12.01), 0])


def test_discounted_returns():
    assert cp.discounted(3, 0.5) == [1.75, 1.5, 1.0]
    g = cp.discounted(200)
    assert g[-1] == 1.0 and g[0] == pytest.approx((1 - 0.99**200) / 0.01)


def _controller(feeds):
    """A hand-made balancer as logits: push toward where the pole is falling."""
    obs = np.asarray(feeds["obs"], dtype=np.float64).reshape(-1, 4)
    push = obs[:, 2] + 0.5 * obs[:, 3] + 0.05 * obs[:, 1]
    return np.stack([-20 * push, 20 * push], axis=1)


def test_metric_with_hand_made_policies():
    assert cp.metric(_controller) == 200.0 == cp.metric(_controller, greedy=True)
    zeros = cp.metric(lambda feeds: [[0.0, 0.0]] * cp.EVAL_EPISODES)  # coin flips
    assert 10 < zeros < 40
    assert cp.metric(lambda feeds: [[0.0, 1.0]] * cp.EVAL_EPISODES, greedy=True) < 12  # always right
    with pytest.raises(ValueError, match="expected 200"):
        cp.metric(lambda feeds: [0.0] * 10)


def test_rollout_batches():
    b, rets = cp.rollout(4, 7)
    assert set(b) == set(cp.INPUTS) and b == cp.batch(4, 7) and b != cp.batch(5, 7)
    mask = np.asarray(b["mask"]).reshape(cp.ENVS, cp.T)
    adv = np.asarray(b["advantages"]).reshape(cp.ENVS, cp.T)
    obs = np.asarray(b["obs"]).reshape(cp.ENVS, cp.T, 4)
    assert mask.sum(axis=1).tolist() == rets and all(1 <= n <= 200 for n in rets)
    played = mask > 0
    assert abs(adv[played].mean()) < 1e-5 and adv[played].std() == pytest.approx(1.0, abs=1e-4)
    assert not adv[~played].any() and not obs[~played].any()
    # every episode starts near upright and its states follow the physics under its actions
    acts = np.asarray(b["actions"]).reshape(cp.ENVS, cp.T)
    for e in range(cp.ENVS):
        n = rets[e]
        assert np.all(np.abs(obs[e, 0]) <= 0.05)
        for t in range(n - 1):
            np.testing.assert_allclose(
                obs[e, t + 1], cp.step_state(obs[e, t].tolist(), int(acts[e, t])), atol=1e-5
            )
        last = cp.step_state(obs[e, n - 1].tolist(), int(acts[e, n - 1]))
        assert cp.failed(last) or n == cp.MAX_STEPS
    # with a good policy, episodes last the full 200 steps
    _, good = cp.rollout(0, 0, _controller)
    assert good == [200] * cp.ENVS


def test_loss_is_minus_mean_logprob_times_advantage():
    b = cp.batch(1, 3)
    tr = samples.compile("cartpole", backend="reference", seed=2)
    got = float(tr.attach(cp.loss_fn, inputs=cp.INPUTS).run(**b).output)
    logits = np.asarray(
        tr.attach(cp.forward, inputs={"obs": (cp.ENVS * cp.T, 4)})
        .run(obs=np.asarray(b["obs"], np.float32).reshape(-1, 4))
        .output,
        np.float64,
    )
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    picked = logp[np.arange(len(logp)), np.asarray(b["actions"])]
    mask = np.asarray(b["mask"])
    want = -(picked * np.asarray(b["advantages"]) * mask).sum() / mask.sum()
    assert got == pytest.approx(want, rel=1e-4, abs=1e-6)


def test_trains_to_success_on_the_reference_backend(tmp_path):
    # then the trained policy, played greedily, balances too
    _, tr = train_to_success("cartpole", 10, tmp_path, trained=True)
    predict = tr.attach(cp.forward, inputs=cp.EVAL_INPUTS)
    assert cp.metric(lambda feeds: predict.run(**feeds).output, greedy=True) >= 195


def test_cli_trains_cartpole_with_its_policy():
    out = io.StringIO()
    s = cli.train(
        "cartpole", backend="reference", seed=1, eval_every=20, until_success=True, progress=False, out=out
    )
    # batches from a random policy teach nothing about the policy's own mistakes: success
    # within the budget shows the CLI played each batch with the model being trained
    assert s["first_success_step"] is not None and s["final_metric"] >= 195, out.getvalue()
    assert "mean_return" in out.getvalue()


def test_bad_policy_calls_are_refused():
    with pytest.raises(ValueError, match="at most 100 states"):
        cp.probabilities(_controller, [[0.0] * 4] * 101)
    with pytest.raises(ValueError, match="needs a random.Random"):
        cp.play(_controller, [[0.0] * 4])
    assert cp.probabilities(None, [[0.0] * 4] * 3) == [0.5] * 3
    r = random.Random(0)
    assert cp.play(_controller, [[0.0] * 4], r)[0]["return"] == 200
