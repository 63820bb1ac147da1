"""Designing a project's space: build the catalog, run the project's designer (`designer.kind`: rules by
default, or llm), and write `runs/<name>/space.yaml` — readable, with the rationale beside each
parameter — plus the versioned copy `space.v<N>.yaml`.

An LLM designer that fails falls back to the rules with a visible warning; the search never stops for
want of a space.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from evaluators.files import write_whole
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


def hand_edited(run_dir: Path) -> bool:
    """Whether `run_dir`'s `space.yaml` is a person's edit: SRO writes it together with `space.v<N>.yaml`, so
    text equal to a versioned copy is the designer's own (or one restored), text in none of them an edit."""
    path = run_dir / "space.yaml"
    if not path.is_file():
        return False
    text = path.read_bytes()  # bytes: an edit saved in another encoding is an edit too
    return not any(v.read_bytes() == text for v in run_dir.glob("space.v*.yaml"))


def _keep_edit(run_dir: Path, log: Callable[[str], None]) -> None:
    """Copy a hand-edited `space.yaml` aside before it is replaced. The file is written for review and a
    person may edit it; an edit is in no `space.v<N>.yaml`, so replacing the file lost it without a word
    (a rerun of `sro design` did)."""
    path = run_dir / "space.yaml"
    if not hand_edited(run_dir):
        return
    text = path.read_bytes()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    keep, n = run_dir / f"space.edited-{stamp}.yaml", 1
    while keep.exists():
        n += 1
        keep = run_dir / f"space.edited-{stamp}-{n}.yaml"
    write_whole(keep, text)
    log(f"note: {path} matches no space.v<N>.yaml (edited by hand?); kept it as {keep.name} "
        "before writing the new space; copy your edits back from there if you want them")


def write_space(run_dir: Path, space: RecipeSpace, log: Callable[[str], None] = print) -> Path:
    """`space.yaml` (what the search reads) and `space.v<version>.yaml` (the history), each written whole
    (a kill mid-write left a truncated space.yaml that stopped the next resume). A hand-edited
    `space.yaml` is kept aside first (`_keep_edit`), and `log` says where."""
    run_dir.mkdir(parents=True, exist_ok=True)
    text = HEADER.format(designer=space.designer, version=space.version) + space.to_yaml()
    _keep_edit(run_dir, log)
    write_whole(run_dir / f"space.v{space.version}.yaml", text)
    path = run_dir / "space.yaml"
    write_whole(path, text)
    return path


def design_space(project: ProjectConfig, run_dir: Path, budget: Budget | None = None, ctx=None,
                 log: Callable[[str], None] = print, version: int = 1,
                 unless: RecipeSpace | None = None) -> tuple[RecipeSpace, Path | None]:
    """Design the project's space with its configured designer and write it under `run_dir`; where the design
    is `unless` but for its version (the run folder's space, designed again: `sro design` run twice wrote v2
    and v3, the same space; a review, stop 57), return `unless` and write nothing (the path None)."""
    catalog = build_catalog(project, budget, ctx)
    space = DESIGNERS.get(project.designer.kind)(catalog, project, run_dir, log)
    if unless is not None and {**space.to_dict(), "version": unless.version} == unless.to_dict():
        return unless, None
    space.version = version
    return space, write_space(run_dir, space, log)


def last_version(run_dir: Path, written: RecipeSpace | None = None) -> int:
    """The highest version of a space in `run_dir`: the current `space.yaml`'s (`written`) or a kept
    `space.vN.yaml`'s, 0 for none. A new design takes the next, so it never overwrites a kept version (with
    space.yaml removed to design afresh, a new v1 overwrote space.v1.yaml, the space the first trials ran
    in; review, stop 30)."""
    kept = [int(m.group(1)) for f in Path(run_dir).glob("space.v*.yaml")
            if (m := re.fullmatch(r"space\.v(\d+)\.yaml", f.name))]
    return max([written.version if written is not None else 0, *kept])
