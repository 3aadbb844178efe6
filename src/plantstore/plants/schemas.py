"""The plant wire shapes as msgspec Structs: they decode, validate and encode.

The same Structs feed the OpenAPI document, so the schema users see is the one enforced.
"""

from __future__ import annotations

import re
from typing import Annotated

import msgspec
from msgspec import UNSET, Meta, UnsetType

from ..http.parsing import INT64_MAX, INT64_MIN, decode_strict

# No C0/C1 control characters (Unicode category Cc). This is the ECMA-262 pattern the
# document publishes; Python's ``$`` also matches before a final newline, so the service
# enforces it with its own search in ``NewPlant.__post_init__``.
NO_CONTROL_CHARS = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
_CONTROL_CHAR = re.compile("[\x00-\x1f\x7f-\x9f]")

PlantId = Annotated[
    int,
    Meta(
        ge=INT64_MIN,
        le=INT64_MAX,
        description="Identification number of the plant, unique per user",
        extra_json_schema={"format": "int64"},
    ),
]
PlantName = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=256,
        description="The name of the plant",
        extra_json_schema={"pattern": NO_CONTROL_CHARS},
    ),
]
PlantTag = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=64,
        description="Tag that specifies the type",
        extra_json_schema={"pattern": NO_CONTROL_CHARS},
    ),
]


class Plant(msgspec.Struct, omit_defaults=True):
    """A plant as the service answers it: no id, and no tag member when it has none."""

    name: PlantName
    tag: PlantTag | UnsetType = UNSET


class NewPlant(msgspec.Struct, forbid_unknown_fields=True):
    """The body of a create: a Plant plus its required id."""

    id: PlantId
    name: PlantName
    tag: PlantTag | UnsetType = UNSET

    def __post_init__(self) -> None:
        if _CONTROL_CHAR.search(self.name):
            raise ValueError("`name` must not contain control characters - at `$.name`")
        if isinstance(self.tag, str) and _CONTROL_CHAR.search(self.tag):
            raise ValueError("`tag` must not contain control characters - at `$.tag`")


new_plant_decoder = msgspec.json.Decoder(NewPlant)
_MEMBER_KEYS = (b'"id"', b'"name"', b'"tag"')


def decode_new_plant(body: bytes) -> NewPlant:
    """Decode a NewPlant strictly; every violation is a 400 whose message names the member."""
    return decode_strict(body, new_plant_decoder, "NewPlant", _may_repeat_a_member)


def _may_repeat_a_member(body: bytes) -> bool:
    """Whether a body that decoded as a NewPlant could hold a member twice.

    msgspec keeps the last of repeated members, so repeats need a second parse, which cost a
    fifth of a create. A decoded body has no members but ``id``, ``name`` and ``tag``; with no
    escape anywhere, a repeat must show one of them quoted twice. Otherwise, parse again.
    """
    return b"\\" in body or any(body.count(key) > 1 for key in _MEMBER_KEYS)
