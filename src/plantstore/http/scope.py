"""What the layers of a request leave in its ASGI scope for the layers outside them."""

from __future__ import annotations

REQUEST_ID_KEY = "plantstore.request_id"  # set by the observing layer, read by the 500
ROUTE_KEY = "plantstore.route"  # set by ``FastRoutes``, which routes without Starlette
USER_KEY = "plantstore.user_id"  # set by the Authenticator, for the access log
