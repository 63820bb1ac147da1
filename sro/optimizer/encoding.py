"""GP encoding of a `RecipeSpace`: each recipe becomes a point of [0,1]^D that a Gaussian process can
compare with a stationary kernel, and any point of that cube decodes back to a valid recipe.

Layout of one encoded recipe (D = `RecipeEncoder.dim`):

- float / int → one column, `Param.to_unit` (log scale where the parameter is log);
- categorical / bool → one column per choice, one-hot;
- simplex → one column per member, the member's weight (columns sum to 1);
- a conditional parameter that is inactive given its parent → a constant (0.5 for a number, all
  zeros for a one-hot), so every recipe lacking it looks the same to the kernel and the GP is not fed
  arbitrary values for a setting that had no effect.

This follows the usual one-hot + continuous relaxation used with qNEHVI (Daulton et al. 2021,
"Parallel Bayesian Optimization of Multiple Noisy Objectives with Expected Hypervolume
Improvement", arXiv 2105.08195): the acquisition is evaluated only on decoded-then-re-encoded
candidates, so it never scores a point that is not a recipe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sro.space import Param, RecipeSpace, SpaceError, choice_index

INACTIVE_NUMERIC = 0.5
"""Encoded value of an inactive float/int parameter: the centre of its column."""


@dataclass(frozen=True)
class Block:
    """Columns `[start, start + width)` of the encoding that belong to one parameter or simplex."""

    name: str
    start: int
    width: int
    param: Param | None = None
    members: tuple[str, ...] = ()

    @property
    def cols(self) -> slice:
        return slice(self.start, self.start + self.width)

    @property
    def one_hot(self) -> bool:
        return self.param is not None and self.param.kind in ("categorical", "bool")


class RecipeEncoder:
    """Maps values dicts of `space` to (D,) float64 tensors and back."""

    def __init__(self, space: RecipeSpace) -> None:
        self.space = space
        blocks: list[Block] = []
        j = 0
        for p in space.params:
            width = len(p.choices or []) if p.kind in ("categorical", "bool") else 1
            blocks.append(Block(p.name, j, width, param=p))
            j += width
        for s in space.simplexes:
            blocks.append(Block(s.name, j, len(s.members), members=tuple(s.members)))
            j += len(s.members)
        self.blocks = blocks
        self.dim = j

    @property
    def bounds(self) -> torch.Tensor:
        """(2, D): the unit cube."""
        return torch.stack([torch.zeros(self.dim), torch.ones(self.dim)]).double()

    # --- encode ---------------------------------------------------------------------------------
    def encode(self, values: dict[str, Any]) -> torch.Tensor:
        """One recipe's values → (D,) float64 tensor in [0,1]^D."""
        x = np.zeros(self.dim)
        active: dict[str, Any] = {}  # the values decided so far (parents precede children), as `decode` reads them
        for b in self.blocks:
            if b.param is None:  # simplex: the weights themselves
                try:
                    x[b.cols] = [float(values[m]) for m in b.members]
                except KeyError as e:
                    raise SpaceError(f"simplex {b.name!r}: recipe lacks weight {e.args[0]!r}") from None
                continue
            if b.name not in values or not self.space.is_active(b.param, active):
                # inactive (or absent) conditional parameter: a value a recipe carries anyway (one run
                # before a redesign added the condition) has no effect, and must not reach the model
                x[b.cols] = 0.0 if b.one_hot else INACTIVE_NUMERIC
                continue
            active[b.name] = values[b.name]
            if b.one_hot:
                choices = list(b.param.choices or [])
                if values[b.name] not in choices:
                    raise SpaceError(f"{b.name}={values[b.name]!r} is not one of {choices}")
                x[b.start + choice_index(choices, values[b.name])] = 1.0
            else:
                x[b.start] = min(max(b.param.to_unit(values[b.name]), 0.0), 1.0)
        return torch.from_numpy(x)

    def encode_many(self, rows: Sequence[dict[str, Any]]) -> torch.Tensor:
        """N recipes → (N, D) float64 tensor."""
        if not rows:
            return torch.zeros(0, self.dim, dtype=torch.float64)
        return torch.stack([self.encode(v) for v in rows])

    # --- decode ---------------------------------------------------------------------------------
    def decode(self, x: torch.Tensor | np.ndarray) -> dict[str, Any]:
        """(D,) point of the cube (not necessarily an encoding) → the nearest valid values dict.

        Numbers go through `Param.from_unit` (ints rounded, clipped to range), one-hots take their
        argmax, simplex columns are clipped at 0 and renormalized, and parameters whose condition
        does not hold are left out.
        """
        x = np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x, dtype=float)
        if x.shape != (self.dim,):
            raise SpaceError(f"expected an encoded point of shape ({self.dim},), got {tuple(x.shape)}")
        values: dict[str, Any] = {}
        for b in self.blocks:  # parents precede children in `space.params`
            if b.param is None:
                w = np.clip(x[b.cols], 0.0, None)
                if abs(w.sum() - 1.0) > 1e-6 * b.width:  # weights a recipe holds (6 decimals) are kept as they
                    # are: dividing by their sum of 1 ± 1e-6 again moved a 6th digit, and the recipe's key with
                    # it (1 of 5 Sobol recipes), so a decoded trial read as a new recipe (review, stop 30)
                    w = w / w.sum() if w.sum() > 0 else np.full(b.width, 1.0 / b.width)
                values.update({m: round(float(v), 6) for m, v in zip(b.members, w)})
            elif self.space.is_active(b.param, values):
                if b.one_hot:
                    values[b.name] = (b.param.choices or [])[int(np.argmax(x[b.cols]))]
                else:
                    values[b.name] = b.param.from_unit(float(x[b.start]))
        return values

    def decode_many(self, X: torch.Tensor) -> list[dict[str, Any]]:
        """(N, D) → N values dicts."""
        return [self.decode(row) for row in X]

    # --- moves in the encoded cube ----------------------------------------------------------------
    def perturb(self, X: torch.Tensor, sigma: float | torch.Tensor, flip: float, gen: torch.Generator) -> torch.Tensor:
        """Local moves around encoded recipes X (n, D): Gaussian noise of scale `sigma` (a float, or
        one per row (n,)) on the numeric and simplex columns; each one-hot block of each row is redrawn
        uniformly with probability `flip` (a small Gaussian almost never changes an argmax). Returns
        (n, D) in the cube, to be decoded."""
        n = X.shape[0]
        scale = torch.as_tensor(sigma, dtype=X.dtype).reshape(-1, 1)
        Y = (X + scale * torch.randn(n, self.dim, generator=gen, dtype=X.dtype)).clamp(0.0, 1.0)
        rows = torch.arange(n)
        for b in self.blocks:
            if b.one_hot:
                Y[:, b.cols] = X[:, b.cols]
                redraw = torch.rand(n, generator=gen) < flip
                pick = b.start + torch.randint(b.width, (n,), generator=gen)
                Y[redraw, b.cols] = 0.0
                Y[rows[redraw], pick[redraw]] = 1.0
        return Y

    def crossover(self, XA: torch.Tensor, XB: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """Uniform crossovers of encoded recipe pairs (XA[i], XB[i]), (n, D) each: every parameter (a
        whole one-hot block) comes from one parent; a simplex is a random convex blend of the two
        mixtures. Returns (n, D)."""
        n = XA.shape[0]
        Y = XA.clone()
        for b in self.blocks:
            if b.param is None:
                t = torch.rand(n, 1, generator=gen, dtype=XA.dtype)
                Y[:, b.cols] = t * XA[:, b.cols] + (1 - t) * XB[:, b.cols]
            else:
                take = torch.rand(n, generator=gen) < 0.5
                Y[take, b.cols] = XB[take, b.cols]
        return Y




def sobol_pool(space: RecipeSpace, n: int, seed: int, skip: int = 0) -> list[dict[str, Any]]:
    """n valid values dicts from one scrambled Sobol sequence (points skip … skip+n−1); `space.sobol`
    decodes through `Param.from_unit`, so every row satisfies `space.validate`."""
    if n <= 0:
        return []
    return space.sobol(n, seed, skip=skip)
