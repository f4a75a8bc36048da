"""tictactoe: a policy network learns tic-tac-toe with REINFORCE, by self-play and against random players.

A board is seen from the player to move: 18 inputs, 9 for the mover's stones and 9 for
the opponent's (cells 0-8 row by row), and a mask of the legal (empty) cells. The model
is an MLP trunk (18 -> 128 -> 128, ReLU) with a policy head (9 move logits, pushed to
-1e4 on occupied cells so that the softmax gives illegal moves no probability) and a
value head (the mover's expected return); the same network plays both sides. A game's
reward is +1 for the winner, -1 for the loser and 0 for both in a draw; a move's return
is that reward discounted by GAMMA for each later move of the same player. The loss is
REINFORCE with the value as baseline, -mean(log pi(move | board) * (return - value)),
plus VALUE_WEIGHT times the value head's squared error, over the network's moves.

One training step plays, with moves sampled from the policy, SELF_PLAY games of the
network against itself (both sides' moves are trained on), VS_RANDOM games against a
uniformly random player and VS_OPPORTUNIST games against a random player that takes a
win when it has one (half of each with the network first; only the network's moves are
trained on). The opportunist punishes an unblocked line every time, where the uniform
player lets most of them pass: without it the policy plateaus near 97 % (it learns
that blocking rarely pays against random moves). Batches are padded to ROWS moves with
a mask.

Success: the network, always playing its most probable move, wins or draws at least
98 % of 1,000 games against the uniformly random player (500 moving first, 500
second; a fixed random stream) within 2,000 steps.

A training batch depends on the policy being trained, so ``batch`` takes the policy:
``batch(step, rng=0, policy=None)`` where ``policy`` runs ``forward`` on an EVAL_INPUTS
batch (what ``trainer.attach(forward, inputs=EVAL_INPUTS).run(**feeds).output`` gives);
without one, uniformly random moves are played. ``BATCH_NEEDS_POLICY`` says so to the CLI.
"""

from __future__ import annotations

import array
import math

from .. import nn, ops
from ._util import flatten, make_rng

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
SELF_PLAY = 32  # games against itself per step
VS_RANDOM = 96  # games against the uniformly random player per step
VS_OPPORTUNIST = 96  # games against the random player that takes a win when it sees one
ROWS = SELF_PLAY * 9 + (VS_RANDOM + VS_OPPORTUNIST) * 5  # the most moves a step can train on
GAMMA = 0.9
HIDDEN = 128
EVAL_GAMES = 1000
POLICY_ROWS = 500  # boards per policy call (at most 500 of the 1,000 games wait for the network)
MASKED = -1e4  # the logit of an occupied cell
VALUE_WEIGHT = 0.5
STEPS = 2000
BATCH_NEEDS_POLICY = True  # batch(step, rng, policy=...): the extension of the sample surface
INPUTS = {
    "board": (ROWS, 18),
    "legal": (ROWS, 9),
    "moves": ((ROWS,), "i32"),
    "returns": (ROWS,),
    "mask": (ROWS,),
}
EVAL_INPUTS = {"board": (POLICY_ROWS, 18), "legal": (POLICY_ROWS, 9)}
OPTIMIZER = {
    "name": "adam",
    "lr": 3e-3,
    "betas": (0.9, 0.999),
    "eps": 1e-8,
    "schedule": None,
    "weight_decay": 0.0,
    "clip": 1.0,
}
SUCCESS = {"metric": "not_lost", "at_least": 0.98, "within_steps": STEPS}


# ------------------------------------------------------------------ the game


def winner(cells) -> int:
    """1 or -1 if that player has three in a line on cells (9 values in {1, -1, 0}), else 0."""
    if len(cells) != 9:
        raise ValueError(f"a board has 9 cells, got {len(cells)}")
    for a, b, c in LINES:
        if cells[a] != 0 and cells[a] == cells[b] == cells[c]:
            return cells[a]
    return 0


def legal_moves(cells) -> list[int]:
    """The empty cells."""
    return [i for i in range(9) if cells[i] == 0]


def features(cells, player: int) -> list[float]:
    """The 18 inputs for `player` (1 or -1) to move: its stones, then the opponent's."""
    return [1.0 if v == player else 0.0 for v in cells] + [1.0 if v == -player else 0.0 for v in cells]


# ------------------------------------------------------------------ the policy


