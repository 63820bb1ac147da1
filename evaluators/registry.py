"""One registry helper for SRO's extension points (tasks, algorithms, estimators, losses, designers).

It lives in `evaluators` because that is the bottom of the import chain
(`sro` → `trainers` → `evaluators`): every layer can use it without an upward import.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """A name that is not registered; the message lists the known names."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want the plain sentence
        return str(self.args[0])


class Registry(Generic[T]):
    """A named table of extension objects that refuses duplicates and lists known names on a miss."""

    instances: list[Registry] = []
    """Every registry made: what a plugin that failed half-way registered is taken back from (`sro.plugins`)."""

    def __init__(self, kind: str, check: Callable[[T], str | None] | None = None) -> None:
        """`check`: what is wrong with an object offered to `add` (None: nothing), refused then as a TypeError
        rather than failing where it is first used."""
        self.kind = kind
        self.check = check
        self._items: dict[str, T] = {}
        Registry.instances.append(self)

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: `@REG.register("grpo")` adds the decorated object under `name`."""

        def add(obj: T) -> T:
            self.add(name, obj)
            return obj

        return add

    def add(self, name: str, obj: T) -> None:
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is already registered; pick another name")
        if self.check is not None and (why := self.check(obj)) is not None:
            raise TypeError(f"{self.kind} {name!r}: {why}")
        self._items[name] = obj

    def remove(self, name: str) -> None:
        """Forget `name` (nothing if it is not registered)."""
        self._items.pop(name, None)

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "(none)"
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def names(self) -> list[str]:
        return sorted(self._items)
