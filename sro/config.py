"""The project YAML (see DESIGN.md): pydantic models and a loader whose errors name file, key path and fix.

Every error a user can make in the file becomes one `ConfigError` line such as
`quickstart.yaml: domains.arithmetic.sources[0].reasoning_gym: unknown generator 'basic_arithmetc';
did you mean 'basic_arithmetic'?` — the CLI prints it and exits 2.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import yaml
from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError, field_validator,
                      model_validator)

from sro import yaml_strict

from evaluators.sources import MULTI_TURN_KINDS, SourceSpec, SourceSpecError, check_source_spec
from sro.budget import Budget, BudgetError
from sro.start_recipes import is_exported


def _not_a_bool(v: Any) -> Any:
    """YAML's `true` for a count: pydantic's lax int took it as 1 (`size: true`, a one-item benchmark; a review,
    stop 37)."""
    if isinstance(v, bool):
        raise ValueError(f"must be a whole number, not {str(v).lower()}")
    return v


Whole = Annotated[int, BeforeValidator(_not_a_bool)]
"""An int field of the project YAML: a whole number, never a bool."""


class ConfigError(ValueError):
    """A problem in a project file, phrased as `file: key.path: what is wrong; how to fix it`."""


def _plain_name(value: str, what: str) -> str:
    """Names that become file and key parts: letters, digits, _ . - only."""
    if isinstance(value, str) and not value.strip():  # `name: ''` read "'' may only use letters" (a review, stop 38)
        raise ValueError(f"{what} is empty; give one of letters, digits, _ . - (e.g. my-search)")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
        raise ValueError(f"{what} {value!r} may only use letters, digits, _ . -")
    if set(value) == {"."} or value.startswith("-"):  # `name: ..` wrote the run outside runs/ (a review, stop 37)
        raise ValueError(f"{what} {value!r} may not be only dots or start with '-' (it names a folder)")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


SOURCE_KINDS = ("reasoning_gym", "jsonl", "dataset", "textworld", "env")
"""A source entry's kind keys (`evaluators.sources.make_task`); textworld and env are multi-turn."""


class SourceConfig(_Strict):
    """One training data source: exactly one of `reasoning_gym`, `jsonl`, `dataset`, `textworld` or `env`."""

    reasoning_gym: str | None = Field(None, description="reasoning-gym generator name")
    jsonl: str | None = Field(None, description="local JSONL file with `question` and `answer` fields")
    dataset: str | None = Field(None, description="a dataset read through `datasets`: an HF hub id (openai/gsm8k) "
                                "or a local parquet, JSON, JSONL or CSV file or dataset folder; config: split, name "
                                "(subset), revision, question and answer (columns), answer_after (e.g. '####')")
    textworld: str | None = Field(None, description="TextWorld game family (coin_collector, ...)")
    env: str | None = Field(None, description="a multi-turn environment an adapter registered (`plugins:`)")
    config: dict[str, Any] = Field(default_factory=dict, description="generator configuration")

    @model_validator(mode="after")
    def _one_kind(self) -> SourceConfig:
        kinds = [k for k in SOURCE_KINDS if getattr(self, k) is not None]
        if len(kinds) != 1:
            got = ", ".join(kinds) or "none"
            raise ValueError(
                f"a source needs exactly one of {', '.join(SOURCE_KINDS)} (got {got}); "
                "write e.g. `- reasoning_gym: basic_arithmetic`"
            )
        return self

    @property
    def kind(self) -> str:
        return next(k for k in SOURCE_KINDS if getattr(self, k) is not None)

    @property
    def target(self) -> str:
        return str(getattr(self, self.kind))

    def spec(self, base_dir: Path | None = None) -> SourceSpec:
        target = self.target
        if self.kind == "jsonl" and base_dir is not None and not os.path.isabs(target):
            target = str((base_dir / target).resolve())
        if self.kind == "dataset" and base_dir is not None and not os.path.isabs(target) and (base_dir / target).exists():
            target = str((base_dir / target).resolve())  # a local file or folder; a hub id otherwise
        return SourceSpec(kind=self.kind, target=target, config=dict(self.config))


