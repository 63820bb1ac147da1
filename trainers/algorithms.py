"""Trainer algorithms as data: each is a named combination of an advantage estimator, a policy loss
and an aggregation (ALGORITHMS.md §1, §3), with the recipe parameters it exposes — ranges, scale and
when it applies — declared once, here, for the designer and the optimizer to read.

`config_for(name, values)` turns an algorithm name and recipe values into a validated `GRPOConfig`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from evaluators.registry import Registry
from trainers.grpo import GRPOConfig
from trainers.losses import ProxKLSettings


@dataclass(frozen=True)
class Knob:
    """A recipe parameter an algorithm exposes: its GRPOConfig field, kind, range and help text."""

    name: str
    kind: str  # float | int | categorical | bool
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple[Any, ...] | None = None
    help: str = ""


@dataclass(frozen=True)
class Algorithm:
    name: str
    summary: str
    applies_to: frozenset[str]
    """Regimes it is meant for: single_turn, multi_turn, off_policy."""
    fixed: dict[str, Any] = field(default_factory=dict)
    """GRPOConfig fields this algorithm pins (its identity: loss, scaling, aggregation)."""
    knobs: tuple[Knob, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "summary": self.summary, "applies_to": sorted(self.applies_to),
                "fixed": dict(self.fixed),
                "knobs": [{f: v for f, v in asdict(knob).items() if v not in (None, False, "")}
                          for knob in self.knobs]}


ALGORITHMS: Registry = Registry("algorithm")

# shared by every group-baseline algorithm
COMMON = (
    Knob("lr", "float", 1e-7, 1e-2, log=True, help="AdamW learning rate"),
    Knob("group_size", "int", 2, 16, help="completions per prompt (the group baseline)"),
    Knob("prompts_per_step", "int", 1, 64, help="prompts per generation batch"),
    Knob("steps", "int", 1, 10_000, help="generation batches"),
    Knob("temperature", "float", 0.3, 1.5, help="rollout temperature"),
    Knob("beta", "float", 0.0, 0.2, help="k3 KL to the frozen base; 0 keeps no reference copy"),
)
CLIP = (
    Knob("eps_low", "float", 0.05, 0.4, help="ratio clipped below at 1 − eps_low"),
    Knob("eps_high", "float", 0.05, 0.4, help="ratio clipped above at 1 + eps_high"),
)
REUSE = (
    Knob("num_iterations", "int", 1, 8, help="passes over each generation batch"),
    Knob("minibatches", "int", 1, 8, help="optimizer steps per pass"),
    Knob("staleness", "int", 0, 8, help="train on the batch generated this many updates ago"),
)
PROX = tuple(
    Knob(f"prox.{n}", kind, lo, hi, log, None, h) for n, kind, lo, hi, log, h in (
        ("beta_p", "float", 0.0, 1.0, False, "weight of the bounded future-KL credit"),
        ("horizon", "int", 0, 16, False, "future-KL horizon in tokens (0: whole tail)"),
        ("gamma", "float", 0.5, 1.0, False, "discount inside the horizon"),
        ("bound", "float", 0.1, 5.0, True, "clip of the future-KL credit"),
        ("c_is", "float", 1.0, 10.0, True, "cap on the staleness weight"),
        ("c_mask", "float", 2.0, 100.0, True, "staleness ratio above which a token is masked"),
        ("c_prox", "float", 1.0, 10.0, True, "cap on exp(δ)"),
    )
)

for algo in (
    Algorithm("grpo", "GRPO: group-normalized advantage, clipped surrogate (DeepSeekMath)",
              frozenset({"single_turn", "multi_turn"}),
              {"policy_loss": "clip", "scale_rewards": "group", "aggregation": "seq_mean"},
              COMMON + CLIP + REUSE + (Knob("scale_rewards", "categorical", choices=("group", "batch", "none")),
                                       Knob("aggregation", "categorical", choices=("seq_mean", "token_mean", "fixed_len")))),
    Algorithm("dr_grpo", "Dr.GRPO: unscaled advantage, constant normalizer (arXiv 2503.20783)",
              frozenset({"single_turn", "multi_turn"}),
              {"policy_loss": "clip", "scale_rewards": "none", "aggregation": "fixed_len"}, COMMON + CLIP + REUSE),
    Algorithm("dapo", "DAPO: clip-higher, token-mean loss, overlong masking (arXiv 2503.14476)",
              frozenset({"single_turn"}),
              {"policy_loss": "clip", "aggregation": "token_mean", "mask_truncated": True, "eps_high": 0.28},
              COMMON + CLIP + REUSE),
    Algorithm("pg", "plain policy gradient with the group baseline; no off-policy correction",
              frozenset({"single_turn", "multi_turn"}), {"policy_loss": "pg"}, COMMON + REUSE),
    Algorithm("cispo", "CISPO: clipped, detached importance weight on every token (arXiv 2506.13585)",
              frozenset({"single_turn", "off_policy"}), {"policy_loss": "cispo"}, COMMON + CLIP + REUSE),
    Algorithm("proximal_kl", "Proximal KL: staleness weights + bounded future-KL credit (ALGORITHMS.md §3)",
              frozenset({"single_turn", "multi_turn", "off_policy"}), {"policy_loss": "proximal_kl"},
              COMMON + REUSE + PROX),
):
    ALGORITHMS.add(algo.name, algo)


def config_for(name: str, values: dict[str, Any], **runtime: Any) -> GRPOConfig:
    """A validated GRPOConfig for algorithm `name` from recipe `values` (unknown keys are ignored,
    so a recipe may carry mixture weights and other non-trainer settings)."""
    algo: Algorithm = ALGORITHMS.get(name)
    top = {f.name for f in fields(GRPOConfig)}
    cfg: dict[str, Any] = {}
    prox: dict[str, Any] = {}
    for k, v in values.items():
        if k.startswith("prox."):
            prox[k[len("prox."):]] = v
        elif k in top and k != "prox":
            cfg[k] = v
    if "eps" in values:  # a symmetric clip range in the recipe
        cfg.setdefault("eps_low", values["eps"])
        cfg.setdefault("eps_high", values["eps"])
    cfg.update(algo.fixed)
    cfg.update(runtime)
    prox_fields = {f.name for f in fields(ProxKLSettings)}
    unknown = set(prox) - prox_fields
    if unknown:
        raise ValueError(f"unknown Proximal KL settings {sorted(unknown)}; known: {sorted(prox_fields)}")
    return GRPOConfig(**cfg, prox=ProxKLSettings(**prox))


def catalog() -> list[dict[str, Any]]:
    """Every algorithm as plain data (for the designer's catalog)."""
    return [ALGORITHMS.get(n).as_dict() for n in ALGORITHMS.names()]
