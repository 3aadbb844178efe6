"""The wire shapes (seed §2) as msgspec Structs: they decode, validate and encode.

The same Structs feed the OpenAPI document, so the schema users see is the one enforced.
"""

from __future__ import annotations

import re
from typing import Annotated

import msgspec
from msgspec import UNSET, Meta, UnsetType

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1

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


class Error(msgspec.Struct):
    """Every error answer: ``error`` equals the HTTP status."""

    error: Annotated[
        int,
        Meta(
            ge=100,
            le=599,
            description="The HTTP status code",
            extra_json_schema={"format": "int32"},
        ),
    ]
    message: Annotated[str, Meta(description="What was wrong, naming the field or parameter")]


class Status(msgspec.Struct):
    """The body of the health and readiness routes."""

    status: str


encoder = msgspec.json.Encoder()
new_plant_decoder = msgspec.json.Decoder(NewPlant)
