"""Held-out benchmarks: items drawn from a source with held-out seeds, graded by the source's verifier."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evaluators.sources import Item, SourceSpec, Task, derive_seed, make_task, normalize


@dataclass
class BenchmarkResult:
    name: str
    score: float
    """The benchmark metric (accuracy: fraction of items the verifier scores 1.0)."""
    mean_reward: float
    n: int
    examples: list[tuple[str, str, str]]
    """A few (question, expected, got) triples, for the report."""
    cut_off: float = 0.0
    """Share of the items graded wrong whose completion was cut off (no end of sequence within the
    completion length): answers the length may have cost."""


@dataclass
class Benchmark:
    name: str
    task: Task
    items: list[Item]
    metric: str = "accuracy"

    @classmethod
    def build(cls, name: str, spec: SourceSpec, size: int, project_seed: int, domain: str,
              metric: str = "accuracy", cache_dir: Path | None = None) -> Benchmark:
        """Draw `size` items with a held-out seed (never used by a training source); `cache_dir` as in
        `make_task`."""
        seed = derive_seed(project_seed, "heldout", domain, name)
        task = make_task(spec, seed, cache_dir)
        if getattr(task, "multi_turn", False):
            # a game benchmark plays episodes on its held-out games: one entry per game, no single-step items
            # (until stop 26 it drew them from sibling games that nothing played, 14 s of set-up for 8 games)
            n = min(size, getattr(task, "n_games", size))
            return cls(name, task, [Item(f"{spec.key} game {g}", "", spec.key, {"game": g}) for g in range(n)], metric)
        # a file has only so many rows: more items would repeat them (and weigh those twice)
        return cls(name, task, task.items(min(size, getattr(task, "n_items", size))), metric)

    def questions(self) -> set[str]:
        """Normalized questions, for keeping them out of every training stream."""
        return {normalize(it.question) for it in self.items}

    def grade(self, completions: Sequence[str], truncated: Sequence[bool] | None = None) -> BenchmarkResult:
        """`truncated`: per completion, whether it was cut off at the completion length (for `cut_off`)."""
        if len(completions) != len(self.items) or (truncated is not None and len(truncated) != len(completions)):
            raise ValueError(f"{self.name}: got {len(completions)} completions "
                             f"({'-' if truncated is None else len(truncated)} truncation flags) for "
                             f"{len(self.items)} items")
        rewards = [self.task.score(it, c) for it, c in zip(self.items, completions)]
        correct = [r >= 1.0 for r in rewards]
        ex = [(it.question, it.answer, c) for it, c in zip(self.items[:5], completions[:5])]
        n = len(rewards)
        cut = sum(not ok and t for ok, t in zip(correct, truncated)) / n if truncated is not None else 0.0
        return BenchmarkResult(self.name, sum(correct) / n, sum(rewards) / n, n, ex, cut)
