"""Sandbox mode as a docs visitor meets it, in Debian's chromium: the /docs page's "Get a sandbox
token" button authorizes "Try it out" in one click, each visitor sees only their own plants, an
expired token stops working and its plants leave the database, the issuance limit answers 429,
without the mode there is no button (and no route), and a docs page on another origin does all
of it through CORS. Driven as in test_docs_browser.py.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import threading
import time
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Locator, Page, expect

from plantstore.openapi.docs_page import DOCS_DIR
from tests.e2e.test_docs_browser import TIMEOUT_MS, PageLog, browser, documented_operations
from tests.fixtures.calls import assert_error, bearer
from tests.fixtures.servers import LiveServer, free_port, start_server, stop_server
from tests.sandbox.test_sandbox import rows

pytestmark = [pytest.mark.browser, pytest.mark.server]

__all__ = ["browser"]  # the chromium fixture, shared with test_docs_browser.py

SANDBOX_ENV = {"PLANTSTORE_SANDBOX": "true", "PLANTSTORE_SANDBOX_ISSUE_LIMIT": "off"}
GET_TOKEN = "Get a sandbox token"


@contextlib.contextmanager
def serving(tmp_path: Path, name: str, **env: str) -> Iterator[LiveServer]:
    server = start_server(f"sqlite:///{tmp_path / f'{name}.db'}", tmp_path / f"{name}.log", **env)
    try:
        yield server
    finally:
        stop_server(server)


@contextlib.contextmanager
def visitor(browser: Browser, base_url: str, page_path: str = "/docs") -> Iterator[Page]:
    """A visitor with a browser of their own (nothing stored), on the docs page."""
    context: BrowserContext = browser.new_context(base_url=base_url)
    try:
        context.set_default_timeout(TIMEOUT_MS)
        page = context.new_page()
        page.goto(page_path)
        expect(page.locator(".info .title")).to_contain_text("Plant Store", timeout=TIMEOUT_MS)
        yield page
    finally:
        context.close()


def get_sandbox_token(page: Page) -> str:
    """Click the button; return the token it authorized "Try it out" with."""
    with page.expect_response(lambda answer: answer.url.endswith("/sandbox/tokens")) as answer:
        page.get_by_role("button", name=GET_TOKEN, exact=True).click()
    assert answer.value.status == 200
    status = page.locator(".sandbox-token__status")
    expect(status).to_contain_text("Authorized until", timeout=TIMEOUT_MS)
    token = status.get_attribute("data-token")
    assert token is not None
    assert re.fullmatch(r"pst_[A-Za-z0-9_-]{43}", token)
    expect(page.locator(".auth-wrapper button.authorize")).to_have_class(
        re.compile(r"(^|\s)locked(\s|$)"), timeout=TIMEOUT_MS
    )
    return token


def operation(page: Page, method: str, path: str) -> Locator:
    block = page.locator(f".opblock-{method.lower()}").filter(
        has=page.locator(f'.opblock-summary-path[data-path="{path}"]')
    )
    return block


def try_it(page: Page, method: str, path: str, body: object = None) -> tuple[int, str]:
    """Open the operation, fill the body, Execute; return the status and body the page shows."""
    block = operation(page, method, path)
    if not block.locator("button.try-out__btn").is_visible():
        block.locator(".opblock-summary-control").click()
    try_out = block.locator("button.try-out__btn")
    expect(try_out).to_be_visible(timeout=TIMEOUT_MS)
    if try_out.inner_text().strip() == "Try it out":
        try_out.click()
    if body is not None:
        editor = block.locator("textarea.body-param__text")
        expect(editor).to_be_editable(timeout=TIMEOUT_MS)
        editor.fill(json.dumps(body))
    with page.expect_response(
        lambda answer: answer.request.method == method and answer.url.split("?")[0].endswith(path)
    ) as answer:
        block.get_by_role("button", name="Execute").click()
    status = answer.value.status
    shown = block.locator(".live-responses-table tbody .response-col_status")
    expect(shown).to_have_text(str(status), timeout=TIMEOUT_MS)
    text = answer.value.text()
    return status, text


def test_visitors_get_tokens_of_their_own_and_try_the_api(browser: Browser, tmp_path: Path) -> None:
    with serving(tmp_path, "sandbox", **SANDBOX_ENV) as server:
        log = PageLog()
        with visitor(browser, server.base_url) as first:
            first.on("console", log.on_console)
            first.on("pageerror", log.on_page_error)
            assert_styled_as_the_page(first)
            token = get_sandbox_token(first)
            status, body = try_it(first, "POST", "/plants", {"id": 7, "name": "Fern"})
            assert (status, json.loads(body)) == (200, {"name": "Fern"})
            status, body = try_it(first, "GET", "/plants")
            assert (status, json.loads(body)) == (200, [{"name": "Fern"}])
        assert log.errors == []
        with visitor(browser, server.base_url) as second:
            other = get_sandbox_token(second)
            assert other != token
            status, body = try_it(second, "GET", "/plants")
            assert (status, json.loads(body)) == (200, [])
        with server.client() as http:  # past the browser, the API agrees
            assert http.get("/plants", headers=bearer(token)).json() == [{"name": "Fern"}]
            assert http.get("/plants", headers=bearer(other)).json() == []


STYLE = ["color", "borderTopColor", "borderTopWidth", "borderRadius", "fontFamily", "fontWeight"]


def assert_styled_as_the_page(page: Page) -> None:
    """The button looks like the page's own Authorize button (swagger-ui.css reaches it),
    not like a browser's default grey button; and it sits within the page's width."""
    get = page.get_by_role("button", name=GET_TOKEN, exact=True)
    expect(get).to_be_visible(timeout=TIMEOUT_MS)
    authorize = page.locator(".auth-wrapper button.authorize")

    def style(button: Locator) -> list[str]:
        styles: list[str] = button.evaluate(
            "(node, names) => names.map((name) => getComputedStyle(node)[name])", STYLE
        )
        return styles

    assert style(get) == style(authorize)
    assert style(get)[0] == "rgb(73, 204, 144)"  # swagger-ui's green, not the default text
    bar = page.locator("#sandbox-token .wrapper").bounding_box()
    content = page.locator(".information-container").bounding_box()
    assert bar is not None
    assert content is not None
    assert (bar["x"], bar["width"]) == (content["x"], content["width"])


def test_an_expired_visitor_is_refused_and_purged(browser: Browser, tmp_path: Path) -> None:
    with serving(tmp_path, "short", **SANDBOX_ENV, PLANTSTORE_SANDBOX_TTL="20s") as server:
        with visitor(browser, server.base_url) as page:
            token = get_sandbox_token(page)
            assert try_it(page, "POST", "/plants", {"id": 1, "name": "Ivy"})[0] == 200
            user = "SELECT id FROM users WHERE name LIKE 'sandbox-%'"
            [(user_id,)] = rows(server.db_url, user)
            assert rows(server.db_url, f"SELECT name FROM plants WHERE user_id = {user_id}") == [
                ("Ivy",)
            ]
            deadline = time.monotonic() + 60
            while rows(server.db_url, user):  # expiry, the 2 s grace, then the purge
                assert time.monotonic() < deadline, server.log_path.read_text()[-2000:]
                time.sleep(0.5)
            status, body = try_it(page, "GET", "/plants")
            assert status == 401
            assert json.loads(body)["error"] == 401
        assert rows(server.db_url, f"SELECT count(*) FROM plants WHERE user_id = {user_id}") == [
            (0,)
        ]
        assert rows(server.db_url, f"SELECT count(*) FROM tokens WHERE user_id = {user_id}") == [
            (0,)
        ]
        with server.client() as http:
            assert_error(http.get("/plants", headers=bearer(token)), 401)


def test_the_issuance_limit_answers_429_on_the_page(browser: Browser, tmp_path: Path) -> None:
    env = {**SANDBOX_ENV, "PLANTSTORE_SANDBOX_ISSUE_LIMIT": "1/hour"}
    with serving(tmp_path, "limited", **env) as server, visitor(browser, server.base_url) as page:
        get_sandbox_token(page)
        with page.expect_response(lambda answer: answer.url.endswith("/sandbox/tokens")) as answer:
            page.get_by_role("button", name=GET_TOKEN, exact=True).click()
        assert answer.value.status == 429
        assert int(answer.value.headers["retry-after"]) >= 1
        expect(page.locator(".sandbox-token__status")).to_contain_text(
            re.compile(
                r"too many sandbox tokens from this address; retry later \(retry in \d+ s\)"
            ),
            timeout=TIMEOUT_MS,
        )


def test_without_sandbox_mode_there_is_no_button_and_no_route(
    browser: Browser, tmp_path: Path
) -> None:
    with serving(tmp_path, "plain") as server, visitor(browser, server.base_url) as page:
        operations = documented_operations(server)
        assert ("POST", "/sandbox/tokens") not in operations
        expect(page.locator(".opblock")).to_have_count(len(operations), timeout=TIMEOUT_MS)
        expect(page.get_by_role("button", name=GET_TOKEN, exact=True)).to_have_count(0)
        expect(page.locator("#sandbox-token")).to_have_count(0)
        answer = page.request.post("/sandbox/tokens")
        assert answer.status == 404
        assert answer.json() == {"error": 404, "message": "no such path"}


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def docs_origin(directory: Path, api: str, port: int) -> Iterator[str]:
    """The docs page served on ``port`` of another host name, rendering the API's document:
    what a docs site hosting Swagger UI does. Yields the page's origin."""
    assets = directory / "docs" / "assets"
    shutil.copytree(DOCS_DIR, assets)
    shutil.copy(DOCS_DIR / "index.html", directory / "docs" / "index.html")
    init = (DOCS_DIR / "init.js").read_text()
    assert '"/openapi.json"' in init
    (assets / "init.js").write_text(init.replace('"/openapi.json"', f'"{api}/openapi.json"'))
    httpd = ThreadingHTTPServer(
        ("127.0.0.1", port), partial(_QuietHandler, directory=str(directory))
    )
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{port}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_docs_page_on_another_origin_uses_the_api_through_cors(
    browser: Browser, tmp_path: Path
) -> None:
    site_files = tmp_path / "site"
    site_files.mkdir()
    port = free_port()  # known before the API starts: its CORS setting names the origin
    origin = f"http://localhost:{port}"
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(
            serving(tmp_path, "cors", **SANDBOX_ENV, PLANTSTORE_CORS_ORIGINS=origin)
        )
        site = stack.enter_context(docs_origin(site_files, server.base_url, port))
        assert site == origin
        log = PageLog()
        page = stack.enter_context(visitor(browser, site, "/docs/index.html"))
        page.context.on("request", log.on_request)
        token = get_sandbox_token(page)
        status, body = try_it(page, "POST", "/plants", {"id": 3, "name": "Moss", "tag": "damp"})
        assert (status, json.loads(body)) == (200, {"name": "Moss", "tag": "damp"})
        status, body = try_it(page, "GET", "/plants")
        assert (status, json.loads(body)) == (200, [{"name": "Moss", "tag": "damp"}])
        # The page's calls went to the API's origin from the docs origin, which the API allowed.
        api_calls = [request for request in log.requests if request.url.startswith(server.base_url)]
        assert {request.method for request in api_calls} == {"GET", "POST"}
        assert {request.header_value("origin") for request in api_calls} == {origin}
        for request in api_calls:
            answer = request.response()
            assert answer is not None
            assert answer.header_value("access-control-allow-origin") == origin, request.url
        with httpx.Client(base_url=server.base_url) as http:
            assert http.get("/plants", headers=bearer(token)).json() == [
                {"name": "Moss", "tag": "damp"}
            ]
