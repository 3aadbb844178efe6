"""Writes as named operations: what a store may hand the machine's writer.

A write runs in whichever process of the machine owns the writer, so it travels by name, not
as code: each store module declares its writes at module level as ``WriteOp``s, which
register as ``module:function`` while the module is imported, and the owner looks the name up
(importing the module first if that process has not yet: a CLI command may own the writer
for a server's workers). A function another process could not find by its name (a closure, a
lambda, a method) is refused as its ``WriteOp`` is made, in every process, so a
single-process test meets the refusal a second worker would.
"""

from __future__ import annotations

import importlib
import sqlite3
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

_REGISTRY: dict[str, WriteOp[..., Any]] = {}


class WriteOp(Generic[P, R]):
    """A write: ``fn(connection, *args)`` and how the writer runs it.

    ``one_write`` promises that ``fn`` changes the database with one statement at most:
    SQLite undoes a failed statement by itself, so it runs without the savepoint that keeps
    a failing job from taking its batch down. ``background`` lets it wait a moment for a
    request's write to share its commit rather than add one (the sandbox purge's steps).
    """

    __slots__ = ("background", "fn", "name", "one_write")

    def __init__(
        self,
        fn: Callable[Concatenate[sqlite3.Connection, P], R],
        *,
        one_write: bool = False,
        background: bool = False,
    ) -> None:
        qualname = getattr(fn, "__qualname__", None)
        name = getattr(fn, "__name__", None)
        if qualname is None or qualname != name or "<" in qualname:
            raise TypeError(
                f"a write must be a module-level function, not {fn!r}: another worker "
                "finds it by its module and name"
            )
        self.name = f"{fn.__module__}:{qualname}"
        if self.name in _REGISTRY:
            raise ValueError(f"a write named {self.name} is declared already")
        self.fn = fn
        self.one_write = one_write
        self.background = background
        _REGISTRY[self.name] = self

    def __repr__(self) -> str:
        return f"WriteOp({self.name})"


AnyOp = WriteOp[..., Any]


def find(name: str) -> AnyOp | None:
    """The write declared under ``name``, its module imported if it was not yet."""
    op = _REGISTRY.get(name)
    if op is None:
        module, _, _ = name.partition(":")
        try:
            importlib.import_module(module)
        except Exception:  # another version's write, say: refused, not a fault of the relay
            return None
        op = _REGISTRY.get(name)
    return op


def check_submittable(op: object, kwargs: dict[str, Any]) -> None:
    """Refuse a write that cannot be submitted: not a declared one, or arguments given by
    keyword (a ``TypeError`` saying which)."""
    if type(op) is not WriteOp:
        raise TypeError(f"not a declared write: {op!r} (declare a WriteOp at module level)")
    if kwargs:
        raise TypeError(f"{op.name}: a write's arguments go by position, as they travel")
