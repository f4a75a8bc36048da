# tictactoe: a policy network (MLP with a policy and a value head) learns tic-tac-toe
# with REINFORCE, playing itself and two random players (one takes wins it sees).
# show() plays 1,000 games against the uniformly random player, always the most
# probable move; the view lets you play against the model (move() below).
import tgweb as tg
from tgweb import worker
from tgweb.samples import tictactoe as tt

trainer = tg.compile(tt.Model(), tt.loss_fn, inputs=tt.INPUTS,
                     optimizer=tt.OPTIMIZER, seed=0)
predict = trainer.attach(tt.forward, inputs=tt.EVAL_INPUTS)


def logits(feeds):
    return predict.run(**feeds).output


def policy(feeds):
    worker.check_stop()  # Stop is heard between the plies of a step's games
    return logits(feeds)


def show():
    """Results of 1,000 greedy games against the uniformly random player."""
    res = tt.results(logits)
    share = (res["won"] + res["drawn"]) / tt.EVAL_GAMES
    worker.emit("view", {
        "figures": {"wins or draws vs random": share, "goal": ">= 0.98",
                    "games played": trainer.steps * (tt.SELF_PLAY + tt.VS_RANDOM + tt.VS_OPPORTUNIST)},
        "tictactoe": {"results": res, "step": trainer.steps},
    })


def train(steps):
    for _ in range(steps):
        r = trainer.step(**tt.batch(trainer.steps, 0, policy))
        worker.metric("loss", r.loss, step=trainer.steps)
        if trainer.steps % 250 == 0:
            show()
        worker.check_stop()


def move(cells, player):
    """The model's move for player (1 = X, -1 = O) on cells (9 values in 1, -1, 0) and its
    probability for every cell."""
    cells = [int(c) for c in cells]
    probs = tt.move_probabilities(logits, [(cells, int(player))])[0]
    return {"move": tt.reply(logits, cells, int(player)), "probs": probs, "step": trainer.steps}
