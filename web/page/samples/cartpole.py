# cartpole: REINFORCE teaches a policy (MLP 4 -> 64 -> 2) to balance a pole on a cart.
# Each step plays 16 episodes with the current policy (the physics in plain Python, the
# policy on the GPU), then one gradient step on -mean(log pi(a|s) * normalized return).
# show() measures the policy on 100 fixed episodes; the view animates an episode
# (episode() below) and plots the mean return of the training episodes.
import random

import tgweb as tg
from tgweb import worker
from tgweb.samples import cartpole as cp

trainer = tg.compile(cp.Model(), cp.loss_fn, inputs=cp.INPUTS, optimizer=cp.OPTIMIZER, seed=0)
predict = trainer.attach(cp.forward, inputs=cp.EVAL_INPUTS)
history = {"step": [], "mean_return": []}  # the training episodes' mean return per step


def policy(feeds):
    worker.check_stop()  # a step plays up to 200 timesteps: Stop is heard between them
    return predict.run(**feeds).output


def show():
    """The figures (evaluation mean return and the goal) and the return curve."""
    if history["step"] and history["step"][-1] > trainer.steps:
        history["step"].clear()  # after Reset: a fresh policy, a fresh curve
        history["mean_return"].clear()
    evaluated = cp.metric(policy)
    worker.emit(
        "view",
        {
            "figures": {
                "mean return (100 episodes)": evaluated,
                "goal": ">= 195",
                "episodes played": trainer.steps * cp.ENVS,
            },
            "cartpole": {
                "steps": history["step"],
                "returns": history["mean_return"],
                "evaluated": evaluated,
                "at": trainer.steps,
            },
        },
    )


def train(steps):
    for _ in range(steps):
        batch, returns = cp.rollout(trainer.steps, 0, policy)
        r = trainer.step(**batch)
        worker.metric("loss", r.loss, step=trainer.steps)
        history["step"].append(trainer.steps)
        history["mean_return"].append(sum(returns) / len(returns))
        if trainer.steps % 50 == 0:
            show()
        worker.check_stop()


def episode(greedy=False, seed=None):
    """One episode with the current policy from a random start: the cart's position and
    the pole's angle at every timestep (the last one where it failed, if it did)."""
    r = random.Random(seed)
    ep = cp.play(predict_plain, [cp.reset(r)], r, greedy=bool(greedy))[0]
    states = ep["states"] + [cp.step_state(ep["states"][-1], ep["actions"][-1])]
    return {
        "x": [s[0] for s in states],
        "angle": [s[2] for s in states],
        "actions": ep["actions"],
        "return": ep["return"],
        "failed": cp.failed(states[-1]),
        "greedy": bool(greedy),
        "step": trainer.steps,
        "dt": cp.TAU,
        "x_limit": cp.X_LIMIT,
        "angle_limit": cp.ANGLE_LIMIT,
    }


def predict_plain(feeds):
    return predict.run(**feeds).output
