"""``POST /sandbox/tokens``: a token for a fresh sandbox user, limited per client address.

The route exists only in sandbox mode (``app.py`` adds it then); without it the path is a 404
like any unknown one. The issuance limit is a budget like the rate limits' (shared through
Redis when ``PLANTSTORE_REDIS_URL`` is set), spent before anything is written.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..errors import TooManyRequests
from ..sandbox import issue_sandbox_token
from ..schemas import encoder
from ..settings import Settings
from ..store import Store
from .ratelimit import Budget, SharedBudget, client_address, retry_after, standalone_budget
from .responses import json_response
from .services import services_of


class SandboxIssuer:
    """Issues sandbox tokens within each client address's budget."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self._store = store
        self._ttl = settings.sandbox_ttl_seconds
        self._max_plants = settings.sandbox_max_plants
        self._trusted_proxies = settings.trusted_proxy_addresses
        self._budget: Budget | SharedBudget | None = standalone_budget(
            settings.sandbox_issue_limit, settings.redis_url, "sandbox-issue"
        )

    async def issue(self, request: Request) -> bytes:
        """The encoded token answer; a 429 once the caller's address has had its tokens."""
        if self._budget is not None:
            address = client_address(request.scope, self._trusted_proxies)
            if wait := await self._budget.spend(address):
                raise TooManyRequests(
                    "too many sandbox tokens from this address; retry later", retry_after(wait)
                )
        token = await issue_sandbox_token(self._store, self._ttl, self._max_plants)
        return encoder.encode(token)


async def create_sandbox_token(request: Request) -> Response:
    issuer = services_of(request).sandbox
    assert issuer is not None, "the route exists only in sandbox mode"
    return json_response(await issuer.issue(request))
