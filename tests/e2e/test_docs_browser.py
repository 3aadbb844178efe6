"""/docs in a real browser: Swagger UI renders every operation from the service's own assets,
and "Try it out" with a bearer token creates a plant that the API then lists.

``test_openapi_docs.py`` checks the page's HTML and assets as files; only a browser runs the
JavaScript and so sees what it really fetches (a CDN, the validator badge) and whether the
Authorize dialog and Execute work against the live service, with an operator's token and
with a JWT from the (test-made) identity provider. Needs Debian's chromium at
/usr/bin/chromium (driven by the playwright package; no downloaded browser).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Request, expect, sync_playwright

from tests.auth.jwt.jwt_support import TestProvider
from tests.fixtures.calls import bearer
from tests.fixtures.servers import LiveServer, start_server, stop_server

pytestmark = [pytest.mark.browser, pytest.mark.server]

CHROMIUM = Path("/usr/bin/chromium")
# Headless on a machine with no GPU, no sandbox privileges and no outside network: without the
# background-networking flags chromium calls Google's services on its own.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 30_000  # generous: two cores, and other tests run beside this one
HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}
NEW_PLANT = {"id": 42, "name": "Fern", "tag": "shade"}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.skip(
            f"browser tests skipped: {CHROMIUM} not found; install it with "
            "`apt-get update && apt-get install -y chromium`"
        )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_FLAGS, timeout=TIMEOUT_MS
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> TestProvider:
    return TestProvider(tmp_path_factory.mktemp("docs-browser-provider"))


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, provider: TestProvider
) -> Iterator[LiveServer]:
    directory = tmp_path_factory.mktemp("docs-browser")
    live = start_server(
        f"sqlite:///{directory / 'plantstore.db'}", directory / "server.log", **provider.env()
    )
    try:
        assert live.token, "the first start should issue and print a token for user 'default'"
        yield live
    finally:
        stop_server(live)


class PageLog:
    """What a page did: every request it made and every error it reported."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.errors: list[str] = []

    def on_request(self, request: Request) -> None:
        self.requests.append(request)

    def on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(f"console: {message.text} at {message.location}")

    def on_page_error(self, error: Exception) -> None:
        self.errors.append(f"uncaught: {error}")

    def assert_stayed_home(self, base_url: str) -> None:
        """Every request went to the service itself, and nothing reported an error."""
        home = urlsplit(base_url)
        urls = [request.url for request in self.requests]
        assert f"{base_url}/openapi.json" in urls, urls  # the log saw the page's own fetches
        for url in urls:
            parts = urlsplit(url)
            assert (parts.scheme, parts.netloc) == (home.scheme, home.netloc), url
        assert self.errors == []


@pytest.fixture
def docs(browser: Browser, server: LiveServer) -> Iterator[tuple[Page, PageLog]]:
    """A fresh browser context (no stored authorization) showing /docs, and its log."""
    log = PageLog()
    context = browser.new_context(base_url=server.base_url)
    try:
        context.set_default_timeout(TIMEOUT_MS)
        context.on("request", log.on_request)  # the context's: popups would count too
        page = context.new_page()
        page.on("console", log.on_console)
        page.on("pageerror", log.on_page_error)
        page.goto("/docs")
        yield page, log
    finally:
        context.close()  # after this no more requests are recorded


def documented_operations(server: LiveServer) -> set[tuple[str, str]]:
    """Each operation of the served document, the webhooks it sends included (Swagger UI
    renders those as operations too, under their names)."""
    with server.client() as http:
        document = http.get("/openapi.json").json()
    return {
        (method.upper(), path)
        for section in ("paths", "webhooks")
        for path, item in document.get(section, {}).items()
        for method in item
        if method in HTTP_METHODS
    }


def test_every_operation_renders_from_local_assets(
    docs: tuple[Page, PageLog], server: LiveServer
) -> None:
    page, log = docs
    expected = documented_operations(server)
    assert {("GET", "/plants"), ("POST", "/plants"), ("DELETE", "/plants/{id}")} <= expected
    expect(page.locator(".info .title")).to_contain_text("Plant Store", timeout=TIMEOUT_MS)
    operations = page.locator(".opblock")
    expect(operations).to_have_count(len(expected), timeout=TIMEOUT_MS)
    rendered = {
        (
            operation.locator(".opblock-summary-method").inner_text(),
            operation.locator(".opblock-summary-path").get_attribute("data-path"),
        )
        for operation in operations.all()
    }
    assert rendered == expected
    expect(page.locator(".errors-wrapper")).to_have_count(0, timeout=TIMEOUT_MS)
    page.context.close()
    log.assert_stayed_home(server.base_url)


