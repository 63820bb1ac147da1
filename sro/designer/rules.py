"""The offline rule-based designer (the default): catalog + project → a task-adapted `RecipeSpace`
with a one-line rationale for every parameter.

It reads the trainer layer's declarations (`catalog.algorithms`: knobs, ranges, `applies_to`) and never
invents a parameter: a knob becomes a dimension only when the trainer config has a field for it. The
lessons it encodes (seed article, ALGORITHMS.md):

1) algorithms: those declared for the project's regime; off-policy ones (and the reuse knobs) only when
   rollouts are reused or stale; algorithms meant only for multi-turn credit shaping (ProAS) only when a
   domain is multi-turn, with their knobs as dimensions conditional on the algorithm;
2) clipping is not searched on fresh rollouts (r ≡ 1: it does nothing) and never widened past the
   declared default (a wider clip buys a transient gain and costs stability);
3) samples per trial from the budget and the measured rollout throughput; the batch kept below a
   critical batch (at least MIN_UPDATES optimizer steps per trial), the batch schedule and the
   lr-scaling exponent as dimensions; group size from the pass rate (most groups must hold a success);
4) learning rate scaled to the model size;
5) self-distillation only when every domain has held-out benchmarks and the budget affords a dimension
   the evidence ranks low (its gains often do not generalize);
6) mixture weights as a simplex across domains and one per domain across its sources; processing
   operators only where the catalog shows they can act (repeats → dedup; a length spread → length band;
   a pass-rate table that covers the stream → difficulty band).
"""

from __future__ import annotations

import math
from typing import Any

from sro.config import CONFIDENCE_METRICS, ProjectConfig
from sro.designer.catalog import Catalog
from sro.executor import SOURCE_PREFIX, trainer_keys
from sro.recipe import MIX_PREFIX
from sro.space import Param, RecipeSpace, Simplex

MIN_UPDATES = 30
"""Optimizer steps a trial needs at least; the batch is capped so the trial gets them (two clocks)."""
TRIAL_SAMPLES = {"cpu": 4000, "cuda": 40000}
"""Training samples per trial when the budget counts trials (or tokens) rather than time."""
LOW_PRIOR_TRIALS = 12
"""Budgets below this many trials leave out dimensions the evidence ranks low."""


