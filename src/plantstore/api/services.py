"""What handlers need at request time, built once per process by the app's lifespan."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from ..plants import CursorCodec
from ..settings import Settings
from ..store import Store
from .auth import Authenticator


@dataclass(frozen=True, slots=True)
class Services:
    settings: Settings
    store: Store
    authenticator: Authenticator
    cursors: CursorCodec


def services_of(request: Request) -> Services:
    services: Services = request.app.state.services
    return services
