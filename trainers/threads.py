"""Torch's intra-op thread count: the cores this process may use, and a count set for a block and restored
after it."""

from __future__ import annotations

import os

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with `n` torch intra-op threads (None: unchanged); the caller's count is restored
    after it, also when it raises."""
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: a SLURM or cgroup limit, `taskset`), not the
    machine's: on a big node `os.cpu_count()` oversubscribed torch's threads (a review, stop 37)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1
