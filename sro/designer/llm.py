"""The LLM designer: any OpenAI-compatible endpoint through the `openai` client.

1) The catalog and the project go to the model with the answer's JSON schema (`SpaceAnswer`);
2) the answer is parsed and validated (pydantic), then checked against the catalog (`review`): an
   unknown algorithm or source is rejected, an unknown parameter dropped, a range outside the declared
   bounds clamped — each with a reason;
3) a rejected answer gets one repair round that sends the error back;
4) anything else (no key, timeout, unreachable endpoint, a second bad answer) raises `DesignerFailed`,
   and the caller falls back to the rule-based designer with a visible warning.

The prompt, the answers and the review are saved under `runs/<name>/designer/`. The API key is read
from the environment variable the project names and is never written anywhere.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sro.config import ProjectConfig
from sro.designer.catalog import Catalog
from sro.designer.rules import project_fixed, trainer_keys
from sro.executor import SOURCE_PREFIX
from sro.recipe import MIX_PREFIX, Recipe
from sro.space import Param, RecipeSpace, Simplex, SpaceError
from trainers.algorithms import ACTS_WHEN, idle_setting

FIXED_OK = {"algorithm", "max_new_tokens"}


class DesignerFailed(RuntimeError):
    """The LLM designer gave no usable space (the message says why)."""


class ParamAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    kind: Literal["float", "int", "categorical", "bool"]
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: list[Any] | None = None
    when: dict[str, list[Any]] | None = Field(None, description="exists only when each parent has a listed value")
    why: str = Field(min_length=1, description="one-line rationale")


class SimplexAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    members: list[str] = Field(min_length=2)
    why: str = Field(min_length=1)


class SpaceAnswer(BaseModel):
    """What the model must answer: the searched parameters, the simplexes and the fixed settings."""

    model_config = ConfigDict(extra="forbid")
    params: list[ParamAnswer] = Field(min_length=1)
    simplexes: list[SimplexAnswer] = Field(default_factory=list)
    fixed: dict[str, Any] = Field(default_factory=dict)


SYSTEM = """You design the search space of a post-training recipe search (SRO). You get a catalog: the \
project's data sources (with the base model's pass rates), processing operators, trainer algorithms \
with the parameters they declare (name, kind, range, when they apply), the base model, the hardware \
and the budget. Answer with ONE JSON object and nothing else, matching this JSON schema:
{schema}
Rules: use only parameter names the catalog declares (algorithm knobs, operator knobs `proc.*`, \
`algorithm` as a categorical over catalog algorithms), mixture members `mix.<domain>` and \
`src.<domain>.<index>`; keep every range inside the declared one; give every parameter a one-line `why`. \
Keep the space small: only the dimensions that matter for these domains and this budget."""


def _known(catalog: Catalog) -> dict[str, dict[str, Any]]:
    """Every declarable parameter → its declared knob (the first algorithm or operator declaring it)."""
    out: dict[str, dict[str, Any]] = {}
    fields = trainer_keys()
    for a in catalog.algorithms:
        for k in a["knobs"]:
            if k["name"] in fields:
                out.setdefault(k["name"], k)
    for op in (*catalog.operators, *catalog.stages):
        for k in op["knobs"]:
            out.setdefault(k["name"], k)
    return out


def review(answer: SpaceAnswer, catalog: Catalog, project: ProjectConfig,
           carry: dict[str, Any] | None = None) -> tuple[RecipeSpace, list[str]]:
    """The answer as a space, checked against the catalog. Raises `ValueError` (sent back in the repair
    round) for an unknown algorithm or source; returns the notes on what was dropped or clamped.

    `carry` (a redesign: `carried`) holds the settings the answer keeps where it neither searches nor fixes
    them: the current space's fixed settings and the best Pareto recipe's values. Until stop 33 a dimension
    the model dropped took the trainer's default (lr 1e-3 where the space searched 1e-6 to 5e-6)."""
    regime = "multi_turn" if project.multi_turn else "single_turn"
    algos = {a["name"] for a in catalog.algorithms if regime in a["applies_to"]}
    elsewhere = {a["name"] for a in catalog.algorithms} - algos  # proas in a single-turn project is grpo
    known = _known(catalog)
    notes: list[str] = []
    params: list[Param] = []

    def check_algorithm(what: str, names: list[Any]) -> None:
        bad = [c for c in names if not isinstance(c, str) or c not in algos]
        if bad:
            other = [c for c in bad if isinstance(c, str) and c in elsewhere]
            why = (f"; {', '.join(other)} train(s) {'multi-turn' if regime == 'single_turn' else 'single-turn'} "
                   f"projects only, and this one is {regime.replace('_', '-')}") if other else ""
            raise ValueError(f"{what} names unknown algorithm(s) {bad}{why}; known here: {sorted(algos)}")

    for pa in answer.params:
        # a condition's values are plain values: `"when": {"algorithm": [["dapo"]]}` was a TypeError out of
        # design and out of a running search's redesign, never a repair round (a review, stop 53)
        for parent, want in (pa.when or {}).items():
            bad = [v for v in want if not _hashable(v)]
            if bad:
                raise ValueError(f"parameter {pa.name!r}: `when` lists {bad} for {parent!r}; list the parent's values "
                                 'themselves (text, numbers, true or false), e.g. "when": {"algorithm": ["dapo"]}')
        if pa.name == "algorithm":
            if pa.kind != "categorical":
                raise ValueError(f"parameter 'algorithm' must be kind categorical with catalog algorithms as its "
                                 f"choices (got kind {pa.kind})")
            check_algorithm("parameter 'algorithm'", list(pa.choices or []))
            if not pa.choices:
                raise ValueError(f"parameter 'algorithm' has no choices; choose among {sorted(algos)}")
            params.append(Param("algorithm", "categorical", choices=list(pa.choices), rationale=pa.why))
            continue
        k = known.get(pa.name)
        if k is None:
            notes.append(f"dropped {pa.name!r}: no algorithm or operator of the catalog declares it")
            continue
        numeric = k.get("kind") in ("float", "int")
        if pa.kind in ("float", "int", "bool") and pa.kind != k.get("kind"):  # group_size 7.3 is no recipe
            raise ValueError(f"parameter {pa.name!r} is declared {k.get('kind')}, not {pa.kind}")
        low, high = pa.low, pa.high
        if pa.kind in ("float", "int") and k.get("low") is not None and k.get("high") is not None:
            lo_c, hi_c = float(k["low"]), float(k["high"])
            if low is None or high is None:  # the end it gives is kept (both were replaced until stop 33)
                if low is not None or high is not None:
                    notes.append(f"{pa.name}: no {'high' if high is None else 'low'} given; the declared "
                                 f"{hi_c if high is None else lo_c} used")
                low, high = lo_c if low is None else low, hi_c if high is None else high
            if low < lo_c or high > hi_c:
                notes.append(f"clamped {pa.name} [{low}, {high}] to the declared [{lo_c}, {hi_c}]")
                low, high = max(low, lo_c), min(high, hi_c)
                if low > high:
                    low, high = lo_c, hi_c
        choices = pa.choices
        if pa.kind == "categorical" and k.get("choices") is not None:
            allowed = list(k["choices"])
            kept = [c for c in (choices or []) if _hashable(c) and c in allowed]
            if kept != list(choices or []):
                notes.append(f"{pa.name}: dropped choices outside {allowed}")
            choices = kept or allowed
        elif pa.kind == "categorical" and numeric:  # a grid of a numeric knob: each point inside its range
            kept = [c for c in (choices or []) if _declared_value(k, c)]
            if not kept:
                raise ValueError(f"parameter {pa.name!r}: no choice of {choices} is a {k['kind']} inside the "
                                 f"declared [{k.get('low')}, {k.get('high')}]")
            if kept != list(choices or []):
                notes.append(f"{pa.name}: dropped choices outside the declared [{k.get('low')}, {k.get('high')}]")
            choices = kept
        try:
            params.append(Param(pa.name, pa.kind, low, high, pa.log and (low or 0) > 0, choices, pa.when, pa.why))
        except SpaceError as e:
            raise ValueError(str(e)) from None
    fixed = {}
    for key, v in answer.fixed.items():
        if key == "algorithm":
            check_algorithm("fixed algorithm", [v])
        if key in known and not _declared_value(known[key], v):
            k = known[key]
            if k.get("kind") == "bool" and k.get("choices") is None:
                raise ValueError(f"fixed {key}: {v!r} must be true or false")
            where = k["choices"] if k.get("choices") is not None else f"[{k.get('low')}, {k.get('high')}]"
            raise ValueError(f"fixed {key}: {v!r} is not a declared {k.get('kind')} value ({where})")
        if key in FIXED_OK or key in known:
            fixed[key] = v
        else:
            notes.append(f"dropped fixed {key!r}: not a catalog parameter")
    searched = {p.name for p in params} | {m for sa in answer.simplexes for m in sa.members}
    for key, v in (carry or {}).items():  # a redesign: what the answer left out keeps its current setting
        if key not in searched and key not in fixed and (key in FIXED_OK or key in known
                                                         or key.startswith((MIX_PREFIX, SOURCE_PREFIX))):
            fixed[key] = v
            notes.append(f"kept {key} at {v!r}: the answer neither searches nor fixes it")
    if "algorithm" not in {p.name for p in params}:  # before the checks below read it (a condition on it too)
        fixed.setdefault("algorithm", "grpo")
    params, fixed = _only_what_the_algorithms_read(params, fixed, catalog, notes)
    both = sorted({p.name for p in params} & set(fixed))
    if both:  # the searched value won silently
        raise ValueError(f"{', '.join(both)}: both searched (params) and fixed; keep one of the two")
    params = _only_where_they_act(params, fixed, notes)
    params = _settle_conditions(params, fixed, notes)
    if not params and not answer.simplexes:  # an empty space was accepted as the llm's design (a review, stop 37);
        # checked after the drops above: `prox.beta_p` beside grpo alone was written as an empty space (stop 53)
        dropped = [n for n in notes if n.startswith("dropped '")]
        raise ValueError("the answer searches nothing SRO can train" + (f" ({'; '.join(dropped)})" if dropped else "")
                         + f"; search parameters the catalog declares, by its names: {sorted(known)[:12]} ...")
    members_ok = {MIX_PREFIX + d for d in project.domains} | {
        f"{SOURCE_PREFIX}{d}.{i}" for d, dom in project.domains.items() for i in range(len(dom.sources))}
    simplexes = []
    for sa in answer.simplexes:
        bad = [m for m in sa.members if m not in members_ok]
        if bad:
            raise ValueError(f"simplex {sa.name!r} names unknown source(s) or domain(s) {bad}; "
                             f"known members: {sorted(members_ok)}")
        groups = [sorted(MIX_PREFIX + d for d in project.domains)] + [
            sorted(f"{SOURCE_PREFIX}{d}.{i}" for i in range(len(dom.sources))) for d, dom in project.domains.items()]
        if sorted(sa.members) not in groups:  # weights left out of a simplex would not sum with it
            raise ValueError(f"simplex {sa.name!r} has members {sa.members}; a simplex is every domain's "
                             f"`{MIX_PREFIX}<domain>` weight, or every source weight of one domain: one of {groups}")
        simplexes.append(Simplex(sa.name, list(sa.members), sa.why))
    fixed["max_new_tokens"] = project.runtime.max_new_tokens
    fixed.update(project_fixed(project))  # in every LLM space, designed or redesigned
    try:
        space = RecipeSpace(params, simplexes, fixed, version=1, designer="llm")
    except SpaceError as e:
        raise ValueError(str(e)) from None
    _check_trainable(space, project)
    return space, notes


