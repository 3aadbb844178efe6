"""``create_app(settings)``: the ASGI app, composed of the features. Nothing happens at import.

The lifespan migrates and opens the database, gives each feature's routes their stores, and
starts the background jobs (webhook delivery, the sandbox purge). Each feature declares its
routes once (``http/routing.py``), and every error of every layer becomes its answer in one
place (``http/boundary.py``).

Requests flow through ``Observe`` (request id, metrics, access log, the last resort), CORS
when configured, ``DrainUnreadBody``, ``FastRoutes`` (the hot routes, served directly), and
then Starlette for everything else: plain ASGI layers, each a few lines, in front of the
framework rather than inside its middleware stack, which cost a plant request Starlette's own
outer layers too. Under granian the native routes skip the ASGI layers altogether, unless CORS
is on (its layer is an ASGI one).
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.types import ASGIApp

from .auth import store as auth_store
from .auth.backends import token_store_for
from .auth.bearer import Authenticator
from .auth.jwt.callers import jwt_callers
from .db import open_database
from .db.migrate import upgrade
from .http.boundary import STARLETTE_HANDLERS
from .http.cors import ContractCORS
from .http.dispatch import FastRoutes
from .http.keepalive import DrainUnreadBody
from .http.ratelimit import RateLimits
from .http.responses import encoder
from .http.routing import Mount, Route, hot_routes, native_routes, starlette_routes
from .http.rsgi import RSGIBridge
from .openapi.docs_page import DocsPage
from .openapi.document import build_document
from .openapi.parts import Document, DocumentPart
from .ops import health, metrics
from .ops.health import HealthRoutes
from .ops.logs import WEBHOOK_LOGGER, access_logger, configure_logging
from .ops.observe import Observe
from .plants import openapi as plants_openapi
from .plants import store as plants_store
from .plants.backends import plant_store_for
from .plants.cursors import CursorCodec
from .plants.routes import PlantRoutes
from .processes.duty import OncePerMachine
from .processes.inheritance import Inheritance
from .sandbox import openapi as sandbox_openapi
from .sandbox.backends import sandbox_store_for
from .sandbox.issuer import SandboxIssuer, issue_window_seconds
from .sandbox.purge import SandboxPurge, purge_interval
from .sandbox.routes import SandboxRoutes
from .settings import Settings, load_settings
from .webhooks import openapi as webhooks_openapi
from .webhooks.backends import webhook_store_for
from .webhooks.dispatcher import new_dispatcher
from .webhooks.routes import WebhookRoutes


@dataclass
class _Features:
    """Each feature's routes, declared when the app is built and started by its lifespan."""

    settings: Settings
    plants: PlantRoutes = field(init=False)
    webhooks: WebhookRoutes = field(init=False)
    health: HealthRoutes = field(default_factory=HealthRoutes)
    sandbox: SandboxRoutes | None = field(init=False)

    def __post_init__(self) -> None:
        self.plants = PlantRoutes(self.settings)
        self.webhooks = WebhookRoutes(self.settings)
        self.sandbox = SandboxRoutes() if self.settings.sandbox else None

    def routes(self) -> list[Route | Mount]:
        """The service's one route table."""
        return [
            *(self.sandbox.routes() if self.sandbox is not None else []),
            *self.plants.routes(),
            *self.webhooks.routes(),
            *self.health.routes(),
        ]


def document_parts(settings: Settings | None) -> list[DocumentPart]:
    """The features' parts of the OpenAPI document, in the order it lists them."""
    parts = [plants_openapi.document_part(), webhooks_openapi.document_part()]
    parts.append(health.document_part())
    if settings is not None and settings.sandbox:
        parts.append(sandbox_openapi.document_part(settings))
    return parts


def openapi_document(settings: Settings | None = None) -> Document:
    """The OpenAPI document of the service ``settings`` describe."""
    return build_document(settings, document_parts(settings))


