"""cartpole: REINFORCE balances a pole on a cart (the classic control task), 16 environments at once.

The physics are the classic cart-pole equations (Barto, Sutton and Anderson, 1983) with
the usual constants: gravity 9.8, cart 1.0 kg, pole 0.1 kg, pole half-length 0.5 m,
force 10 N left or right, Euler steps of 0.02 s. An episode starts near upright (every
state variable uniform in [-0.05, 0.05]) and ends when |x| > 2.4, |angle| > 12 degrees
or after 200 steps; each step earns 1, so a perfect episode returns 200.

The policy is an MLP (4 -> 64 -> 2, tanh) with a softmax over the two actions (push
left, push right). One training step plays 16 episodes with the current policy
(actions sampled), computes discounted returns (gamma 0.99), normalises them over all
the batch's timesteps to get advantages, and minimises -mean(log pi(a|s) * advantage)
over the timesteps that were played (episodes are padded to 200 timesteps and a mask
input marks the real ones, since shapes are static).

Success: the policy, its actions sampled as in training, reaches a mean return of at
least 195 over 100 evaluation episodes (fixed start states) within 300 steps. (The
greedy policy, always the more probable action, gets there much sooner.)

A training batch depends on the policy being trained, so ``batch`` takes the policy:
``batch(step, rng=0, policy=None)`` where ``policy`` runs ``forward`` on an EVAL_INPUTS
batch (what ``trainer.attach(forward, inputs=EVAL_INPUTS).run(**feeds).output`` gives);
without one, a uniformly random policy plays. ``BATCH_NEEDS_POLICY`` says so to the CLI.
"""

from __future__ import annotations

import array
import math

from .. import nn, ops
from ._util import flatten, make_rng

# the classic constants
GRAVITY = 9.8
CART_MASS = 1.0
POLE_MASS = 0.1
TOTAL_MASS = CART_MASS + POLE_MASS
HALF_LENGTH = 0.5  # half the pole's length
POLE_MOMENT = POLE_MASS * HALF_LENGTH
FORCE = 10.0
TAU = 0.02  # seconds per step
X_LIMIT = 2.4
ANGLE_LIMIT = 12 * 2 * math.pi / 360
MAX_STEPS = 200

ENVS = 16  # episodes per training step
T = MAX_STEPS  # padded episode length of a batch
GAMMA = 0.99
EVAL_EPISODES = 100
HIDDEN = 64
STEPS = 300
BATCH_NEEDS_POLICY = True  # batch(step, rng, policy=...): the extension of the sample surface
INPUTS = {
    "obs": (ENVS, T, 4),
    "actions": ((ENVS, T), "i32"),
    "advantages": (ENVS, T),
    "mask": (ENVS, T),
}
EVAL_INPUTS = {"obs": (EVAL_EPISODES, 4)}
OPTIMIZER = {
    "name": "adam",
    "lr": 1e-2,
    "betas": (0.9, 0.999),
    "eps": 1e-8,
    # decaying to a tenth steadies the policy once it balances (REINFORCE keeps pushing)
    "schedule": {"kind": "linear", "start": 1e-2, "end": 1e-3, "steps": STEPS},
    "weight_decay": 0.0,
    "clip": 1.0,
}
SUCCESS = {"metric": "mean_return", "at_least": 195.0, "within_steps": STEPS}


# ------------------------------------------------------------------ the environment


def reset(r) -> list[float]:
    """A start state [x, x_dot, angle, angle_dot], each uniform in [-0.05, 0.05]."""
    return [r.uniform(-0.05, 0.05) for _ in range(4)]


def step_state(state, action: int) -> list[float]:
    """The state after one 0.02 s Euler step with action 0 (push left) or 1 (push right)."""
    if action not in (0, 1):
        raise ValueError(f"action must be 0 or 1, got {action!r}")
    x, x_dot, theta, theta_dot = state
    force = FORCE if action == 1 else -FORCE
    cos, sin = math.cos(theta), math.sin(theta)
    temp = (force + POLE_MOMENT * theta_dot * theta_dot * sin) / TOTAL_MASS
    theta_acc = (GRAVITY * sin - cos * temp) / (
        HALF_LENGTH * (4.0 / 3.0 - POLE_MASS * cos * cos / TOTAL_MASS)
    )
    x_acc = temp - POLE_MOMENT * theta_acc * cos / TOTAL_MASS
    return [x + TAU * x_dot, x_dot + TAU * x_acc, theta + TAU * theta_dot, theta_dot + TAU * theta_acc]


def failed(state) -> bool:
    """Whether the cart left the track or the pole fell past 12 degrees."""
    return abs(state[0]) > X_LIMIT or abs(state[2]) > ANGLE_LIMIT


# ------------------------------------------------------------------ the policy


class Model(nn.Module):
    def __init__(self, hidden: int = HIDDEN) -> None:
        self.net = nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, 2))

    def forward(self, obs):
        return self.net(obs)


def forward(model: Model, obs):
    """Action logits [n, 2] for states obs [n, 4]."""
    return model(obs)


