"""schemathesis hooks for tests/e2e/test_schemathesis.py.

JSON Schema 2020-12 compares numbers by value, so to it ``1.0`` is an integer, and
schemathesis deliberately sends whole floats as "valid" ids. The contract rejects them
(``id`` must be a JSON integer literal), which no JSON Schema can express. This hook spells
such ids as integers, so a 400 for ``1.0`` is not reported as a valid request refused;
tests/plants/test_create.py pins the rejection itself.
"""

from __future__ import annotations

from typing import Any

import schemathesis


@schemathesis.hook
def map_body(context: schemathesis.HookContext, body: Any) -> Any:
    plant_id = body.get("id") if isinstance(body, dict) else None
    if isinstance(plant_id, float) and plant_id.is_integer():
        return {**body, "id": int(plant_id)}
    return body