def _only_what_the_algorithms_read(params: list[Param], fixed: dict[str, Any], catalog: Catalog,
                                   notes: list[str]) -> tuple[list[Param], dict[str, Any]]:
    """An algorithm's knob where the space's algorithms (the searched choices, or the fixed one) read it: a
    searched knob that none of them declares is dropped, one that some declare is searched only under those
    (a condition on `algorithm`); a fixed knob none declares is dropped, and so is a fixed setting the fixed
    algorithm pins (dr_grpo's scale_rewards). Until stop 30 `prox.beta_p` searched beside grpo was a dimension
    that changed nothing, and a fixed `scale_rewards: batch` under dr_grpo was silently overridden."""
    searched = next((p for p in params if p.name == "algorithm"), None)
    selectable = set(searched.choices or []) if searched is not None else {fixed.get("algorithm", "grpo")}
    readers: dict[str, set[str]] = {}
    for a in catalog.algorithms:
        for k in a["knobs"]:
            readers.setdefault(k["name"], set()).add(a["name"])
    shared = {k["name"] for group in (catalog.operators, catalog.stages) for op in group for k in op["knobs"]}
    out = []
    for p in params:
        who = readers.get(p.name, set()) & selectable
        if p.name != "algorithm" and p.name in readers and p.name not in shared and "algorithm" in (p.condition or {}):
            # the answer's own condition on the algorithm, kept to the algorithms that read the knob (until stop 33
            # `prox.beta_p when algorithm in [grpo]` was searched under grpo, which ignores it)
            want = list(p.condition["algorithm"])  # type: ignore[index]
            read = [a for a in want if a in readers[p.name]]
            if not read:
                notes.append(f"dropped {p.name!r}: its condition names algorithm(s) {want}, none of which reads it")
                continue
            if read != want:
                notes.append(f"{p.name}: searched only where algorithm is {', '.join(read)}, which read it")
                p.condition["algorithm"] = read  # type: ignore[index]
            out.append(p)
        elif (p.name == "algorithm" or p.name not in readers or p.name in shared or who == selectable
                or "algorithm" in (p.condition or {})):  # a condition on the algorithm: `_settle_conditions`
            out.append(p)
        elif not who:
            notes.append(f"dropped {p.name!r}: none of the space's algorithms ({', '.join(sorted(selectable))}) reads it")
        else:
            p.condition = {**(p.condition or {}), "algorithm": sorted(who)}
            notes.append(f"{p.name}: searched only where algorithm is {', '.join(sorted(who))}, which read it")
            out.append(p)
    pins = {}
    if searched is None:
        algo = next((a for a in catalog.algorithms if a["name"] == fixed.get("algorithm", "grpo")), None)
        if algo is not None:
            pins = {k: v for k, v in algo["fixed"].items() if k not in {x["name"] for x in algo["knobs"]}}
    kept = {}
    for key, v in fixed.items():
        if key in pins:
            notes.append(f"dropped fixed {key!r}: {fixed.get('algorithm', 'grpo')} pins it at {pins[key]!r}")
        elif key in readers and key not in shared and not readers[key] & selectable:
            notes.append(f"dropped fixed {key!r}: none of the space's algorithms ({', '.join(sorted(selectable))}) reads it")
        else:
            kept[key] = v
    return out, kept


