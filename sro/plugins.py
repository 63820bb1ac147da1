"""Plugins: the project's own Python modules, imported before its sources are read.

A plugin registers what SRO's registries hold — an environment adapter (`evaluators.envs.ENVIRONMENTS`,
played by `env:` sources), an algorithm, a designer — so a project can use it without a change to SRO.
An entry is a module name on the Python path (`my_team.envs`) or a `.py` file, relative to the
project's folder. Each is imported once per process: a project read twice (a resume, `sro train` after
`sro search`) does not register twice.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import traceback
from pathlib import Path


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


def _failure(at: str, e: BaseException) -> PluginError:
    """The plugin's own error, with the line of the plugin that raised it."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "importlib" not in f.filename]
    where = f" ({Path(frames[-1].filename).name}, line {frames[-1].lineno})" if frames else ""
    return PluginError(f"{at}: importing it failed{where}: {type(e).__name__}: {e}")


def _import_module(name: str, at: str) -> None:
    if name in sys.modules:
        return
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and name.startswith(e.name):  # the entry itself, not a module it imports
            raise PluginError(f"{at}: no module {name!r} on the Python path; install it, or give the path of its "
                              ".py file") from None
        raise _failure(at, e) from None
    except Exception as e:
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
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]  # a fixed file is imported afresh
        raise _failure(at, e) from None
