"""The training data mixture: domains drawn by weight, sources uniformly within a domain, items streamed
in order from each source, skipping any question that belongs to a held-out benchmark."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from evaluators.sources import Item, Task, normalize


class Mixture:
    """Draws (task, item) pairs across domains with per-domain weights."""

    def __init__(self, tasks: Mapping[str, Sequence[Task]], weights: Mapping[str, float] | None = None,
                 seed: int = 0, exclude_questions: set[str] | None = None) -> None:
        if not tasks or any(len(v) == 0 for v in tasks.values()):
            raise ValueError("every domain of a mixture needs at least one source")
        self.domains = list(tasks)
        self.tasks = {d: list(v) for d, v in tasks.items()}
        w = {d: float((weights or {}).get(d, 1.0)) for d in self.domains}
        if any(v < 0 for v in w.values()) or sum(w.values()) <= 0:
            raise ValueError(f"mixture weights must be >= 0 with a positive sum; got {w}")
        total = sum(w.values())
        self.weights = {d: v / total for d, v in w.items()}
        self.rng = random.Random(seed)
        self.cursor: dict[tuple[str, int], int] = {}
        self.exclude = exclude_questions or set()
        self.skipped = 0

    def _next(self, domain: str, k: int) -> Item:
        task = self.tasks[domain][k]
        for _ in range(10_000):
            idx = self.cursor.get((domain, k), 0)
            self.cursor[(domain, k)] = idx + 1
            item = task.item(idx)
            if normalize(item.question) not in self.exclude:
                return item
            self.skipped += 1
        raise RuntimeError(f"source {task.spec.key} yields only held-out questions; widen its config")

    def sample(self, n: int) -> list[tuple[Task, Item]]:
        doms = self.rng.choices(self.domains, weights=[self.weights[d] for d in self.domains], k=n)
        out = []
        for d in doms:
            k = self.rng.randrange(len(self.tasks[d]))
            out.append((self.tasks[d][k], self._next(d, k)))
        return out
