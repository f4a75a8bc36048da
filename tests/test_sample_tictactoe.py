"""The tictactoe sample: its game rules, games played in lockstep, returns, its metric
with a perfect (minimax) player and a bad one, the loss against NumPy, training to
SUCCESS on the reference backend, and `tgweb train tictactoe` through the CLI."""

from __future__ import annotations

import functools
import io
import random

import numpy as np
import pytest

from tgweb import cli, samples
from tgweb.samples import tictactoe as tt


def test_rules():
    assert tt.winner([1, 1, 1, 0, -1, -1, 0, 0, 0]) == 1
    assert tt.winner([-1, 1, 1, 0, -1, 1, 0, 0, -1]) == -1  # a diagonal
    assert tt.winner([1, -1, 1, 1, -1, -1, -1, 1, 1]) == 0  # a full board, drawn
    assert tt.legal_moves([1, 0, -1, 0, 0, 0, 0, 0, 1]) == [1, 3, 4, 5, 6, 7]
    assert tt.features([1, -1, 0, 0, 0, 0, 0, 0, 0], -1) == [0, 1] + [0] * 7 + [1, 0] + [0] * 7
    with pytest.raises(ValueError, match="9 cells"):
        tt.winner([0] * 8)


def test_returns_are_discounted_per_own_move():
    g = {"moves": [4, 0, 2, 6, 3, 5, 1], "players": [1, -1, 1, -1, 1, -1, 1], "winner": 1}
    got = tt.move_returns(g, 0.5)
    assert got == [0.125, -0.25, 0.25, -0.5, 0.5, -1.0, 1.0]
    assert tt.move_returns({**g, "winner": 0}, 0.5) == [0.0] * 7


@functools.cache
def _best(cells: tuple, player: int) -> int:
    """The minimax value of the position for `player` to move."""
    w = tt.winner(list(cells))
    if w:
        return w * player
    legal = tt.legal_moves(cells)
    if not legal:
        return 0
    return max(-_best(cells[:i] + (player,) + cells[i + 1 :], -player) for i in legal)


def _minimax_policy(feeds):
    """Logits from minimax: perfect play, as a policy on the sample's feeds."""
    board = np.asarray(feeds["board"]).reshape(tt.POLICY_ROWS, 18)
    out = np.full((tt.POLICY_ROWS, 9), -1e4)
    for k, row in enumerate(board):
        cells = tuple(int(a) - int(b) for a, b in zip(row[:9], row[9:]))  # the mover is +1
        for i in tt.legal_moves(cells):
            out[k, i] = -_best(cells[:i] + (1,) + cells[i + 1 :], -1)
    return out


def test_metric_with_a_perfect_and_a_naive_player():
    res = tt.results(_minimax_policy)
    assert res["lost"] == 0 and res["won"] > 800
    assert tt.metric(_minimax_policy) == 1.0

    def first_empty(feeds):
        legal = np.asarray(feeds["legal"]).reshape(tt.POLICY_ROWS, 9)
        return np.where(legal > 0, -np.arange(9.0), -1e4)

    assert tt.metric(first_empty) < 0.9


def test_games_follow_the_rules():
    r = random.Random(3)
    games = tt.play(None, [("net", "net"), ("random", "opportunist"), ("opportunist", "net")] * 30, r)
    for g in games:
        cells = [0] * 9
        for k, (board, p, cell) in enumerate(zip(g["boards"], g["players"], g["moves"])):
            assert board == cells and p == (1 if k % 2 == 0 else -1) and cells[cell] == 0
            cells[cell] = p
            assert tt.winner(cells) == 0 or k == len(g["moves"]) - 1
        assert tt.winner(cells) == g["winner"]
    # the opportunist takes a win when it has one
    assert tt.random_move([1, 1, 0, -1, -1, 0, 0, 0, 0], 1, r, opportunist=True) == 2
    assert tt.random_move([1, 1, 0, -1, -1, 0, 0, 0, 0], -1, r, opportunist=True) == 5
    with pytest.raises(ValueError, match="each one of"):
        tt.play(None, [("net", "human")], r)
    with pytest.raises(ValueError, match="need a random.Random"):
        tt.play(_minimax_policy, [("net", "random")])


def test_batches():
    b, games = tt.rollout(2, 5)
    assert set(b) == set(tt.INPUTS) and b == tt.batch(2, 5) and b != tt.batch(3, 5)
    mask = np.asarray(b["mask"])
    played = sum(sum(g["net"]) for g in games)
    assert mask.sum() == played and mask[:played].all() and not mask[played:].any()
    legal = np.asarray(b["legal"]).reshape(tt.ROWS, 9)
    moves = np.asarray(b["moves"])
    assert (legal[np.arange(tt.ROWS), moves][:played] == 1).all()  # every trained move was legal
    assert len(games) == tt.SELF_PLAY + tt.VS_RANDOM + tt.VS_OPPORTUNIST
    rets = np.asarray(b["returns"])[:played]
    allowed = [0.0] + [tt.GAMMA**k for k in range(5)]
    assert all(min(abs(abs(float(v)) - a) for a in allowed) < 1e-6 for v in rets)


def test_loss_against_numpy():
    b = tt.batch(0, 1)
    tr = samples.compile("tictactoe", backend="reference", seed=4)
    got = float(tr.attach(tt.loss_fn, inputs=tt.INPUTS).run(**b).output)
    p = {k: np.asarray(v, np.float64) for k, v in tr.params().items()}
    x = np.asarray(b["board"], np.float64).reshape(tt.ROWS, 18)
    h = np.maximum(x @ p["trunk.0.weight"].T + p["trunk.0.bias"], 0)
    h = np.maximum(h @ p["trunk.2.weight"].T + p["trunk.2.bias"], 0)
    legal = np.asarray(b["legal"]).reshape(tt.ROWS, 9)
    logits = h @ p["policy.weight"].T + p["policy.bias"] + (1 - legal) * tt.MASKED
    value = np.tanh(h @ p["value.weight"].T + p["value.bias"])[:, 0]
    logp = logits - logits.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    moves, rets, mask = np.asarray(b["moves"]), np.asarray(b["returns"]), np.asarray(b["mask"])
    picked = logp[np.arange(tt.ROWS), moves]
    n = mask.sum()
    want = (
        -(picked * (rets - value) * mask).sum() / n + tt.VALUE_WEIGHT * ((value - rets) ** 2 * mask).sum() / n
    )
    assert got == pytest.approx(want, rel=1e-4, abs=1e-6)


def test_reply_is_a_legal_move():
    tr = samples.compile("tictactoe", backend="reference", seed=0)
    predict = tr.attach(tt.forward, inputs=tt.EVAL_INPUTS)
    cells = [1, -1, 1, 0, -1, 0, 0, 0, 0]
    move = tt.reply(lambda f: predict.run(**f).output, cells, 1)
    assert move in tt.legal_moves(cells)
    assert tt.reply(_minimax_policy, cells, 1) == 7  # X must block the column 1-4-7
    with pytest.raises(ValueError, match="game is over"):
        tt.reply(_minimax_policy, [1, 1, 1, -1, -1, 0, 0, 0, 0], -1)
    with pytest.raises(ValueError, match="player is 1 or -1"):
        tt.reply(_minimax_policy, [2, 0, 0, 0, 0, 0, 0, 0, 0], 1)


def test_cli_runs_tictactoe():
    out = io.StringIO()
    s = cli.train("tictactoe", backend="reference", steps=3, progress=False, out=out)
    assert s["steps"] == 3 and s["metric"] == "not_lost" and 0 <= s["final_metric"] <= 1
    assert "final not_lost: " in out.getvalue()
