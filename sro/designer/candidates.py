"""LLM-proposed candidates for the optimizer: when the project's designer is an LLM endpoint, the
BoTorch proposer asks it, at each model-based proposal, for a few recipes worth trying given the
space and the trials so far. The proposer validates them against the space, drops any already run,
and lets qLogNEHVI choose among them and its own candidates; the prompt and answer are saved for
audit (never the API key)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sro.config import ProjectConfig
from sro.designer.llm import DesignerFailed, _ask, _client, unfenced
from sro.ledger import TrialRecord
from sro.space import RecipeSpace

SYSTEM = ("You propose post-training recipes to try next in a multi-objective search. Answer with one JSON "
          'object {{"recipes": [{{<parameter>: <value>, ...}}, ...]}} holding at most {n} recipes; every '
          "recipe sets every parameter of the space below, inside its range or choices; mixture weights "
          "of a simplex sum to 1. Prefer recipes that may extend the Pareto front, not copies of trials.")


def llm_candidates(project: ProjectConfig, space: RecipeSpace, audit_dir: Path,
                   n: int = 8) -> Callable[[Sequence[TrialRecord]], list[dict[str, Any]]]:
    """An extra candidate source for `BoTorchProposer(extra=...)` backed by the designer endpoint.
    It raises `DesignerFailed` on an unreachable endpoint or a malformed answer (the proposer then
    warns and goes on with its own candidates)."""
    # numbered after the files already there: a proposer is built anew after every redesign and resume, and
    # until stop 33 each one wrote candidates-1-*.json again over the audit of the first
    calls = {"n": max((int(f.name.split("-")[1]) for f in audit_dir.glob("candidates-*-prompt.json")
                       if f.name.split("-")[1].isdigit()), default=0)}

    def propose(history: Sequence[TrialRecord]) -> list[dict[str, Any]]:
        trials = [{"values": r.recipe.values, "state": r.state, "scores": r.scores,
                   "wall_s": r.cost.get("wall_s")} for r in history if r.state != "running"]
        messages = [{"role": "system", "content": SYSTEM.format(n=n)},
                    {"role": "user", "content": "Space:\n" + space.to_yaml() + "\nTrials so far:\n"
                     + json.dumps(trials, default=str)}]
        calls["n"] += 1
        audit_dir.mkdir(parents=True, exist_ok=True)
        (audit_dir / f"candidates-{calls['n']}-prompt.json").write_text(json.dumps(messages, indent=1), encoding="utf-8")
        content = _ask(_client(project), project, messages)
        (audit_dir / f"candidates-{calls['n']}-answer.json").write_text(content, encoding="utf-8")  # an answer in any script
        try:
            recipes = json.loads(unfenced(content)).get("recipes")
        except (json.JSONDecodeError, AttributeError):
            raise DesignerFailed("the candidates answer is not a JSON object with a `recipes` list") from None
        if not isinstance(recipes, list):
            raise DesignerFailed("the candidates answer has no `recipes` list")
        return [r for r in recipes[:n] if isinstance(r, dict)]

    return propose