def _only_where_they_act(params: list[Param], fixed: dict[str, Any], notes: list[str]) -> list[Param]:
    """Each `ACTS_WHEN` knob searched only where it does something: with its setting fixed (or left at the
    trainer's default) below the threshold it is dropped; with the setting searched it gets a condition on the
    setting's values from the threshold up (`_settle_conditions` then intersects it with any the answer gave,
    and drops the knob if the setting's range never reaches the threshold)."""
    by_name = {p.name: p for p in params}
    kept = []
    for p in params:
        if p.name not in ACTS_WHEN:
            kept.append(p)
            continue
        setting, least, why = ACTS_WHEN[p.name]

        def acting(values: list[Any]) -> list[Any]:  # the values of the setting where the knob does something
            return [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= least]

        parent = by_name.get(setting)
        if parent is None:
            if (idle := idle_setting(p.name, fixed)) is not None:
                notes.append(f"dropped {p.name!r}: {why}, and the space "
                             + ("fixes" if setting in fixed else "leaves it at its default") + f" {setting} {idle[1]!r}")
                continue
        else:
            can = (parent.choices if parent.choices is not None else
                   list(range(int(parent.low), int(parent.high) + 1)) if parent.kind == "int" else None)
            want = (p.condition or {}).get(setting)
            if want is not None:  # the answer's own values, those below the threshold left out
                if not acting(want):
                    notes.append(f"dropped {p.name!r}: {why}, and its condition names {setting} {want} only")
                    continue
                p.condition[setting] = acting(want)  # type: ignore[index]  # outside the range: `_settle_conditions`
            elif can is not None:  # none: `_settle_conditions` drops it
                p.condition = {**(p.condition or {}), setting: acting(can) or [least]}
        kept.append(p)
    return kept


