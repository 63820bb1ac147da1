"""The catalog the Recipe-Space Designer reads, as plain data: what each data source of the project is
(generator, config, problem-space size, the base model's pass rate), the processing operators, every
trainer algorithm with its parameters as the trainer layer declares them (`trainers.algorithms`), the
base model's size, the hardware and the budget.

Facts that need the base model (pass rates, rollout throughput) are measured once per base model and
cached under the context's cache folder; without a prepared context they are left out (None).
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evaluators.files import write_whole
from evaluators.sources import MULTI_TURN_KINDS, QUESTION_KEY_VERSION, Task, derive_seed, make_task, normalize
from sro.budget import Budget
from sro.config import ProjectConfig
from trainers.algorithms import catalog as algorithm_catalog
from trainers.algorithms import stages
from trainers.models import model_fingerprint
from trainers.processing import OPERATORS
from trainers.threads import usable_cores

GREEDY_SAMPLE = 32
"""Items per source on which the base model's greedy pass rate is measured."""
SIZE_PROBE = 1000
"""Items drawn per source to count distinct questions (a problem-space size estimate)."""
PASS_RATE_POOL = 256
"""Items per source whose pass rate `SearchContext.pass_rates` estimates (trainers.processing default)."""


@dataclass
class Catalog:
    project: str
    domains: dict[str, dict[str, Any]]
    """Per domain: description, sources (list of source entries), benchmarks, regime."""
    operators: list[dict[str, Any]]
    algorithms: list[dict[str, Any]]
    model: dict[str, Any]
    hardware: dict[str, Any]
    budget: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    stages: list[dict[str, Any]] = field(default_factory=list)
    """The pre-RL stages (`trainers.algorithms.stages()`: SFT) with their knobs; none in a multi-turn project,
    whose trainer runs none (until stop 30 the catalog left them out, and the LLM designer's review dropped
    any `sft.*` it proposed)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def algorithm(self, name: str) -> dict[str, Any]:
        for a in self.algorithms:
            if a["name"] == name:
                return a
        raise KeyError(name)

    def sources(self) -> list[dict[str, Any]]:
        return [s for d in self.domains.values() for s in d["sources"]]

    @property
    def multi_turn_domains(self) -> list[str]:
        return [d for d, info in self.domains.items() if info["regime"] == "multi_turn"]

    @property
    def has_heldout(self) -> bool:
        """True when every domain has at least one held-out benchmark (self-distillation needs it)."""
        return all(info["benchmarks"] for info in self.domains.values())


def _distinct_questions(task: Task, n: int) -> tuple[int, list[int]]:
    qs = []
    for i in range(n):
        try:
            qs.append(task.item(i).question)
        except Exception:  # a finite source ran out, or a game family that cannot list items cheaply
            break
    return len({normalize(q) for q in qs}), [len(q.strip()) for q in qs]


def _source_entry(project: ProjectConfig, domain: str, i: int, task: Task | None) -> dict[str, Any]:
    src = project.domains[domain].sources[i]
    entry: dict[str, Any] = {"domain": domain, "index": i, "kind": src.kind, "target": src.target,
                             "config": dict(src.config), "multi_turn": src.kind in MULTI_TURN_KINDS}
    if task is not None and src.kind not in MULTI_TURN_KINDS:
        distinct, lengths = _distinct_questions(task, SIZE_PROBE)
        entry["distinct_questions_in_first"] = {"items": SIZE_PROBE, "distinct": distinct}
        if lengths:
            q = statistics.quantiles(lengths, n=10) if len(lengths) > 1 else [lengths[0]] * 9
            entry["question_chars"] = {"p10": int(q[0]), "p50": int(q[4]), "p90": int(q[8]),
                                       "min": min(lengths), "max": max(lengths)}
    return entry


def _model_params(base_path: str | None) -> int | None:
    if not base_path or not Path(base_path).exists():
        return None
    cfg_path = Path(base_path) / "config.json"
    if not cfg_path.is_file():
        return None
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(base_path)
    import torch

    with torch.device("meta"):  # counts parameters without allocating them
        model = AutoModelForCausalLM.from_config(cfg)
    return int(sum(p.numel() for p in model.parameters()))


def _throughput(model, tok, ctx) -> float | None:
    """Training samples per second of the base model: two real GRPO steps of 8 prompts × 8
    completions (generation, log-probs, backward, optimizer), after a one-step warm-up."""
    from trainers.algorithms import config_for
    from trainers.grpo import GRPOTrainer
    from trainers.mixture import Mixture

    single = {d: [t for t in ts if t.spec.kind not in MULTI_TURN_KINDS] for d, ts in ctx.tasks.items()}
    if not any(single.values()):
        return None  # episodes, not single completions: not measured here
    mix = Mixture({d: ts for d, ts in single.items() if ts}, seed=ctx.project.seed)
    warm = config_for("grpo", {"steps": 1, "prompts_per_step": 2, "group_size": 2, "lr": 1e-12},
                      max_new_tokens=ctx.project.runtime.max_new_tokens)
    GRPOTrainer(model, tok, warm, mix).train()
    cfg = config_for("grpo", {"steps": 2, "prompts_per_step": 8, "group_size": 8, "lr": 1e-12},
                     max_new_tokens=ctx.project.runtime.max_new_tokens)
    trainer = GRPOTrainer(model, tok, cfg, mix)
    t0 = time.monotonic()
    trainer.train()
    return round(trainer.samples / max(time.monotonic() - t0, 1e-6), 1)


def _read_cache(path: Path) -> dict[str, Any] | None:
    """The cached measurements at `path`, or None when there are none to trust. A file that is not a
    JSON object (a catalog written before the cache was written atomically, cut short by a kill) is a
    miss, measured again and rewritten: reading it raised a JSONDecodeError on every later run."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("sources"), dict) else None


