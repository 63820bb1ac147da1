"""Processing operators: item filters a recipe switches on with `proc.*` values, registered by name.

- `difficulty`: keep items whose pass rate under the base model lies in
  [`proc.difficulty_low`, `proc.difficulty_high`]. The pass rate of an item is estimated once per base
  model by sampling k completions for each of the first items of every source (`estimate_pass_rates`);
  an item whose question was not estimated is dropped, so the filter never lets an unknown through.
  Items every sample solves or every sample fails give a GRPO group no signal (all advantages zero).
- `dedup`: `proc.dedup: true` draws each normalized question at most once per pass over a source:
  after `DEDUP_PATIENCE` consecutive repeats the source counts as exhausted and a new pass starts.
- `length`: keep questions whose length in characters lies in [`proc.min_len`, `proc.max_len`].

`item_filter(values, pass_rates)` combines the operators a recipe switches on into one predicate that
`Mixture(keep=...)` applies to every item it draws; `processing_values(values)` checks the recipe's
`proc.*` values against the kinds of the operators' knobs first, by key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluators.files import write_whole
from evaluators.registry import Registry
from evaluators.sources import QUESTION_KEY_VERSION, Item, Task, normalize
from trainers.algorithms import Knob, RecipeValueError, checked_value
from trainers.models import model_fingerprint

Predicate = Callable[[Item], bool]
PassRates = Mapping[str, float]
"""Normalized question → the base model's estimated pass rate."""

DEDUP_PATIENCE = 200
DEDUP_MIN = 20
"""The shortest run of repeats that ends a pass of a source that has shown few distinct questions."""
PREFIX = "proc."
RATED_ITEMS = 256
"""Items of each source the pass-rate table rates (the first ones of its stream). A recipe with a difficulty band
draws from these alone, round and round (`Mixture(period=...)`): past them every item is unrated and dropped, and
a large generator's stream failed the trial after 256 prompts (10,000 draws without a kept item; review, stop 30)."""


@dataclass(frozen=True)
class Operator:
    """A named item filter: the recipe values it reads and how it builds its predicate."""

    name: str
    summary: str
    knobs: tuple[Knob, ...]
    build: Callable[[Mapping[str, Any], Callable[[], PassRates]], Predicate | None]
    """(recipe values, lazy pass-rate table) → predicate, or None when the recipe leaves it off."""
    needs_pass_rates: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "summary": self.summary, "needs_pass_rates": self.needs_pass_rates,
                "knobs": [k.as_dict() for k in self.knobs]}


OPERATORS: Registry[Operator] = Registry("processing operator")


def _difficulty(values: Mapping[str, Any], pass_rates: Callable[[], PassRates]) -> Predicate | None:
    if PREFIX + "difficulty_low" not in values and PREFIX + "difficulty_high" not in values:
        return None
    lo = float(values.get(PREFIX + "difficulty_low", 0.0))
    hi = float(values.get(PREFIX + "difficulty_high", 1.0))
    if lo > hi:
        raise RecipeValueError((PREFIX + "difficulty_low", PREFIX + "difficulty_high"),
                               f"proc.difficulty_low={lo} is above proc.difficulty_high={hi}; swap them")
    table = pass_rates()

    def keep(item: Item) -> bool:
        rate = table.get(normalize(item.question))
        return rate is not None and lo <= rate <= hi

    return keep


class _Dedup:
    """Each normalized question once per pass of its source; a run of repeats from a source starts that
    source's new pass: DEDUP_PATIENCE long, or twice the distinct questions of this pass (at least DEDUP_MIN). Per source: one shared set let a small source that ran out
    restart every other source's pass too (a 3-row file beside a generator: 15 repeats in 60 draws
    where the generator alone had none)."""

    def __init__(self) -> None:
        self.seen: dict[str, set[str]] = {}
        self.repeats: dict[str, int] = {}

    def __call__(self, item: Item) -> bool:
        q, src = normalize(item.question), item.source
        seen = self.seen.setdefault(src, set())
        if q not in seen:
            seen.add(q)
            self.repeats[src] = 0
            return True
        self.repeats[src] = self.repeats.get(src, 0) + 1
        # this source has nothing new left: start its new pass, after DEDUP_PATIENCE repeats in a row, or fewer
        # (twice its distinct questions, at least DEDUP_MIN) when it has shown few: a narrow band's 2 items of 256
        # needed 200 repeats, 25,600 draws, and the mixture gave up at 10,000 (a review, stop 37)
        if self.repeats[src] >= min(DEDUP_PATIENCE, max(DEDUP_MIN, 2 * len(seen))):
            self.seen[src] = {q}
            self.repeats[src] = 0
            return True
        return False


