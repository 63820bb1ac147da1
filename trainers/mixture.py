"""The training data mixture: domains drawn by weight, sources uniformly within a domain, items streamed
in order from each source, skipping any question that belongs to a held-out benchmark."""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Callable, Mapping, Sequence

from evaluators.sources import Item, Task, normalize

DRAWS = 10_000
"""Draws in a row that a source may spend on held-out or filtered items before it is dropped."""


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
        if not all(math.isfinite(v) and v >= 0 for v in w.values()) or sum(w.values()) <= 0:  # NaN passed `v < 0`
            raise ValueError(f"mixture weights must be finite, >= 0, with a positive sum; got {w}")
        total = sum(w.values())
        self.weights = {d: v / total for d, v in w.items()}
        self.source_weights = {d: [float(x) for x in sw] for d, sw in (source_weights or {}).items()}
        """Per domain, the weight of each of its sources (default: uniform)."""
        for d, sw in self.source_weights.items():
            if (d not in self.tasks or len(sw) != len(self.tasks[d]) or not all(math.isfinite(x) and x >= 0 for x in sw)
                    or sum(sw) <= 0):
                raise ValueError(f"source weights for {d!r} must be {len(self.tasks.get(d, []))} finite values >= 0 "
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
        self.drawn = 0
        self.exhausted: dict[str, int] = {}
        """Sources dropped because they yield no item the filters keep: `<domain>.<i>` (the recipe's `src.` key of
        the source) → prompts drawn by then."""

    def _next(self, domain: str, k: int) -> Item | None:
        """The next item of source k of `domain` that is outside the held-out benchmarks and kept by the
        filter; None when 10,000 draws in a row found none (the source is then `exhausted`)."""
        task = self.tasks[domain][k]
        for _ in range(DRAWS):
            idx = self.cursor.get((domain, k), 0)
            self.cursor[(domain, k)] = idx + 1
            item = task.item(idx % self.period if self.period else idx)
            if normalize(item.question) in self.exclude:
                self.skipped += 1
            elif self.keep is not None and not self.keep(item):
                self.filtered += 1
            else:
                return item
        # by its place, `<domain>.<i>` as the recipe's `src.` weights name it: the same source in two domains is two
        # streams of their own seeds, and by its spec key one emptied dropped both (a review, stop 53)
        self.exhausted[f"{domain}.{k}"] = self.drawn
        warnings.warn(f"source {task.spec.key} ({domain}) yields no item that is both outside the held-out "
                      f"benchmarks and kept by the recipe's processing filters in {DRAWS} draws; its share goes to "
                      f"the other sources from prompt {self.drawn} on", RuntimeWarning, stacklevel=3)
        return None

    def _exhausted_names(self) -> str:
        """The exhausted sources as `a.0 (jsonl:data/x.jsonl:{})`."""
        def named(place: str) -> str:
            d, _, i = place.rpartition(".")
            return f"{place} ({self.tasks[d][int(i)].spec.key})"

        return ", ".join(map(named, self.exhausted))

    def _live(self, domain: str) -> list[float]:
        """Source weights of `domain` with the exhausted sources at 0."""
        sw = self.source_weights.get(domain) or [1.0] * len(self.tasks[domain])
        return [0.0 if f"{domain}.{i}" in self.exhausted else w for i, w in enumerate(sw)]

    def sample(self, n: int) -> list[tuple[Task, Item]]:
        """n (task, item) pairs. A source that yields nothing the filters keep is dropped (`exhausted`) and
        its draws go to its domain's other sources, a domain left without any to the other domains; with
        no source left, RuntimeError."""
        doms = self.rng.choices(self.domains, weights=[self.weights[d] for d in self.domains], k=n)
        out = []
        for d in doms:
            while True:
                sw = self._live(d)
                if sum(sw) <= 0:  # the domain is dry: another one by weight
                    live = [x for x in self.domains if self.weights[x] > 0 and sum(self._live(x)) > 0]
                    if not live:
                        raise RuntimeError(
                            f"no source yields an item that is both outside the held-out benchmarks and kept by "
                            f"the recipe's processing filters (exhausted: {self._exhausted_names()}); widen "
                            "their configs or the filter bands (proc.*)")
                    d = self.rng.choices(live, weights=[self.weights[x] for x in live])[0]
                    continue
                if self.source_weights.get(d) or self.exhausted:
                    k = self.rng.choices(range(len(sw)), weights=sw)[0]
                else:  # uniform, as drawn before any source ran dry
                    k = self.rng.randrange(len(self.tasks[d]))
                item = self._next(d, k)
                if item is not None:
                    break
            out.append((self.tasks[d][k], item))
            self.drawn += 1
        return out
