"""What a feature hands the document (``DocumentPart``), and the pieces parts share: schema
references, Error responses, the common error statuses and the ``Retry-After`` header."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

JSON = "application/json"
Document = dict[str, Any]


@dataclass
class DocumentPart:
    """One feature's share of the document, merged in the order the app lists the parts.

    ``amend`` changes the assembled document where a feature refines another's operation
    (sandbox mode names its smaller quota on ``POST /plants``).
    """

    paths: dict[str, Any] = field(default_factory=dict)
    schemas: dict[str, Any] = field(default_factory=dict)
    responses: dict[str, Any] = field(default_factory=dict)
    tags: list[dict[str, str]] = field(default_factory=list)
    webhooks: dict[str, Any] = field(default_factory=dict)
    amend: Callable[[Document], None] | None = None


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def error(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    """A response answered with the Error body."""
    response: dict[str, Any] = {
        "description": description,
        "content": {JSON: {"schema": ref("Error")}},
    }
    if headers:
        response["headers"] = headers
    return response


def schemas_of(structs: list[Any]) -> dict[str, Any]:
    """The JSON schemas of msgspec Structs (and of the Structs they hold), by name."""
    _, found = msgspec.json.schema_components(structs, ref_template="#/components/schemas/{name}")
    return found


FAULT = error("An unexpected fault of the service; the details are logged, not sent.")
# Every operation behind a bearer token may answer these.
COMMON_ERRORS = {
    "401": {"$ref": "#/components/responses/Unauthorized"},
    "429": {"$ref": "#/components/responses/TooManyRequests"},
    "500": FAULT,
    "503": {"$ref": "#/components/responses/Unavailable"},
}
RETRY_AFTER = {
    "description": "Seconds to wait before retrying.",
    "required": True,
    "schema": {"type": "integer", "minimum": 1},
}
