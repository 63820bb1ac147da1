"""BoTorch's fused qLogEHVI kernel, loaded before a search's first multi-objective proposal.

BoTorch 0.18 compiles a C++ kernel for qLogEHVI / qLogNEHVI the first time such an acquisition is built, and
caches it under `~/.cache/torch_extensions` (or `$TORCH_EXTENSIONS_DIR`): about 45 s on 2 cores, once per
machine. Without it a proposal with 3 objectives after 100 trials takes 15-30% more CPU time (2.1 s instead
of 1.7 s at stop 31; `bench/optimizer.py --overhead-only` times both, docs/optimizer.md). `make setup` compiles it; a search started from a plain `pip install` says that it is
compiling instead of pausing silently in its first proposal.

`python -m sro.optimizer.fused_kernel` loads it (compiling if needed) and prints whether it is ready.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

NAME = "logei_fused_ext"
"""The extension's name, as BoTorch builds it (`torch.utils.cpp_extension.load(name=...)`)."""

MESSAGE = "compiling BoTorch's fused qLogEHVI kernel (once per machine, about a minute) ..."


def compiled() -> bool:
    """Whether this machine's torch extensions folder holds a built kernel (loading it then takes a second);
    True where torch no longer tells its folder (nothing is announced then)."""
    try:
        from torch.utils.cpp_extension import _get_build_directory

        return any(Path(_get_build_directory(NAME, False)).glob(f"{NAME}*.so"))
    except (ImportError, OSError):
        return True


def load_fused_kernel(status: Callable[[str], AbstractContextManager] | None = None) -> bool:
    """Load the kernel into BoTorch (compiling it first if this machine has none: under `status(MESSAGE)`,
    e.g. a rich console's `status`). True if BoTorch will use it; False where it cannot be built (no C++
    compiler: BoTorch warns and keeps its pure-Python path) or where BoTorch has no such kernel."""
    from botorch.acquisition.multi_objective import logei

    load = getattr(logei, "_try_load_fused_kernel", None)
    if load is None:  # a BoTorch release without the kernel
        return False
    attempted = getattr(logei, "_load_attempted", False)
    with status(MESSAGE) if status is not None and not attempted and not compiled() else nullcontext():
        load()
    return getattr(logei, "_C", None) is not None


def _say(message: str) -> AbstractContextManager:
    """A `status` for a plain terminal: the message, printed once."""
    print(message, flush=True)
    return nullcontext()


def main() -> int:
    ready = load_fused_kernel(_say)
    print("BoTorch fused qLogEHVI kernel:", "ready" if ready else "not built (BoTorch's pure-Python path)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