def _settle_conditions(params: list[Param], fixed: dict[str, Any], notes: list[str]) -> list[Param]:
    """The parameters whose conditions can hold, until nothing changes: a condition on a fixed parent is
    decided now (the parameter dropped, or the condition removed as always true); one on a parameter the
    review dropped for another reason is removed; values a searched parent cannot take are left out of a
    condition, and a parameter none of whose values it can take is dropped; so is the child of a dropped
    one (until stop 30 the child kept naming its dropped parent, and the answer was refused for it)."""
    names, dropped = {p.name for p in params}, set()
    choices = {p.name: (list(p.choices) if p.choices is not None else [False, True] if p.kind == "bool" else None)
               for p in params}
    ranges = {p.name: p for p in params if p.choices is None and p.kind in ("int", "float")}
    while True:
        kept: list[Param] = []
        for p in params:
            why = None
            for parent in sorted(p.condition or {}):
                want = p.condition[parent]  # type: ignore[index]
                if parent in names and parent in ranges:  # a numeric parent: the values inside its range
                    q = ranges[parent]
                    inside = [v for v in want if q.kind == "int" and isinstance(v, (int, float))
                              and not isinstance(v, bool) and float(v).is_integer() and q.low <= v <= q.high]
                    if not inside:
                        why = (f"its condition needs {parent} in {want}, which {parent} never takes exactly "
                               f"(a float)" if q.kind == "float" else
                               f"its condition needs {parent} in {want}, outside {parent}'s whole numbers "
                               f"[{q.low:g}, {q.high:g}]")
                        break
                    p.condition[parent] = [int(v) for v in inside]  # type: ignore[index]
                elif parent in names:
                    can = choices.get(parent)
                    if can is not None:
                        inside = [v for v in want if any(v == c and type(v) is type(c) for c in can)]
                        if not inside:
                            why = f"its condition needs {parent} in {want}, which {parent} cannot take ({can})"
                            break
                        p.condition[parent] = inside  # type: ignore[index]
                elif parent in dropped:
                    why = f"its parent {parent!r} was dropped"
                    break
                elif parent in fixed:
                    if fixed[parent] not in want:
                        why = f"its condition needs {parent} in {want}, which the space fixes at {fixed[parent]!r}"
                        break
                    del p.condition[parent]  # type: ignore[union-attr]  # always true
                else:
                    notes.append(f"{p.name}: dropped its condition on unknown parent {parent!r}")
                    del p.condition[parent]  # type: ignore[union-attr]
            if why is not None:
                notes.append(f"dropped {p.name!r}: {why}")
                names.discard(p.name)
                dropped.add(p.name)
                continue
            p.condition = p.condition or None
            kept.append(p)
        if len(kept) == len(params):
            return kept
        params = kept


