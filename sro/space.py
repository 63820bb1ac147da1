"""`RecipeSpace`: typed parameters (float linear/log, int, categorical, bool) with conditions and
simplex groups; maps recipes to and from the unit cube, samples with scrambled Sobol, and reads and
writes a YAML a person can edit, with the designer's rationale beside each parameter."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import yaml

from sro import yaml_strict

Kind = Literal["float", "int", "categorical", "bool"]


class SpaceError(ValueError):
    """A malformed space or a recipe that does not fit it."""


class OutsideError(SpaceError):
    """A recipe's value outside its parameter's range or choices; `key` names the parameter."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


def choice_index(choices: list[Any], value: Any) -> int:
    """Position of `value` in `choices`, telling True from 1 (list.index would not)."""
    for i, c in enumerate(choices):
        if c == value and type(c) is type(value):
            return i
    return choices.index(value)


@dataclass
class Param:
    name: str
    kind: Kind
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: list[Any] | None = None
    condition: dict[str, list[Any]] | None = None
    """The parameter exists only when each named parent has one of the listed values."""
    rationale: str = ""

    def __post_init__(self) -> None:
        where = f"parameter {self.name!r}"
        if self.kind in ("float", "int"):
            for end in ("low", "high"):  # a bound given as text (a dict built in Python): any number it spells
                v = getattr(self, end)
                if v is None:
                    continue
                if isinstance(v, bool):  # YAML's `low: true`: kept as a bool until stop 42, an int range [0, 1]
                    raise SpaceError(f"{where}: {end} must be a number (got {v!r}); a yes/no choice is `kind: bool`")
                try:
                    x = float(v)
                except (TypeError, ValueError):
                    raise SpaceError(f"{where}: {end} must be a number (got {v!r})") from None
                if not math.isfinite(x):  # `high: .inf` sampled inf (a review, stop 37)
                    raise SpaceError(f"{where}: {end} must be a finite number (got {v!r})")
                if self.kind == "int" and not x.is_integer():
                    raise SpaceError(f"{where}: an int parameter needs whole bounds (got {end} {v!r})")
                setattr(self, end, int(x) if self.kind == "int" else x)
            if self.low is None or self.high is None or not self.low <= self.high:
                raise SpaceError(f"{where}: needs low <= high (got {self.low}, {self.high})")
            if self.log and self.low <= 0:
                raise SpaceError(f"{where}: a log scale needs low > 0 (got {self.low})")
        elif self.kind == "categorical":
            if not isinstance(self.choices, list) or not self.choices:  # 'grpo, dapo' read as 12 letters
                raise SpaceError(f"{where}: a categorical needs a non-empty `choices` list, e.g. [grpo, dapo] "
                                 f"(got {self.choices!r})")
            # a repeated choice was sampled twice as often, and encoded at its first place only (a review, stop
            # 53); 0 and 0.0 are one choice (`canonical`), True and 1 two (`choice_index`)
            for i, c in enumerate(self.choices):
                if any(c == d and isinstance(c, bool) == isinstance(d, bool) for d in self.choices[:i]):
                    raise SpaceError(f"{where}: choice {c!r} is listed twice in {self.choices!r}; list each "
                                     "choice once")
        elif self.kind == "bool":
            self.choices = [False, True]
        else:
            raise SpaceError(f"{where}: kind must be float, int, categorical or bool (got {self.kind!r})")

    def from_unit(self, u: float) -> Any:
        """Map u ∈ [0, 1] to a value (log-uniform for log floats and ints)."""
        u = min(max(float(u), 0.0), 1.0)
        if self.kind in ("float", "int"):
            lo, hi = float(self.low), float(self.high)  # type: ignore[arg-type]
            if self.kind == "int":
                lo, hi = lo - 0.5, hi + 0.5  # each integer gets an equal share of the cube
            if self.log:
                x = math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))  # low > 0 (checked above)
            else:
                x = lo + u * (hi - lo)
            if self.kind == "int":
                return int(min(max(round(x), self.low), self.high))  # type: ignore[type-var]
            return float(min(max(x, self.low), self.high))  # type: ignore[type-var]
        choices = self.choices or []
        return choices[min(int(u * len(choices)), len(choices) - 1)]

    def to_unit(self, value: Any) -> float:
        if self.kind in ("float", "int"):
            lo, hi = float(self.low), float(self.high)  # type: ignore[arg-type]
            if self.kind == "int":
                lo, hi = lo - 0.5, hi + 0.5
            if hi == lo:
                return 0.5
            if self.log:  # no floor on low: one at 1e-12 hid every decade below it (a review, stop 37)
                return (math.log(float(value)) - math.log(lo)) / (math.log(hi) - math.log(lo))
            return (float(value) - lo) / (hi - lo)
        choices = self.choices or []
        return (choice_index(choices, value) + 0.5) / len(choices)  # True is not 1 (list.index read it as 1 until stop 42)

    def contains(self, value: Any) -> bool:
        if self.kind in ("float", "int"):
            ok_type = isinstance(value, (int, float)) and not isinstance(value, bool)
            if self.kind == "int":
                ok_type = ok_type and float(value).is_integer()
            return ok_type and self.low <= value <= self.high  # type: ignore[operator]
        return value in (self.choices or [])