EPISODE_METRICS: dict[str, tuple[str, str]] = {
    "success": ("success", "max"), "score": ("score", "max"),
    "auroc": ("calib_auroc", "max"), "ece": ("calib_ece", "min"), "brier": ("calib_brier", "min"),
    "first_auroc": ("calib_first_auroc", "max"), "first_ece": ("calib_first_ece", "min"),
    "first_brier": ("calib_first_brier", "min")}
"""A game benchmark's (textworld, env) `metric:` → (its key in `trainers.multiturn.evaluate_episodes`' result, the
better direction). auroc, ece and brier grade the agent's stated step confidence (ALGORITHMS.md §5)
against each held-out episode's outcome, over every step of the benchmark's episodes; first_auroc,
first_ece and first_brier over the first steps only (the confidence before the agent has acted)."""
CONFIDENCE_METRICS = ("auroc", "ece", "brier", "first_auroc", "first_ece", "first_brier")


class BenchmarkConfig(SourceConfig):
    """A held-out benchmark: a source plus a name, a size and a metric. Never trained on."""

    name: str = Field(description="benchmark name, unique within its domain")
    size: Whole | None = Field(None, gt=0, description="number of held-out items (default 100; a game "
                             "benchmark (textworld, env): its games, one greedy episode each)")
    metric: Literal["accuracy", "success", "score", "auroc", "ece", "brier", "first_auroc", "first_ece",
                    "first_brier"] | None = Field(
        None, description="what the score means: accuracy (single-turn items, the default there); success (the "
        "default) or score (game episodes, textworld or env, one greedy episode per held-out game), or the calibration of "
        "the agent's stated step confidence on those episodes: auroc, ece or brier over every step, first_auroc, "
        "first_ece or first_brier over the first steps (lower is better for the ece and brier ones)")
    decontaminate: bool = Field(
        False, description="also drop this benchmark's exact questions from every training stream "
        "(held-out seeds are always disjoint; this matters for generators with a small problem space)")

    _name_ok = field_validator("name")(lambda v: _plain_name(v, "benchmark name"))

    @model_validator(mode="after")
    def _metric_fits_kind(self) -> BenchmarkConfig:
        allowed = tuple(EPISODE_METRICS) if self.kind in MULTI_TURN_KINDS else ("accuracy",)
        if self.metric is None:
            self.metric = allowed[0]
        elif self.metric not in allowed:
            raise ValueError(f"metric {self.metric!r} does not apply to a {self.kind} benchmark; "
                             f"use {', '.join(allowed)} (or leave it out: {allowed[0]})")
        if self.kind in MULTI_TURN_KINDS:
            from evaluators.games import PLAY_KEYS

            games = self.config.get("games", PLAY_KEYS["games"])
            whole = not isinstance(games, bool) and isinstance(games, (int, float)) and float(games).is_integer()
            games = int(games) if whole and games >= 1 else None  # below 1: the source's check names config.games  # `games: 2.0` plays 2 games (it was taken as none: size 100)
            if self.size is None:  # filled in, so a dumped project (`portable_dump`) reads back the same
                self.size = games if games is not None and games > 0 else 100
            elif games is not None and self.size > games:  # greedy replays of the same games add nothing
                raise ValueError(f"size {self.size} is more than the benchmark's {games} held-out games (one "
                                 f"greedy episode each); set config.games: {self.size}, or size: {games}")
        elif self.size is None:
            self.size = 100
        return self

    @property
    def better(self) -> str:
        """"max" or "min": which way this benchmark's metric improves (min for ece and brier)."""
        return EPISODE_METRICS[self.metric][1] if self.kind in MULTI_TURN_KINDS else "max"


class DomainConfig(_Strict):
    description: str = Field("", description="free text, read by the designer")
    sources: list[SourceConfig] = Field(min_length=1, description="what recipes may train on")
    benchmarks: list[BenchmarkConfig] = Field(min_length=1, description="held-out evaluation")

    @model_validator(mode="after")
    def _unique_benchmarks(self) -> DomainConfig:
        names = [b.name for b in self.benchmarks]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"benchmark names must be unique in a domain; repeated: {sorted(dup)}")
        return self


