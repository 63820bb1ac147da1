"""What the bench scripts share: the quickstart project's context (benchmarks, streams, the cached
tiny base model) and a table with one column per held-out benchmark."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rich.table import Table  # noqa: E402

from sro.config import load_project  # noqa: E402
from sro.executor import SearchContext  # noqa: E402


def quickstart() -> SearchContext:
    """The quickstart project prepared as a search would (the tiny model is built once and cached)."""
    project = load_project(ROOT / "search_spaces" / "quickstart.yaml")
    return SearchContext.prepare(project, ROOT / "runs" / ".cache", log=lambda m: None)


def score_table(title: str, keys: list[str], first: str, extra: tuple[str, ...] = ()) -> Table:
    """A table with a `first` label column, one column per benchmark key, then `extra` columns."""
    table = Table(title=title)
    table.add_column(first)
    for c in (*keys, *extra):
        table.add_column(c, justify="right")
    return table
