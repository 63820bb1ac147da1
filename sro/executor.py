"""The trial executor: maps a `Recipe` onto the trainer layer, trains from the base model within the
trial's share of the budget, and scores the result on every held-out benchmark of the project."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from evaluators.benchmark import Benchmark
from evaluators.sources import Task, derive_seed, make_task, normalize
from sro.config import ProjectConfig
from sro.recipe import Recipe
from trainers.evaluate import evaluate
from trainers.algorithms import config_for
from trainers.grpo import GRPOConfig, GRPOTrainer
from trainers.mixture import Mixture
from trainers.models import load_policy
from trainers.tiny import TinySpec, ensure_tiny

PRETRAIN_PAIRS = 4000
OVERLAP_PROBE = 2000


class TrialFailed(RuntimeError):
    """A trial that could not finish (diverged, bad recipe); the search records it and goes on."""


@dataclass
class TrialOutcome:
    scores: dict[str, float]
    cost: dict[str, float]
    curve: list[dict[str, float]] = field(default_factory=list)


@dataclass
class SearchContext:
    """Everything trials share: benchmarks, training streams and the base model's location."""

    project: ProjectConfig
    base_path: str
    benchmarks: dict[str, Benchmark]
    tasks: dict[str, list[Task]]
    exclude: set[str]
    overlap: dict[str, float] = field(default_factory=dict)
    """Per benchmark: share of its questions that also occur among the first OVERLAP_PROBE items of
    its domain's training streams (same text, other seeds: small problem spaces repeat)."""

    @classmethod
    def prepare(cls, project: ProjectConfig, cache_dir: str | Path,
                log: Callable[[str], None] = print,
                pretrain_progress: Callable[[int, float], None] | None = None) -> SearchContext:
        threads = project.runtime.threads or os.cpu_count() or 1
        torch.set_num_threads(threads)
        benchmarks: dict[str, Benchmark] = {}
        tasks: dict[str, list[Task]] = {}
        for dname, dom in project.domains.items():
            for b in dom.benchmarks:
                benchmarks[f"{dname}/{b.name}"] = Benchmark.build(
                    b.name, b.spec(project.base_dir), b.size, project.seed, dname, b.metric)
            tasks[dname] = [make_task(s.spec(project.base_dir), derive_seed(project.seed, "train", dname, i))
                            for i, s in enumerate(dom.sources)]
        decon = {f"{d}/{b.name}" for d, dom in project.domains.items() for b in dom.benchmarks if b.decontaminate}
        exclude = set().union(*(b.questions() for k, b in benchmarks.items() if k in decon))
        seen = {d: {normalize(t.item(i).question) for t in ts for i in range(OVERLAP_PROBE)} for d, ts in tasks.items()}
        overlap = {}
        for key, bench in benchmarks.items():
            seen_here = seen[key.split("/")[0]]
            overlap[key] = round(len((bench.questions() - exclude) & seen_here) / max(1, len(bench.questions())), 3)
            if overlap[key] > 0:
                log(f"{key}: {overlap[key]:.0%} of its questions also occur in training streams (disjoint seeds, "
                    "small problem space); `decontaminate: true` excludes them from training")
        base_path = project.base_model
        if project.base_model == "tiny":
            mix = Mixture(tasks, seed=project.seed, exclude_questions=exclude)
            pairs = [(it.question, it.answer) for _, it in mix.sample(PRETRAIN_PAIRS)]
            spec = TinySpec(seed=project.seed, pretrain_steps=project.runtime.tiny_pretrain_steps)
            log(f"base model: tiny (Qwen2 architecture), pre-training on {len(pairs)} items of the project's "
                f"sources for {spec.pretrain_steps} steps; cached under {cache_dir}")
            base_path = str(ensure_tiny(pairs, cache_dir, spec, pretrain_progress))
        return cls(project, base_path, benchmarks, tasks, exclude, overlap)

    def score(self, model, tokenizer) -> dict[str, float]:
        rt = self.project.runtime
        return {k: evaluate(model, tokenizer, b, rt.max_new_tokens, rt.eval_batch_size).score
                for k, b in self.benchmarks.items()}

    def score_base(self) -> dict[str, float]:
        model, tok = load_policy(self.base_path, self.project.runtime.device)
        return self.score(model, tok)


def trainer_config(recipe: Recipe, seed: int, max_seconds: float | None) -> GRPOConfig:
    """The recipe's algorithm (default grpo) as a validated trainer config; `TrialFailed` if invalid."""
    try:
        return config_for(str(recipe.get("algorithm", "grpo")), {**recipe.fixed, **recipe.values},
                          seed=int(recipe.get("seed", seed)), max_seconds=max_seconds)
    except (KeyError, ValueError, TypeError) as e:
        raise TrialFailed(f"recipe {recipe.key} is not a valid trainer config: {e}") from None


def run_trial(recipe: Recipe, ctx: SearchContext, max_seconds: float | None = None,
              on_step: Callable[[int, dict[str, float]], None] | None = None) -> TrialOutcome:
    """Train the base model with `recipe`, then score it; raise `TrialFailed` if training diverges."""
    cfg = trainer_config(recipe, ctx.project.seed, max_seconds)
    t0 = time.monotonic()
    project = ctx.project
    model, tok = load_policy(ctx.base_path, project.runtime.device)
    mixture = Mixture(ctx.tasks, recipe.mixture(list(project.domains)), seed=project.seed,
                      exclude_questions=ctx.exclude)
    trainer = GRPOTrainer(model, tok, cfg, mixture)
    curve: list[dict[str, float]] = []

    def step_cb(step: int, m: dict[str, float]) -> bool:
        curve.append({k: round(float(v), 5) for k, v in m.items()})
        if not all(math.isfinite(m[k]) for k in ("loss", "grad_norm")):
            raise TrialFailed(f"training diverged at step {step} (loss={m['loss']}, grad_norm={m['grad_norm']})")
        if on_step:
            on_step(step, m)
        return False

    trainer.train(step_cb)
    train_s = time.monotonic() - t0
    scores = ctx.score(model, tok)
    wall = time.monotonic() - t0
    on_gpu = next(model.parameters()).device.type == "cuda"
    cost = {"wall_s": round(wall, 2), "train_s": round(train_s, 2), "samples": float(trainer.samples),
            "tokens": float(trainer.tokens), "gpu_h": wall / 3600 if on_gpu else 0.0}
    return TrialOutcome(scores, cost, curve)
