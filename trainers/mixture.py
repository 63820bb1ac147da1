"""The training data mixture: domains drawn by weight, sources uniformly within a domain, items streamed
in order from each source, skipping any question that belongs to a held-out benchmark."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

from evaluators.sources import Item, Task, normalize


class Mixture:
    """Draws (task, item) pairs across domains with per-domain weights."""

    def __init__(self, tasks: Mapping[str, Sequence[Task]], weights: Mapping[str, float] | None = None,
                 seed: int = 0, exclude_questions: set[str] | None = None,
                 keep: Callable[[Item], bool] | None = None,
                 source_weights: Mapping[str, Sequence[float]] | None = None, period: int | None = None) -> None:
        if not tasks or any(len(v) == 0 for v in tasks.values()):
            raise ValueError("every domain of a mixture needs at least one source")
        self.domains = list(tasks)
        self.tasks = {d: list(v) for d, v in tasks.items()}
        w = {d: float((weights or {}).get(d, 1.0)) for d in self.domains}
        if any(v < 0 for v in w.values()) or sum(w.values()) <= 0:
            raise ValueError(f"mixture weights must be >= 0 with a positive sum; got {w}")
        total = sum(w.values())
        self.weights = {d: v / total for d, v in w.items()}
        self.source_weights = {d: [float(x) for x in sw] for d, sw in (source_weights or {}).items()}
        """Per domain, the weight of each of its sources (default: uniform)."""
        for d, sw in self.source_weights.items():
            if d not in self.tasks or len(sw) != len(self.tasks[d]) or min(sw) < 0 or sum(sw) <= 0:
                raise ValueError(f"source weights for {d!r} must be {len(self.tasks.get(d, []))} values >= 0 "
                                 f"with a positive sum; got {sw}")
        self.rng = random.Random(seed)
        self.cursor: dict[tuple[str, int], int] = {}
        self.exclude = exclude_questions or set()
        self.keep = keep
        """Optional item filter (the recipe's processing operators, `trainers.processing`)."""
        self.period = period
        """Items are read from the first `period` of each stream, round and round (None: the whole stream):
        what a filter knows about, the difficulty band's rated items (`trainers.processing.RATED_ITEMS`)."""
        self.skipped = 0
        self.filtered = 0

    def _next(self, domain: str, k: int) -> Item:
        task = self.tasks[domain][k]
        for _ in range(10_000):
            idx = self.cursor.get((domain, k), 0)
            self.cursor[(domain, k)] = idx + 1
            item = task.item(idx % self.period if self.period else idx)
            if normalize(item.question) in self.exclude:
                self.skipped += 1
            elif self.keep is not None and not self.keep(item):
                self.filtered += 1
            else:
                return item
        raise RuntimeError(f"source {task.spec.key} yields no item that is both outside the held-out benchmarks "
                           "and kept by the recipe's processing filters in 10000 draws; widen its config or "
                           "the filter bands (proc.*)")

    def sample(self, n: int) -> list[tuple[Task, Item]]:
        doms = self.rng.choices(self.domains, weights=[self.weights[d] for d in self.domains], k=n)
        out = []
        for d in doms:
            sw = self.source_weights.get(d)
            k = self.rng.choices(range(len(sw)), weights=sw)[0] if sw else self.rng.randrange(len(self.tasks[d]))
            out.append((self.tasks[d][k], self._next(d, k)))
        return out
