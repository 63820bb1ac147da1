"""Start recipes: recipes a person already trusts (the team's current recipe, a published one), given
in the project YAML's `start_recipes:`, trained first, in order, before the optimizer proposes.

They are the search's first evidence, the way Optuna's `enqueue_trial` or SMAC's default configuration
start a study: the optimizer's initial design continues after them, and its model starts from a point
that is known to be reasonable instead of only from space-filling ones. Each must be a recipe of the
search space: every parameter active given its parents set, each inside its range, the mixture on the
simplex. The config has already turned `sro export` files into their `recipe:` section, `{values: ...,
fixed: ...}`: the fixed settings of the space the recipe ran in fill the parameters this space searches
and the recipe's values leave unset (a setting the old space fixed and this one searches was part of the
recipe too: until stop 27 such a recipe was refused as lacking it).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any

from sro.recipe import Recipe
from sro.space import OutsideError, RecipeSpace, SpaceError


class StartRecipeError(SpaceError):
    """A start recipe that is not a recipe of the search space: which one, what is wrong, how to fix it."""


def start_recipes(entries: Sequence[dict[str, Any]], space: RecipeSpace, where: str,
                  skip: Callable[[StartRecipeError], None] | None = None,
                  note: Callable[[str], None] | None = None, source: str = "") -> list[Recipe]:
    """The project's start recipes as recipes of `space`; `where` names the space for the messages, `source`
    the project file they come from.
    One that does not fit raises `StartRecipeError`, or, given `skip`, is passed to it and left out.
    `note` is told where a recipe file's fixed setting differs from this space's (which wins), and which of
    them this space leaves unset (neither fixed nor searched)."""
    out = []
    for i, values in enumerate(entries):
        try:
            out.append(start_recipe(values, space, f"{source}: start_recipes[{i}]" if source else f"start_recipes[{i}]",
                                    where, note))
        except StartRecipeError as e:
            if skip is None:
                raise
            skip(e)
    return out


def is_exported(entry: Any) -> bool:
    """Whether a `start_recipes` entry is a recipe in `sro export`'s form, `{values: {...}, fixed: {...}}`,
    rather than a flat mapping of settings (no setting's value is a mapping)."""
    return isinstance(entry, dict) and isinstance(entry.get("values"), dict)


def start_recipe(entry: dict[str, Any], space: RecipeSpace, at: str, where: str,
                 note: Callable[[str], None] | None = None) -> Recipe:
    """One start recipe (`at` names it) as a recipe of `space`: its canonical values plus the space's
    fixed settings. Raises `StartRecipeError` saying what does not fit and how to fix it.

    `entry` is a flat mapping of settings, or an exported recipe (`is_exported`): its `values` are checked
    as a flat mapping's, and its `fixed` settings fill the parameters of `space` that the values leave
    unset where they are active; the others are the old space's business (this space fixes them at its own
    values, or trials do not read them)."""
    if not isinstance(entry, dict):  # a path: `sro.config.load_project` reads those into values
        raise StartRecipeError(f"{at}: {entry!r} is not a mapping of settings; load the project with "
                               "sro.config.load_project, which reads recipe files into their values")
    values, inherited = (entry["values"], entry.get("fixed") or {}) if is_exported(entry) else (entry, {})
    names = [p.name for p in space.params] + [m for s in space.simplexes for m in s.members]
    for key, v in values.items():
        if key in space.fixed:
            if v != space.fixed[key]:
                raise StartRecipeError(f"{at}: {key} is fixed at {space.fixed[key]!r} in {where}, not {v!r}; "
                                       f"drop {key} from the start recipe or edit the space")
        elif key not in names:
            hint = difflib.get_close_matches(key, names, n=1)
            fix = f"did you mean {hint[0]!r}?" if hint else f"the space's parameters: {', '.join(names)}"
            raise StartRecipeError(f"{at}: {key!r} is not a parameter of {where}; {fix}")
    own = {k: v for k, v in values.items() if k not in space.fixed}
    borrowed = {k: v for k, v in inherited.items() if k in names and k not in own}
    try:
        canonical = space.canonical({**borrowed, **own})
    except OutsideError as e:  # the fix, and the borrowed settings only where the value is one (a review, stop 58)
        came = f" (the recipe file's fixed {e.key}, which this space searches)" if e.key in borrowed else ""
        raise StartRecipeError(f"{at}: {e} in {where}{came}; widen params.{e.key} there to take it, or change the "
                               f"start recipe's {e.key}") from None
    except SpaceError as e:
        came = (f" ({', '.join(sorted(borrowed))}: the recipe file's fixed settings, which this space searches)"
                if borrowed else "")
        raise StartRecipeError(f"{at}: {e} in {where}{came}; a start recipe sets every parameter that is active "
                               "given its parents, inside its range, and mixture weights that sum to 1") from None
    dropped = sorted(set(own) - set(canonical))
    if dropped:  # a child whose condition does not hold: say so rather than train something else
        raise StartRecipeError(f"{at}: {', '.join(dropped)} inactive given the recipe's other settings in {where} "
                               "(their condition does not hold); drop them or change their parent")
    differ = {k: v for k, v in inherited.items() if k in space.fixed and v != space.fixed[k]}
    unset = {k: v for k, v in inherited.items() if k not in space.fixed and k not in names}
    if (differ or unset) and note is not None:  # it trains otherwise than the file says: say so
        said = []
        if differ:  # a ProAS recipe trained as GRPO
            said.append(f"the recipe file fixed {_settings(differ)}; {where} fixes "
                        f"{_settings({k: space.fixed[k] for k in differ})}, which it trains with")
        if unset:  # the file's `beta: 0.0` in a space that leaves beta to the trainer's default
            said.append(f"the recipe file fixed {_settings(unset)}, which {where} neither fixes nor searches "
                        "(its trials take SRO's defaults there; fix them in the space to keep them)")
        note(f"{at}: {'; '.join(said)}")
    return Recipe(canonical, dict(space.fixed))


def _settings(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in sorted(values.items()))


def next_start(starts: Sequence[Recipe], tried: set[str]) -> Recipe | None:
    """The first start recipe whose key the study has not tried (any state), or None."""
    return next((r for r in starts if r.key not in tried), None)
