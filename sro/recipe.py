"""`Recipe`: one point of a `RecipeSpace` plus the space's fixed settings; hashable and YAML-serializable."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

MIX_PREFIX = "mix."
SOURCE_PREFIX = "src."
"""`src.<domain>.<i>`: the weight of a domain's i-th source within the domain."""


def _canon(v: Any) -> Any:
    if isinstance(v, float):
        return float(f"{v:.6g}")  # recipes equal to 6 significant digits are the same recipe
    if isinstance(v, dict):
        return {k: _canon(x) for k, x in sorted(v.items())}
    if isinstance(v, (list, tuple)):
        return [_canon(x) for x in v]
    return v


@dataclass(frozen=True)
class Recipe:
    values: dict[str, Any]
    fixed: dict[str, Any] = field(default_factory=dict)

    def __hash__(self) -> int:
        return hash(self.key)

    @property
    def key(self) -> str:
        """A short content hash of the settings that train (values and fixed merged): two trials with
        the same key ran the same recipe, also across a redesign that moved a searched parameter into
        `fixed` at the value an earlier trial had."""
        blob = json.dumps(_canon(self.trained()), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def trained(self) -> dict[str, Any]:
        """Values and fixed merged, less the settings nothing reads: the source weights of a domain whose
        mixture weight is 0 (it draws no prompt). Until stop 38 they were part of the key, and a search
        trained one recipe five times over, differing only there (found by a review)."""
        merged = {**self.fixed, **self.values}
        off = {k[len(MIX_PREFIX):] for k, v in merged.items()
               if k.startswith(MIX_PREFIX) and isinstance(v, (int, float)) and not isinstance(v, bool) and v == 0}
        if not off:
            return merged
        return {k: v for k, v in merged.items()
                if not (k.startswith(SOURCE_PREFIX) and k[len(SOURCE_PREFIX):].rsplit(".", 1)[0] in off)}

    def get(self, name: str, default: Any = None) -> Any:
        if name in self.values:
            return self.values[name]
        return self.fixed.get(name, default)

    def mixture(self, domains: list[str]) -> dict[str, float]:
        """Per-domain weights (`mix.<domain>`); equal weights where the recipe sets none."""
        w = {d: float(self.get(MIX_PREFIX + d, 1.0)) for d in domains}
        total = sum(w.values()) or 1.0
        return {d: v / total for d, v in w.items()}

    def to_dict(self) -> dict[str, Any]:
        return {"values": dict(self.values), "fixed": dict(self.fixed)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Recipe:
        return cls(dict(d.get("values") or {}), dict(d.get("fixed") or {}))
