"""YAML for the files a person writes (project, space.yaml, recipe files): PyYAML's safe loader, except that a
key given twice in one mapping is an error. PyYAML keeps the last value silently, so a second `math:` domain
replaced the first without a word, and its objectives then named a benchmark "that does not exist" (a review,
stop 37). The error is a `yaml.YAMLError` with its line, as a syntax error is."""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError


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


def safe_load(text: str) -> Any:
    """`yaml.safe_load`, with a repeated key an error."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
