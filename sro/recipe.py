"""`Recipe`: one point of a `RecipeSpace` plus the space's fixed settings; hashable and YAML-serializable."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

MIX_PREFIX = "mix."


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
        blob = json.dumps(_canon({**self.fixed, **self.values}), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

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