def create_app(
    settings: Settings, *, inherited: Inheritance | None = None, freeze_after_start: bool = False
) -> Observe:
    """Build the service for ``settings``; the database opens when the server starts it.

    ``inherited``: what a worker of ``plantstore serve`` shares with the others (none for a
    process of its own). ``freeze_after_start`` is for server processes: see
    ``_freeze_startup_objects``.
    """
    inherited = inherited or Inheritance(settings)
    lines = access_logger()  # request lines (if on) and webhook attempt lines (at info)
    access_log = lines if settings.access_log else None
    features = _Features(settings)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await asyncio.to_thread(upgrade, settings.database_url)
        database = open_database(
            settings,
            on_commit=metrics.observe_commit,
            on_lock_wait=metrics.observe_lock_wait,
            on_refusal=metrics.observe_refusal,
        )
        await database.open()
        plants = plant_store_for(database, settings.max_plants_per_user)
        metrics.time_operations(plants, plants_store.TIMED_OPERATIONS)
        tokens = token_store_for(database)
        metrics.time_operations(tokens, auth_store.TIMED_OPERATIONS)
        jwt = jwt_callers(settings, tokens)
        webhooks = webhook_store_for(database)
        await webhooks.open()
        attempt_lines = (
            lines if logging.getLogger(WEBHOOK_LOGGER).isEnabledFor(logging.INFO) else None
        )
        dispatcher = new_dispatcher(webhooks, settings, attempt_lines)
        # Also with sandbox mode off: users issued while it was on still expire.
        sandbox = sandbox_store_for(database)
        purge = SandboxPurge(
            sandbox, purge_interval(settings.sandbox_ttl_seconds), issue_window_seconds(settings)
        )
        background = OncePerMachine(
            [(dispatcher.start, dispatcher.stop), (purge.begin, purge.stop)], inherited.duty
        )
        try:
            if jwt is not None:
                await jwt.start()
            limits = RateLimits(
                settings.rate_limit,
                settings.auth_failure_limit,
                settings.redis_url,
                inherited.machine_table,  # serve's workers: one budget for them all
            )
            authenticator = Authenticator(
                tokens, settings.token_cache_seconds, limits, settings.trusted_proxy_addresses, jwt
            )
            features.plants.start(plants, authenticator, CursorCodec(await plants.cursor_key()))
            features.webhooks.start(webhooks, authenticator, dispatcher)
            features.health.start(database)
            if features.sandbox is not None:
                issuer = SandboxIssuer(sandbox, settings, await sandbox.address_key())
                features.sandbox.start(issuer)
            await background.start()  # here, or in whichever worker holds the machine's duty
            if freeze_after_start:
                _freeze_startup_objects()
            yield
        finally:
            await background.stop()
            if jwt is not None:
                await jwt.close()
            await webhooks.close()
            await database.close()
            lines.flush()
            metrics.TALLY.write()  # what the last 50 ms counted

    docs = DocsPage(encoder.encode(openapi_document(settings)))
    table = [*features.routes(), *docs.routes()]
    app = Starlette(
        routes=starlette_routes(table),
        lifespan=lifespan,
        exception_handlers=STARLETTE_HANDLERS,
    )
    app.router.redirect_slashes = False
    app.state.openapi = docs.document
    app.state.features = features  # what each route serves with, once the lifespan started it
    app.state.routes = table
    layers: ASGIApp = DrainUnreadBody(
        FastRoutes(app, hot_routes(table)),
        settings.max_body_bytes,
        settings.body_timeout,
    )
    if settings.cors_origin_list:  # otherwise browsers keep their same-origin rule
        layers = ContractCORS(layers, allow_origins=settings.cors_origin_list)
    return Observe(layers, access_log=access_log, state=app.state)


def create_app_from_env() -> Observe:
    """ASGI factory for servers started by import string (uvicorn --factory, say)."""
    settings = load_settings()
    configure_logging(settings.log_level)
    return create_app(settings, freeze_after_start=True)


def worker_app(inherited: Inheritance) -> RSGIBridge:
    """What each worker of ``plantstore serve`` serves (``processes/supervisor.py`` calls it
    in the worker): the ASGI service over granian's RSGI, with the list served natively
    (``http/rsgi.py``). With CORS on, every route goes through the ASGI layers, where the
    CORS layer is."""
    settings = inherited.settings
    configure_logging(settings.log_level)
    observe = create_app(settings, inherited=inherited, freeze_after_start=True)
    native = {}
    if not settings.cors_origin_list:
        for route in native_routes(observe.state.routes):
            native[route.method, route.path] = observe.native(route.handler, route.path)
    return RSGIBridge(observe, native)


def _freeze_startup_objects() -> None:
    """Take everything alive after start-up out of the cyclic collector's sight.

    Modules, migrations' SQLAlchemy metadata, settings and the OpenAPI document live as long
    as the process, yet every full collection walked them all; frozen (``gc.freeze``), they
    are skipped, and the collections a busy worker runs cost its requests less.
    """
    gc.collect()
    gc.freeze()