def test_try_it_out_creates_a_plant_with_the_token(
    docs: tuple[Page, PageLog], server: LiveServer
) -> None:
    page, log = docs
    with server.client() as http:
        before = http.get("/plants", headers=bearer(server.token))
    assert before.status_code == 200
    assert before.json() == []

    authorize(page, server.token)

    create = page.locator(".opblock-post").filter(
        has=page.locator('.opblock-summary-path[data-path="/plants"]')
    )
    create.locator(".opblock-summary-control").click()
    try_out = create.locator("button.try-out__btn")
    expect(try_out).to_be_visible(timeout=TIMEOUT_MS)
    # init.js sets tryItOutEnabled, so the operation may open already in "Try it out" mode.
    if try_out.inner_text().strip() == "Try it out":
        try_out.click()
    expect(try_out).to_have_text("Cancel", timeout=TIMEOUT_MS)
    editor = create.locator("textarea.body-param__text")
    expect(editor).to_be_editable(timeout=TIMEOUT_MS)
    editor.fill(json.dumps(NEW_PLANT))

    with page.expect_response(
        lambda response: (
            response.request.method == "POST" and response.url == f"{server.base_url}/plants"
        ),
        timeout=TIMEOUT_MS,
    ) as answer:
        create.get_by_role("button", name="Execute").click()
    request = answer.value.request
    assert request.headers.get("authorization") == f"Bearer {server.token}"
    assert request.post_data_json == NEW_PLANT

    shown = create.locator(".live-responses-table")
    expect(shown.locator("tbody .response-col_status")).to_have_text("200", timeout=TIMEOUT_MS)
    body = shown.locator("tbody .response-col_description .highlight-code code")
    expect(body).to_contain_text("Fern", timeout=TIMEOUT_MS)
    assert json.loads(body.inner_text()) == {"name": "Fern", "tag": "shade"}
    page.context.close()
    log.assert_stayed_home(server.base_url)

    with server.client() as http:  # plain httpx, past the browser
        after = http.get("/plants", headers=bearer(server.token))
    assert after.status_code == 200
    assert after.json() == [{"name": "Fern", "tag": "shade"}]


def authorize(page: Page, token: str) -> None:
    """Enter ``token`` in the Authorize dialog, as a reader of the docs would."""
    page.locator(".auth-wrapper button.authorize").click()
    dialog = page.locator(".dialog-ux .modal-ux")
    dialog.locator("#auth-bearer-value").fill(token)
    dialog.get_by_role("button", name="Apply credentials").click()
    expect(dialog.get_by_role("button", name="Remove authorization")).to_be_visible(
        timeout=TIMEOUT_MS
    )
    dialog.get_by_role("button", name="Close").click()
    expect(dialog).to_be_hidden(timeout=TIMEOUT_MS)
    expect(page.locator(".auth-wrapper button.authorize")).to_have_class(
        re.compile(r"(^|\s)locked(\s|$)"), timeout=TIMEOUT_MS
    )


def test_authorize_with_a_jwt_lists_that_users_plants(
    docs: tuple[Page, PageLog], server: LiveServer, provider: TestProvider
) -> None:
    page, log = docs
    token = provider.token("docs-reader", "ES256")
    with server.client() as http:  # the JWT's user has a plant; the operator's user is elsewhere
        created = http.post("/plants", json={"id": 3, "name": "Moss"}, headers=bearer(token))
    assert created.status_code == 200, created.text

    authorize(page, token)
    listing = page.locator(".opblock-get").filter(
        has=page.locator('.opblock-summary-path[data-path="/plants"]')
    )
    listing.locator(".opblock-summary-control").click()
    try_out = listing.locator("button.try-out__btn")
    expect(try_out).to_be_visible(timeout=TIMEOUT_MS)
    if try_out.inner_text().strip() == "Try it out":
        try_out.click()
    with page.expect_response(
        lambda response: (
            response.request.method == "GET"
            and urlsplit(response.url).path == "/plants"
            and response.url.startswith(server.base_url)
        ),
        timeout=TIMEOUT_MS,
    ) as answer:
        listing.get_by_role("button", name="Execute").click()
    assert answer.value.request.headers.get("authorization") == f"Bearer {token}"

    shown = listing.locator(".live-responses-table")
    expect(shown.locator("tbody .response-col_status")).to_have_text("200", timeout=TIMEOUT_MS)
    body = shown.locator("tbody .response-col_description .highlight-code code")
    expect(body).to_contain_text("Moss", timeout=TIMEOUT_MS)
    assert json.loads(body.inner_text()) == [{"name": "Moss"}]
    page.context.close()
    log.assert_stayed_home(server.base_url)