def _dedup(values: Mapping[str, Any], pass_rates: Callable[[], PassRates]) -> Predicate | None:
    return _Dedup() if values.get(PREFIX + "dedup") is True else None


def _length(values: Mapping[str, Any], pass_rates: Callable[[], PassRates]) -> Predicate | None:
    if PREFIX + "min_len" not in values and PREFIX + "max_len" not in values:
        return None
    lo = int(values.get(PREFIX + "min_len", 0))
    hi = int(values.get(PREFIX + "max_len", 10**9))
    if lo > hi:
        raise RecipeValueError((PREFIX + "min_len", PREFIX + "max_len"),
                               f"proc.min_len={lo} is above proc.max_len={hi}; swap them")
    return lambda item: lo <= len(item.question.strip()) <= hi


for op in (
    Operator("difficulty", "keep items whose base-model pass rate (k samples each) lies in a band",
             (Knob(PREFIX + "difficulty_low", "float", 0.0, 1.0, help="lowest pass rate kept"),
              Knob(PREFIX + "difficulty_high", "float", 0.0, 1.0, help="highest pass rate kept")),
             _difficulty, needs_pass_rates=True),
    Operator("dedup", "draw each normalized question at most once per pass over a source",
             (Knob(PREFIX + "dedup", "bool", help="deduplicate question text"),), _dedup),
    Operator("length", "keep questions whose length in characters lies in a band",
             (Knob(PREFIX + "min_len", "int", 0, 100_000, help="shortest question kept (characters)"),
              Knob(PREFIX + "max_len", "int", 1, 100_000, help="longest question kept (characters)")),
             _length),
):
    OPERATORS.add(op.name, op)


def needs_pass_rates(values: Mapping[str, Any]) -> bool:
    """True when the recipe switches on an operator that reads the pass-rate table."""
    return any(OPERATORS.get(n).needs_pass_rates and any(k.name in values for k in OPERATORS.get(n).knobs)
               for n in OPERATORS.names())


