"""The trial executor: maps a `Recipe` onto the trainer layer, trains from the base model within the
trial's share of the budget, and scores the result on every held-out benchmark of the project."""

from __future__ import annotations

import difflib
import math
import time
from collections.abc import Callable, Collection
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace
from pathlib import Path

import torch

from evaluators.benchmark import Benchmark
from evaluators.sources import Item, Task, derive_seed, make_task, normalize
from sro.config import CONFIDENCE_METRICS, EPISODE_METRICS, ConfigError, ProjectConfig
from sro.recipe import MIX_PREFIX, SOURCE_PREFIX, Recipe
from trainers.evaluate import evaluate
from trainers.algorithms import STAGES, RecipeValueError, check_regime, config_for, sft_config_for
from trainers.grpo import GRPOConfig, GRPOTrainer
from trainers.mixture import Mixture
from trainers.multiturn import MT_SETTINGS, MultiTurnTrainer, evaluate_episodes, multi_turn_config
from trainers.sft import sft
from trainers.processing import RATED_ITEMS, OPERATORS, item_filter, needs_pass_rates, pass_rate_table, processing_values
from trainers.models import ModelLoadError, hub_offline, load_policy, looks_like_path
from trainers.threads import usable_cores
from trainers.tiny import TinySpec, ensure_tiny, tiny_cached, tiny_folder

PRETRAIN_PAIRS = 4000
"""Recipe values `src.<domain>.<i>` weight the sources within a domain (a simplex per domain)."""
OVERLAP_PROBE = 2000


class TrialFailed(RuntimeError):
    """A trial that could not finish (bad recipe, crash); the search records it and goes on."""


class EnvironmentFailed(TrialFailed):
    """A trial the environment failed, not the recipe: every training episode ended by an environment error. Its
    own name, so that the repeated-failure guard counts it (a `TrialFailed` is the recipe's own, and never stops
    the search: a broken plugin spent the whole budget on failed trials, never run again; a review, stop 58)."""


class TrialCollapsed(TrialFailed):
    """Training collapsed (the failure clock fired, ALGORITHMS.md §6): stopped early, not scored."""

    def __init__(self, reason: str, cost: dict[str, float], curve: list[dict[str, float]]) -> None:
        super().__init__(f"collapsed after {int(cost.get('samples', 0))} samples: {reason}")
        self.reason, self.cost, self.curve = reason, cost, curve


