"""The generic default recipe space, sized to the base model and this machine.

It is what a search uses until the Recipe-Space Designer builds a task-adapted one: the GRPO knobs
of ALGORITHMS.md §1 plus the domain mixture as a simplex.
"""

from __future__ import annotations

from sro.config import ProjectConfig
from sro.recipe import MIX_PREFIX
from sro.space import Param, RecipeSpace, Simplex


def default_space(project: ProjectConfig) -> RecipeSpace:
    tiny = project.base_model == "tiny"
    # Adam's first RL steps move every weight by ~lr whatever the reward says: a ~1M-parameter model
    # keeps its skills only below ~3e-4 (measured: 3e-4 and above erased held-out accuracy)
    lr_low, lr_high = (2e-5, 3e-4) if tiny else (1e-7, 1e-5)
    params = [
        Param("lr", "float", lr_low, lr_high, log=True, rationale="the most sensitive knob; log scale"),
        Param("group_size", "int", 4, 12, rationale="G: larger groups give a steadier baseline but cost more rollouts"),
        Param("prompts_per_step", "int", 8, 16, rationale="P: prompts per generation batch"),
        Param("steps", "int", 20, 60, rationale="generation batches per trial, sized for the CPU budget"),
        Param("eps", "float", 0.1, 0.3, rationale="symmetric clip range ε"),
        Param("beta", "float", 0.0, 0.05, rationale="k3 KL to the base model; 0 keeps no reference copy"),
        Param("temperature", "float", 0.7, 1.3, rationale="rollout temperature: exploration vs on-target samples"),
        Param("scale_rewards", "categorical", choices=["group", "none"],
              rationale="GRPO's std scaling or Dr.GRPO's unscaled advantage"),
        Param("aggregation", "categorical", choices=["seq_mean", "token_mean"],
              rationale="GRPO's per-sequence mean or DAPO's token mean"),
    ]
    domains = list(project.domains)
    simplexes = []
    if len(domains) > 1:
        simplexes.append(Simplex("mixture", [MIX_PREFIX + d for d in domains],
                                 rationale="share of training prompts drawn from each domain"))
    fixed = {"algorithm": "grpo", "max_new_tokens": project.runtime.max_new_tokens}
    return RecipeSpace(params, simplexes, fixed, version=1, designer="default")
