"""Trainer algorithms as data: each is a named combination of an advantage estimator, a policy loss
and an aggregation (ALGORITHMS.md §1, §3), with the recipe parameters it exposes — ranges, scale and
when it applies — declared once, here, for the designer and the optimizer to read.

`config_for(name, values)` turns an algorithm name and recipe values into a validated `GRPOConfig`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from evaluators.registry import Registry, UnknownNameError
from trainers.grpo import GRPOConfig
from trainers.clocks import CollapseSettings
from trainers.distill import DistillSettings
from trainers.losses import ProxKLSettings
from trainers.sft import SFTConfig


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

    def as_dict(self) -> dict[str, Any]:
        """Its declared fields (unset ones left out; a bound of 0 is kept)."""
        return {f: v for f, v in asdict(self).items() if not (v is None or v is False or v == "")}


@dataclass(frozen=True)
class Algorithm:
    name: str
    summary: str
    applies_to: frozenset[str]
    """Regimes it is meant for: single_turn, multi_turn, off_policy."""
    fixed: dict[str, Any] = field(default_factory=dict)
    """GRPOConfig fields this algorithm pins (its identity: loss, scaling, aggregation); for a field it also
    declares as a knob, the default when a recipe does not set it (`config_for`)."""
    knobs: tuple[Knob, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "summary": self.summary, "applies_to": sorted(self.applies_to),
                "fixed": dict(self.fixed),
                "knobs": [knob.as_dict() for knob in self.knobs]}


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
# the two clocks (§6) and self-distillation (§4): any algorithm can carry them
SCHEDULE = (
    Knob("batch_switch_at", "float", 0.2, 1.0, help="fraction of steps after which the batch grows (1: never)"),
    Knob("batch_multiplier", "int", 1, 4, help="the larger batch, in multiples of the first"),
    Knob("lr_alpha", "categorical", choices=(0.0, 0.5, 1.0), help="lr = lr0·(N/N0)^alpha as the batch changes"),
)
DISTILL = (
    Knob("distill.weight", "float", 0.0, 0.9, help="w_d: share of self-distillation in the loss (0: off)"),
    Knob("distill.context", "categorical", choices=("answer", "sibling"),
         help="privileged context of the teacher: the reference answer or a successful sibling"),
    Knob("distill.divergence", "categorical", choices=("sampled_rkl", "topk_rkl"),
         help="reverse KL on the sampled token, or over the student's top-k tokens"),
    Knob("distill.teacher", "categorical", choices=("live", "frozen", "ema"), help="the teacher's weights"),
)
DYNAMIC = (Knob("dynamic_sampling", "bool", help="drop groups with equal rewards and resample (DAPO)"),)
PROX = tuple(
    Knob(f"prox.{n}", kind, lo, hi, log, None, h) for n, kind, lo, hi, log, h in (
        ("beta_p", "float", 0.0, 4.0, False, "weight of the bounded future-KL credit"),
        ("horizon", "int", 0, 16, False, "future-KL horizon in tokens (0: whole tail)"),
        ("gamma", "float", 0.5, 1.0, False, "discount inside the horizon"),
        ("bound", "float", 0.1, 5.0, True, "clip of the future-KL credit"),
        ("c_is", "float", 1.0, 10.0, True, "cap on the staleness weight"),
        ("c_mask", "float", 2.0, 100.0, True, "staleness ratio above which a token is masked"),
        ("c_prox", "float", 1.0, 10.0, True, "cap on exp(δ)"),
        ("ewma_decay", "float", 0.0, 0.99, False, "EWMA decay of π_prox's weights (mode ewma)"),
    )
) + (Knob("prox.mode", "categorical", choices=("snapshot", "ewma"), help="π_prox: snapshot or EWMA of weights"),)
EXTRAS = SCHEDULE + DISTILL
PROAS = (  # trainers.proas.ProASConfig; read by trainers.multiturn.multi_turn_config
    Knob("proas.graph_source", "categorical", choices=("rules", "distilled", "both"),
         help="edge validity from the env's rules + walkthroughs, distilled rollouts, or both"),
    Knob("proas.theta_v", "float", 0.1, 0.9, help="a step is a deviation when its validity is below this"),
    Knob("proas.v_unk", "float", 0.5, 1.0, help="validity of unknown edges (1: neutral)"),
    Knob("proas.v_off", "float", 0.0, 1.0,
         help="validity of an admissible command off the walkthrough (1: neutral; below theta_v: a deviation)"),
    Knob("proas.n_min", "int", 1, 16, help="occurrences before an edge's distilled estimate counts"),
    Knob("proas.window", "int", 1, 32, help="iterations of rollouts the distilled estimate covers"),
    Knob("proas.lam", "float", 0.0, 1.0, help="share of a failed episode's penalty moved to its first deviations"),
    Knob("proas.k_dev", "int", 1, 4, help="first deviations sharing the moved penalty"),
    Knob("proas.rho", "float", 0.2, 1.0, help="decay of the moved penalty over the deviations"),
    Knob("proas.gate", "categorical", choices=("soft", "hard"), help="masking gate in successful episodes"),
)

for algo in (
    Algorithm("grpo", "GRPO: group-normalized advantage, clipped surrogate (DeepSeekMath)",
              frozenset({"single_turn", "multi_turn"}),
              {"policy_loss": "clip", "scale_rewards": "group", "aggregation": "seq_mean"},
              COMMON + CLIP + REUSE + EXTRAS + DYNAMIC + (Knob("scale_rewards", "categorical", choices=("group", "batch", "none")),
                                       Knob("aggregation", "categorical", choices=("seq_mean", "token_mean", "fixed_len")))),
    Algorithm("dr_grpo", "Dr.GRPO: unscaled advantage, constant normalizer (arXiv 2503.20783)",
              frozenset({"single_turn", "multi_turn"}),
              {"policy_loss": "clip", "scale_rewards": "none", "aggregation": "fixed_len"},
              COMMON + CLIP + REUSE + EXTRAS + DYNAMIC),
    Algorithm("dapo", "DAPO: clip-higher, token-mean loss, overlong masking (arXiv 2503.14476)",
              frozenset({"single_turn"}),
              {"policy_loss": "clip", "aggregation": "token_mean", "mask_truncated": True, "eps_high": 0.28,
               "dynamic_sampling": True},
              COMMON + CLIP + REUSE + EXTRAS),
    Algorithm("pg", "plain policy gradient with the group baseline; no off-policy correction",
              frozenset({"single_turn", "multi_turn"}), {"policy_loss": "pg"}, COMMON + REUSE + EXTRAS),
    Algorithm("cispo", "CISPO: clipped, detached importance weight on every token (arXiv 2506.13585)",
              frozenset({"single_turn", "off_policy"}), {"policy_loss": "cispo", "aggregation": "token_mean"},
              COMMON + CLIP[1:] + REUSE + EXTRAS),  # clipped above only; the paper's token mean
    Algorithm("proximal_kl", "Proximal KL: staleness weights + bounded future-KL credit (ALGORITHMS.md §3)",
              frozenset({"single_turn", "off_policy"}), {"policy_loss": "proximal_kl", "aggregation": "token_mean"},
              COMMON + REUSE + PROX + EXTRAS),
    Algorithm("proas", "ProAS: reference-graph credit shaping of GRPO for multi-turn agents (ALGORITHMS.md §2)",
              frozenset({"multi_turn"}), {"policy_loss": "clip", "scale_rewards": "group", "aggregation": "seq_mean"},
              COMMON + PROAS),  # no clip range: one pass over fresh episodes, the ratio is 1 (`unsupported_settings`)
):
    ALGORITHMS.add(algo.name, algo)


NESTED = {"prox": ProxKLSettings, "distill": DistillSettings, "collapse": CollapseSettings}
"""Recipe keys `<prefix>.<field>` fill these nested settings of GRPOConfig."""


class RecipeValueError(ValueError):
    """A recipe value `config_for` refuses. `keys`: the recipe keys at fault (empty when the reason cites
    none); `detail`: the reason, each of `keys` named in it once as a word, so that a caller can put the
    key's place in its file there (`sro train`: `recipe.values.steps=36.5 must be a whole number`)."""

    def __init__(self, keys: tuple[str, ...], detail: str, message: str | None = None) -> None:
        super().__init__(message if message is not None else f"recipe value {detail}")
        self.keys, self.detail = tuple(keys), detail

    def located(self, where: dict[str, str]) -> str:
        """`detail` with the first mention of each key replaced by `where[key]` (its path in a file)."""
        out = self.detail
        for k in self.keys:
            if k in where:
                out = re.sub(_word(k), lambda _m, k=k: where[k], out, count=1)
        return out