class _Builder:
    """Collects parameters; refuses a knob the trainer layer does not declare."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.params: list[Param] = []
        self.fixed: dict[str, Any] = {}
        self.trainer_fields = trainer_keys()

    def knob(self, algos: list[str], name: str) -> dict[str, Any] | None:
        """The knob as the first of `algos` that declares it declares it (None if none does)."""
        for a in algos:
            for k in self.catalog.algorithm(a)["knobs"]:
                if k["name"] == name:
                    return k
        return None

    def add(self, name: str, kind: str, why: str, low: float | None = None, high: float | None = None,
            log: bool = False, choices: list[Any] | None = None, when: dict[str, list[Any]] | None = None,
            algos: list[str] | None = None) -> bool:
        """Add a dimension, clamped to the declared range of the knob; False when no algorithm declares it."""
        if algos is not None:
            k = self.knob(algos, name)
            if k is None or name not in self.trainer_fields:
                return False
            if kind in ("float", "int") and k.get("low") is not None:
                low = max(float(low), float(k["low"])) if low is not None else float(k["low"])
                high = min(float(high), float(k["high"])) if high is not None else float(k["high"])
                low = min(low, high)
            if kind == "int":
                low, high = int(math.ceil(low)), int(math.floor(high))  # type: ignore[arg-type]
                high = max(low, high)
            if kind == "categorical" and choices is None:
                choices = list(k.get("choices") or [])
        self.params.append(Param(name, kind, low, high, log, choices, when, why))  # type: ignore[arg-type]
        return True


def _regimes(catalog: Catalog) -> tuple[bool, bool]:
    multi = bool(catalog.multi_turn_domains)
    single = any(info["regime"] == "single_turn" for info in catalog.domains.values())
    return single, multi


def _off_policy(catalog: Catalog) -> tuple[bool, str]:
    """Rollouts are worth reusing (hence stale) when sampling is the expensive part of a step."""
    params = catalog.model.get("params")
    rate = catalog.hardware.get("train_samples_per_s")
    if params is not None and params >= 100_000_000:
        return True, f"a {params / 1e9:.1f}B-parameter model makes rollouts the costly part of a step"
    if rate is not None and rate < 5:
        return True, f"training is slow here ({rate:.1f} samples/s), so each generation batch is reused"
    return False, ""


def _samples_per_trial(catalog: Catalog) -> tuple[str, float]:
    """(how the size was chosen, training samples a trial can afford)."""
    b, hw = catalog.budget, catalog.hardware
    rate = hw.get("train_samples_per_s")
    if b.get("wall_s") and rate:
        per_trial = b["wall_s"] / 8  # leave room for at least ~8 trials
        return f"~{per_trial:.0f}s per trial (1/8 of the budget) at the measured {rate:.0f} samples/s", per_trial * rate
    samples = TRIAL_SAMPLES[hw["device"]]
    return f"the budget sets no clock per trial: ~{samples} training samples per trial", float(samples)


def _pass_rate(catalog: Catalog) -> float | None:
    rates = [s["sampled_pass_rate"] for s in catalog.sources() if s.get("sampled_pass_rate") is not None]
    return min(rates) if rates else None


def design_rules(catalog: Catalog, project: ProjectConfig) -> RecipeSpace:
    single, multi = _regimes(catalog)
    # the multi-turn trainer plays fresh episodes for one pass: reuse and staleness are single-turn only
    reuse, reuse_why = _off_policy(catalog) if single else (False, "")
    b = _Builder(catalog)

    # 1) algorithms by declared regime
    names = [a["name"] for a in catalog.algorithms]
    meta = {a["name"]: set(a["applies_to"]) for a in catalog.algorithms}
    regimes = ({"single_turn"} if single else set()) | ({"multi_turn"} if multi else set())
    algos = [n for n in names if regimes <= meta[n] or (multi and meta[n] == {"multi_turn"})]
    if not reuse:
        algos = [n for n in algos if "off_policy" not in meta[n]]
    if not multi:
        algos = [n for n in algos if meta[n] != {"multi_turn"}]
    algos = algos or ["grpo"]
    shaping = [n for n in algos if meta[n] == {"multi_turn"}]  # declared for multi-turn only: credit shaping
    if len(algos) > 1:
        why = "declared for this project's " + " and ".join(sorted(regimes)) + " domains"
        why += (f"; off-policy corrections kept: {reuse_why}" if reuse else
                "; off-policy corrections left out: rollouts are fresh, so there is nothing to correct")
        if shaping:
            why += f"; credit shaping ({', '.join(shaping)}) for the multi-turn domains"
        b.add("algorithm", "categorical", why, choices=algos)
    else:
        b.fixed["algorithm"] = algos[0]

    # 4) learning rate from the model size (Adam moves every weight by ~lr per step)
    n_params = catalog.model.get("params")
    size = f"{n_params / 1e6:.1f}M parameters" if n_params else "an unmeasured model (assumed 1.5B parameters)"
    ceiling = min(2.5e-4, 2.5e-4 * math.sqrt(1e6 / (n_params or 1_500_000_000)))
    lr_high = ceiling / math.sqrt(2)  # a doubled batch with α = 0.5 lands exactly on the ceiling
    b.add("lr", "float", f"scaled to {size} (ceiling {ceiling:.2g} = 2.5e-4·√(1M/N), reached when the batch "
          "doubles); a short trial needs at least a quarter of it to move the model", ceiling / 4, lr_high,
          log=True, algos=algos)

    # 3) batch and steps from the budget
    trial_how, samples = _samples_per_trial(catalog)
    p = _pass_rate(catalog)
    g_low = 4 if p is None or p <= 0 else min(12, max(4, math.ceil(math.log(0.5) / math.log(max(1 - p, 1e-6)))))
    b.add("group_size", "int", (f"the hardest source passes {p:.0%} of samples: at least {g_low} samples per group "
                                "give most groups a success to learn from" if p is not None else
                                "a group of 4+ gives a usable baseline"), g_low, min(16, 2 * g_low), algos=algos)
    b_crit = max(samples / MIN_UPDATES, 4 * g_low)
    p_high = int(min(64, max(8, b_crit / g_low)))
    p_low = max(4, p_high // 4)
    b.add("prompts_per_step", "int", f"batch kept below the critical batch (~{b_crit:.0f} samples: ≥{MIN_UPDATES} "
          f"updates in {samples:.0f} samples per trial)", p_low, p_high, algos=algos)
    b_mid = math.sqrt(p_low * p_high) * math.sqrt(g_low * 2 * g_low)
    s_mid = max(MIN_UPDATES, samples / b_mid)
    b.add("steps", "int", f"{trial_how} ({samples:.0f}) at the batch's geometric middle ({b_mid:.0f})",
          max(10, int(0.6 * s_mid)), int(1.4 * s_mid) + 1, algos=algos)
    grows = None  # where the batch grows: the switch and α do nothing at a multiplier of 1 (until stop 26 they
    if b.add("batch_multiplier", "int", "two clocks: start below the critical batch, grow it late in the trial",
             1, 2, algos=algos) and b.params[-1].high >= 2:  # were searched there all the same)
        # every multiplier the knob declares, not only this range's: a redesign may widen the range
        grows = {"batch_multiplier": list(range(2, int(b.knob(algos, "batch_multiplier")["high"]) + 1))}
    b.add("batch_switch_at", "float", "fraction of the trial run at the small batch before it grows",
          0.5, 0.9, when=dict(grows) if grows else None, algos=algos)
    b.add("lr_alpha", "categorical", "lr = lr0·(N/N0)^α when the batch grows: search α rather than assume √; "
          "α = 1 left out, it would push lr past the ceiling", choices=[0.0, 0.5],
          when=dict(grows) if grows else None, algos=algos)

    # 2) clipping and reuse
    if reuse:
        b.add("num_iterations", "int", "passes over each generation batch: " + reuse_why, 1, 4, algos=algos)
        b.add("staleness", "int", "train on batches this many updates old, as an asynchronous sampler would",
              0, 2, algos=algos)
        clip_algos = [n for n in algos if b.knob([n], "eps_high") is not None]
        if clip_algos:
            b.add("eps_high", "float", "clip matters once a batch is reused; never widened past 0.2 (a wider clip "
                  "trades stability for a transient gain)", 0.1, 0.2, algos=clip_algos,
                  when={"algorithm": clip_algos} if len(algos) > 1 else None)
    else:
        b.fixed.update(num_iterations=1, minibatches=1)
    b.fixed["temperature"] = 1.0  # the policy evaluated greedily is π itself: train the distribution it samples
    long_budget = (catalog.budget.get("trials") or 0) >= LOW_PRIOR_TRIALS
    if not (long_budget and b.add("beta", "float", "k3 KL to the base: worth a reference copy on a long budget",
                                  0.0, 0.05, algos=algos)):
        b.fixed["beta"] = 0.0  # a short trial cannot drift far from the base; skip the reference forward pass

    # algorithm-specific knobs (ProAS, Proximal KL, ...): conditional on their algorithm, declared ranges
    special = [a for a in algos if a in shaping or "off_policy" in meta[a]]
    generic = {k["name"] for a in names if a not in special and not meta[a] & {"off_policy"}
               and meta[a] != {"multi_turn"} for k in catalog.algorithm(a)["knobs"]}
    taken = {p.name for p in b.params} | set(b.fixed)
    for a in special:
        for k in catalog.algorithm(a)["knobs"]:
            if k["name"] in generic or k["name"] in taken:
                continue  # shared knobs follow the rules above (clipping, reuse, ...)
            when = {"algorithm": [x for x in algos if b.knob([x], k["name"]) is not None]} if len(algos) > 1 else None
            why = (f"{a}: {k.get('help', '')} (declared range)"
                   + ("; multi-turn credit shaping" if a in shaping else "; off-policy correction"))
            if b.add(k["name"], k["kind"], why, k.get("low"), k.get("high"), bool(k.get("log")), when=when, algos=[a]):
                taken.add(k["name"])

    # 5) self-distillation: only with held-out benchmarks, only on budgets that afford a low-prior dimension
    # (single-turn only: the multi-turn trainer has no distillation)
    if single and catalog.has_heldout and (catalog.budget.get("trials") or 0) >= LOW_PRIOR_TRIALS:
        b.add("distill.weight", "float", "self-distillation share; its gains often fail to generalize, so the "
              "held-out benchmarks decide (train/held-out gap recorded)", 0.0, 0.5, algos=algos)

    # 6) processing operators where they can act
    _processing(b, catalog)
    simplexes = _mixtures(project)
    b.fixed.update(project_fixed(project))
    b.fixed["max_new_tokens"] = project.runtime.max_new_tokens
    return RecipeSpace(b.params, simplexes, b.fixed, version=1, designer="rules")


def project_fixed(project: ProjectConfig) -> dict[str, Any]:
    """Settings the project itself decides, whatever the designer: a benchmark that grades the stated
    step confidence (metric auroc, ece or brier; ALGORITHMS.md §5) needs every trial to state it and
    train its calibration term (`mt.confidence`)."""
    graded = any(b.metric in CONFIDENCE_METRICS for _, b in project.benchmarks())
    return {"mt.confidence": True} if graded else {}


def _processing(b: _Builder, catalog: Catalog) -> None:
    srcs = [s for s in catalog.sources() if not s["multi_turn"]]
    if not srcs:
        return
    repeats = [s for s in srcs if s.get("distinct_questions_in_first")
               and s["distinct_questions_in_first"]["distinct"] < 0.9 * s["distinct_questions_in_first"]["items"]]
    if repeats:
        share = min(s["distinct_questions_in_first"]["distinct"] / s["distinct_questions_in_first"]["items"]
                    for s in repeats)
        b.add("proc.dedup", "bool", f"{len(repeats)} source(s) repeat questions (as few as {share:.0%} distinct "
              "in 1000 draws): draw each once per pass or not")
    chars = [s["question_chars"] for s in srcs if s.get("question_chars")]
    spread = [c for c in chars if c["p90"] >= 1.5 * max(1, c["p10"])]
    lo = max((c["p10"] for c in chars), default=0)  # every source keeps at least a tenth of its items
    hi = max((c["max"] for c in chars), default=0)  # the longest question of any source: no cut at all
    if spread and hi > lo:
        b.add("proc.max_len", "int", f"question length varies within a source ({lo}–{hi} chars): drop the longest",
              lo, hi)
    covered = [s for s in srcs if s.get("pass_rate_coverage") is not None]
    if covered and all(s["pass_rate_coverage"] >= 0.2 for s in covered):
        never = sum(s["pass_rate_bands"]["never"] for s in covered)
        total = sum(sum(s["pass_rate_bands"].values()) for s in covered)
        b.add("proc.difficulty_high", "float", f"drop items the base model already always solves (no group signal); "
              f"{never}/{total} sampled items are never solved and stay", 0.75, 1.0)


def _mixtures(project: ProjectConfig) -> list[Simplex]:
    out = []
    domains = list(project.domains)
    if len(domains) > 1:
        out.append(Simplex("mixture", [MIX_PREFIX + d for d in domains],
                           "share of training prompts per domain; every domain is scored, so every weight may move"))
    for d, dom in project.domains.items():
        if len(dom.sources) > 1:
            out.append(Simplex(f"sources.{d}", [f"{SOURCE_PREFIX}{d}.{i}" for i in range(len(dom.sources))],
                               f"share of {d}'s prompts drawn from each of its {len(dom.sources)} sources"))
    return out