class DesignerConfig(_Strict):
    kind: Literal["rules", "llm"] = "rules"
    base_url: str | None = None
    model: str | None = None
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the key")
    timeout_s: float = Field(120.0, gt=0, description="seconds to wait for the endpoint's whole answer")
    redesign_every: Whole = Field(0, ge=0, description="redesign the space from the evidence after this many "
                                "finished trials (0: never)")
    redesign_on_stall: Whole = Field(0, ge=0, description="also redesign when the hypervolume has not grown for "
                                   "this many finished trials (0: never)")

    @field_validator("timeout_s", mode="before")
    @classmethod
    def _finite_timeout(cls, v: Any) -> Any:
        """`timeout_s: .inf` passed here and crashed the request's wait (`Thread.join(inf)`: OverflowError, a
        review, stop 53); `.nan` was "should be greater than 0". Checked before the number's own checks."""
        try:
            x = float(v)
        except (TypeError, ValueError):  # not a number: pydantic's own check says so
            return v
        if not math.isfinite(x):
            raise ValueError(f"{v} is not a finite number of seconds; give the longest wait for the endpoint's "
                             "whole answer, e.g. 600")
        return v

    @model_validator(mode="after")
    def _llm_needs_an_endpoint(self) -> DesignerConfig:
        """`kind: llm` without a base_url or a model was found minutes later, after the base model was measured,
        as a warning and a rules space (a review, stop 37)."""
        if self.kind == "llm":
            lacks = [k for k in ("base_url", "model") if not getattr(self, k)]
            if lacks:
                raise ValueError(f"kind: llm needs {' and '.join(lacks)} (e.g. base_url: http://127.0.0.1:8000/v1, "
                                 "model: the name the server serves); or kind: rules for the offline designer")
        return self

    def missing_key(self) -> str | None:
        """Why the LLM designer cannot be asked on this machine (its key variable unset), or None."""
        if self.kind == "llm" and not os.environ.get(self.api_key_env):
            return (f"designer.api_key_env: the environment variable {self.api_key_env} is not set; export the "
                    "endpoint's API key there (any non-empty value for a local server that takes none), or "
                    "use designer.kind: rules")
        return None