class UnknownAlgorithmError(UnknownNameError, RecipeValueError):
    """An algorithm that is not registered: a registry's `UnknownNameError` (a KeyError, as before),
    and a `RecipeValueError` of the recipe key `algorithm`."""

    def __init__(self, keys: tuple[str, ...], detail: str, message: str) -> None:
        RecipeValueError.__init__(self, keys, detail, message)


def check_regime(algorithm: str, regime: str) -> None:
    """A `RecipeValueError` of the key `algorithm` where it is not declared for `regime` (`single_turn`,
    `multi_turn`): proximal_kl over fresh episodes, or proas on single-turn prompts (trained as GRPO, unsaid)."""
    regimes = ALGORITHMS.get(algorithm).applies_to
    if regime not in regimes:
        why = (f"{algorithm} is not declared for {regime.replace('_', '-')} domains (it applies to "
               f"{', '.join(sorted(regimes))}); use one of "
               f"{', '.join(n for n in ALGORITHMS.names() if regime in ALGORITHMS.get(n).applies_to)}")
        raise RecipeValueError(("algorithm",), f"algorithm: {why}", f"algorithm {why}")


def config_for(name: str, values: dict[str, Any], **runtime: Any) -> GRPOConfig:
    """A validated GRPOConfig for algorithm `name` from recipe `values` (unknown top-level keys are
    ignored, so a recipe may carry mixture weights, an SFT stage and other non-trainer settings).
    A value it refuses raises `RecipeValueError` naming the recipe key."""
    try:
        algo: Algorithm = ALGORITHMS.get(name)
    except UnknownNameError as e:
        raise UnknownAlgorithmError(("algorithm",), f"algorithm: {e}", str(e)) from None
    top = {f.name for f in fields(GRPOConfig)}
    cfg: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {k: {} for k in NESTED}
    for k, v in values.items():
        prefix, _, rest = k.partition(".")
        if rest and prefix in NESTED:
            nested[prefix][rest] = v
        elif k in top and k not in NESTED:
            cfg[k] = v
    origin = {k: k for k in cfg}  # GRPOConfig field -> the recipe key that set it
    if "eps" in values:  # a symmetric clip range in the recipe
        for k in ("eps_low", "eps_high"):
            if k not in cfg:
                cfg[k], origin[k] = values["eps"], "eps"
    check_types(GRPOConfig, cfg, origin)
    declared = {k.name for k in algo.knobs}
    for k, v in algo.fixed.items():  # the algorithm's identity; for a knob it declares, only a default
        if k not in declared or k not in values:
            cfg[k] = v
            origin.pop(k, None)
    cfg.update(runtime)
    for k in runtime:
        origin.pop(k, None)
    for prefix, cls in NESTED.items():
        cfg[prefix] = recipe_settings(cls, prefix, nested[prefix])
    try:
        return GRPOConfig(**cfg)
    except ValueError as e:  # GRPOConfig's own checks (lr > 0, steps >= 1, ...)
        raise _cited(str(e), str(e).removeprefix("GRPOConfig: "), origin) from None