def loss_fn(model: Model, obs, actions, advantages, mask):
    """-mean over the played timesteps of log pi(action | obs) * advantage."""
    logp = ops.log_softmax(model(obs), axis=-1)  # [ENVS, T, 2]
    picked = ops.sum(logp * ops.one_hot(actions, 2), axis=-1)  # [ENVS, T]
    return -ops.sum(picked * advantages * mask) / ops.maximum(ops.sum(mask), 1.0)


def probabilities(policy, states) -> list[float]:
    """P(push right) for each state (at most EVAL_EPISODES of them), from policy(feeds)
    -> logits [EVAL_EPISODES, 2]; states are padded with zeros to the inference shape.
    policy None: 0.5 for every state (the uniformly random policy)."""
    n = len(states)
    if policy is None:
        return [0.5] * n
    if n > EVAL_EPISODES:
        raise ValueError(f"at most {EVAL_EPISODES} states per policy call, got {n}")
    flat = array.array("f", [v for s in states for v in s])
    flat.extend([0.0] * (4 * (EVAL_EPISODES - n)))
    logits = flatten(policy({"obs": flat}))
    if len(logits) != 2 * EVAL_EPISODES:
        raise ValueError(f"policy returned {len(logits)} values, expected {2 * EVAL_EPISODES}")
    out = []
    for i in range(n):
        d = float(logits[2 * i + 1]) - float(logits[2 * i])
        out.append(1.0 / (1.0 + math.exp(-d)) if d > -60 else 0.0)
    return out


def play(policy, starts, r=None, greedy: bool = False) -> list[dict]:
    """Play one episode from each start state in parallel, all with one policy call per
    timestep. greedy: take the more probable action; else sample with random.Random r.
    Returns per episode {"states": [...], "actions": [...], "return": steps survived}."""
    if not greedy and r is None:
        raise ValueError("sampling actions needs a random.Random r (or greedy=True)")
    eps = [{"states": [], "actions": [], "state": list(s), "done": False} for s in starts]
    for _ in range(MAX_STEPS):
        live = [e for e in eps if not e["done"]]
        if not live:
            break
        probs = probabilities(policy, [e["state"] for e in live])
        for e, p in zip(live, probs):
            a = int(p > 0.5) if greedy else int(r.random() < p)
            e["states"].append(e["state"])
            e["actions"].append(a)
            e["state"] = step_state(e["state"], a)
            e["done"] = failed(e["state"])
    return [{"states": e["states"], "actions": e["actions"], "return": len(e["actions"])} for e in eps]


def discounted(n: int, gamma: float = GAMMA) -> list[float]:
    """The discounted return from each of n timesteps of an episode of n rewards of 1."""
    out, g = [0.0] * n, 0.0
    for t in range(n - 1, -1, -1):
        g = 1.0 + gamma * g
        out[t] = g
    return out


def rollout(step: int, rng=0, policy=None) -> tuple[dict[str, array.array], list[int]]:
    """(batch, returns): ENVS episodes with actions sampled from policy (see batch), as
    the flat training arrays of INPUTS, and each episode's return."""
    r = make_rng(step, rng)
    episodes = play(policy, [reset(r) for _ in range(ENVS)], r)
    rets = [discounted(len(e["actions"])) for e in episodes]
    every = [g for gs in rets for g in gs]
    mean = sum(every) / len(every)
    std = math.sqrt(sum((g - mean) ** 2 for g in every) / len(every))
    scale = 1.0 / std if std > 1e-6 else 0.0  # all returns equal: no signal
    obs, actions, adv, mask = array.array("f"), array.array("i"), array.array("f"), array.array("f")
    for e, gs in zip(episodes, rets):
        n = len(e["actions"])
        for s in e["states"]:
            obs.extend(s)
        obs.extend([0.0] * (4 * (T - n)))
        actions.extend(e["actions"] + [0] * (T - n))
        adv.extend([(g - mean) * scale for g in gs] + [0.0] * (T - n))
        mask.extend([1.0] * n + [0.0] * (T - n))
    return {"obs": obs, "actions": actions, "advantages": adv, "mask": mask}, [e["return"] for e in episodes]


def batch(step: int, rng=0, policy=None) -> dict[str, array.array]:
    """One step's training batch: ENVS episodes played with actions sampled from policy
    (a function running ``forward`` on EVAL_INPUTS-shaped feeds; None: uniformly random
    actions). The same (step, rng) and policy give the same batch."""
    return rollout(step, rng, policy)[0]


def eval_starts() -> list[list[float]]:
    """The EVAL_EPISODES fixed start states of the metric."""
    r = make_rng(0, 0xCA27)
    return [reset(r) for _ in range(EVAL_EPISODES)]


def metric(policy, greedy: bool = False) -> float:
    """Mean return over the EVAL_EPISODES fixed start states, with actions sampled from
    the policy (a fixed random stream, so the same policy gives the same figure), or the
    more probable action if greedy. policy(feeds) runs ``forward`` on {"obs": flat array
    of EVAL_EPISODES * 4} and returns logits [EVAL_EPISODES, 2] (any nesting)."""
    episodes = play(policy, eval_starts(), make_rng(1, 0xCA27), greedy=greedy)
    return sum(e["return"] for e in episodes) / len(episodes)