class RuntimeConfig(_Strict):
    """Fixed settings of every trial (not searched)."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    max_new_tokens: Whole = Field(8, gt=0, description="completion length for rollouts and evaluation")
    eval_batch_size: Whole = Field(64, gt=0)
    threads: Whole | None = Field(None, gt=0, description="torch CPU threads (default: all cores)")
    tiny_pretrain_steps: Whole = Field(800, ge=0, description="pre-training steps of the embedded `tiny` model")
    rollout_backend: Literal["hf", "vllm"] = Field(
        "hf", description="who samples rollouts: hf (transformers generate) or vllm (GPU, extra sro[vllm])")


class PruningConfig(_Strict):
    """Multi-objective pruning of trials (`sro.pruning`): stop a trial whose results on benchmark
    subsets, at a fraction of its steps, are dominated by enough earlier trials at that fraction."""

    enabled: bool = Field(True, description="false (or `sro search --no-pruning`): every trial runs to the end")
    at: list[float] = Field([1 / 3, 2 / 3], min_length=1, description="fractions of a trial's steps at which "
                            "it is evaluated, each in (0, 1)")
    items: Whole = Field(50, gt=0, description="items of each held-out benchmark scored at those points")
    min_dominating: Whole = Field(3, ge=1, description="earlier trials that must dominate a trial at the same "
                                "fraction to stop it (none is pruned before that many have been evaluated)")
    min_steps: Whole = Field(6, ge=2, description="trials with fewer training steps are never evaluated early")

    @field_validator("at")
    @classmethod
    def _fractions_ok(cls, v: list[float]) -> list[float]:
        if not all(0 < f < 1 for f in v):
            raise ValueError(f"every fraction must lie strictly between 0 and 1 (got {v}); e.g. [0.33, 0.67]")
        from sro.pruning import fraction_key  # (sro.pruning reads the ledger, which reads this module)

        # results are stored under the fraction to 3 decimals: two that round alike would overwrite each
        # other's (a review, stop 52)
        keys = [fraction_key(f) for f in sorted(set(v))]
        if len(set(keys)) < len(keys):
            raise ValueError(f"fractions must differ in their first 3 decimals (got {v}); e.g. [0.33, 0.67]")
        return sorted(set(v))


class ProjectConfig(_Strict):
    name: str = Field(description="runs/<name>/ holds everything the search writes")
    base_model: str = Field("tiny", description='"tiny" (embedded), an HF model id, or a local path')
    seed: Whole = 0
    domains: dict[str, DomainConfig] = Field(min_length=1)
    objectives: list[dict[str, Literal["max", "min"]]] = Field(default_factory=list)
    reference_point: dict[str, float] = Field(
        default_factory=dict,
        description="worst acceptable value of some objectives (cost in wall seconds); the BoTorch "
                    "optimizer and the hypervolume history count only what is better; unnamed "
                    "objectives get one inferred from the trials")
    plugins: list[str] = Field(
        default_factory=list,
        description="Python modules imported before the sources are read, to register environments for "
                    "`env:` sources: a module name on the Python path, or a .py file (relative to the project's "
                    "folder)")
    start_recipes: list[dict[str, Any] | str] = Field(
        default_factory=list,
        description="recipes trained first, in order, before the optimizer proposes (your current "
                    "recipe, a published one): each a mapping of the space's parameters to values, the "
                    "path of a recipe YAML written by `sro export`, or its `recipe:` section ({values: ..., "
                    "fixed: ...}: the fixed settings fill the parameters this space searches)")
    budget: str = Field("20m", description="default for `sro search`; --budget overrides")
    storage: str | None = Field(None, description="SQLAlchemy URL; default sqlite in runs/<name>/")
    heartbeat_s: Whole = Field(60, gt=0, description="a running trial records a heartbeat in the storage this "
                             "often; one silent for 10 intervals is taken for dead (its worker's machine or "
                             "process gone), marked interrupted and run again by another worker")
    designer: DesignerConfig = Field(default_factory=DesignerConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    pruning: PruningConfig = Field(default_factory=PruningConfig)
    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _source: str = PrivateAttr("")
    """The file it was read from (`load_project`), for errors found after loading (a start recipe that does
    not fit the designed space)."""

    _name_ok = field_validator("name")(lambda v: _plain_name(v, "name (a folder under runs/)"))

    @field_validator("domains")
    @classmethod
    def _domain_names_ok(cls, v: dict[str, DomainConfig]) -> dict[str, DomainConfig]:
        """A domain's name is the first part of its benchmarks' keys (`domain/benchmark`): `math/easy` made
        `math/easy/b`, which no per-domain lookup found (the generalization gap went missing), and '' or a
        space made keys that could not be read back (review, stop 30)."""
        for name in v:
            _plain_name(name, "domain name")
        return v

    @field_validator("storage")
    @classmethod
    def _storage_ok(cls, v: str | None) -> str | None:
        if v is None:
            return v
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError

        pg = "for PostgreSQL install sro's postgres extra (pip install 'sro[postgres]') and write " \
             "postgresql+psycopg://USER@HOST:PORT/DATABASE"
        try:
            url = make_url(v)
        except ArgumentError:
            raise ValueError(f"storage {v!r} is not an SQLAlchemy URL; write e.g. sqlite:///runs/study.db "
                             "or leave it out (sqlite in runs/<name>/)") from None
        try:  # the driver loads here, not in the first worker minutes later
            url.get_dialect().import_dbapi()
        except NoSuchModuleError:
            raise ValueError(f"storage {v!r}: SQLAlchemy has no database kind {url.drivername!r}; {pg}") from None
        except ImportError as e:
            raise ValueError(f"storage {v!r}: its database driver is not installed ({e}); {pg}") from None
        return v

    @field_validator("budget", mode="before")
    @classmethod
    def _budget_ok(cls, v: Any) -> str:
        if not isinstance(v, str):
            raise ValueError(f"budget needs a unit, e.g. 20m, 2h or 8trials (got {v!r})")
        try:
            Budget.parse(v)
        except BudgetError as e:
            raise ValueError(str(e)) from None
        return v

    @model_validator(mode="after")
    def _objectives_ok(self) -> ProjectConfig:
        if not self.objectives:
            self.objectives = [{key: b.better} for key, b in self.benchmarks()] + [{"cost": "min"}]
        known = set(self.benchmark_keys()) | {"cost"}
        keys = [k for o in self.objectives for k in o]
        if [k for k in keys if k != "cost"] == [] and keys:
            raise ValueError("objectives name only the cost; name at least one benchmark (a search for the "
                             f"cheapest recipe whatever its scores finds nothing worth having): {sorted(known - {'cost'})}")
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        if repeated:
            raise ValueError(f"objectives name {', '.join(repeated)} more than once; list each once")
        for i, obj in enumerate(self.objectives):
            if len(obj) != 1:
                raise ValueError(f"objectives[{i}] must be one `key: max|min` pair, got {obj}")
            (key,) = obj
            if key not in known:
                hint = difflib.get_close_matches(key, sorted(known), n=1)
                fix = f"did you mean {hint[0]!r}?" if hint else f"known: {', '.join(sorted(known))}"
                raise ValueError(f"objectives[{i}] names {key!r}, which is not a benchmark; {fix}")
            better = "min" if key == "cost" else dict(self.benchmarks())[key].better
            if obj[key] != better:  # e.g. `max` on an ECE: the search would look for the worst calibration
                what = "the cost" if key == "cost" else f"{key}'s metric"
                raise ValueError(f"objectives[{i}]: {key}: {obj[key]}, but {what} improves towards "
                                 f"{'lower' if better == 'min' else 'higher'} values; write `{key}: {better}`")
        self._one_turn_kind()
        names = [k for k, _ in self.objective_directions()]
        for key, v in self.reference_point.items():
            if not math.isfinite(v):  # `cost: .inf` read as "no limit" made every hypervolume inf, and every
                # window a stall for redesign_on_stall (a review, stop 37)
                raise ValueError(f"reference_point.{key}: {v} is not a finite number; give the worst acceptable "
                                 "value, or leave the objective out (one is inferred from the trials)")
            if key not in names:
                hint = difflib.get_close_matches(key, names, n=1)
                fix = f"did you mean {hint[0]!r}?" if hint else f"objectives: {', '.join(names)}"
                raise ValueError(f"reference_point names {key!r}, which is not an objective; {fix}")
        return self

    def _one_turn_kind(self) -> None:
        """A project is all multi-turn (textworld, env) or all single-turn; the entries that break it, by key path."""
        entries = [(d, f"domains.{d}.{part}[{i}]", x) for d, dom in self.domains.items()
                   for part in ("sources", "benchmarks") for i, x in enumerate(getattr(dom, part))]
        multi = [e for e in entries if e[2].kind in MULTI_TURN_KINDS]
        single = [e for e in entries if e[2].kind not in MULTI_TURN_KINDS]
        if multi and single:  # named one each (a walkthrough, stop 34: it named no key)
            (md, mk, m), (sd, sk, s1) = multi[0], single[0]
            same = md == sd  # one domain mixing them has no "agent domain" to move (a review, stop 35)
            fix = ("move the multi-turn entries and the single-turn ones into separate projects" if same else
                   "put the agent domains and the single-turn ones in separate projects")
            raise ValueError(f"{mk} ({m.kind}: {m.target}) is multi-turn and {sk} ({s1.kind}: {s1.target}) is "
                             f"single-turn; a project cannot yet mix the two: {fix}")

    @property
    def multi_turn(self) -> bool:
        """Whether its domains play episodes (textworld, env sources and benchmarks): its trials train with
        the multi-turn trainer, which reads the recipe's `proas.*` and `mt.*` settings."""
        return any(x.kind in MULTI_TURN_KINDS for dom in self.domains.values() for x in [*dom.sources, *dom.benchmarks])

    def lower_is_better(self) -> set[str]:
        """The benchmark keys whose metric improves downwards (ece, brier)."""
        return {key for key, b in self.benchmarks() if b.better == "min"}

    def benchmarks(self) -> list[tuple[str, BenchmarkConfig]]:
        """(`domain/benchmark`, its config) for every benchmark, in file order."""
        return [(f"{d}/{b.name}", b) for d, dom in self.domains.items() for b in dom.benchmarks]

    def benchmark_keys(self) -> list[str]:
        """`domain/benchmark` for every benchmark, in file order."""
        return [key for key, _ in self.benchmarks()]

    @property
    def base_dir(self) -> Path:
        """Folder of the project YAML; relative data paths resolve against it."""
        return self._base_dir

    def objective_directions(self) -> list[tuple[str, str]]:
        return [next(iter(o.items())) for o in self.objectives]

    def portable_dump(self, unset: bool = False) -> dict[str, Any]:
        """The project as plain data that reads the same from any folder: relative `jsonl:` paths made
        absolute against the project's folder, unset keys left out (what `runs/<name>/project.yaml` and
        `sro export` write) unless `unset` (then they are there, as None)."""
        data = self.model_dump(mode="json", exclude_none=not unset)
        for dname, dom in self.domains.items():
            for group in ("sources", "benchmarks"):
                for item, src in zip(data["domains"][dname][group], getattr(dom, group)):
                    if src.kind in ("jsonl", "dataset"):
                        item[src.kind] = src.spec(self.base_dir).target
        return data


