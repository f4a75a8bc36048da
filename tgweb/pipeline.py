"""Pipelined training steps: the contract between the Trainer, the Program and the engines.

A step is sent to the GPU before the steps sent before it are read back (up to DEPTH
of them), and the applied/skipped outcome stays exact. A step's optimizer scalars
(lr, and Adam's step_size and bc2_sqrt) depend on how many steps were applied before
it, which the host does not know yet for the unread ones. So the host sends one set
of them for each number j = 0..DEPTH of unread steps that may turn out applied: the
plain names for j = 0, "<name>@<j>" (if_applied) for the others, plus "applied_seen"
(APPLIED_READ): the applied steps it had read back when it sent this one.

On the GPU, the training Program's first kernel (select_scalars, emitted by
tgweb.codegen.select) counts the applied runs in the word after the host's scalars
(adding the `ok` output the last run left) and copies set j = count - applied_seen
over the plain words. The reference backend does the same on the host (Selector);
the Trainer (tgweb.trainer) keeps its unread steps in an InFlight, which counts the
applied steps it reads back the same way.

Pure Python: it runs in the browser too.
"""

from __future__ import annotations

import collections
import functools
from typing import Any, Callable, Iterable

DEPTH = 8  # steps a Trainer may have sent and not yet read back when it sends another
APPLIED_READ = "applied_seen"  # the host scalar: applied runs of the Program read back so far
OPTIMIZER_SCALARS = ("lr", "step_size", "bc2_sqrt")  # the host scalars that depend on the outcomes


def if_applied(name: str, j: int) -> str:
    """The host scalar holding `name`'s value should j of the unread steps turn out applied."""
    return f"{name}@{j}"


def for_group(name: str, i: int) -> str:
    """The optimizer scalar `name` of parameter group i (a tgweb.torch optimizer's groups
    each have their own lr); group 0 uses the plain name."""
    return name if i == 0 else f"{name}.{i}"


def is_host_scalar(name: str) -> bool:
    """Whether a training graph may use this host scalar: seed, APPLIED_READ, or an
    optimizer scalar (of any group), itself or for j = 1..DEPTH (if_applied)."""
    if name in ("seed", APPLIED_READ):
        return True
    base, at, j = name.partition("@")
    if at and not (j.isdigit() and 1 <= int(j) <= DEPTH and str(int(j)) == j):
        return False
    k, dot, i = base.partition(".")
    return k in OPTIMIZER_SCALARS and (not dot or (i.isdigit() and str(int(i)) == i and i != "0"))


def declare_scalars(graph) -> None:
    """Give a training graph the scalars of pipelined steps: each optimizer scalar again
    for every j = 1..DEPTH, and APPLIED_READ (none when it has no optimizer scalar)."""
    optimizer_scalars = [k for k in graph.scalars if k != "seed"]
    for k in optimizer_scalars:
        for j in range(1, DEPTH + 1):
            graph.scalar(if_applied(k, j))
    if optimizer_scalars:
        graph.scalar(APPLIED_READ, "i32")


def scalar_words(names: Iterable[str]) -> int:
    """32-bit words of a Program's scalars buffer: one per host scalar and, for a training
    step, the select kernel's count of applied runs after them."""
    names = list(names)
    return len(names) + (APPLIED_READ in names)


def step_scalars(outcomes: list[dict], applied_read: int, seed: int, names: Iterable[str]) -> dict:
    """A step's host scalars, those of `names` (the graph's): outcomes[j], j = 0..DEPTH,
    are the optimizer scalars should j of the unread steps turn out applied."""
    scalars = dict(outcomes[0])
    for j in range(1, DEPTH + 1):
        for k, v in outcomes[j].items():
            scalars[if_applied(k, j)] = v
    scalars[APPLIED_READ] = applied_read
    scalars["seed"] = seed
    return {k: scalars[k] for k in names}


def selected(scalars: dict[str, Any], applied: int) -> dict[str, Any]:
    """The scalars a step uses, given the applied runs before it: what the select kernel
    does on the GPU."""
    out = {k: v for k, v in scalars.items() if "@" not in k}
    j = applied - int(scalars.get(APPLIED_READ, applied))
    if 1 <= j <= DEPTH:
        out.update({k: scalars[if_applied(k, j)] for k in list(out) if if_applied(k, j) in scalars})
    return out


class Selector:
    """The select kernel on the host (the reference backend): it counts the applied runs
    from each run's ok output, as the kernel does in its scalars buffer."""

    def __init__(self) -> None:
        self.applied = 0
        self._last_ok = False  # the last run's ok output (a GPU's zeroed buffer at first)

    def select(self, scalars: dict[str, Any]) -> dict[str, Any]:
        """The scalars of the run about to start (it counts the last run first)."""
        self.applied += self._last_ok
        return selected(scalars, self.applied)

    def ran(self, ok: bool) -> None:
        self._last_ok = ok


class InFlight:
    """A trainer's steps sent and not yet read back, oldest first, and the applied steps
    read back from its engine (the APPLIED_READ of the next step). A tracked result has
    `ready` and `_pending`: the function that reads it back, set here."""

    def __init__(self) -> None:
        self.unread: collections.deque = collections.deque()
        self.applied_read = 0

    def outcome_sets(self, scalars_after: Callable[[int], Any], applied: int) -> list:
        """scalars_after(applied + j) for every number j of the unread steps that may turn
        out applied, then repeated up to DEPTH + 1 entries (outcomes that cannot happen)."""
        sets = [scalars_after(applied + j) for j in range(len(self.unread) + 1)]
        return sets + [sets[-1]] * (DEPTH + 1 - len(sets))

    def send(self, result, read: Callable[[int], bool]) -> None:
        """Track the step just sent. read(j) reads it back, given that j of the steps
        unread now were applied, and says whether it was applied itself."""
        before, at = tuple(self.unread), self.applied_read
        result._pending = lambda: self._read(result, before, at, read)
        self.unread.append(result)  # tracked before any is read: an error there loses no step
        if len(self.unread) > DEPTH:
            wait(self.unread[0])  # on the GPU it ran DEPTH steps before this one

    def _read(self, result, before: tuple, at: int, read: Callable[[int], bool]) -> None:
        try:
            self.unread.remove(result)
        except ValueError:
            pass
        try:
            for r in before:
                wait(r)  # in order (its own error, if any, comes again here)
            result._pending = None
            self.applied_read += read(self.applied_read - at)
        except Exception as e:
            result._pending = functools.partial(_raise, e)  # every later read of it says why
            raise

    def wait_all(self) -> None:
        """Read back every step in flight (the last one reads those before it first)."""
        if self.unread:
            wait(self.unread[-1])

    def lost(self) -> None:
        """The engine is gone, with the steps sent to it; a new one has counted no runs."""
        self.unread.clear()
        self.applied_read = 0


def wait(result) -> None:
    """Read a tracked result back, if it is not in yet."""
    if result._pending is not None:
        result._pending()


def _raise(e: Exception):
    raise e
