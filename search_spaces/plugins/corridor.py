"""An environment adapter, as a project's plugin: a corridor of halls, each with a few doors of which one
leads on (a draught blows from it), then a vault with a coin. Used by `search_spaces/corridor.yaml` and the tests of `env:` sources.

What an adapter does (evaluators/adapters.py): subclass `TextEnv`, answer `reset()` and `step(command)`
with the observation text and a `StepInfo` (the admissible commands, a state key, whether the command
was admissible, won/lost, the walkthrough from here), and register a factory `(seed, EnvSettings,
**settings)` in `ENVIRONMENTS`. SRO resolves the policy's text to a command and keeps the step limit.
"""

from __future__ import annotations

import random

from evaluators.envs import ENVIRONMENTS, EnvSettings, StepInfo, TextEnv

DOORS = ["go north", "go east", "go south", "go west"]


class Corridor(TextEnv):
    """The game of `seed`: `length` halls, each with `doors` doors (the right one drawn from the seed and
    shown by a draught), then the vault; `doors ** length` distinct games."""

    def __init__(self, seed: int, settings: EnvSettings, length: int = 2, doors: int = 3) -> None:
        super().__init__(settings)
        if not (isinstance(length, int) and length >= 1) or not (isinstance(doors, int) and 2 <= doors <= 4):
            raise ValueError(f"length must be an integer >= 1 and doors one of 2-4 (got length={length!r}, "
                             f"doors={doors!r})")
        rng = random.Random(seed)
        self.choices = DOORS[:doors]
        self.right = [rng.choice(self.choices) for _ in range(length)]
        self.hall = 0

    def _render(self, valid: bool, won: bool = False) -> tuple[str, dict]:
        if self.hall < len(self.right):
            admissible = [*self.choices, "look"]
            where = (f"hall {self.hall + 1} of {len(self.right)}. A draught blows from the "
                     f"{self.right[self.hall].split()[1]}")
            walkthrough = [*self.right[self.hall:], "take coin"]
        else:
            admissible, where, walkthrough = ["look", "take coin"], "the vault", ([] if won else ["take coin"])
        info = StepInfo(admissible=admissible, state_key=f"hall{self.hall}", valid=valid, won=won,
                        score=float(won), walkthrough=walkthrough)
        return f"You are in {where}.\nChoices: {', '.join(admissible)}", {"step": info}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.hall, self.steps = 0, 0
        return self._render(True)

    def step(self, action: str):
        self.steps += 1
        at_vault = self.hall == len(self.right)
        valid = action in (["look", "take coin"] if at_vault else [*self.choices, "look"])
        won = at_vault and action == "take coin"
        if not at_vault and action == self.right[self.hall]:
            self.hall += 1
        obs, info = self._render(valid, won)
        return obs, float(won), won, False, info  # the step limit is SRO's to keep


ENVIRONMENTS.add("corridor", Corridor)