def recipe_settings(cls: type, prefix: str, got: dict[str, Any], **runtime: Any) -> Any:
    """`cls(**got, **runtime)` for the recipe keys `<prefix>.<field>` in `got` (prefix stripped);
    a ValueError naming the unknown ones and the known fields otherwise, a `RecipeValueError` naming
    the recipe key of a value of the wrong type or one that `cls` refuses (the nested settings here,
    `trainers.multiturn`'s `proas.*` and `mt.*`)."""
    known = {f.name for f in fields(cls)}
    unknown = set(got) - known
    if unknown:
        raise ValueError(f"unknown {cls.__name__} fields {sorted(f'{prefix}.{u}' for u in unknown)}; "
                         f"known: {sorted(known)}")
    origin = {k: f"{prefix}.{k}" for k in got}
    got = dict(got)
    check_types(cls, got, origin)
    try:
        return cls(**got, **runtime)
    except ValueError as e:  # the settings' own checks (teacher must be one of ...)
        err = _cited(str(e), str(e).removeprefix(f"{cls.__name__}: "), origin)
        if err.keys:  # said by the recipe keys it cites (`recipe value mt.history must be >= 0 (got -1)`)
            err = RecipeValueError(err.keys, err.detail)
        raise err from None


def _word(name: str) -> str:
    """A regex for `name` as a whole word of a message (not part of lr_alpha or prox.horizon)."""
    return rf"(?<![\w.]){re.escape(name)}(?![\w.])"


def _cited(message: str, detail: str, origin: dict[str, str]) -> RecipeValueError:
    """A `RecipeValueError` for a config's own message: the recipe keys whose fields (`origin`: field ->
    recipe key) it names, each first mention of such a field in `detail` replaced by its recipe key."""
    keys = []
    for f, k in origin.items():
        if re.search(_word(f), detail):
            detail = re.sub(_word(f), lambda _m, k=k: k, detail, count=1)
            keys.append(k)
    # one recipe key can set two fields (`eps`: eps_low and eps_high); their messages then read the same: once
    detail = "; ".join(dict.fromkeys(detail.split("; ")))
    return RecipeValueError(tuple(dict.fromkeys(keys)), detail, message)


