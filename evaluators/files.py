"""Cache files written whole: to a temporary name of this process, then renamed into place, so a kill
or a second worker writing the same file at once never leaves, or reads, half of one."""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def write_whole(path: Path, text: str) -> None:
    """Write `text` to `path` atomically (a per-process temporary file beside it, then `os.replace`)."""
    # the pid and a random part: workers of two containers sharing a folder can both be pid 1
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}-{uuid.uuid4().hex[:8]}")
    tmp.write_text(text)
    os.replace(tmp, path)
