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


def write_whole(path: Path, text: str | bytes) -> None:
    """Write `text` to `path` atomically (a temporary file of this writer beside it, then `os.replace`), a
    string in UTF-8 whatever the locale (a C locale's ASCII failed on the report's `·`), and remove the temporary file if
    the write fails (a full disk or an unencodable text left `report.html.tmp...` behind; a review, stop 53)."""
    tmp = path.with_name(f"{path.name}.tmp{unique_tag()}")
    try:
        if isinstance(text, bytes):  # a person's file copied as it is (`sro design` keeping an edit)
            tmp.write_bytes(text)
        else:
            tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:  # a Ctrl-C mid-write too
        tmp.unlink(missing_ok=True)
        raise


def readable_as_new_files(folder: Path) -> None:
    """Give every file in `folder` the mode a new file gets here (0644 under the usual umask of 022): safetensors
    0.8 writes its weights 0600, so a saved model and `runs/.cache` were unreadable to a team sharing a filesystem
    (a review, stop 57)."""
    probe = folder / f".mode-probe{unique_tag()}"
    probe.touch()  # 0666 less the umask
    try:
        mode = probe.stat().st_mode & 0o777
    finally:
        probe.unlink()
    for f in folder.rglob("*"):
        if f.is_file() and not f.is_symlink():
            f.chmod(mode)