def _hashable(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool)) or v is None


def _declared_value(knob: dict[str, Any], v: Any) -> bool:
    """Whether `v` is a value the catalog's `knob` declares: of its kind, inside its range or choices."""
    kind = knob.get("kind")
    if knob.get("choices") is not None:
        return _hashable(v) and v in list(knob["choices"])
    if kind == "bool":
        return isinstance(v, bool)
    if kind in ("float", "int"):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return False
        if kind == "int" and not float(v).is_integer():
            return False
        lo, hi = knob.get("low"), knob.get("high")
        return (lo is None or v >= lo) and (hi is None or v <= hi)
    return True


def _check_trainable(space: RecipeSpace, project: ProjectConfig) -> None:
    """Every recipe of the space must be one the project's trainer takes (checked on Sobol points, as a
    trial checks it: `check_recipe`, the multi-turn trainer's settings too in an agent project, where a
    searched `staleness` or a fixed `dynamic_sampling: true` used to pass and fail every trial)."""
    from sro.executor import check_recipe

    for values in space.sobol(16, seed=0):
        r = Recipe(values, dict(space.fixed))
        try:
            check_recipe(r, project.seed, multi_turn=project.multi_turn)
        except (KeyError, ValueError, TypeError) as e:
            raise ValueError(f"the space yields recipes the trainer rejects: {e}") from None


