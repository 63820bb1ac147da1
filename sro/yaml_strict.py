"""YAML for the files a person writes (project, space.yaml, recipe files): PyYAML's safe loader, except that

- a key given twice in one mapping is an error. PyYAML keeps the last value silently, so a second `math:`
  domain replaced the first without a word, and its objectives then named a benchmark "that does not exist"
  (a review, stop 37). The error is a `yaml.YAMLError` with its line, as a syntax error is;
- `1e-4`, `5e3` and `1.5e4` are numbers, as in YAML 1.2 and every other reader. PyYAML implements YAML 1.1,
  whose floats need a dot and a signed exponent, and read them as text: `lr: 1e-4` in a recipe file, a
  space.yaml bound or a categorical's choices reached the trainer as the string '1e-4' (each reader had its
  own conversion until stop 39).

`safe_dump` writes what `safe_load` reads back the same: a string that reads as such a number is quoted.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

FLOAT_12 = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")
"""An exponent float of YAML 1.2 (`1e-4`, `5e3`, `1.5e4`, `.5e4`), which YAML 1.1's float pattern misses; the
forms it has (`1.0e-4`, `0.5`, `.inf`) are read as PyYAML reads them."""
_FLOAT = "tag:yaml.org,2002:float"


class UniqueKeyLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses a mapping with a repeated key (merge keys `<<` aside)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            first: dict[Any, yaml.Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    earlier = first.get(key)
                except TypeError:  # an unhashable key: PyYAML's own error follows
                    continue
                if earlier is not None:
                    raise ConstructorError(None, None, f"key {key!r} appears twice in one mapping (first at line "
                                           f"{earlier.start_mark.line + 1}); keep one", key_node.start_mark)
                first[key] = key_node
        return super().construct_mapping(node, deep=deep)


class Dumper(yaml.SafeDumper):
    """`yaml.SafeDumper` that quotes a string `safe_load` would read as a number (`'1e3'`)."""


for _cls in (UniqueKeyLoader, Dumper):  # the same numbers read and, as strings, quoted
    _cls.add_implicit_resolver(_FLOAT, FLOAT_12, list("-+0123456789."))


class NotUtf8(yaml.YAMLError):
    """A YAML file whose bytes are not UTF-8 text; its message names the first bad byte's line."""


def read(path: Path) -> str:
    """A YAML file's text, decoded as UTF-8 (a byte-order mark allowed) whatever the locale; `NotUtf8` if it
    is not UTF-8 (a file saved as Latin-1 was a `UnicodeDecodeError` traceback)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise NotUtf8(f"not UTF-8 text (byte 0x{data[e.start]:02x} on line {line}); save the file as UTF-8") from None


def safe_load(text: str) -> Any:
    """`yaml.safe_load`, with a repeated key an error and `1e-4` a number."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)


def safe_dump(data: Any, **kw: Any) -> str:
    """`yaml.safe_dump` to text that `safe_load` reads back as `data`."""
    return yaml.dump(data, Dumper=Dumper, **kw)