def _storage_from(url: str | None, base_dir: Path) -> str | None:
    """A SQLite `storage:` with a relative path, read from the project's folder as `jsonl:` paths are: it
    was read from the working directory, so a search rerun from another folder started a second study
    over the same run folder, overwriting its report (a review, stop 37)."""
    if url is None:
        return None
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    db = parsed.database
    if not parsed.drivername.startswith("sqlite") or not db or db == ":memory:" or db.startswith("file:") \
            or os.path.isabs(db):
        return url
    return parsed.set(database=str((base_dir / Path(db).expanduser()).resolve())).render_as_string(
        hide_password=False)


def _key_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _model_in(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The pydantic model inside an annotation (`X`, `list[X]`, `dict[str, X]`, `X | None`) and whether
    a dict key comes before it in an error's location."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    keyed = get_origin(annotation) is dict
    for arg in get_args(annotation):
        model, _ = _model_in(arg)
        if model is not None:
            return model, keyed
    return None, False


def _known_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys allowed where the last part of `loc` (an unknown key) sits; [] if it cannot be told."""
    model: type[BaseModel] | None = ProjectConfig
    skip_key = False
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if skip_key:
            skip_key = False
            continue
        field = model.model_fields.get(str(part)) if model is not None else None
        if field is None:
            return []
        model, skip_key = _model_in(field.annotation)
    return sorted(model.model_fields) if model is not None else []


def _explain(err: dict[str, Any]) -> str:
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        known = _known_keys(tuple(err["loc"]))
        hint = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
        fix = (f"did you mean {hint[0]!r}?" if hint else f"known keys here: {', '.join(known)}") if known \
            else "check its spelling (see README, 'The project YAML')"
        return f"unknown key; {fix}"
    if kind == "missing":
        return "required key is missing; add it"
    if kind == "literal_error":  # one of a fixed set: what was given, and the nearest allowed value
        allowed = re.findall(r"'([^']*)'", str(err.get("ctx", {}).get("expected", "")))
        near = difflib.get_close_matches(str(err.get("input")), allowed, n=1)
        if str(err.get("input")).lower() in ("gpu", "nvidia", "cuda:0") and "cuda" in allowed:  # not 'cpu'
            near = ["cuda"]
        return f"{msg} (got {err.get('input')!r}" + (f"; did you mean {near[0]!r}?)" if near else ")")
    loc, given = tuple(err["loc"]), err.get("input")
    # the fix, not pydantic's words alone (a review, stop 57: `- cost` was "Input should be a valid dictionary")
    if kind == "dict_type" and loc[:1] == ("objectives",) and len(loc) == 2 and isinstance(given, str):
        return f"an objective is `{given}: max` or `{given}: min`, a mapping (got {given!r})"
    if kind == "too_short" and loc == ("domains",):
        return ("give at least one domain: `domains: {NAME: {sources: [...], benchmarks: [...]}}` (README, "
                "'The project YAML')")
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if kind.endswith(("_type", "_parsing")) or kind in BOUNDS:  # `threads: -1` said "greater than 0", not what it got
        got = repr(given)
        return f"{msg} (got {got if len(got) <= 80 else got[:77] + '...'})"
    return msg


BOUNDS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal", "multiple_of")
"""Pydantic's error types of a number outside its bounds."""


EXPORT_HOW = "write one with `sro export RUN --trial N --out FILE`"


def read_recipe_file(path: Path, where: str, how: str = EXPORT_HOW) -> dict[str, Any]:
    """A recipe YAML as `sro export` writes it, parsed: a mapping with `project:` and `recipe:` (a mapping
    with `values:` and `fixed:`). Raises `ConfigError` starting with `where` and ending with `how`."""
    if path.is_dir():
        raise ConfigError(f"{where}: is a folder, not a recipe file; {how}")
    if not path.is_file():
        raise ConfigError(f"{where}: no such file; {how}")
    try:
        doc = yaml_strict.safe_load(yaml_strict.read(path))
    except yaml_strict.NotUtf8 as e:
        raise ConfigError(f"{where}: {e}") from None
    except (OSError, yaml.YAMLError) as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{where}: malformed YAML{at} ({str(e).splitlines()[0]}); fix the syntax") from None
    if not isinstance(doc, dict) or "project" not in doc or "recipe" not in doc:
        project_file = isinstance(doc, dict) and "domains" in doc
        raise ConfigError(f"{where}: not a recipe file (it needs `project:` and `recipe:`)"
                          + ("; it is a project file, which `sro search` runs" if project_file else "") + f"; {how}")
    if not isinstance(doc["recipe"], dict) or any(not isinstance(doc["recipe"].get(k) or {}, dict)
                                                  for k in ("values", "fixed")):  # a list under fixed: was a traceback
        raise ConfigError(f"{where}: recipe: must be a mapping with `values:` (and `fixed:`), each a mapping, "
                          "as `sro export` writes it")
    extra = sorted(str(k) for k in set(doc["recipe"]) - {"values", "fixed"})
    if extra:  # `fixd:` was ignored, and every fixed setting of the trial fell back to the defaults (stop 38)
        near = difflib.get_close_matches(extra[0], ["values", "fixed"], n=1)
        raise ConfigError(f"{where}: recipe: unknown key {extra[0]!r}" + (f" (did you mean {near[0]!r}?)" if near else "")
                          + "; a recipe takes only `values:` and `fixed:`")
    return doc


def _read_start_recipes(project: ProjectConfig, base_dir: Path) -> None:
    """Each `start_recipes` entry as a mapping of settings: a path (relative to the project's folder) is
    read as a recipe YAML of `sro export` and replaced by its `recipe:` section, `{values: ..., fixed:
    ...}` (the fixed settings of the space it ran in go with it: a new space may search them); every value
    (of `values:`) must be a number, a string or a bool. Whether they are recipes of the search space is checked when the
    space is known (`sro.start_recipes`)."""
    for i, entry in enumerate(project.start_recipes):
        at = f"start_recipes[{i}]"
        if isinstance(entry, str):
            path = Path(entry) if Path(entry).is_absolute() else base_dir / entry
            doc = read_recipe_file(path, f"{at}: {entry}", f"{EXPORT_HOW}, or give the settings as a mapping")
            entry = project.start_recipes[i] = {"values": dict(doc["recipe"].get("values") or {}),
                                                "fixed": dict(doc["recipe"].get("fixed") or {})}
        prefix, settings = "", entry
        if is_exported(entry):
            extra = sorted(set(entry) - {"values", "fixed"})
            if extra or not isinstance(entry.get("fixed") or {}, dict):
                raise ConfigError(f"{at}: a recipe's `values:` and `fixed:` (as `sro export` writes its `recipe:`) "
                                  f"take no other key and `fixed:` is a mapping (got {extra or entry['fixed']!r})")
            # `fixed:` is the old space's business (any value); what a new space borrows from it is checked there
            prefix, settings = "values.", entry["values"]
        for key, v in settings.items():
            if not isinstance(v, (int, float, str, bool)):
                raise ConfigError(f"{at}.{prefix}{key}: {v!r} is not a setting (a number, a string or a bool); "
                                  "give one value per parameter")


def _check_sources(project: ProjectConfig, base_dir: Path) -> None:
    for dname, dom in project.domains.items():
        groups: list[tuple[str, list[SourceConfig]]] = [("sources", dom.sources)]
        groups.append(("benchmarks", list(dom.benchmarks)))
        for group, items in groups:
            for i, src in enumerate(items):
                try:
                    check_source_spec(src.spec(base_dir))
                except SourceSpecError as e:
                    field = e.field or src.kind
                    raise ConfigError(f"domains.{dname}.{group}[{i}].{field}: {e}") from None


def load_project(path: str | os.PathLike[str], trains: bool = True) -> ProjectConfig:
    """Read and validate a project YAML; raise `ConfigError` with file, key path and fix. `trains`: this
    machine will train it, so its rollout backend must run here (`sro design` only measures: False)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder; pass the path of a project YAML (e.g. search_spaces/quickstart.yaml)")
    if not path.is_file():
        raise ConfigError(f"{path}: no such file; pass the path of a project YAML")
    with path.open("rb") as f:  # a run folder's files, given for the project (a review, stop 57: "not UTF-8 text")
        if f.read(16) == b"SQLite format 3\x00":
            raise ConfigError(f"{path}: this is a study's database (SQLite), not a project; pass the project YAML "
                              f"(a run folder keeps a copy as {path.parent / 'project.yaml'})")
    try:
        data = yaml_strict.safe_load(yaml_strict.read(path))
    except yaml_strict.NotUtf8 as e:
        raise ConfigError(f"{path}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}: {where}malformed YAML ({problem}); fix the syntax there") from None
    if isinstance(data, dict) and "project" in data and "recipe" in data:  # was "name: required key is missing"
        raise ConfigError(f"{path}: this is a recipe file (`project:` and `recipe:`, as `sro export` writes it), "
                          f"not a project; run `sro train {path}` on it, or pass a project YAML")
    if isinstance(data, dict) and "params" in data and "domains" not in data:  # was every known key, 3 times
        raise ConfigError(f"{path}: this is a search space (`params:`, as `sro design` writes it), not a project; "
                          "pass the project YAML (a run folder's space.yaml is used by the search of its project)")
    return project_from_data(data, path.parent, str(path), trains)


def project_from_data(data: Any, base_dir: str | os.PathLike[str], where: str, trains: bool = True) -> ProjectConfig:
    """Validate a project given as data (a parsed YAML mapping); relative paths resolve against
    `base_dir`; errors are `ConfigError`s that start with `where` (a file, or `file: project`)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: the top level must be a mapping with name, domains, ...")
    try:
        project = ProjectConfig.model_validate(data)
    except ValidationError as e:
        # unknown keys first: a misspelt required key is also "missing", and its did-you-mean is the fix; up to
        # three said, each at its key (a second one was "(and 1 more)", unnamed)
        errs = sorted(e.errors(), key=lambda x: x["type"] != "extra_forbidden")
        typos = {(tuple(x["loc"][:-1]), m) for x in errs if x["type"] == "extra_forbidden"
                 for m in difflib.get_close_matches(str(x["loc"][-1]), _known_keys(tuple(x["loc"])), n=1)}
        errs = [x for x in errs if x["type"] != "missing" or (tuple(x["loc"][:-1]), x["loc"][-1]) not in typos]
        more = f" (and {len(errs) - 3} more)" if len(errs) > 3 else ""
        said = [(f"{_key_path(err['loc'])}: " if err["loc"] else "") + _explain(err)  # a whole-project check
                for err in errs[:3]]                                                # names its keys itself
        raise ConfigError(f"{where}: {'; '.join(said)}{more}") from None
    if trains and project.runtime.rollout_backend != "hf":  # refused here, not in every trial of the search
        from trainers.backends import unavailable

        if (why := unavailable(project.runtime.rollout_backend)) is not None:
            raise ConfigError(f"{where}: runtime.rollout_backend: {why}")
    base_dir = Path(base_dir)
    from sro.plugins import PluginError, load_plugins
    from trainers.models import looks_like_path, missing_local_folder, not_a_model_folder

    try:
        project.plugins = load_plugins(project.plugins, base_dir)
    except PluginError as e:
        raise ConfigError(f"{where}: {e}") from None

    # relative to the project's folder, as jsonl: paths are; `models/qwen` there is a folder, not a hub id
    if looks_like_path(project.base_model) or (project.base_model != "tiny"
                                               and (base_dir / project.base_model).is_dir()):
        given = project.base_model
        project.base_model = str((base_dir / Path(given).expanduser()).resolve())
        if missing_local_folder(project.base_model):
            raise ConfigError(f"{where}: base_model: {given}: no such folder ({project.base_model}; a relative "
                              "path is read from the project's folder); give a local model folder that exists, "
                              "an HF model id (org/name) or tiny")
        if (lacks := not_a_model_folder(project.base_model)) is not None:
            raise ConfigError(f"{where}: base_model: {given} {lacks} ({project.base_model}); save the model "
                              "(and its tokenizer) there with save_pretrained(), or give an HF model id")
    project.storage = _storage_from(project.storage, base_dir)
    try:
        _check_sources(project, base_dir)
        _read_start_recipes(project, base_dir)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    project._base_dir = base_dir.resolve()
    project._source = where
    return project