def checked_value(key: str, v: Any, kind: str, choices: Sequence[Any] | None = None) -> Any:
    """`v` read as a recipe value of `kind` (float, int, bool, str or categorical) for recipe `key`, or a
    `RecipeValueError` naming the key: a number (finite: NaN compares false with every bound, so a range
    check could not refuse it), a whole number for an int (36.0 read as 36), true or false for a bool
    (0 and 1 read as False and True, as `RecipeSpace.canonical` reads them; `mt.confidence: 'yes'` would
    have been truthy), text for a str, one of `choices` for a categorical. The one kind check of the
    trainer settings (`check_types`) and the processing knobs (`trainers.processing.processing_values`)."""
    if kind == "bool":
        if isinstance(v, bool):
            return v
        if isinstance(v, (int, float)) and v in (0, 1):
            return bool(v)
        raise RecipeValueError((key,), f"{key}={v!r} must be true or false")
    if kind in ("int", "float"):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
            hint = ""
            try:  # `steps: '31'`: quoted (SRO's YAML reader takes `1e-4` as a number, `sro.yaml_strict`)
                if isinstance(v, str) and math.isfinite(float(v)):
                    hint = f" (it is text: quoted in the YAML? write {v.strip()} without quotes)"
            except ValueError:
                pass
            raise RecipeValueError((key,), f"{key}={v!r} must be a number{hint}")
        if math.isinf(v):
            raise RecipeValueError((key,), f"{key}={v!r} must be a finite number")
        if kind == "int":
            if v != int(v):
                raise RecipeValueError((key,), f"{key}={v!r} must be a whole number")
            return int(v)
        return v
    if kind == "str" and not isinstance(v, str):
        raise RecipeValueError((key,), f"{key}={v!r} must be a name (text)")
    if kind == "categorical" and choices is not None and v not in choices:
        raise RecipeValueError((key,), f"{key}={v!r} must be one of {list(choices)}")
    return v


def check_types(cls: type, got: dict[str, Any], origin: dict[str, str]) -> None:
    """Each value in `got` checked against the type of its field of dataclass `cls` (`checked_value`:
    a number, a whole number, a name, true or false), named by its recipe key (`origin`) before `cls`
    trips over it; a value it reads otherwise (36.0 for an int field, 0/1 for a bool one) is replaced
    in `got`. None passes where the field is optional; other field types are left to `cls`."""
    types = {f.name: (f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))).replace(" ", "")
             for f in fields(cls)}
    for f, v in list(got.items()):
        want = types.get(f, "")
        if v is None and want.endswith("|None"):
            continue
        want = want.removesuffix("|None")
        if want in ("int", "float", "bool", "str"):
            got[f] = checked_value(origin.get(f, f), v, want)


NOT_SET = object()
"""`default_setting`'s answer for a key whose value a recipe without it trains with is not the trainer's to say."""

RUNTIME_KEYS = frozenset({"seed", "max_seconds", "rollout_backend"})
"""Trainer config fields a trial gets from its project and its budget, not from a trainer default."""


def default_setting(key: str, values: dict[str, Any]) -> Any:
    """The value a recipe of `values` that does not set recipe key `key` trains with: the trainer's default
    for it, as `config_for` makes the recipe's algorithm's config (an algorithm's own, e.g. dapo's eps_high
    0.28; `eps` for both clip ends), of the nested settings (`prox.`, `distill.`, `collapse.`), of ProAS
    (`proas.`), of the multi-turn settings (`mt.`) and of the SFT stage (`sft.`). `NOT_SET` for every other key
    (mixture and source weights, processing operators, `RUNTIME_KEYS`) and for values `config_for` refuses."""
    prefix, _, rest = key.partition(".")
    if key in RUNTIME_KEYS or key in values:
        return NOT_SET
    if prefix == "sft" and rest:
        return next((f.default for f in fields(SFTConfig) if f.name == rest), NOT_SET)
    if prefix in ("proas", "mt") and rest:
        from trainers.multiturn import MT_SETTINGS, MultiTurnConfig  # the multi-turn trainer imports this module
        from trainers.proas import ProASConfig

        cls, names = (ProASConfig, None) if prefix == "proas" else (MultiTurnConfig, MT_SETTINGS)
        return next((f.default for f in fields(cls) if f.name == rest and (names is None or rest in names)), NOT_SET)
    try:
        return config_value(config_for(str(values.get("algorithm", "grpo")), values), key)
    except (KeyError, ValueError, TypeError):  # a value `config_for` refuses, or no field of the config
        return NOT_SET


