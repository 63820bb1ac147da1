"""Designing a project's space: build the catalog, run the project's designer (`designer.kind`: rules by
default, or llm), and write `runs/<name>/space.yaml` — readable, with the rationale beside each
parameter — plus the versioned copy `space.v<N>.yaml`.

An LLM designer that fails falls back to the rules with a visible warning; the search never stops for
want of a space.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from evaluators.registry import Registry
from sro.budget import Budget
from sro.config import ProjectConfig
from sro.designer.catalog import Catalog, build_catalog
from sro.designer.rules import design_rules
from sro.space import RecipeSpace

HEADER = ("# SRO recipe space, designed by the {designer} designer (version {version}).\n"
          "# Each parameter's `why` is the designer's rationale. Edit bounds or choices, then run `sro search`:\n"
          "# it uses this file as it is.\n")

Designer = Callable[[Catalog, ProjectConfig, Path, Callable[[str], None]], RecipeSpace]
DESIGNERS: Registry[Designer] = Registry("designer")


@DESIGNERS.register("rules")
def _rules(catalog: Catalog, project: ProjectConfig, run_dir: Path, warn: Callable[[str], None]) -> RecipeSpace:
    return design_rules(catalog, project)


@DESIGNERS.register("llm")
def _llm(catalog: Catalog, project: ProjectConfig, run_dir: Path, warn: Callable[[str], None]) -> RecipeSpace:
    from sro.designer.llm import DesignerFailed, design_llm

    try:
        return design_llm(catalog, project, run_dir / "designer")
    except DesignerFailed as e:
        warn(f"warning: the LLM designer failed ({e}); using the rule-based designer instead")
        return design_rules(catalog, project)


def write_space(run_dir: Path, space: RecipeSpace) -> Path:
    """`space.yaml` (what the search reads) and `space.v<version>.yaml` (the history)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    text = HEADER.format(designer=space.designer, version=space.version) + space.to_yaml()
    (run_dir / f"space.v{space.version}.yaml").write_text(text)
    path = run_dir / "space.yaml"
    path.write_text(text)
    return path


def design_space(project: ProjectConfig, run_dir: Path, budget: Budget | None = None, ctx=None,
                 log: Callable[[str], None] = print, version: int = 1) -> tuple[RecipeSpace, Path]:
    """Design the project's space with its configured designer and write it under `run_dir`."""
    catalog = build_catalog(project, budget, ctx)
    space = DESIGNERS.get(project.designer.kind)(catalog, project, run_dir, log)
    space.version = version
    return space, write_space(run_dir, space)
