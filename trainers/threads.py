"""Torch's intra-op thread count: the cores this process may use, and a count set for a block and restored
after it."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
    """The cores this process may run on: its CPU affinity (a SLURM or cpuset limit, `taskset`), not the
    machine's (on a big node `os.cpu_count()` oversubscribed torch's threads, a review, stop 37), and no more
    than a cgroup CPU quota allows (`docker --cpus`, a Kubernetes limit, which leave the affinity whole: a
    review, stop 53)."""
    try:
        cores = max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return cores if quota is None else max(1, min(cores, math.ceil(quota)))


def cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPUs a cgroup quota allows this process (quota / period), None without one: cgroup v2's `cpu.max`
    ("200000 100000", or "max 100000" for none), else v1's `cpu/cpu.cfs_quota_us` (-1 for none) and
    `cpu.cfs_period_us`."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else float(quota) / float(period)
    except (OSError, ValueError):
        pass
    try:
        quota = float((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = float((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None