def config_value(cfg: GRPOConfig, key: str) -> Any:
    """The value of recipe key `key` in `cfg`: a field (`steps`) or a nested setting (`distill.weight`);
    KeyError for a key that is neither."""
    prefix, _, rest = key.partition(".")
    if not rest and key in {f.name for f in fields(GRPOConfig)} and key not in NESTED:
        return getattr(cfg, key)
    if rest and prefix in NESTED and rest in {f.name for f in fields(NESTED[prefix])}:
        return getattr(getattr(cfg, prefix), rest)
    raise KeyError(f"no trainer setting {key!r}")


ACTS_WHEN: dict[str, tuple[str, int, str]] = {
    "batch_switch_at": ("batch_multiplier", 2, "the batch grows only at a batch_multiplier of 2 or more"),
    "lr_alpha": ("batch_multiplier", 2, "the rate follows the batch only when it grows, at a batch_multiplier of 2 or more"),
}
"""Knobs that do something only when another whole-number setting is at least a threshold: knob → (that
setting, the threshold, why). The designers search them only there (an LLM's space searched `batch_switch_at` with
the multiplier fixed at 1, a dimension that moved nothing)."""


def idle_setting(knob: str, fixed: dict[str, Any]) -> tuple[str, Any] | None:
    """For an `ACTS_WHEN` knob whose setting is not searched: (the setting, its value) where that value, fixed in
    `fixed` or else the trainer's default, is below the knob's threshold, so the knob does nothing; else None."""
    if knob not in ACTS_WHEN:
        return None
    setting, least, _ = ACTS_WHEN[knob]
    value = fixed.get(setting, config_value(GRPOConfig(), setting))
    return (setting, value) if isinstance(value, (int, float)) and value < least else None


ONE_PASS = ("staleness", "num_iterations", "minibatches", "distill.weight", "dynamic_sampling", "overlong_buffer",
            "eps_low", "eps_high")
"""Recipe keys the multi-turn trainer refuses away from their defaults (`multiturn.unsupported_settings`): it
plays fresh episodes for one pass per iteration, so there is no reuse, distillation or resampling, and the policy
ratio is 1 (a clip range does nothing)."""


def catalog(multi_turn: bool = False) -> list[dict[str, Any]]:
    """Every algorithm as plain data (for the designer's catalog); for a `multi_turn` project without the knobs
    its trainer refuses (`ONE_PASS`, and self-distillation's, which only `distill.weight` turns on): until stop 53
    an LLM was offered them, and a space searching one was refused or searched a dimension that does nothing."""
    out = [ALGORITHMS.get(n).as_dict() for n in ALGORITHMS.names()]
    if multi_turn:
        groups = tuple(k.partition(".")[0] + "." for k in ONE_PASS if "." in k)  # distill.*
        for a in out:
            a["knobs"] = [k for k in a["knobs"] if k["name"] not in ONE_PASS and not k["name"].startswith(groups)]
    return out


@dataclass(frozen=True)
class Stage:
    """A recipe stage that runs before the RL algorithm (its knobs are `<name>.<field>` recipe keys)."""

    name: str
    summary: str
    knobs: tuple[Knob, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "summary": self.summary,
                "knobs": [knob.as_dict() for knob in self.knobs]}


STAGES: Registry = Registry("recipe stage")
STAGES.add("sft", Stage("sft", "supervised fine-tuning on verified solutions from the sources, before RL", (
    Knob("sft.steps", "int", 0, 200, help="SFT optimizer steps before RL (0: no SFT stage)"),
    Knob("sft.lr", "float", 1e-5, 1e-3, log=True, help="SFT learning rate (cosine decay)"),
    Knob("sft.batch_size", "int", 4, 64, help="verified (question, answer) pairs per SFT step"),
)))


def sft_config_for(values: dict[str, Any], **runtime: Any) -> SFTConfig:
    """The recipe's SFT stage (steps 0 when the recipe has none)."""
    got = {k[len("sft."):]: v for k, v in values.items() if k.startswith("sft.")}
    return recipe_settings(SFTConfig, "sft", got, **runtime)


def stages() -> list[dict[str, Any]]:
    """Every pre-RL stage as plain data (for the designer's catalog)."""
    return [STAGES.get(n).as_dict() for n in STAGES.names()]
