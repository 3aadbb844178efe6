"""Fuzz the create body: ``decode_new_plant`` on arbitrary bytes.

The only exception allowed is the 400 (``BadRequest``). Beyond not crashing, the decoder is
checked against a reference written straight from docs/api.md on top of the standard
library's JSON parser: a body is accepted exactly when the reference accepts it, and then
with the same id, name and tag. An accepted plant also satisfies the contract on its own:
an int64 id, a name of 1-256 code points and a tag absent or of 1-64, none with a control
character or a lone surrogate.

    .venv/bin/python -m trials.fuzz.harnesses.fuzz_body -runs=100000
"""

from __future__ import annotations

import json
import re
from typing import Any

from .fuzzlib import fuzz, instrumented_imports

with instrumented_imports():
    from msgspec import UnsetType

    from plantstore.errors import BadRequest
    from plantstore.http.parsing import INT64_MAX, INT64_MIN
    from plantstore.plants.schemas import NewPlant, decode_new_plant

_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")  # Cc, and lone surrogates
_MEMBERS = {"id", "name", "tag"}


class _Refused(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    members = dict(pairs)
    if len(members) != len(pairs):
        raise _Refused("a member appears twice")
    return members


def _refuse_constant(name: str) -> None:
    raise _Refused(f"{name} is not JSON")


def _text(value: object, longest: int) -> bool:
    return isinstance(value, str) and 1 <= len(value) <= longest and not _FORBIDDEN.search(value)


def reference(body: bytes) -> tuple[int, str, str | None] | None:
    """docs/api.md's NewPlant rules: the plant a body carries, or None if it is refused."""
    try:
        text = body.decode("utf-8")  # strict: invalid UTF-8 is refused
        document = json.loads(
            text, object_pairs_hook=_no_duplicates, parse_constant=_refuse_constant
        )
    except (_Refused, ValueError, RecursionError):
        return None
    if not isinstance(document, dict) or not set(document) <= _MEMBERS:
        return None
    plant_id, name, tag = document.get("id"), document.get("name"), document.get("tag")
    if type(plant_id) is not int or not INT64_MIN <= plant_id <= INT64_MAX:
        return None  # a bool, a float such as 1.0, a string or null is not an id
    if not _text(name, 256) or ("tag" in document and not _text(tag, 64)):
        return None
    assert isinstance(name, str)
    return plant_id, name, tag if isinstance(tag, str) else None


def check_plant(plant: NewPlant) -> tuple[int, str, str | None]:
    """The contract's invariants on an accepted plant, checked on the decoded value alone."""
    assert type(plant.id) is int, plant.id
    assert INT64_MIN <= plant.id <= INT64_MAX, plant.id
    assert _text(plant.name, 256), plant.name
    tag = None if isinstance(plant.tag, UnsetType) else plant.tag
    assert tag is None or _text(tag, 64), tag
    return plant.id, plant.name, tag


def test_one_input(data: bytes) -> None:
    expected = reference(data)
    try:
        plant = decode_new_plant(data)
    except BadRequest as exc:
        refusal = exc
    else:
        assert check_plant(plant) == expected, f"accepted as {plant!r}, reference {expected!r}"
        return
    assert refusal.status == 400, refusal
    assert refusal.message, refusal
    assert expected is None, f"refused a valid NewPlant ({refusal.message}): {data!r}"


SEEDS = [
    b'{"id": 1, "name": "Monstera", "tag": "tropical"}',
    b'{"id": -9223372036854775808, "name": "x"}',
    b'{"id": 9223372036854775807, "name": "\\u00e9\\ud83c\\udf31", "tag": "t"}',
    b'{"id": 1, "name": "a", "name": "b"}',
    b'{"id": 1, "n\\u0061me": "a", "name": "b"}',
    b'{"id": 1.0, "name": "x"}',
    b'{"id": true, "name": "x"}',
    b'{"id": 1, "name": "x", "tag": null}',
    b'{"id": 1, "name": "x", "extra": 1}',
    b'{"id": 1, "name": "\\ud800"}',
    b'{"id": 1, "name": "\\u0000"}',
    b'{"id": 1, "name": "\xc2\x85"}',
    b'{"id": 1, "name": "\xff"}',
    b' \t\r\n{"name":"x","id":0} ',
    b"[]",
    b"",
    b"null",
    # Python's int() refuses strings over 4,300 digits (CVE-2020-10735): numbers at the limit.
    b'{"id": 1' + b"0" * 4299 + b', "name": "x"}',
]

if __name__ == "__main__":
    fuzz(test_one_input, SEEDS, max_len=8192)
