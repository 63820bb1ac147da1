"""Plugins: the project's own Python modules, imported before its sources are read.

A plugin registers an environment adapter in `evaluators.envs.ENVIRONMENTS`, played by `env:` sources,
so a project can use it without a change to SRO. An entry is a module name on the Python path
(`my_team.envs`) or a `.py` file, relative to the project's folder (its folder goes on the Python path,
after everything else, so helper modules beside it import). Each is imported once per process: a
project read twice (a resume, `sro train` after `sro search`) does not register twice, and what a plugin
that failed half-way registered is taken back, so the fixed file imports cleanly.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import traceback
from pathlib import Path

from evaluators.registry import Registry


class PluginError(ValueError):
    """A plugin that cannot be imported: which entry, why, and how to fix it."""


def load_plugins(entries: list[str], base_dir: Path) -> list[str]:
    """Import every entry; return them as stored (files as absolute paths, so that the study's copy of the
    project imports the same files from anywhere). Raises `PluginError` naming `plugins[i]`."""
    out = []
    for i, entry in enumerate(entries):
        at = f"plugins[{i}]: {entry}"
        if entry.endswith(".py") or "/" in entry or "\\" in entry:
            path = (base_dir / Path(entry).expanduser()).resolve()
            if not path.is_file():
                raise PluginError(f"{at}: no such file ({path}; a relative path is read from the project's folder)")
            _import_file(path, at)
            out.append(str(path))
        else:
            _import_module(entry, at)
            out.append(entry)
    return out


def _failure(at: str, e: BaseException, path: Path | None = None) -> PluginError:
    """The plugin's own error, with the line of the plugin (its last frame in the plugin's file, where it is
    known) that raised it."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "importlib" not in f.filename]
    own = [f for f in frames if path is not None and Path(f.filename) == path] or frames
    where = f" ({Path(own[-1].filename).name}, line {own[-1].lineno})" if own else ""
    return PluginError(f"{at}: importing it failed{where}: {type(e).__name__}: {e}")


def _registered() -> list[tuple[Registry, set[str]]]:
    return [(r, set(r.names())) for r in Registry.instances]


def _take_back(before: list[tuple[Registry, set[str]]]) -> None:
    """Forget what a plugin that failed half-way registered, so that the fixed plugin can register it again."""
    for reg, names in before:
        for name in set(reg.names()) - names:
            reg.remove(name)


def _import_module(name: str, at: str) -> None:
    if name in sys.modules:
        return
    before = _registered()
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as e:
        _take_back(before)
        if e.name and (name == e.name or name.startswith(e.name + ".")):  # the entry (or its package) itself,
            raise PluginError(f"{at}: no module {name!r} on the Python path; install it, or give the path of its "
                              ".py file") from None  # not a module the plugin imports
        raise _failure(at, e) from None
    except Exception as e:
        _take_back(before)
        raise _failure(at, e) from None


def _import_file(path: Path, at: str) -> None:
    name = f"sro_plugin_{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"{at}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    if str(path.parent) not in sys.path:  # its helper modules beside it import (appended: never shadowing others)
        sys.path.append(str(path.parent))
    before = _registered()
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]  # a fixed file is imported afresh, and registers afresh
        _take_back(before)
        raise _failure(at, e, path) from None
