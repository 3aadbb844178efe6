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


class MalformedHeader(ValueError):
    """A header sent more than once where one is allowed, or with a value that is not text."""


def one_value(scope: Mapping[str, Any], headers: Any, name: str) -> str | None:
    """The value of header ``name``, which a request may carry once; None when it is absent.

    ``MalformedHeader`` when it was sent more than once (a proxy in front may have read
    another of its lines than this service would: RFC 9110 section 5.3 allows one for such a
    field), or with a value granian could not read as text: granian hides such a value from
    the header list the ASGI layers see, and its own map (``RSGI_HEADERS_KEY``) still names
    it. ``headers`` is the request's, which a native route reads from granian directly.
    """
    raw = scope.get(RSGI_HEADERS_KEY, headers)
    if not hasattr(raw, "get_all"):  # under another server: ASGI lists every line
        values = raw.getlist(name)
    elif raw.get(name) is not None:
        values = raw.get_all(name)
    elif name in raw:
        raise MalformedHeader(f"the {name.title()} header must be visible ASCII")
    else:
        return None
    if len(values) > 1:
        raise MalformedHeader(f"send one {name.title()} header, not {len(values)}")
    return str(values[0]) if values else None