@dataclass
class Simplex:
    """Weights that are each >= 0 and sum to 1 (e.g. the domain mixture)."""

    name: str
    members: list[str]
    rationale: str = ""

    def from_unit(self, us: np.ndarray) -> dict[str, float]:
        # −log(u) of uniforms normalized is a uniform draw on the simplex (Dirichlet(1,…,1))
        e = -np.log(np.clip(us, 1e-9, 1.0))
        w = e / e.sum() if e.sum() > 0 else np.full(len(self.members), 1.0 / len(self.members))  # the all-ones corner
        return {m: round(float(x), 6) for m, x in zip(self.members, w)}

    def to_unit(self, weights: dict[str, float]) -> list[float]:
        return [math.exp(-float(weights[m])) for m in self.members]


class _PlainDumper(yaml_strict.Dumper):
    """SafeDumper that writes a shared object out again wherever it occurs, never as an alias."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


@dataclass
class RecipeSpace:
    params: list[Param]
    simplexes: list[Simplex] = field(default_factory=list)
    fixed: dict[str, Any] = field(default_factory=dict)
    """Settings every recipe of this space shares (algorithm, completion length, ...)."""
    version: int = 1
    designer: str = "default"

    def __post_init__(self) -> None:
        names = [p.name for p in self.params] + [m for s in self.simplexes for m in s.members]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise SpaceError(f"parameter names must be unique; repeated: {sorted(dup)}")
        known = {p.name for p in self.params}
        for p in self.params:
            for parent in (p.condition or {}):
                if parent not in known:
                    raise SpaceError(f"parameter {p.name!r}: condition names unknown parent {parent!r}")
        for s in self.simplexes:
            if not s.members:
                raise SpaceError(f"simplex {s.name!r} has no members")
        self.params = _parents_first(self.params)

    def canonical(self, values: dict[str, Any]) -> dict[str, Any]:
        """`values` as this space's recipes hold them: only the parameters active given their parents,
        each number cast to its parameter's kind (an int's 3.0 is 3, a float's 0 is 0.0, a bool's 1 is
        True), and the simplex weights; other keys are dropped. Raises `SpaceError` when the result is
        outside the space. Recipes from outside the optimizer (an LLM's candidates) go through this,
        so that the same recipe gets the same `Recipe.key` and encoding."""
        out: dict[str, Any] = {}
        for p in self.params:  # parents first
            if p.name not in values or not self.is_active(p, out):
                continue
            v = values[p.name]
            if p.kind in ("float", "int") and isinstance(v, str):  # a number given as text (an LLM's answer, a
                try:  # dict built in Python; SRO's YAML reader takes `1e-4` as a number), as a bound is read
                    v = float(v) if math.isfinite(float(v)) else v
                except ValueError:
                    pass
            if p.kind == "categorical":  # 0 and 0.0 are one choice: take the space's own, so keys agree
                v = next((c for c in p.choices or [] if c == v and type(c) is type(v)),
                         next((c for c in p.choices or [] if c == v and not isinstance(c, bool)
                               and not isinstance(v, bool)), v))
            elif p.kind == "int" and isinstance(v, float) and v.is_integer():
                v = int(v)
            elif p.kind == "float" and isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
            elif p.kind == "bool" and not isinstance(v, bool) and v in (0, 1):
                v = bool(v)
            out[p.name] = v
        for s in self.simplexes:
            out.update({m: values[m] for m in s.members if m in values})
        self.validate(out)
        return out

    # --- geometry -------------------------------------------------------------------------------
    @property
    def dim(self) -> int:
        """Unit-cube dimensions: one per parameter, one per simplex member."""
        return len(self.params) + sum(len(s.members) for s in self.simplexes)

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise SpaceError(f"no parameter {name!r}; known: {', '.join(p.name for p in self.params)}")

    def is_active(self, p: Param, values: dict[str, Any]) -> bool:
        # `k in values`: an inactive parent is absent, not None (a `when: {sched: null}` child was active
        # whenever `sched` itself was inactive)
        return all(k in values and values[k] in v for k, v in (p.condition or {}).items())

    def from_unit(self, u: np.ndarray) -> dict[str, Any]:
        """Decode a point of [0,1]^dim; inactive conditional parameters are left out."""
        u = np.asarray(u, dtype=float)
        if u.shape != (self.dim,):
            raise SpaceError(f"expected a point of shape ({self.dim},), got {u.shape}")
        values: dict[str, Any] = {}
        for i, p in enumerate(self.params):  # parents precede children in `params`
            if self.is_active(p, values):
                values[p.name] = p.from_unit(u[i])
        j = len(self.params)
        for s in self.simplexes:
            values.update(s.from_unit(u[j : j + len(s.members)]))
            j += len(s.members)
        return values

    def to_unit(self, values: dict[str, Any]) -> np.ndarray:
        """Encode a recipe; inactive parameters sit at 0.5 (the centre, a neutral value), also where the recipe
        carries a value for one (until stop 53 that value was encoded; `RecipeEncoder` held it at 0.5: a review)."""
        out = np.full(self.dim, 0.5)
        active: dict[str, Any] = {}  # parents precede children, as in `validate`
        for i, p in enumerate(self.params):
            if p.name in values and self.is_active(p, active):
                active[p.name] = values[p.name]
                out[i] = p.to_unit(values[p.name])
        j = len(self.params)
        for s in self.simplexes:
            out[j : j + len(s.members)] = s.to_unit(values)
            j += len(s.members)
        return out

    def sobol(self, n: int, seed: int, skip: int = 0) -> list[dict[str, Any]]:
        """Points `skip … skip+n−1` of one scrambled Sobol sequence, so a resumed search continues it."""
        from scipy.stats import qmc

        eng = qmc.Sobol(d=self.dim, scramble=True, seed=seed)
        if skip:
            eng.fast_forward(skip)
        with warnings.catch_warnings():  # we draw a few points at a time on purpose
            warnings.filterwarnings("ignore", message=".*balance properties.*")
            rows = eng.random(n)
        return [self.from_unit(row) for row in rows]

    def admits(self, values: dict[str, Any]) -> bool:
        """Whether `validate` accepts `values`."""
        try:
            self.validate(values)
        except SpaceError:
            return False
        return True

    def validate(self, values: dict[str, Any]) -> None:
        """Raise `SpaceError` naming the first value outside the space. A parameter is active given its
        parents' values where those are active themselves (parents first, as `canonical` and the
        encoding read it): a value carried for an inactive parent activates nothing (until stop 30 it
        did, and a trial run before a redesign added that parent's condition read as outside the space)."""
        active_values: dict[str, Any] = {}
        missing = []  # all of them at once: a start recipe written by hand was refused one name per run
        for p in self.params:  # parents precede children
            if self.is_active(p, active_values):
                if p.name in values:
                    active_values[p.name] = values[p.name]
                else:
                    missing.append(repr(p.name))
        # a simplex's weights with them: they were named only on the next run, after the rest was mended (a
        # review, stop 37)
        missing += [repr(m) for x in self.simplexes for m in x.members if m not in values]
        if missing:
            raise SpaceError(f"recipe lacks {', '.join(missing)}")
        active_values = {}
        for p in self.params:
            if not self.is_active(p, active_values):
                continue
            active_values[p.name] = values[p.name]
            if not p.contains(values[p.name]):
                v = values[p.name]
                if p.kind in ("int", "float") and (isinstance(v, bool) or not isinstance(v, (int, float))):
                    raise SpaceError(f"{p.name} must be a number (got {v!r})")
                if p.kind == "int" and isinstance(v, float) and math.isfinite(v) and not v.is_integer():
                    raise SpaceError(f"{p.name} must be a whole number (got {v!r})")
                rng = p.choices if p.choices is not None else f"[{p.low}, {p.high}]"
                raise OutsideError(f"{p.name}={values[p.name]!r} is outside {rng}", p.name)
        for s in self.simplexes:
            w = [values.get(m) for m in s.members]
            numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in w)
            if not numeric or any(x < 0 for x in w) or abs(sum(w) - 1) > 1e-3:  # type: ignore[operator]
                raise SpaceError(f"{s.name}: weights {dict(zip(s.members, w))} must be >= 0 and sum to 1")

    # --- YAML -----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        params = {}
        for p in self.params:
            d: dict[str, Any] = {"kind": p.kind}
            if p.kind in ("float", "int"):
                d.update(low=p.low, high=p.high)
                if p.log:
                    d["log"] = True
            elif p.kind == "categorical":
                d["choices"] = list(p.choices or [])
            if p.condition:
                d["when"] = {k: list(v) for k, v in p.condition.items()}
            d["why"] = p.rationale
            params[p.name] = d
        simplexes = {s.name: {"members": list(s.members), "why": s.rationale} for s in self.simplexes}
        return {"version": self.version, "designer": self.designer, "fixed": dict(self.fixed),
                "params": params, "simplexes": simplexes}

    def to_yaml(self) -> str:
        """The space as a person edits it: never YAML anchors and aliases (`&id001`, `*id001`), which a
        condition shared by two parameters used to produce (stop 26), so that the text read back and
        written again is the same text; and a reason's `·` or `√` as it is, not as `\\xB7` (a review, stop 57;
        the files are written and read as UTF-8)."""
        return yaml.dump(self.to_dict(), Dumper=_PlainDumper, sort_keys=False, width=100, allow_unicode=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RecipeSpace:
        try:
            params = []
            if not isinstance(d, dict) or not isinstance(d.get("params") or {}, dict):
                raise SpaceError("malformed space: `params` must be a mapping of name → {kind, ...}")
            for name, pd in (d.get("params") or {}).items():
                if not isinstance(pd, dict):
                    raise SpaceError(f"parameter {name!r}: must be a mapping {{kind, low, high, ...}}, got {pd!r}")
                pd = dict(pd)
                when = pd.pop("when", None)
                if when is not None and not isinstance(when, dict):
                    raise SpaceError(f"parameter {name!r}: `when` must map each parent to its values, got {when!r}")
                # a single value is a one-value list (`when: {algorithm: proas}`); a string must not match
                # by substring
                when = {k: list(v) if isinstance(v, (list, tuple)) else [v] for k, v in when.items()} if when else None
                if "kind" not in pd:  # was "malformed space: 'kind'"
                    raise SpaceError(f"parameter {name!r}: needs a `kind` (float, int, categorical or bool)")
                log = pd.pop("log", False)
                if not isinstance(log, bool):  # `log: 'false'` turned the log scale on
                    raise SpaceError(f"parameter {name!r}: `log` must be true or false (got {log!r})")
                params.append(Param(name=name, kind=pd.pop("kind"), low=pd.pop("low", None), high=pd.pop("high", None),
                                    log=log, choices=pd.pop("choices", None),
                                    condition=when, rationale=str(pd.pop("why", ""))))
                if pd:
                    raise SpaceError(f"parameter {name!r}: unknown keys {sorted(pd)}")
            simplexes = []
            for n, sd in (d.get("simplexes") or {}).items():
                members = sd.get("members") if isinstance(sd, dict) else None
                if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
                    raise SpaceError(f"simplex {n!r}: `members` must be a list of weight names, e.g. "
                                     f"[mix.arithmetic, mix.multiplication] (got {members!r})")
                simplexes.append(Simplex(n, members, str(sd.get("why", ""))))
            fixed, version = d.get("fixed") or {}, d.get("version", 1)
            if not isinstance(fixed, dict):  # `fixed: [algorithm]` was a ValueError traceback
                raise SpaceError(f"`fixed` must be a mapping of setting → value, e.g. {{algorithm: grpo}} (got {fixed!r})")
            if isinstance(version, bool) or not isinstance(version, int):  # `version: two` was a traceback
                raise SpaceError(f"`version` must be a whole number (got {version!r})")
            # a key in both: the searched value won, and the trial read `fixed: lr: 1e-4` in its own recipe file
            # while it trained at 1.6e-4 (a review, stop 58)
            if both := sorted(set(fixed) & {*(p.name for p in params), *(m for sx in simplexes for m in sx.members)}):
                raise SpaceError(f"{', '.join(both)} {'is' if len(both) == 1 else 'are'} both searched and fixed "
                                 f"(fixed: {', '.join(f'{k}: {fixed[k]!r}' for k in both)}); remove "
                                 f"{'it' if len(both) == 1 else 'each'} from `params:` to hold it at that value, or "
                                 "from `fixed:` to search it")
            if not params and not simplexes:  # a 0-byte space.yaml was searched at the trainer's defaults
                raise SpaceError("the space searches nothing (no `params:` and no `simplexes:`); delete the file "
                                 "to have it designed afresh, or list the parameters to search")
            return cls(params, simplexes, dict(fixed), version, str(d.get("designer", "default")))
        except (KeyError, TypeError, AttributeError) as e:
            raise SpaceError(f"malformed space: {e}") from None

    @classmethod
    def from_yaml(cls, text: str) -> RecipeSpace:
        try:
            data = yaml_strict.safe_load(text) or {}
        except yaml.YAMLError as e:  # `sro design` over a hand-edited file used to end in a traceback
            raise SpaceError(f"not valid YAML: {' '.join(str(e).split())}") from None
        return cls.from_dict(data)


def _parents_first(params: list[Param]) -> list[Param]:
    """`params` in their order, except that each parameter comes after the parents its condition names
    (decoding and sampling decide a child's activity from the parents already decoded); a cycle of
    conditions is an error."""
    by_name = {p.name: p for p in params}
    out: list[Param] = []
    placed: set[str] = set()
    visiting: list[str] = []

    def place(p: Param) -> None:
        if p.name in placed:
            return
        if p.name in visiting:
            cycle = " -> ".join(visiting[visiting.index(p.name):] + [p.name])
            raise SpaceError(f"the conditions form a cycle: {cycle}; a parameter cannot depend on itself")
        visiting.append(p.name)
        for parent in p.condition or {}:
            place(by_name[parent])
        visiting.pop()
        placed.add(p.name)
        out.append(p)

    for p in params:
        place(p)
    return out