def _client(project: ProjectConfig):
    import openai

    d = project.designer
    key = os.environ.get(d.api_key_env)
    if not key:
        raise DesignerFailed(f"environment variable {d.api_key_env} (designer.api_key_env) is not set; "
                             "export the endpoint's API key there")
    return openai.OpenAI(base_url=d.base_url, api_key=key, timeout=d.timeout_s, max_retries=0)  # see `_create`


def _masked(url: str | None) -> str:
    """`url` as it may be printed or written to designer/answer.json: a password in it and the query's values
    masked (`http://alice:***@host/v1?api-key=***`), as storage URLs are (a review, stop 37)."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    if not url:
        return str(url)
    try:
        u = urlsplit(url)
        netloc = u.netloc
        if u.password is not None:
            netloc = netloc.replace(f":{u.password}@", ":***@", 1)
        query = urlencode([(k, "***") for k, _ in parse_qsl(u.query, keep_blank_values=True)], safe="*")
        return urlunsplit((u.scheme, netloc, u.path, query, u.fragment))
    except ValueError:
        return "<the designer.base_url>"


class _Deadline(Exception):
    """The endpoint's answer did not arrive whole within designer.timeout_s."""


def _within(client, seconds: float, call):
    """`call()` on a helper thread, waited for at most `seconds` in all. The client's own timeout is per read
    (httpx), so an endpoint sending its answer a few bytes at a time held `sro design` for as long as it liked
    (stop 37's note); on the deadline the client is closed, which ends the request."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    worker = threading.Thread(target=run, name="sro-designer-request", daemon=True)
    worker.start()
    worker.join(min(seconds, threading.TIMEOUT_MAX))  # a longer wait (1e10 s) is an OverflowError (stop 53)
    if worker.is_alive():
        client.close()
        raise _Deadline
    if "error" in box:
        raise box["error"]
    return box["value"]


def _create(client, model: str, messages: list[dict[str, str]], shape: dict[str, Any], timeout_s: float,
            attempts: int = 3):
    """One chat completion, its whole answer within `timeout_s`; a 429 or a 5xx is asked again after 1 s, then
    2 s (or the Retry-After the server names, up to 30 s): those fell back to the rules at once (a review, stop
    37). A timeout is not asked again: `designer.timeout_s` is the wait the user chose."""
    import openai

    for attempt in range(attempts):
        try:
            return _within(client, timeout_s,
                           lambda: client.chat.completions.create(model=model, messages=messages, **shape))
        except (openai.RateLimitError, openai.InternalServerError) as e:
            if attempt == attempts - 1:
                raise
            after = e.response.headers.get("retry-after") if e.response is not None else None
            time.sleep(_retry_wait(after, attempt))


def _retry_wait(after: str | None, attempt: int) -> float:
    """Seconds to wait before asking again: the server's Retry-After kept to [0, 30] s (a negative one was
    `time.sleep(-1)`, a ValueError reported as "a body that is not JSON": a review, stop 53), 2^attempt s
    without one or for one that is no number of seconds (an HTTP date, nan)."""
    try:
        wait = float(after) if after else math.nan
    except ValueError:
        wait = math.nan
    return 2.0 ** attempt if math.isnan(wait) else min(30.0, max(0.0, wait))


def _ask(client, project: ProjectConfig, messages: list[dict[str, str]]) -> str:
    import openai

    d = project.designer
    shape: dict[str, Any] = {"response_format": {"type": "json_object"}, "temperature": 0.2}
    try:
        try:
            resp = _create(client, d.model or "default", messages, shape, d.timeout_s)
        except openai.BadRequestError as e:  # a server or model that takes no JSON mode or no temperature:
            if not any(k in str(e.message) for k in shape):  # ask once more without them (the prompt asks for JSON)
                raise
            resp = _create(client, d.model or "default", messages, {}, d.timeout_s)
    except (openai.APITimeoutError, _Deadline):
        raise DesignerFailed(f"the endpoint {_masked(d.base_url)} did not answer within {d.timeout_s:g}s "
                             "(raise designer.timeout_s or check the server)") from None
    except openai.APIConnectionError as e:
        raise DesignerFailed(f"cannot reach the endpoint {_masked(d.base_url)}: {e}") from None
    except openai.APIStatusError as e:
        raise DesignerFailed(f"the endpoint {_masked(d.base_url)} answered HTTP {e.status_code}: "
                             f"{str(e.message)[:200]}") from None
    except openai.OpenAIError as e:  # an answer the client could not read as a completion
        raise DesignerFailed(f"the endpoint {_masked(d.base_url)} answered with something the client cannot read: {e}") from None
    except ValueError as e:  # a 200 whose body is not JSON (empty, cut short): a traceback until stop 33
        raise DesignerFailed(f"the endpoint {_masked(d.base_url)} answered with a body that is not JSON ({e}); check "
                             "designer.base_url and the server's log") from None
    try:  # a 200 that is no chat completion (a web UI's HTML page, a null message) crashed design and redesign
        content = resp.choices[0].message.content if resp.choices else None
    except (AttributeError, TypeError, IndexError, KeyError):
        raise DesignerFailed(f"the endpoint {_masked(d.base_url)} answered with something that is not a chat completion "
                             f"({type(resp).__name__}); check designer.base_url (it ends in /v1 for most servers)") from None
    if isinstance(content, list):  # content parts ({"type": "text", "text": ...}), as some servers answer
        texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        content = "".join(texts) if texts and all(isinstance(t, str) for t in texts) else content
    if content is not None and not isinstance(content, str):
        raise DesignerFailed(f"the endpoint {_masked(d.base_url)} answered with content of type {type(content).__name__}, "
                             "not text; check that designer.base_url serves chat completions")
    if not content:
        raise DesignerFailed(f"the endpoint {_masked(d.base_url)} answered with no content")
    if getattr(resp.choices[0], "finish_reason", None) == "length":  # it read as a JSON error at its last column
        raise DesignerFailed(f"the answer of {d.model or 'default'} at {_masked(d.base_url)} was cut off at the server's "
                             f"token limit after {len(content)} characters (finish_reason: length); raise the "
                             "server's max tokens for this model, or use a model that answers more briefly")
    return content


def unfenced(content: str) -> str:
    """The JSON of an answer: without a reasoning model's `<think>...</think>`, the JSON value the text starts
    with, else the inside of the first Markdown code fence that holds JSON wherever it is ("Here is the
    space:\\n```json ..."), else from the first `{` to the last `}` when prose surrounds it, else the first
    fence or the text itself (each of these fell back to the rules until stop 37). A JSON object followed by an
    unrelated fence (```bash sro search ...```) was read as the fence's command, a wasted repair round (a review,
    stop 53)."""
    text = re.sub(r"<think>.*?</think>", "", content, flags=re.S).strip()
    starts = text.startswith(("{", "["))
    if starts:
        try:
            return text[: json.JSONDecoder().raw_decode(text)[1]]
        except (ValueError, RecursionError):  # malformed, or nested too deeply: `_parse` says which
            pass
    fences = [f.strip() for f in re.findall(r"```[a-zA-Z0-9_-]*\s*\n(.*?)(?:```|$)", text, flags=re.S)]
    json_fence = next((f for f in fences if f.startswith(("{", "["))), None)
    if json_fence is not None:
        return json_fence
    if not starts and "{" in text and "}" in text:
        return text[text.index("{"): text.rindex("}") + 1]
    return fences[0] if fences and not starts else text  # malformed JSON first: its own error goes back


def carried(space: RecipeSpace, evidence: dict[str, Any] | None) -> dict[str, Any]:
    """What a redesign keeps where the model's answer neither searches nor fixes it (`review`'s `carry`): the
    current space's fixed settings, and each searched dimension and mixture weight at the best Pareto recipe's
    value (the best on the project's first objective, as the rules' redesign fixes a dropped dimension)."""
    pareto = (evidence or {}).get("pareto") or []
    best = pareto[0].get("values", {}) if pareto else {}
    names = {p.name for p in space.params} | {m for sx in space.simplexes for m in sx.members}
    return {**dict(space.fixed), **{k: v for k, v in best.items() if k in names}}


def _parse(content: str, catalog: Catalog, project: ProjectConfig,
           carry: dict[str, Any] | None = None) -> tuple[RecipeSpace, list[str]]:
    """ValueError (with what to fix) for malformed JSON, a schema violation or a catalog violation."""
    text = unfenced(content)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"the answer is not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:  # nested deeper than the JSON reader goes
        raise ValueError("the answer is not valid JSON (nested too deeply)") from None
    try:
        answer = SpaceAnswer.model_validate(data)
    except ValidationError as e:
        errs = "; ".join(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors()[:5])
        raise ValueError(f"the answer does not match the schema: {errs}") from None
    return review(answer, catalog, project, carry)


def design_llm(catalog: Catalog, project: ProjectConfig, audit_dir: Path, space: RecipeSpace | None = None,
               evidence: dict[str, Any] | None = None) -> RecipeSpace:
    """A space from the project's LLM endpoint (one repair round); `DesignerFailed` otherwise. With
    `space` and `evidence` it is a redesign: the model sees the current space and the trials' evidence."""
    audit_dir.mkdir(parents=True, exist_ok=True)
    d = project.designer
    if not d.base_url:
        raise DesignerFailed("designer.base_url is not set; add the endpoint's URL to the project YAML")
    client = _client(project)
    schema = json.dumps(SpaceAnswer.model_json_schema())
    ask = "Domains' descriptions are in the catalog. Design the space."
    if space is not None:
        ask = ("Current space (version {v}):\n{y}\nEvidence from the trials so far (Pareto recipes, parameter "
               "importances, failures):\n{e}\nRedesign the space: narrow or widen ranges, drop dimensions that do "
               "not matter, add ones that may.").format(v=space.version, y=space.to_yaml(),
                                                         e=json.dumps(evidence, default=str))
    messages = [{"role": "system", "content": SYSTEM.format(schema=schema)},
                {"role": "user", "content": "Catalog:\n" + json.dumps(catalog.to_dict(), default=str) + "\n" + ask}]
    tag = f"v{space.version + 1}-" if space is not None else ""
    log: dict[str, Any] = {"endpoint": _masked(d.base_url), "model": d.model, "rounds": []}

    def save() -> None:
        (audit_dir / f"{tag}prompt.json").write_text(json.dumps(messages, indent=1), encoding="utf-8")
        (audit_dir / f"{tag}answer.json").write_text(json.dumps(log, indent=1), encoding="utf-8")

    try:
        for round_ in range(2):
            content = _ask(client, project, messages)
            log["rounds"].append({"answer": content})
            try:
                designed, notes = _parse(content, catalog, project,
                                         carried(space, evidence) if space is not None else None)
            except ValueError as e:
                log["rounds"][-1]["error"] = str(e)
                if round_ == 1:
                    raise DesignerFailed(f"the answer was still invalid after one repair round: {e}") from None
                messages += [{"role": "assistant", "content": content},
                             {"role": "user", "content": f"Your answer was rejected: {e}. Answer again with "
                              "one corrected JSON object only."}]
                continue
            log["rounds"][-1]["notes"] = notes
            if space is not None:  # the audit copy says the version it becomes (it said 1 until stop 30)
                designed.version = space.version + 1
            (audit_dir / f"{tag}space.yaml").write_text(designed.to_yaml(), encoding="utf-8")
            return designed
        raise DesignerFailed("no answer")  # pragma: no cover  (the loop returns or raises)
    except DesignerFailed as e:
        log["failed"] = str(e)
        raise
    finally:
        save()
