"""What the layers of a request leave in its ASGI scope for the layers outside them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

REQUEST_ID_KEY = "plantstore.request_id"  # set by the observing layer, read by the 500
ROUTE_KEY = "plantstore.route"  # set by ``FastRoutes``, which routes without Starlette
USER_KEY = "plantstore.user_id"  # set by the Authenticator, for the access log
# granian's own header map, set by the RSGI bridge: it still names a header whose value is
# not visible ASCII, which granian leaves out of the header list the ASGI layers see.
RSGI_HEADERS_KEY = "plantstore.rsgi_headers"


def sent_unreadable(scope: Mapping[str, Any], headers: Any, name: str) -> bool:
    """Whether the client sent header ``name`` with a value granian could not read as text
    (``headers`` is the request's, which a native route reads from granian directly)."""
    raw = scope.get(RSGI_HEADERS_KEY, headers)  # under another server: ASGI lists them all
    return name in raw and raw.get(name) is None