def _measure(ctx, cache_dir: Path) -> dict[str, Any]:
    """Greedy pass rate per source on GREEDY_SAMPLE items, the pass-rate table's band counts and
    coverage, and rollout throughput — cached per base model and project sources."""
    from trainers.evaluate import complete
    from trainers.models import load_policy

    project = ctx.project
    ident = json.dumps([ctx.base_path, model_fingerprint(ctx.base_path), QUESTION_KEY_VERSION,
                        {d: [(t.spec.key, getattr(t, "content_id", None)) for t in ts]
                                        for d, ts in ctx.tasks.items()},  # an edited JSONL is measured again
                        project.seed, project.runtime.max_new_tokens, GREEDY_SAMPLE], sort_keys=True)
    path = cache_dir / f"catalog-{hashlib.sha256(ident.encode()).hexdigest()[:16]}.json"
    cached = _read_cache(path)
    if cached is not None:
        return cached
    rates = ctx.pass_rates()  # k sampled completions per item: the difficulty filter's table
    model, tok = load_policy(ctx.base_path, project.runtime.device)  # it trains a few steps (throughput)
    out: dict[str, Any] = {"sources": {}, "train_samples_per_s": _throughput(model, tok, ctx)}
    for d, ts in ctx.tasks.items():
        for i, task in enumerate(ts):
            if task.spec.kind in MULTI_TURN_KINDS:
                continue
            items = task.items(GREEDY_SAMPLE)
            comps = complete(model, tok, [it.question for it in items], project.runtime.max_new_tokens)
            greedy = sum(task.score(it, c) >= 1.0 for it, c in zip(items, comps)) / len(items)
            pool = {normalize(it.question) for it in task.items(PASS_RATE_POOL)}
            later = [normalize(it.question) for it in task.items(PASS_RATE_POOL, start=PASS_RATE_POOL)]
            known = [rates[q] for q in pool if q in rates]
            out["sources"][f"{d}.{i}"] = {
                "greedy_pass_rate": round(greedy, 3),
                "sampled_pass_rate": round(sum(known) / max(1, len(known)), 3),
                "pass_rate_bands": {"never": sum(r == 0 for r in known), "sometimes": sum(0 < r < 1 for r in known),
                                    "always": sum(r == 1 for r in known)},
                # share of later items whose question the table knows: the difficulty filter only keeps those
                "pass_rate_coverage": round(sum(q in rates for q in later) / max(1, len(later)), 3),
            }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, json.dumps(out, indent=1))  # a kill or a second worker never leaves half a file
    return out


def build_catalog(project: ProjectConfig, budget: Budget | None = None, ctx=None) -> Catalog:
    """The catalog of `project`. `ctx` (a prepared `sro.executor.SearchContext`) adds the measured facts."""
    budget = budget or Budget.parse(project.budget)
    measured = _measure(ctx, ctx.cache_dir) if ctx is not None else None
    domains: dict[str, dict[str, Any]] = {}
    for d, dom in project.domains.items():
        sources = []
        for i, src in enumerate(dom.sources):
            task = ctx.tasks[d][i] if ctx is not None else None
            if task is None and src.kind not in MULTI_TURN_KINDS:
                try:
                    task = make_task(src.spec(project.base_dir), derive_seed(project.seed, "train", d, i))
                except Exception:
                    task = None
            entry = _source_entry(project, d, i, task)
            if measured:
                entry.update(measured["sources"].get(f"{d}.{i}", {}))
            sources.append(entry)
        regime = "multi_turn" if any(s["multi_turn"] for s in sources) else "single_turn"
        domains[d] = {"description": dom.description, "regime": regime, "sources": sources,
                      "benchmarks": [{"name": b.name, "kind": b.kind, "target": b.target, "size": b.size,
                                      "metric": b.metric} for b in dom.benchmarks]}
    import torch

    cuda = torch.cuda.is_available() and project.runtime.device != "cpu"
    # a `device: cuda` project designed where there is no GPU (docs/trainers.md: design on a laptop) is sized for
    # the GPU it will train on, not for this CPU, and this machine's throughput is not its (a review, stop 37)
    elsewhere = project.runtime.device == "cuda" and not cuda
    hardware = {"device": "cuda" if cuda or elsewhere else "cpu", "cpu_cores": usable_cores(),
                "gpus": torch.cuda.device_count() if cuda else (1 if elsewhere else 0),
                "train_samples_per_s": measured.get("train_samples_per_s") if measured and not elsewhere else None}
    model = {"name": project.base_model, "path": ctx.base_path if ctx is not None else None,
             "params": _model_params(ctx.base_path if ctx is not None else project.base_model)}
    notes = [] if measured else ["base model not loaded: pass rates and throughput are not measured"]
    if elsewhere:
        notes.append("runtime.device is cuda and this machine has no GPU: the space is sized for one GPU by the "
                     "rules' defaults, its throughput not measured here")
    # the multi-turn trainer filters no items and runs no SFT stage: their knobs are no part of an agent's recipe
    # (until stop 33 the LLM review kept `proc.*` there, and the search refused the space it wrote)
    return Catalog(project.name, domains,
                   [] if project.multi_turn else [OPERATORS.get(n).as_dict() for n in OPERATORS.names()],
                   algorithm_catalog(project.multi_turn), model, hardware,
                   {"text": budget.text or str(budget), "wall_s": budget.wall_s, "trials": budget.trials,
                    "gpu_h": budget.gpu_h, "tokens": budget.tokens,
                    "max_new_tokens": project.runtime.max_new_tokens}, notes,
                   [] if project.multi_turn else stages())