@dataclass
class TrialOutcome:
    scores: dict[str, float]
    cost: dict[str, float]
    curve: list[dict[str, float]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    """Measured beside the objectives: SFT cost, in-distribution scores and the train/held-out gap."""
    notes: list[str] = field(default_factory=list)
    """What the person running the search should see beside the scores (e.g. held-out episodes that
    an environment error ended)."""
    time_limited: bool = False
    """The trial's time limit (`max_seconds`) ended its training before its last step: its scores are
    those of a shorter recipe. Training that ended early for another reason (a collapse it was told to
    train through) is not: until stop 24 the search took any short curve under a wall budget for a cut,
    recorded it `stopped` and retried the recipe again and again."""


@dataclass
class HeldOutNotes:
    """What held-out scoring saw beside the scores (`SearchContext.score` fills it)."""

    crashed: list[str] = field(default_factory=list)
    """Held-out episodes that an environment error ended (scored as failures): `<benchmark> game <g>: env error: ...`."""
    cut_off: dict[str, float] = field(default_factory=dict)
    """Per single-turn benchmark: the share of its items graded wrong whose completion was cut off at
    `max_new_tokens` (no end of sequence)."""

    calibration: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per calibration benchmark (metric auroc, ece, brier or first_*): all of §5's figures, the per-step
    ones included (`trainers.multiturn.flat_calibration`)."""

    CUT_OFF_NOTE = 0.1
    """A benchmark with at least this share of cut-off wrong answers gets a note."""

    def metrics(self, multi_turn: bool) -> dict[str, float]:
        out = {"heldout_env_errors": float(len(self.crashed))} if multi_turn else {}
        out |= {f"calib/{b}/{k.removeprefix('calib_')}": round(v, 4)
                for b, c in self.calibration.items() for k, v in c.items()}
        return out | {f"cut_off/{k}": round(v, 4) for k, v in self.cut_off.items()}

    def lines(self, max_new_tokens: int) -> list[str]:
        """Notes for the person running the search."""
        return ([f"held-out episode scored as a failure: {c}" for c in self.crashed]
                + [f"{k}: {v:.0%} of the held-out answers were cut off at max_new_tokens={max_new_tokens} and "
                   "graded wrong; if the answers need more tokens, raise runtime.max_new_tokens"
                   for k, v in self.cut_off.items() if v >= self.CUT_OFF_NOTE])


@dataclass
class SearchContext:
    """Everything trials share: benchmarks, training streams and the base model's location."""

    project: ProjectConfig
    base_path: str
    benchmarks: dict[str, Benchmark]
    tasks: dict[str, list[Task]]
    exclude: set[str]
    overlap: dict[str, float] = field(default_factory=dict)
    """Per benchmark: share of its questions that also occur among the first OVERLAP_PROBE items of the
    training streams (same text, other seeds: small problem spaces repeat; `held_out_overlap`)."""
    cache_dir: Path = Path("runs/.cache")
    """Where per-base-model tables (the processing operators' pass rates) are cached."""
    score_s: float = 0.0
    """Seconds the last full held-out scoring (`score`) took: what a trial's time limit keeps for it."""

    @classmethod
    def prepare(cls, project: ProjectConfig, cache_dir: str | Path,
                log: Callable[[str], None] = print,
                pretrain_progress: Callable[[int, float], None] | None = None) -> SearchContext:
        if project.base_model != "tiny" and not looks_like_path(project.base_model):  # an HF id: before the data
            try:
                hub_offline(project.base_model)
            except ModelLoadError as e:
                raise ConfigError(f"{project._source or 'project'}: base_model: {e}") from None
        threads = project.runtime.threads or usable_cores()
        torch.set_num_threads(threads)
        benchmarks: dict[str, Benchmark] = {}
        tasks: dict[str, list[Task]] = {}
        for dname, dom in project.domains.items():
            for b in dom.benchmarks:
                benchmarks[f"{dname}/{b.name}"] = Benchmark.build(
                    b.name, b.spec(project.base_dir), b.size, project.seed, dname, b.metric, Path(cache_dir))
            tasks[dname] = [make_task(s.spec(project.base_dir), derive_seed(project.seed, "train", dname, i),
                                      Path(cache_dir))
                            for i, s in enumerate(dom.sources)]
        _keep_held_out_games_apart(benchmarks, tasks)
        # a file's held-out seed only shuffles its rows: a jsonl benchmark's questions never train (a file
        # that is both a source and a benchmark is split: the benchmark's rows held out, the rest trained on)
        held = {f"domains.{d}.benchmarks[{j}]": benchmarks[f"{d}/{b.name}"].questions()  # by its key in the file
                for d, dom in project.domains.items() for j, b in enumerate(dom.benchmarks)
                if b.decontaminate or b.kind in ("jsonl", "dataset")}
        exclude = set().union(*held.values())
        _check_sources_left(project, tasks, exclude, held)
        overlap = held_out_overlap(benchmarks, tasks, exclude)
        for key, bench in benchmarks.items():
            distinct = 0 if getattr(bench.task, "multi_turn", False) else len(bench.questions())  # games: apart
            if 0 < distinct < len(bench.items):  # a generator's problem space smaller than the size: repeats weigh
                why = ("its file repeats questions" if hasattr(bench.task, "n_items") else
                       "the generator's problem space is small")  # a JSONL file's own repeats were blamed on a generator
                log(f"{key}: {len(bench.items)} items but {distinct} distinct questions ({why}); repeated ones weigh "
                    "in its score more than once")  # (a review, stop 37)
            if overlap[key] > 0:
                log(f"{key}: {overlap[key]:.0%} of its questions also occur in training streams (disjoint seeds, "
                    "small problem space); `decontaminate: true` excludes them from training")
        for dname, dom in project.domains.items():  # a calibration metric graded a question never pre-trained
            graded = [b for b in dom.benchmarks if b.metric in CONFIDENCE_METRICS]
            asked = any(getattr(t, "confidence", False) for t in tasks[dname])
            if graded and project.base_model == "tiny" and not asked:
                log(f"{dname}/{graded[0].name}: its {graded[0].metric} grades the agent's stated confidence, but no "
                    f"source of {dname} sets `confidence: true` in its config, so the base model's pre-training "
                    "never asks the question; add it to a source's config (docs/agent.md, \"Calibration as an "
                    "objective\")")
        base_path = project.base_model
        if project.base_model == "tiny":
            mix = Mixture(tasks, seed=project.seed, exclude_questions=exclude)
            pairs = [(it.question, it.answer) for _, it in mix.sample(PRETRAIN_PAIRS)]
            spec = TinySpec(seed=project.seed, pretrain_steps=project.runtime.tiny_pretrain_steps)
            folder = tiny_folder(pairs, cache_dir, spec)
            if tiny_cached(folder):  # said apart, so that a build of minutes is told from a read of a second
                log(f"base model: tiny (Qwen2 architecture), from the cache: {folder}")
            else:
                log(f"base model: tiny (Qwen2 architecture), pre-training on {len(pairs)} items of the project's "
                    f"sources for {spec.pretrain_steps} steps; cached in {folder}")
            base_path = str(ensure_tiny(pairs, cache_dir, spec, pretrain_progress))
        return cls(project, base_path, benchmarks, tasks, exclude, overlap, cache_dir=Path(cache_dir))

    def score(self, model, tokenizer, history: int = 0, notes: HeldOutNotes | None = None) -> dict[str, float]:
        """Held-out scores; `history`: the earlier turns an agent's prompts show (the recipe's `mt.history`,
        so a policy is scored on prompts in the format it was trained on); `notes`: filled with what the
        scoring saw beside the scores (crashed episodes, answers cut off at `max_new_tokens`)."""
        rt = self.project.runtime
        notes = HeldOutNotes() if notes is None else notes
        t = time.monotonic()
        out = {}
        for k, b in self.benchmarks.items():
            if getattr(b.task, "multi_turn", False):  # games: one greedy episode per held-out game
                calib: dict[str, float] = {}
                out[k] = episode_score(model, tokenizer, b, rt.max_new_tokens, history, notes.crashed, k, calib)
                if calib:
                    notes.calibration[k] = calib
            else:
                res = evaluate(model, tokenizer, b, rt.max_new_tokens, rt.eval_batch_size)
                out[k], notes.cut_off[k] = res.score, res.cut_off
        self.score_s = time.monotonic() - t
        return out

    def pass_rates(self) -> dict[str, float]:
        """The base model's pass rate per training question (k samples each; cached on disk)."""
        single_turn = [t for ts in self.tasks.values() for t in ts if not getattr(t, "multi_turn", False)]
        return pass_rate_table(self.base_path, single_turn, self.cache_dir,
                               max_new_tokens=self.project.runtime.max_new_tokens,
                               device=self.project.runtime.device, seed=self.project.seed)

    def score_in_distribution(self, model, tokenizer, size: int = 100) -> dict[str, float]:
        """Per domain: the score on the first `size` items of its training streams (what the mixture
        draws first), to set beside the held-out benchmarks (the generalization gap, §4)."""
        rt = self.project.runtime
        out = {}
        for d, ts in self.tasks.items():
            per = max(1, size // len(ts))
            results = [evaluate(model, tokenizer, Benchmark(f"{d}/train", t, items), rt.max_new_tokens,
                                rt.eval_batch_size).score for t in ts if (items := self._trained_items(t, per))]
            if results:
                out[d] = sum(results) / len(results)
        return out

    def _trained_items(self, task: Task, n: int) -> list[Item]:
        """The first `n` items of `task`'s stream that training may draw: a held-out question (a split file's, a
        `decontaminate:` benchmark's) is skipped as the mixture skips it; it was scored as a training item, and
        the gap leaned towards 0 (a review, stop 37). At most 50·n draws."""
        out = []
        for i in range(50 * n):
            item = task.item(i)
            if normalize(item.question) not in self.exclude:
                out.append(item)
                if len(out) == n:
                    break
        return out

    def score_base(self, warn: Callable[[str], None] = print) -> dict[str, float]:
        """The base model's held-out scores; what the scoring noticed (`HeldOutNotes.lines`) is `warn`ed."""
        model, tok = load_policy(self.base_path, self.project.runtime.device, training=False)
        notes = HeldOutNotes()
        scores = self.score(model, tok, notes=notes)
        for line in notes.lines(self.project.runtime.max_new_tokens):
            warn(f"base model: {line}")
        return scores


def _check_sources_left(project: ProjectConfig, tasks: dict[str, list[Task]], exclude: set[str],
                        held: dict[str, set[str]]) -> None:
    """A file source whose every question is held out (a benchmark of the same file as large as it)
    would stop the first trial with a traceback: a `ConfigError` naming the project file, the source's
    key, the benchmarks that hold its questions (`held`: key path -> questions kept out of training)
    and the fix instead."""
    from sro.config import ConfigError

    where = f"{project._source}: " if project._source else ""
    for d, ts in tasks.items():
        for i, t in enumerate(ts):
            if getattr(t, "multi_turn", False):
                continue  # games: held-out ones are kept apart by signature, not by question
            n = getattr(t, "n_items", None)
            if n is None:  # a generator: a decontaminated benchmark as large as its problem space leaves none
                if exclude and all(normalize(t.item(j).question) in exclude for j in range(OVERLAP_PROBE)):
                    by = [k for k, qs in held.items() if qs]
                    raise ConfigError(f"{where}domains.{d}.sources[{i}].{t.spec.kind}: each of the first "
                                      f"{OVERLAP_PROBE} questions of {t.spec.target} is a question of the held-out "
                                      f"benchmark{'s' if len(by) > 1 else ''} {', '.join(by)} (`decontaminate: "
                                      "true` keeps them out of training), so its problem space is used up; give "
                                      "the benchmark a smaller `size`, or the generator a larger space (its config)")
                continue
            questions = {normalize(t.item(j).question) for j in range(n)}
            if questions <= exclude:
                by = [k for k, qs in held.items() if questions & qs]
                raise ConfigError(f"{where}domains.{d}.sources[{i}].{t.spec.kind}: every question of "
                                  f"{Path(t.spec.target).name} is also a question of the held-out "
                                  f"benchmark{'s' if len(by) > 1 else ''} {', '.join(by)} (a jsonl benchmark's rows never train, nor a benchmark's with "
                                  "`decontaminate: true`), so nothing is left to train on; give the benchmark a "
                                  "smaller `size`, or train on another file")


def _keep_held_out_games_apart(benchmarks: dict[str, Benchmark], tasks: dict[str, list[Task]]) -> None:
    """Tell every training task that plays games (TextWorld, env) the held-out games' signatures, so that it
    replaces a game a player could not tell from a held-out one (small game spaces repeat games across
    seeds; until stop 26, 23 of `bench/calibration.py`'s 64 held-out games had a training game's first screen
    and walkthrough, 2 of them the very same game)."""
    held = [b.task for b in benchmarks.values() if hasattr(b.task, "signatures")]
    if not held:
        return
    signatures = set().union(*(t.signatures() for t in held))
    for ts in tasks.values():
        for t in ts:
            if hasattr(t, "keep_out"):
                t.keep_out(signatures)


def held_out_overlap(benchmarks: dict[str, Benchmark], tasks: dict[str, list[Task]], exclude: set[str],
                     probe: int = OVERLAP_PROBE) -> dict[str, float]:
    """Per benchmark: the share of its questions that also occur among the first `probe` items of any
    domain's training streams (the mixture and the tiny model's pre-training draw from every domain;
    until stop 24 only the benchmark's own domain was probed), its `exclude`d (decontaminated)
    questions left out: no stream serves them."""
    # a game benchmark plays its held-out games, which no training task plays (`_keep_held_out_games_apart`):
    # nothing to probe for it (the probe would build the training games' item pools for nothing)
    texts = {key: b.questions() - exclude for key, b in benchmarks.items() if not getattr(b.task, "multi_turn", False)}
    seen = ({normalize(t.item(i).question) for ts in tasks.values() for t in ts for i in range(probe)}
            if texts else set())
    return {key: round(len(texts[key] & seen) / max(1, len(b.questions())), 3) if key in texts else 0.0
            for key, b in benchmarks.items()}


def episode_score(model, tokenizer, b: Benchmark, max_new_tokens: int, history: int = 0,
                  failures: list[str] | None = None, name: str = "",
                  calibration: dict[str, float] | None = None) -> float:
    """A textworld benchmark's metric (`EPISODE_METRICS`) over one greedy episode per held-out game;
    a calibration metric asks for the stated confidence at every step. An AUROC with nothing to rank
    (every episode won, or every one lost) is 0.5, so that the trial keeps a finite score. Episodes the
    environment crashed count as failures; their reasons go to `failures` (prefixed with `name`). For a
    calibration metric, `calibration` gets all of §5's figures (pooled, first step, per step, selective)."""
    key, _ = EPISODE_METRICS[b.metric]
    # each distinct game once: a greedy replay of a game repeats its result (an env without a game count:
    # the benchmark's size)
    n_games = min(len(b.items), getattr(b.task, "n_games", len(b.items)))
    crashed: list[str] = []
    res = evaluate_episodes(model, tokenizer, b.task, n_games, max_new_tokens, history=history,
                            confidence=b.metric in CONFIDENCE_METRICS, failures=crashed)
    if failures is not None:
        failures += [f"{name or getattr(b, 'name', '')} {c}" for c in crashed]
    if calibration is not None and b.metric in CONFIDENCE_METRICS:
        calibration.update({k: v for k, v in res.items() if k.startswith(("calib_", "selective_"))})
    v = res[key]
    return NO_CONFIDENCE[b.metric] if b.metric in NO_CONFIDENCE and math.isnan(v) else v


NO_CONFIDENCE = {m: 0.25 if m.endswith("brier") else 0.5 for m in CONFIDENCE_METRICS}
"""A confidence metric's score where it is undefined (nan), that of a constant stated confidence of 0.5: AUROC 0.5
where the episodes have one outcome only; where no step stated a confidence at all (every held-out episode crashed at
reset, so every one failed), ECE 0.5 and Brier 0.25. Until stop 52 only AUROC had one, and an ECE or Brier benchmark
gave such a trial a nan score (a review)."""


def training_limit(cfg: GRPOConfig, t0: float, scoring_s: float) -> GRPOConfig:
    """`cfg` with the trainer's own time limit: what is left of the trial's `max_seconds` (counted from
    `t0`, the trial's start) after loading the model and any SFT stage, less `scoring_s`, the time the
    held-out scoring after training is expected to take (the last full scoring's). Until stop 24 the
    trainer had the whole limit, so a trial overran a wall-clock budget by its set-up and scoring."""
    if cfg.max_seconds is None:
        return cfg
    return replace(cfg, max_seconds=max(0.0, cfg.max_seconds - (time.monotonic() - t0) - scoring_s))


def cut_by_limit(curve: list[dict[str, float]], cfg: GRPOConfig) -> bool:
    """Whether the trainer's time limit (`cfg.max_seconds`) ended the training before its last step:
    the trainers stop once a step's `wall_s` reaches it."""
    return (cfg.max_seconds is not None and 0 < len(curve) < cfg.steps
            and float(curve[-1].get("wall_s", 0.0)) >= cfg.max_seconds - 1e-3)


def check_recipe(recipe: Recipe, seed: int, multi_turn: bool = False, **runtime) -> GRPOConfig:
    """The recipe's algorithm (default grpo) as a validated trainer config, its SFT stage's settings
    and processing (`proc.*`) values checked too, and with `multi_turn` (a project whose domains play episodes) its `proas.*` and `mt.*`
    settings and whether the algorithm plays episodes (`multi_turn_config`): what a trial would refuse,
    before anything is loaded. Raises the trainers' errors (`RecipeValueError` names the recipe keys)."""
    values = {**recipe.fixed, **recipe.values}
    # the recipe's own `seed` is one of `values`, checked by name there (seed: 3.7 is refused, not cut to 3;
    # seed: 'x' named too); the project's seed otherwise
    own_seed = {} if "seed" in values else {"seed": seed}
    algorithm = str(recipe.get("algorithm", "grpo"))
    cfg = config_for(algorithm, values, **own_seed, **runtime)
    sft_config_for(values)  # sft.steps=2.5 fails here, not when the trial reaches its SFT stage
    processing_values(values)  # proc.min_len=3.7 too, not when the mixture is built
    if multi_turn:  # proas.lam=1.5 fails here, not after the base model has been scored
        multi_turn_config(algorithm, cfg, values)
    else:  # proas on prompts trained as GRPO, unsaid (a review, stop 57)
        check_regime(algorithm, "single_turn")
    return cfg


def trainer_config(recipe: Recipe, seed: int, max_seconds: float | None, where: str | None = None,
                   multi_turn: bool = False, **runtime) -> GRPOConfig:
    """`check_recipe`'s trainer config; `TrialFailed` if invalid. `where`: the recipe's file (`sro train`),
    which the message then starts with, naming the bad value by its place there (`recipe.values.steps=36.5
    must be a whole number`) instead of by the recipe's key."""
    try:
        return check_recipe(recipe, seed, multi_turn, max_seconds=max_seconds, **runtime)
    except (KeyError, ValueError, TypeError) as e:
        if where is None:
            raise TrialFailed(f"recipe {recipe.key} is not a valid trainer config: {e}") from None
        if not isinstance(e, RecipeValueError) or not e.keys:
            raise TrialFailed(f"{where}: recipe: not a valid trainer config: {e}") from None
        raise TrialFailed(f"{where}: " + e.located(
            {k: f"recipe.{'values' if k in recipe.values else 'fixed'}.{k}" for k in e.keys})) from None


def trainer_keys() -> set[str]:
    """Recipe keys the trainer config has a field for (nested settings as `<field>.<sub>`)."""
    out = {f.name for f in fields(GRPOConfig)}
    for f in fields(GRPOConfig):
        if f.default_factory is not MISSING:
            sub = f.default_factory()
            if is_dataclass(sub):
                out |= {f"{f.name}.{g.name}" for g in fields(sub)}
    from trainers.proas import ProASConfig  # the multi-turn trainer reads `proas.*` (multi_turn_config)

    return out | {f"proas.{g.name}" for g in fields(ProASConfig)}


def recipe_keys(project: ProjectConfig) -> set[str]:
    """Every recipe key some part of a trial of `project` reads: the trainer config's fields, `eps`,
    `algorithm`, `seed`, the stages' and processing operators' knobs, `mt.*`, and the mixture members
    `mix.<domain>` and `src.<domain>.<i>`. Anything else in a recipe would be ignored."""
    mixture = {MIX_PREFIX + d for d in project.domains}
    mixture |= {f"{SOURCE_PREFIX}{d}.{i}" for d, dom in project.domains.items() for i in range(len(dom.sources))}
    # the multi-turn trainer runs no pre-RL stage and no item filter (its sources are games): an agent
    # project's sft.* and proc.* were ignored
    regs = () if project.multi_turn else (STAGES, OPERATORS)
    knobs = {k.name for reg in regs for n in reg.names() for k in reg.get(n).knobs}
    # and a single-turn trial reads no `proas.*` and no `mt.*`: they were taken without a word (a review, stop 57)
    episodes = {f"mt.{k}" for k in MT_SETTINGS} if project.multi_turn else set()
    trainer = trainer_keys() if project.multi_turn else {k for k in trainer_keys() if not k.startswith("proas.")}
    return trainer | knobs | mixture | episodes | {"algorithm", "seed", "eps"}


OTHER_NAMES = {"learning_rate": "lr", "kl_coef": "beta", "init_kl_coef": "beta", "num_generations": "group_size",
               "epsilon": "eps", "epsilon_low": "eps_low", "epsilon_high": "eps_high", "cliprange": "eps",
               "max_completion_length": "max_new_tokens", "max_steps": "steps", "max_grad_norm": "grad_clip",
               "mask_truncated_completions": "mask_truncated"}
"""Other trainers' names (TRL's GRPOConfig and PPOConfig) of SRO's recipe keys, named in the hint for a key no trial
reads. Only names for the same quantity: TRL's batch sizes count completions per device, `prompts_per_step` prompts."""


def unread_keys(keys: Collection[str], project: ProjectConfig) -> tuple[list[str], str]:
    """Those of `keys` that no part of a trial of `project` reads (`recipe_keys`: a typo such as `lrr`),
    and a text naming each with the nearest known key (`'lrr' (did you mean 'lr'?)`), listing the known
    keys when one has none near it ("" when every key is read)."""
    known = recipe_keys(project)
    unknown = sorted(set(keys) - known)
    if not unknown:
        return [], ""
    hints, lost = [], False
    # an agent project's recipe in a single-turn one: its mt.* got "did you mean 'beta'?" (a review, stop 57)
    agent = [] if project.multi_turn else [k for k in unknown if k.partition(".")[0] in ("mt", "proas")]
    for k in unknown:
        if k in agent:
            continue
        if OTHER_NAMES.get(k) in known:  # TRL's `kl_coef` got a list of every key, none near (a review, stop 57)
            hints.append(f"{k!r} (SRO's name for it is {OTHER_NAMES[k]!r})")
            continue
        near = difflib.get_close_matches(k, sorted(known), n=1)
        hints.append(f"{k!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
        lost |= not near
    if agent:
        hints.append(f"{', '.join(map(repr, agent))} (a multi-turn agent project's settings, and this project's "
                     "domains are single-turn: drop them, and algorithm proas, or give the recipe to an agent project)")
    return unknown, ", ".join(hints) + (f" (known keys: {', '.join(sorted(known))})" if lost else "")


def weight_problem(recipe: Recipe, project: ProjectConfig) -> str | None:
    """What is wrong with the recipe's mixture weights (`mix.<domain>`, `src.<domain>.<i>`), or None: a group
    given must be whole (every domain, every source of the domain), numbers >= 0 that sum to 1, as a search
    space's simplexes draw them and start recipes must give them. `sro train` renormalized any, silently
    (a walkthrough, stop 34: `mix.a: 0.5, mix.b: 0.75` trained at 0.4 / 0.6)."""
    values = {**recipe.fixed, **recipe.values}
    groups = [[f"{MIX_PREFIX}{d}" for d in project.domains]]
    groups += [[f"{SOURCE_PREFIX}{d}.{i}" for i in range(len(dom.sources))] for d, dom in project.domains.items()]
    for keys in groups:
        given = {k: values[k] for k in keys if k in values}
        if not given:
            continue
        if len(given) < len(keys):
            return (f"{', '.join(sorted(given))} given without {', '.join(k for k in keys if k not in given)}; "
                    "give every weight of the group (summing to 1), or none for equal weights")
        w = list(given.values())
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in w) \
                or min(w) < 0 or abs(sum(w) - 1) > 1e-3:
            total = f" (they sum to {sum(w):.4g})" if all(isinstance(x, (int, float)) for x in w) else ""
            return f"weights {given} must be numbers >= 0 that sum to 1{total}; mend them"
    return None


def source_weights(recipe: Recipe, tasks: dict[str, list[Task]]) -> dict[str, list[float]]:
    """Per domain, the recipe's weight of each source (`src.<domain>.<i>`); domains it leaves out draw
    their sources uniformly."""
    out = {}
    for d, ts in tasks.items():
        w = [recipe.get(f"{SOURCE_PREFIX}{d}.{i}") for i in range(len(ts))]
        if any(x is not None for x in w):
            out[d] = [float(x or 0.0) for x in w]
    return out


def _step_callback(curve: list[dict[str, float]], model, tok,
                   on_step: Callable[[int, dict[str, float]], bool | None] | None,
                   on_checkpoint: Callable[[int, object, object], None] | None) -> Callable[[int, dict[str, float]], bool]:
    """The trainer's per-step callback: record the curve, then the caller's `on_step` (returning True
    stops the training there, e.g. a wall-clock budget shared with other workers is spent) and
    `on_checkpoint`."""

    def step_cb(step: int, m: dict[str, float]) -> bool:
        curve.append({k: round(float(v), 5) for k, v in m.items()})
        if on_step and on_step(step, m):
            return True
        if on_checkpoint:
            on_checkpoint(step, model, tok)
        return False

    return step_cb


def run_trial(recipe: Recipe, ctx: SearchContext, max_seconds: float | None = None,
              on_step: Callable[[int, dict[str, float]], bool | None] | None = None,
              on_checkpoint: Callable[[int, object, object], None] | None = None,
              on_trained: Callable[[object, object], None] | None = None) -> TrialOutcome:
    """Train the base model with `recipe`, then score it; raise `TrialFailed` if training diverges.

    `on_checkpoint(step, model, tokenizer)` runs after every training step (after `on_step`); it may
    evaluate the policy and stop the trial by raising (`sro.pruning.Pruner.hook` raises `TrialPruned`).
    `on_trained(model, tokenizer)` runs once training has ended well, before the held-out scoring (`sro train
    --out` saves the model there, so a failure while scoring does not lose it)."""
    cfg = trainer_config(recipe, ctx.project.seed, max_seconds, multi_turn=ctx.project.multi_turn,
                         rollout_backend=ctx.project.runtime.rollout_backend)
    t0 = time.monotonic()
    project = ctx.project
    model, tok = load_policy(ctx.base_path, project.runtime.device)
    if any(getattr(t, "multi_turn", False) for ts in ctx.tasks.values() for t in ts):
        return run_multi_turn_trial(recipe, ctx, cfg, model, tok, t0, on_step, on_checkpoint, on_trained)
    try:  # the recipe's processing operators (proc.*) filter what the mixture draws
        keep = item_filter({**recipe.fixed, **recipe.values}, ctx.pass_rates)
    except ValueError as e:
        raise TrialFailed(f"recipe {recipe.key}: {e}") from None
    banded = needs_pass_rates({**recipe.fixed, **recipe.values})  # a difficulty band: the rated items, repeated
    # the trainer's seed (the recipe's `seed`, else the project's) orders the data too, as it picks an agent's
    # games: until stop 38 the project's alone did, so recipes of other seeds trained on the same prompts
    mixture = Mixture(ctx.tasks, recipe.mixture(list(project.domains)), seed=cfg.seed,
                      exclude_questions=ctx.exclude, keep=keep, source_weights=source_weights(recipe, ctx.tasks),
                      period=RATED_ITEMS if banded else None)
    values = {**recipe.fixed, **recipe.values}
    # the SFT stage ends where the RL stage would have no time left (the trial is then `stopped`)
    deadline = None if cfg.max_seconds is None else t0 + cfg.max_seconds - ctx.score_s
    try:  # SFT → RL: the optional SFT stage trains on verified solutions from the same mixture
        metrics = sft(model, tok, mixture, sft_config_for(values, seed=cfg.seed), deadline=deadline)
    except (ValueError, TypeError) as e:
        raise TrialFailed(f"recipe {recipe.key}: SFT stage: {e}") from None
    tcfg = training_limit(cfg, t0, ctx.score_s)
    trainer = GRPOTrainer(model, tok, tcfg, mixture)
    # the SFT stage's tokens are training tokens: its cost, every step's running count and a token budget
    # include them (until stop 25 only the RL stage's were counted)
    trainer.tokens = int(metrics.get("sft_tokens", 0))
    curve: list[dict[str, float]] = []
    trainer.train(_step_callback(curve, model, tok, on_step, on_checkpoint))
    cost = _trial_cost(trainer, model, t0)

    metrics.update(_collapse(trainer, cfg, cost, curve))
    # a source the recipe's filters emptied was dropped and its share drawn from the others: when, in prompts
    metrics.update({f"source_exhausted/{key}": float(at) for key, at in mixture.exhausted.items()})
    if on_trained:
        on_trained(model, tok)
    notes = HeldOutNotes()
    scores = ctx.score(model, tok, notes=notes)
    metrics.update(notes.metrics(multi_turn=False))
    if cfg.distill.weight > 0:  # self-distillation's gains may not generalize: always measure the gap
        for d, s in ctx.score_in_distribution(model, tok).items():
            held = [v for k, v in scores.items() if k.split("/")[0] == d]
            metrics[f"train_score/{d}"] = round(s, 4)
            if held:
                metrics[f"gap/{d}"] = round(s - sum(held) / len(held), 4)
    return TrialOutcome(scores, cost(), curve, metrics, notes.lines(project.runtime.max_new_tokens),
                        cut_by_limit(curve, tcfg) or "sft_cut" in metrics)


def _trial_cost(trainer: GRPOTrainer | MultiTurnTrainer, model, t0: float) -> Callable[[], dict[str, float]]:
    """A trial's cost so far, called when it is recorded: wall seconds since `t0`, the training's seconds (until
    now, when this is made, just after training), the trainer's samples and tokens, GPU-hours on a GPU."""
    train_s = time.monotonic() - t0
    on_gpu = next(model.parameters()).device.type == "cuda"

    def cost() -> dict[str, float]:
        wall = time.monotonic() - t0
        return {"wall_s": round(wall, 2), "train_s": round(train_s, 2), "samples": float(trainer.samples),
                "tokens": float(trainer.tokens), "gpu_h": wall / 3600 if on_gpu else 0.0}

    return cost


def _collapse(trainer: GRPOTrainer | MultiTurnTrainer, cfg: GRPOConfig, cost: Callable[[], dict[str, float]],
              curve: list[dict[str, float]]) -> dict[str, float]:
    """After training: `TrialCollapsed` when the trainer's failure clock fired (`trainer.collapse`) and the recipe
    stops on a collapse; when it trained through on purpose (`stop_on_collapse` false), the metric that flags
    it, for the scored trial; else nothing."""
    if trainer.collapse and cfg.stop_on_collapse:
        raise TrialCollapsed(trainer.collapse, cost(), curve)
    if trainer.collapse:
        return {"collapsed_at_samples": float(next(m["samples"] for m in curve if m.get("collapsed")))}
    return {}


def run_multi_turn_trial(recipe: Recipe, ctx: SearchContext, cfg: GRPOConfig, model, tok, t0: float,
                         on_step: Callable[[int, dict[str, float]], bool | None] | None = None,
                         on_checkpoint: Callable[[int, object, object], None] | None = None,
                         on_trained: Callable[[object, object], None] | None = None) -> TrialOutcome:
    """An agent project (textworld or env sources): the multi-turn trainer plays groups of episodes
    (`trainers.multiturn`; algorithm `proas` shapes their credit), then every benchmark is scored."""
    tasks = [t for ts in ctx.tasks.values() for t in ts]
    if not all(getattr(t, "multi_turn", False) for t in tasks):
        raise TrialFailed("a project cannot yet mix multi-turn (textworld, env) and single-turn domains; put them "
                          "in separate projects")
    try:
        tcfg = training_limit(cfg, t0, ctx.score_s)
        mcfg = multi_turn_config(str(recipe.get("algorithm", "grpo")), tcfg, {**recipe.fixed, **recipe.values})
    except (ValueError, TypeError) as e:
        raise TrialFailed(f"recipe {recipe.key} is not a valid multi-turn config: {e}") from None
    trainer = MultiTurnTrainer(model, tok, mcfg, tasks)
    curve: list[dict[str, float]] = []
    trainer.train(_step_callback(curve, model, tok, on_step, on_checkpoint))
    if trainer.episodes and len(trainer.failures) >= trainer.episodes:
        # nothing was learnt from the game: was a complete trial (scored on crashed held-out episodes, on the
        # front), so a broken environment spent the whole budget (a review, stop 57); failed, the repeated-failure
        # guard stops the search
        raise EnvironmentFailed(f"every training episode ({trainer.episodes}) ended by an environment error, e.g. "
                                f"{trainer.failures[0]}; fix the environment (a plugin's adapter, the game files)")
    cost = _trial_cost(trainer, model, t0)

    # the failure clock, as in a single-turn trial (until stop 53 only a non-finite loss failed an agent's trial)
    collapsed = _collapse(trainer, mcfg.base, cost, curve)
    if on_trained:
        on_trained(model, tok)
    notes = HeldOutNotes()
    scores = ctx.score(model, tok, history=mcfg.history, notes=notes)  # the prompt format it trained on
    metrics = {"episodes": float(trainer.episodes), "env_errors": float(len(trainer.failures)), **collapsed,
               **notes.metrics(multi_turn=True)}
    lines = [f"{len(trainer.failures)} training episode(s) ended by an environment error, e.g. "
             f"{trainer.failures[0]}"] if trainer.failures else []
    return TrialOutcome(scores, cost(), curve, metrics, lines + notes.lines(ctx.project.runtime.max_new_tokens),
                        cut_by_limit(curve, tcfg))
