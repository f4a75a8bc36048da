"""Text generation one token at a time, on the device: a key/value cache kept between runs
(tgweb.inference.state) and the next token drawn there (temperature, top-k), so a token
costs one token's work and only its id is read back. Used by the GPT samples' samplers."""

from __future__ import annotations

import array
import math

from .. import inference, ops
from ._util import flatten

MASKED = -1e30  # a logit or score that softmax and the Gumbel draw never pick (finite: WGSL has no inf)


def draw(logits, temperature, top_k):
    """One token id (i32, shape logits.shape[:-1]) drawn from softmax(logits / temperature)
    restricted to the top_k largest logits (ties with the k-th kept, as nanoGPT's
    generate keeps them). temperature: f32 [1, 1]; top_k: i32 [1, 1] (1: the most likely
    token, greedy; 0 or the vocabulary's size: no restriction). A logit's rank is the count of
    larger ones, found by comparing every pair: vocab^2 comparisons, nothing for a
    character vocabulary (65^2), too many for GPT-2's 50,304."""
    vocab = logits.shape[-1]
    x = logits / ops.reshape(temperature, (1,) * (logits.ndim - 1) + (1,))
    rows = x.shape[:-1]
    larger = ops.where(ops.unsqueeze(x, -2) > ops.unsqueeze(x, -1), 1.0, 0.0)  # [.., v, v]
    rank = ops.sum(larger, axis=-1)  # [.., v]: how many logits exceed each
    k = ops.cast(ops.reshape(top_k, (1,) * len(rows) + (1,)), "f32")
    keep = rank < ops.where(k > 0, k, float(vocab))  # k <= 0: every token
    return ops.categorical(ops.where(keep, x, MASKED), axis=-1)


def positions(pos, block: int):
    """(here, seen) for the token at pos (i32 [1]) in a cache of `block` positions, as
    [1, 1, block, 1] and [1, 1, 1, block] booleans: where its key and value go, and which
    positions it attends to (itself and the earlier ones)."""
    at = ops.arange(block, dtype="i32")
    here = ops.reshape(at == pos, (1, 1, block, 1))
    seen = ops.reshape(at <= pos, (1, 1, 1, block))
    return here, seen


def cached_attention(name: str, q, k, v, here, seen):
    """Causal attention of one token's query q [1, h, 1, hd] over the keys and values of
    every earlier position, kept in a cache `name` ([1, h, block, hd] each) between runs:
    this token's k and v are written at its position (`here`), the scores of positions
    after it masked (`seen`); see positions()."""
    _, h, _, hd = q.shape
    block = here.shape[2]
    keys = inference.state(f"{name}.k", (1, h, block, hd))
    values = inference.state(f"{name}.v", (1, h, block, hd))
    keys_now = ops.where(here, k, keys)
    values_now = ops.where(here, v, values)
    inference.assign(keys, keys_now)
    inference.assign(values, values_now)
    scores = ops.matmul(q, ops.transpose(keys_now, 2, 3)) * (1.0 / math.sqrt(hd))  # [1, h, 1, block]
    return ops.matmul(ops.softmax(ops.where(seen, scores, MASKED), axis=-1), values_now)


class Draws:
    """The token ids a sampler program draws (an attached forward like shakespeare's
    next_token: inputs token, temperature and top_k; a draw of -1's token is the previous
    run's, kept on the device), endless, read one by one. Runs are sent when this is made
    and as ids are read, up to `ahead` sent and unread: runs chain on the device, so none
    waits for the host. The context's tokens are run first, filling the cache; when the
    cache's `block` positions are used, it is emptied and filled again from the last
    block // 2 tokens (the one wait for the host: it must know them)."""

    def __init__(self, sampler, context: list[int], block: int, feeds: dict, ahead: int) -> None:
        if isinstance(ahead, bool) or not isinstance(ahead, int) or ahead < 1:
            raise ValueError(f"ahead must be an int >= 1 (runs sent before one is read), got {ahead!r}")
        self.sampler, self.block, self.feeds, self.ahead = sampler, block, feeds, ahead
        self.context = list(context[-block:])
        self._fill()

    def _send(self, token: int):
        return self.sampler.submit(token=array.array("i", [token]), **self.feeds)

    def _fill(self) -> None:
        self.sampler.reset_state()
        self.pending = [self._send(t) for t in self.context][-1:]  # the context's own draws unread
        self.room = self.block - len(self.context)  # chained runs the cache has positions for
        self._top_up()

    def _top_up(self) -> None:
        while len(self.pending) < self.ahead and self.room > 0:
            self.pending.append(self._send(-1))
            self.room -= 1

    def __iter__(self):
        return self

    def __next__(self) -> int:
        token = int(flatten(self.pending.pop(0)().output)[0])
        self.context.append(token)
        if len(self.context) > self.block:  # every run sent has been read: refill
            self.context = self.context[-(self.block // 2) :]
            self._fill()
        else:
            self._top_up()
        return token
