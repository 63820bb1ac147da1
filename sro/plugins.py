"""Plugins: the project's own Python modules, imported before its sources are read.

A plugin registers an environment adapter in `evaluators.envs.ENVIRONMENTS`, played by `env:` sources,
so a project can use it without a change to SRO. An entry is a module name on the Python path
(`my_team.envs`) or a `.py` file, relative to the project's folder (its folder goes on the Python path,
after everything else, so helper modules beside it import). Each is imported once per process: a
project read twice (a resume, `sro train` after `sro search`) does not register twice, and what a plugin
that failed half-way did is undone (the modules it loaded, what they registered), so the fixed file
imports cleanly. One file is one import whatever it is named by: one project's `plugins/envs.py` and
another's `envs` (the same file on the Python path) share the module and its registrations. Helper modules are
imported by their bare names: two projects' plugins in one process should not both have a `helpers.py`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from evaluators.registry import Registry


class PluginError(ValueError):
    """A plugin that cannot be imported: which entry, why, and how to fix it."""


def load_plugins(entries: list[str], base_dir: Path) -> list[str]:
    """Import every entry; return them as stored (files as absolute paths, so that the study's copy of the
    project imports the same files from anywhere). Raises `PluginError` naming `plugins[i]`."""
    out = []
    for i, entry in enumerate(entries):
        at = f"plugins[{i}]: {entry}"
        if not entry.strip():  # was "ValueError: Empty module name", pointing into SRO's code (a review, stop 53)
            raise PluginError(f"plugins[{i}]: the entry is empty ({entry!r}); give a module name on the Python path "
                              "(my_team.envs) or the path of a .py file, or remove the entry")
        if entry.endswith(".py") or "/" in entry or "\\" in entry:
            path = (base_dir / Path(entry).expanduser()).resolve()
            if not path.is_file():  # an absolute one is as a run's project.yaml or `sro export` keeps it: moved since
                why = ("an absolute path, as a run's project.yaml and `sro export` keep a plugin: the file has moved or "
                       "is on another machine; edit this entry under plugins: to where it is now"
                       if Path(entry).is_absolute() else "a relative path is read from the project's folder")
                raise PluginError(f"{at}: no such file ({path}; {why})")
            _import_file(path, at)
            out.append(str(path))
        else:
            _import_module(entry, at)
            out.append(entry)
    return out


def plugin_digests(entries: list[str]) -> dict[str, str]:
    """Each loaded entry (as `load_plugins` returns them) by its file's name, or its module's, with a digest of
    the file's contents: what a study keeps of a plugin's code, so that a resume after the plugin was edited
    says its earlier trials were scored with the earlier code (a review, stop 57). Copies elsewhere have the same
    digests; a module without a file (a namespace package) is named with "no file"."""
    out = {}
    for entry in entries:
        path: Path | None = Path(entry)
        if path.is_absolute():  # a file, as load_plugins stores one
            name = path.name
        else:  # a module, where its spec has a file
            spec = importlib.util.find_spec(entry)
            name, path = entry, Path(spec.origin) if spec is not None and spec.has_location and spec.origin else None
        out[name] = (hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path is not None and path.is_file()
                     else "no file")
    return out


def _failure(at: str, e: BaseException, path: Path | None = None) -> PluginError:
    """The plugin's own error, with the line of the plugin (its last frame in the plugin's file, where it is
    known) that raised it."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "importlib" not in f.filename]
    own = [f for f in frames if path is not None and Path(f.filename) == path] or frames
    where = f" ({Path(own[-1].filename).name}, line {own[-1].lineno})" if own else ""
    if isinstance(e, SyntaxError) and e.filename:  # raised by the compiler: the file and line are the error's
        where = f" ({Path(e.filename).name}, line {e.lineno})"
    return PluginError(f"{at}: importing it failed{where}: {type(e).__name__}: {e}")


def _state() -> tuple[set[str], list[tuple[Registry, set[str]]]]:
    """What an import may change: the modules loaded, and the names of every registry."""
    return set(sys.modules), [(r, set(r.names())) for r in Registry.instances]


def _undo(before: tuple[set[str], list[tuple[Registry, set[str]]]], own: Callable[[str, Any], bool]) -> None:
    """Undo what a plugin that failed half-way did, so that the fixed plugin imports and registers afresh: its
    own modules (`own(name, module)`: the plugin and its helpers) loaded since are forgotten, and so is every
    name registered since by an object of theirs. Anything else it imported (a library, an SRO module) stays."""
    modules, names = before
    gone = {name for name in set(sys.modules) - modules if own(name, sys.modules[name])}
    for name in gone:
        del sys.modules[name]
    for reg, known in names:
        for name in set(reg.names()) - known:
            if getattr(reg.get(name), "__module__", None) in gone:
                reg.remove(name)


def _loaded(path: Path) -> ModuleType | None:
    """The module already imported from the file `path`, under whatever name."""
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and file.endswith(path.name) and Path(file).resolve() == path:
            return module
    return None


def _import_module(name: str, at: str) -> None:
    if name in sys.modules:
        return
    before = _state()
    root = name.split(".")[0]

    def own(mod: str, _module: Any) -> bool:
        return mod == root or mod.startswith(root + ".")

    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.has_location and spec.origin:
            same = _loaded(Path(spec.origin).resolve())  # imported before as a file: the same module
            if same is not None:
                sys.modules[name] = same
                return
        importlib.import_module(name)
    except ModuleNotFoundError as e:
        _undo(before, own)
        if e.name and (name == e.name or name.startswith(e.name + ".")):  # the entry (or its package) itself,
            raise PluginError(f"{at}: no module {name!r} on the Python path; install it, or give the path of its "
                              ".py file") from None  # not a module the plugin imports
        raise _failure(at, e) from None
    except Exception as e:
        _undo(before, own)
        raise _failure(at, e) from None


def _import_file(path: Path, at: str) -> None:
    name = f"sro_plugin_{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return
    same = _loaded(path)  # imported before by its module name
    if same is not None:
        sys.modules[name] = same
        return
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"{at}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    if str(path.parent) not in sys.path:  # its helper modules beside it import (appended: never shadowing others)
        sys.path.append(str(path.parent))
    before = _state()
    sys.modules[name] = module

    def own(mod: str, loaded: Any) -> bool:  # the plugin, and helper modules from its folder
        file = getattr(loaded, "__file__", None)
        return mod == name or (file is not None and Path(file).resolve().parent == path.parent)

    try:
        spec.loader.exec_module(module)
    except BaseException as e:  # a fixed file is imported afresh, and registers afresh
        _undo(before, own)
        if not isinstance(e, Exception):
            raise
        raise _failure(at, e, path) from None
