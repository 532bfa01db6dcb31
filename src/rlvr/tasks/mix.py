"""A task made of data-file records: a held-out split and a training stream mixed by source.

The held-out split takes `eval_size` records, per source in proportion,
chosen with the run's seed; training never sees them. Training draws come
from the sources in the configured ratio (`data.mix`, e.g. math:code = 6:4)
by smooth weighted round robin, so every window of draws keeps the ratio;
within a source the records are reshuffled every pass with the seed. The
stream is a pure function of the seed, so a resumed run replays it to the
saved position (`ProblemSampler.position`).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator

from rlvr.records import Problem
from rlvr.tasks.files import DataError


def _allocate(total: int, counts: dict[str, int]) -> dict[str, int]:
    """`total` split over sources in proportion to counts (largest remainder), each keeping >= 1 record."""
    n = sum(counts.values())
    exact = {s: total * c / n for s, c in counts.items()}
    alloc = {s: min(int(x), counts[s] - 1) for s, x in exact.items()}
    for s in sorted(counts, key=lambda s: exact[s] - int(exact[s]), reverse=True):
        if sum(alloc.values()) >= total:
            break
        if alloc[s] < counts[s] - 1:
            alloc[s] += 1
    return alloc


class FileTask:
    def __init__(
        self,
        problems: list[Problem],
        *,
        mix: dict[str, float],
        eval_size: int,
        seed: int,
        held_out: list[Problem] | None = None,
    ):
        """held_out: records held out already (a data set's own eval split); else eval_size are drawn."""
        self.seed = seed
        by_source: dict[str, list[Problem]] = {}
        for p in problems:
            by_source.setdefault(p.source, []).append(p)
        if held_out is not None:
            self._eval, self.train = list(held_out), by_source
            self.weights = self._weights(mix)
            return
        if eval_size >= len(problems):
            raise DataError(
                f"data.eval_size={eval_size} but there are only {len(problems)} records; "
                f"lower data.eval_size so some are left to train on"
            )
        counts = {s: len(ps) for s, ps in by_source.items()}
        rng = random.Random(f"heldout-{seed}")
        self._eval: list[Problem] = []
        self.train: dict[str, list[Problem]] = {}
        for s, k in _allocate(eval_size, counts).items():
            idx = set(rng.sample(range(counts[s]), k))
            self._eval += [p for i, p in enumerate(by_source[s]) if i in idx]
            self.train[s] = [p for i, p in enumerate(by_source[s]) if i not in idx]
        rng.shuffle(self._eval)  # sources interleaved, so held_out()[:n] keeps the proportions
        self.weights = self._weights(mix)

    def _weights(self, mix: dict[str, float]) -> dict[str, float]:
        sources = sorted(self.train)
        if not mix:
            return {s: float(len(self.train[s])) for s in sources}
        unknown = sorted(set(mix) - set(sources))
        missing = sorted(set(sources) - set(mix))
        if unknown or missing:
            raise DataError(
                f"data.mix: {'unknown source(s) ' + str(unknown) if unknown else ''}"
                f"{'; ' if unknown and missing else ''}"
                f"{'no share for source(s) ' + str(missing) + ' (0 leaves one out)' if missing else ''}; "
                f"the sources in the data are {sources}"
            )
        return {s: float(mix[s]) for s in sources if mix[s] > 0}

    @property
    def sources(self) -> dict[str, int]:
        """Training records per source."""
        return {s: len(ps) for s, ps in sorted(self.train.items())}

    def held_out(self) -> list[Problem]:
        return list(self._eval)

    def train_stream(self, seed: int) -> Iterator[Problem]:
        """Endless training problems: sources in the mix ratio, each source reshuffled every pass."""
        names = sorted(self.weights)
        total = sum(self.weights.values())
        credit = dict.fromkeys(names, 0.0)
        orders = {s: _Pass(self.train[s], random.Random(f"train-{self.seed}-{seed}-{s}")) for s in names}
        while True:
            for s in names:
                credit[s] += self.weights[s]
            pick = max(names, key=lambda s: credit[s])  # ties: the first name, deterministic
            credit[pick] -= total
            yield orders[pick].next()

    def replace(self, keep: dict[str, Problem | None]) -> None:
        """Swap problems by id (None drops one): used by the prompt-length policy."""

        def apply(ps: list[Problem]) -> list[Problem]:
            out = [keep.get(p.id, p) for p in ps]
            return [p for p in out if p is not None]

        self._eval = apply(self._eval)
        self.train = {s: apply(ps) for s, ps in self.train.items()}
        empty = sorted(s for s, ps in self.train.items() if not ps and s in self.weights)
        if empty:
            raise DataError(
                f"no training records left for source(s) {empty} after the prompt-length policy; "
                f"raise data.max_prompt_tokens or use data.on_long_prompt=truncate"
            )
        if not self._eval:
            raise DataError("no held-out records left after the prompt-length policy; raise data.max_prompt_tokens")

    def all_problems(self) -> list[Problem]:
        return self._eval + [p for ps in self.train.values() for p in ps]

    def describe(self) -> dict[str, object]:
        total = sum(self.weights.values())
        return {
            "train": self.sources,
            "held_out": dict(Counter(p.source for p in self._eval)),
            "mix": {s: round(w / total, 4) for s, w in sorted(self.weights.items())},
        }


class _Pass:
    """A source's records in a fresh seeded order on every pass."""

    def __init__(self, items: list[Problem], rng: random.Random):
        self.items, self.rng, self.order = items, rng, []

    def next(self) -> Problem:
        if not self.order:
            self.order = list(self.items)
            self.rng.shuffle(self.order)
            self.order.reverse()  # pop() from the end walks the shuffled order front to back
        return self.order.pop()


DEFAULT_VERIFIER_MIX = {"math": 0.6, "code": 0.4}
"""Built-in tasks together, without data.mix: math : code = 6 : 4 (the source material's ratio)."""


class BuiltinMix:
    """Several built-in tasks as one (`task.name=arithmetic+code`): the held-out split takes
    `eval_size` problems in the mix ratio, interleaved; training draws by smooth weighted round robin.
    `mix` (data.mix) maps task names to shares; without it a task gets its verifier's share of
    DEFAULT_VERIFIER_MIX, split evenly among the tasks with that verifier."""

    def __init__(self, tasks: dict, *, mix: dict[str, float], eval_size: int, seed: int) -> None:
        self.tasks = tasks
        if mix:
            unknown, missing = sorted(set(mix) - set(tasks)), sorted(set(tasks) - set(mix))
            if unknown or missing:
                raise DataError(
                    f"data.mix: the tasks are {sorted(tasks)}; "
                    f"{'unknown ' + str(unknown) if unknown else 'no share for ' + str(missing)}"
                )
            self.weights = {n: float(w) for n, w in mix.items() if w > 0}
        else:
            verifier = {n: _verifier_of(t) for n, t in tasks.items()}
            shares = {v: DEFAULT_VERIFIER_MIX.get(v, 1.0) for v in verifier.values()}
            self.weights = {n: shares[v] / sum(x == v for x in verifier.values()) for n, v in verifier.items()}
        total = sum(self.weights.values())
        counts = {n: max(1, round(eval_size * w / total)) for n, w in self.weights.items()}
        held = {n: self.tasks[n].held_out()[: counts[n]] for n in self.weights}
        self._eval = [p for batch in _interleave(held, self.weights) for p in batch]

    def held_out(self) -> list[Problem]:
        return list(self._eval)

    def train_stream(self, seed: int) -> Iterator[Problem]:
        streams = {n: self.tasks[n].train_stream(seed) for n in self.weights}
        names, total = sorted(self.weights), sum(self.weights.values())
        credit = dict.fromkeys(names, 0.0)
        while True:
            for n in names:
                credit[n] += self.weights[n]
            pick = max(names, key=lambda n: credit[n])
            credit[pick] -= total
            yield next(streams[pick])


def _verifier_of(task) -> str:
    return next(iter(task.held_out())).verifier


def _interleave(held: dict[str, list[Problem]], weights: dict[str, float]) -> Iterator[list[Problem]]:
    """The held-out problems, a round robin over tasks in proportion, so held_out()[:n] keeps the mix."""
    queues = {n: list(ps) for n, ps in held.items()}
    credit = dict.fromkeys(queues, 0.0)
    while any(queues.values()):
        live = [n for n in sorted(queues) if queues[n]]
        for n in live:
            credit[n] += weights[n]
        pick = max(live, key=lambda n: credit[n])
        credit[pick] -= sum(weights[n] for n in live)
        yield [queues[pick].pop(0)]
