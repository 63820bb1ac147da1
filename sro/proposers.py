"""Proposers: where the next recipes come from. The search loop only calls `propose`; the BoTorch
optimizer plugs in here as another registered proposer.

A proposer never returns a recipe that the study has already run (same `Recipe.key`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from evaluators.registry import Registry
from sro.ledger import TrialRecord
from sro.recipe import Recipe
from sro.space import RecipeSpace


class Proposer(Protocol):
    def propose(self, history: Sequence[TrialRecord], n: int = 1) -> list[Recipe]:
        """Up to `n` new recipes given every trial so far (any state)."""
        ...


PROPOSERS: Registry = Registry("optimizer")


@PROPOSERS.register("random")
class SobolProposer:
    """Space-filling baseline: the next points of one scrambled Sobol sequence seeded by the project.

    The sequence position is the number of trials already in the study, so a resumed search carries on
    where it stopped instead of replaying the first points.
    """

    def __init__(self, space: RecipeSpace, seed: int = 0, objectives: list[tuple[str, str]] | None = None) -> None:
        self.space = space
        self.seed = seed  # objectives are accepted for a common signature; Sobol ignores them

    def propose(self, history: Sequence[TrialRecord], n: int = 1) -> list[Recipe]:
        return sobol_recipes(self.space, self.seed, len(history), n, {r.recipe.key for r in history})


def sobol_recipes(space: RecipeSpace, seed: int, position: int, n: int, seen: set[str]) -> list[Recipe]:
    """Up to `n` new recipes from the project's Sobol sequence, starting at `position`, none in `seen`
    (fewer only when a small discrete space is nearly exhausted)."""
    seen = set(seen)
    out: list[Recipe] = []
    for _ in range(200):  # bounded: a small discrete space can run out of new points
        if len(out) >= n:
            break
        for values in space.sobol(n, seed, skip=position):
            rec = Recipe(values, dict(space.fixed))
            if rec.key not in seen:
                seen.add(rec.key)
                out.append(rec)
        position += n
    return out[:n]