def processing_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` with each `proc.*` value an operator declares checked against its knob's kind: a number
    for a float knob, a whole number for an int one (36.0 read as 36), true or false (or 0/1) for a bool
    one, one of the choices for a categorical one. A value that fails is a `RecipeValueError` naming its
    key (`proc.min_len=3.7 must be a whole number`); `int()` used to cut it, and `proc.dedup: 'yes'` or `1`
    silently left dedup off. A knob's range is where a search looks, not what a trial accepts (as for the
    algorithms' knobs): `proc.max_len: 200000` is not refused, while a value no trial can use is
    (`LIMITS`: `proc.max_len: 0`, `proc.difficulty_low: 1.5`). Keys no operator declares, and knobs of
    other kinds, are left alone."""
    knobs = {k.name: k for name in OPERATORS.names() for k in OPERATORS.get(name).knobs}
    out = dict(values)
    for key, v in values.items():
        knob = knobs.get(key)
        if knob is None or knob.kind not in ("bool", "categorical", "int", "float"):
            continue
        out[key] = v = checked_value(key, v, knob.kind, knob.choices)
        low, high = LIMITS.get(key, (None, None))
        if (low is not None and v < low) or (high is not None and v > high):
            span = f"in [{low:g}, {high:g}]" if high is not None else f">= {low:g}"
            raise RecipeValueError((key,), f"{key}={v!r} must be {span}")
    # a band's two ends together, as the operators read them (their defaults for an end not given): an inverted
    # band was found when the trial built its mixture, after the base model was scored (a review, stop 37)
    for low_key, high_key, low0, high0 in ((PREFIX + "difficulty_low", PREFIX + "difficulty_high", 0.0, 1.0),
                                           (PREFIX + "min_len", PREFIX + "max_len", 0, 10**9)):
        if (low_key in out or high_key in out) and out.get(low_key, low0) > out.get(high_key, high0):
            raise RecipeValueError((low_key, high_key), f"{low_key}={out.get(low_key, low0)} is above "
                                                        f"{high_key}={out.get(high_key, high0)}; swap them")
    return out


LIMITS = {PREFIX + "difficulty_low": (0.0, 1.0), PREFIX + "difficulty_high": (0.0, 1.0),
          PREFIX + "min_len": (0, None), PREFIX + "max_len": (1, None)}
"""What a trial can use of the built-in knobs (a pass rate lies in [0, 1], a question has at least one
character), apart from their search ranges: a value outside leaves a source nothing to draw, and every
trial with it fails."""


def item_filter(values: Mapping[str, Any], pass_rates: Callable[[], PassRates] = dict) -> Predicate | None:
    """One predicate for every operator the recipe switches on (None: keep everything); the values are
    checked first (`processing_values`).

    Stateless filters run first so that `dedup` only counts items the others would keep.
    """
    values = processing_values(values)
    preds = []
    for name in ("difficulty", "length", *[n for n in OPERATORS.names() if n not in ("difficulty", "length")]):
        pred = OPERATORS.get(name).build(values, pass_rates)
        if pred is not None:
            preds.append(pred)
    if not preds:
        return None
    return lambda item: all(p(item) for p in preds)


# --- the pass-rate table -------------------------------------------------------------------------

def estimate_pass_rates(model, tokenizer, tasks: Sequence[Task], n_items: int = RATED_ITEMS, k: int = 4,
                        max_new_tokens: int = 8, temperature: float = 1.0, batch_size: int = 64) -> dict[str, float]:
    """Sample `k` completions for each distinct question among the first `n_items` of every task and
    return the fraction the task's verifier scores 1.0, keyed by normalized question."""
    from trainers.prompts import format_prompt
    from trainers.rollout import generate

    was_training = model.training
    model.eval()
    rates: dict[str, float] = {}
    for task in tasks:
        todo: dict[str, Item] = {}
        for it in task.items(n_items):
            todo.setdefault(normalize(it.question), it)
        todo = {q: it for q, it in todo.items() if q not in rates}
        items = list(todo.values())
        for i in range(0, len(items), batch_size):
            chunk = items[i : i + batch_size]
            prompts = [format_prompt(it.question, tokenizer) for it in chunk]
            texts = generate(model, tokenizer, prompts, group_size=k, temperature=temperature,
                             max_new_tokens=max_new_tokens).texts  # prompt-major: k per item
            for j, it in enumerate(chunk):
                solved = sum(task.score(it, t) >= 1.0 for t in texts[j * k : (j + 1) * k])
                rates[normalize(it.question)] = solved / k
    model.train(was_training)
    return rates


def table_id(base_path: str, tasks: Sequence[Task], *settings: Any) -> str:
    """The cache key of a pass-rate table: the base model (its folder's contents too, `model_fingerprint`),
    the question keys' version (`QUESTION_KEY_VERSION`), each source (with its file's content, so an
    edited JSONL is measured again: its path alone left a stale table, whose difficulty band then
    dropped every new question), and the estimate's settings."""
    ident = json.dumps([base_path, model_fingerprint(base_path), QUESTION_KEY_VERSION,
                        [(t.spec.key, getattr(t, "seed", None), getattr(t, "content_id", None)) for t in tasks],
                        *settings], sort_keys=True)
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def pass_rate_table(base_path: str, tasks: Sequence[Task], cache_dir: str | Path, n_items: int = RATED_ITEMS, k: int = 4,
                    max_new_tokens: int = 8, device: str = "auto", seed: int = 0) -> dict[str, float]:
    """`estimate_pass_rates` with the base model at `base_path`, cached as JSON under `cache_dir`."""
    import torch

    from trainers.models import load_policy, pick_device

    # the device is part of the measurement: a model loads in bf16 on CUDA and fp32 on CPU, and a table measured
    # on one was read on the other (a review, stop 53); on CPU the key is as before
    on = [] if pick_device(device).type == "cpu" else [pick_device(device).type]
    path = Path(cache_dir) / f"passrate-{table_id(base_path, tasks, n_items, k, max_new_tokens, seed, *on)}.json"
    if path.is_file():
        try:
            return {str(q): float(r) for q, r in json.loads(path.read_text()).items()}
        except (ValueError, TypeError, AttributeError, OSError):  # not the table (cut short): measured again
            pass
    model, tok = load_policy(base_path, device, training=False)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        rates = estimate_pass_rates(model, tok, tasks, n_items, k, max_new_tokens)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a temporary file per process (until stop 25 two workers building the table at once shared one name,
    # and a rename failed)
    write_whole(path, json.dumps(rates))
    return rates
