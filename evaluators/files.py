"""Cache files written whole: to a temporary name of this process, then renamed into place, so a kill
or a second worker writing the same file at once never leaves, or reads, half of one."""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def unique_tag() -> str:
    """A tag for a temporary file name that no other writer uses: the pid and a random part (workers of two
    containers sharing a folder can both be pid 1). No dot, so `Path.with_suffix` keeps it."""
    return f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


def write_whole(path: Path, text: str) -> None:
    """Write `text` to `path` atomically (a temporary file of this writer beside it, then `os.replace`)."""
    tmp = path.with_name(f"{path.name}.tmp{unique_tag()}")
    tmp.write_text(text)
    os.replace(tmp, path)
