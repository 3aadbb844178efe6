"""What handlers need at request time, built once per process by the app's lifespan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import Request

from ..plants import CursorCodec
from ..settings import Settings
from ..store import Store
from .auth import Authenticator

if TYPE_CHECKING:
    from ..store.webhooks_base import WebhookStore
    from ..webhooks.dispatcher import Dispatcher
    from .sandbox import SandboxIssuer


@dataclass(frozen=True, slots=True)
class Services:
    settings: Settings
    store: Store
    authenticator: Authenticator
    cursors: CursorCodec
    sandbox: SandboxIssuer | None = None  # only in sandbox mode
    webhooks: WebhookStore | None = None  # opened by the lifespan beside the store
    dispatcher: Dispatcher | None = None


def services_of(request: Request) -> Services:
    services: Services = request.app.state.services
    return services