class Model(nn.Module):
    """A shared trunk (18 -> 128 -> 128, ReLU), a policy head (9 move logits) and a value
    head (the expected return of the mover, the baseline of REINFORCE)."""

    def __init__(self, hidden: int = HIDDEN) -> None:
        self.trunk = nn.Sequential(nn.Linear(18, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.policy = nn.Linear(hidden, 9)
        self.value = nn.Linear(hidden, 1)

    def forward(self, board, legal):
        """(move logits [n, 9] with occupied cells at about -1e4, values [n])."""
        h = self.trunk(board)
        return self.policy(h) + (1.0 - legal) * MASKED, ops.tanh(self.value(h))[:, 0]


def forward(model: Model, board, legal):
    """Masked move logits [n, 9] for boards [n, 18] (mover's view) and legal masks [n, 9]."""
    return model(board, legal)[0]


def loss_fn(model: Model, board, legal, moves, returns, mask):
    """REINFORCE with a learned baseline: -mean over the moves played of
    log pi(move | board) * (return - value), plus the value head's squared error."""
    logits, value = model(board, legal)
    logp = ops.log_softmax(logits, axis=-1)
    picked = ops.sum(logp * ops.one_hot(moves, 9), axis=-1)
    n = ops.maximum(ops.sum(mask), 1.0)
    advantage = returns - ops.stop_gradient(value)
    policy_loss = -ops.sum(picked * advantage * mask) / n
    value_loss = ops.sum(ops.square(value - returns) * mask) / n
    return policy_loss + VALUE_WEIGHT * value_loss


def move_probabilities(policy, positions) -> list[list[float]]:
    """For each (cells, player) position, the policy's probability of each of the 9 cells
    (0 on occupied ones); policy(feeds) -> logits [POLICY_ROWS, 9] as ``forward`` gives.
    policy None: uniform over the legal cells. At most POLICY_ROWS positions."""
    n = len(positions)
    if policy is None:
        out = []
        for cells, _ in positions:
            legal = legal_moves(cells)
            out.append([1.0 / len(legal) if c == 0 else 0.0 for c in cells])
        return out
    if n > POLICY_ROWS:
        raise ValueError(f"at most {POLICY_ROWS} positions per policy call, got {n}")
    board, legal = array.array("f"), array.array("f")
    for cells, player in positions:
        board.extend(features(cells, player))
        legal.extend([1.0 if c == 0 else 0.0 for c in cells])
    board.extend([0.0] * (18 * (POLICY_ROWS - n)))
    legal.extend([1.0] * (9 * (POLICY_ROWS - n)))
    logits = flatten(policy({"board": board, "legal": legal}))
    if len(logits) != 9 * POLICY_ROWS:
        raise ValueError(f"policy returned {len(logits)} values, expected {9 * POLICY_ROWS}")
    out = []
    for k, (cells, _) in enumerate(positions):
        row = [float(v) for v in logits[9 * k : 9 * k + 9]]
        top = max(row[i] for i in range(9) if cells[i] == 0)
        e = [math.exp(row[i] - top) if cells[i] == 0 else 0.0 for i in range(9)]
        total = sum(e)
        out.append([v / total for v in e])
    return out


def choose(probs, r=None) -> int:
    """A cell: the most probable one (r None; the lowest index on ties) or one sampled with r."""
    if r is None:
        return max(range(9), key=lambda i: (probs[i], -i))
    u, acc = r.random(), 0.0
    last = 0
    for i, p in enumerate(probs):
        if p > 0:
            acc += p
            last = i
            if u < acc:
                return i
    return last  # rounding left u just above the total


SIDES = ("net", "random", "opportunist")


def random_move(cells, player: int, r, opportunist: bool = False) -> int:
    """A uniformly random empty cell; an opportunist first takes a cell that wins at once."""
    legal = legal_moves(cells)
    if opportunist:
        for i in legal:
            if winner(cells[:i] + [player] + cells[i + 1 :]) == player:
                return i
    return r.choice(legal)


def play(policy, games, r=None, greedy: bool = False) -> list[dict]:
    """Play games in lockstep, one policy call per ply for all games where the network is
    to move. games: a list of (x_side, o_side), each "net", "random" or "opportunist"
    (X moves first; see random_move; they draw with r). The network samples its
    moves with r, or plays its most probable move if greedy (or r is None). Returns per game
    {"moves": [cell, ...], "players": [1 or -1 per move], "net": [bool per move],
    "boards": [cells before each move], "winner": 1 (X), -1 (O) or 0}."""
    for sides in games:
        if len(sides) != 2 or any(s not in SIDES for s in sides):
            raise ValueError(f"a game is (x_side, o_side), each one of {SIDES}, got {sides!r}")
    if r is None and any(s != "net" for sides in games for s in sides):
        raise ValueError("games against a random player need a random.Random r")
    state = [
        {"cells": [0] * 9, "sides": s, "moves": [], "players": [], "net": [], "boards": [], "winner": 0}
        for s in games
    ]
    for ply in range(9):
        player = 1 if ply % 2 == 0 else -1
        live = [g for g in state if g["winner"] == 0 and len(g["moves"]) == ply]
        net = [g for g in live if g["sides"][ply % 2] == "net"]
        probs = {}
        for lo in range(0, len(net), POLICY_ROWS):
            chunk = net[lo : lo + POLICY_ROWS]
            for g, p in zip(chunk, move_probabilities(policy, [(g["cells"], player) for g in chunk])):
                probs[id(g)] = p
        for g in live:
            if id(g) in probs:
                cell = choose(probs[id(g)], None if greedy else r)
            else:
                cell = random_move(g["cells"], player, r, g["sides"][ply % 2] == "opportunist")
            g["boards"].append(list(g["cells"]))
            g["moves"].append(cell)
            g["players"].append(player)
            g["net"].append(id(g) in probs)
            g["cells"][cell] = player
            g["winner"] = winner(g["cells"])
    return [{k: g[k] for k in ("moves", "players", "net", "boards", "winner")} for g in state]


def move_returns(game, gamma: float = GAMMA) -> list[float]:
    """Each move's return for the player who made it: the final reward (+1 win, -1 loss,
    0 draw) discounted by gamma for each later move of the same player."""
    n = len(game["moves"])
    out = []
    for t, p in enumerate(game["players"]):
        later = (n - 1 - t) // 2  # the same player moves every other ply
        out.append(game["winner"] * p * gamma**later)
    return out


def _games() -> list[tuple[str, str]]:
    out = [("net", "net")] * SELF_PLAY
    for kind, n in (("random", VS_RANDOM), ("opportunist", VS_OPPORTUNIST)):
        out += [("net", kind)] * (n // 2) + [(kind, "net")] * (n - n // 2)
    return out


def rollout(step: int, rng=0, policy=None) -> tuple[dict[str, array.array], list[dict]]:
    """(batch, games): one step's games with moves sampled from policy (see batch), as the
    flat training arrays of INPUTS, and the games themselves (see play)."""
    r = make_rng(step, rng)
    games = play(policy, _games(), r)
    board, legal, moves = array.array("f"), array.array("f"), array.array("i")
    rets, mask = array.array("f"), array.array("f")
    played = [
        (cells, p, cell, ret)
        for g in games
        for cells, p, cell, by_net, ret in zip(
            g["boards"], g["players"], g["moves"], g["net"], move_returns(g)
        )
        if by_net
    ]
    for cells, p, cell, ret in played:
        board.extend(features(cells, p))
        legal.extend([1.0 if c == 0 else 0.0 for c in cells])
        moves.append(cell)
        rets.append(ret)
        mask.append(1.0)
    pad = ROWS - len(moves)
    board.extend([0.0] * (18 * pad))
    legal.extend([1.0] * (9 * pad))
    moves.extend([0] * pad)
    rets.extend([0.0] * pad)
    mask.extend([0.0] * pad)
    return {"board": board, "legal": legal, "moves": moves, "returns": rets, "mask": mask}, games


def batch(step: int, rng=0, policy=None) -> dict[str, array.array]:
    """One step's training batch (see the module docstring) with moves sampled from policy
    (a function running ``forward`` on EVAL_INPUTS-shaped feeds; None: uniformly random
    moves). The same (step, rng) and policy give the same batch."""
    return rollout(step, rng, policy)[0]


def results(policy, games: int = EVAL_GAMES, seed: int = 0x7AC) -> dict[str, int]:
    """Wins, draws and losses of the network (its most probable move) against the uniformly
    random player over `games` games, the network first in the first half."""
    r = make_rng(0, seed)
    half = games // 2
    played = play(policy, [("net", "random")] * half + [("random", "net")] * (games - half), r, greedy=True)
    out = {"won": 0, "drawn": 0, "lost": 0}
    for k, g in enumerate(played):
        me = 1 if k < half else -1
        out["won" if g["winner"] == me else "lost" if g["winner"] == -me else "drawn"] += 1
    return out


def metric(policy) -> float:
    """The share of EVAL_GAMES games against the random player that the network wins or
    draws, always playing its most probable move. policy(feeds) runs ``forward`` on
    {"board": flat POLICY_ROWS * 18, "legal": flat POLICY_ROWS * 9} and returns the
    logits [POLICY_ROWS, 9] (any nesting)."""
    res = results(policy)
    return (res["won"] + res["drawn"]) / EVAL_GAMES


def reply(policy, cells, player: int) -> int:
    """The network's move (its most probable cell) for `player` (1 = X, -1 = O) on cells."""
    if winner(cells) or not legal_moves(cells):
        raise ValueError("the game is over: no move to make")
    if player not in (1, -1) or any(c not in (1, -1, 0) for c in cells):
        raise ValueError("cells hold 1 (X), -1 (O) or 0 (empty); player is 1 or -1")
    return choose(move_probabilities(policy, [(list(cells), player)])[0])
