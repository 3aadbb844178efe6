"""Against a real OpenID provider: node-oidc-provider (``tests/auth/jwt/oidc``, installed by ``npm ci``).

Tokens come from its token endpoint by the client-credentials grant, exactly as a team's
service would get them; a real ``plantstore serve`` (two workers) verifies them against the
provider's JWKS over HTTP. Restarting the provider makes a new signing key: the new tokens
work without restarting plantstore, and the provider being away is a 503, not a 401.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.fixtures.backends import new_database_url
from tests.fixtures.calls import assert_error, bearer
from tests.fixtures.servers import LiveServer, free_port, start_server, stop_server

OIDC_DIR = Path(__file__).parent / "oidc"
AUDIENCE = "https://plantstore.test"
START_WAIT = 30  # seconds for a provider to serve; it takes about half a second
START_TRIES = 3
REFETCH_WAIT = 15  # the service refetches the JWKS for an unknown kid at most every 10 s


@dataclass
class OidcProvider:
    """A running node-oidc-provider, restartable on the same port (a key rotation)."""

    port: int
    log_path: Path
    process: subprocess.Popen[str] | None = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> str:
        """Start it; return the ``kid`` of its fresh signing key.

        A start that does not serve within ``START_WAIT`` is killed and tried again on the
        same port: a loaded host has stalled a node process for over 30 s between loading its
        modules and listening, a hiccup of the host rather than of the provider or plantstore.
        """
        for _ in range(START_TRIES):
            kid = self._start_once()
            if kid is not None:
                return kid
            assert self.process is not None
            self.process.kill()  # a stalled process may not heed SIGTERM
            self.process.wait()
        raise AssertionError(
            f"no start served in {START_TRIES} tries:\n{self.log_path.read_text()}"
        )

    def _start_once(self) -> str | None:
        node = shutil.which("node")
        assert node is not None, "node is needed for the provider tests"
        with self.log_path.open("a") as log:
            self.process = subprocess.Popen(
                [node, "provider.js", str(self.port), AUDIENCE],
                cwd=OIDC_DIR,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
        deadline = time.monotonic() + START_WAIT
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log_path.read_text()
            try:
                keys = httpx.get(f"{self.issuer}/jwks", timeout=1).json()["keys"]
                return str(keys[0]["kid"])
            except httpx.TransportError:
                time.sleep(0.1)
        return None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def token(self, client_id: str = "gardener-app") -> str:
        """An access token by the client-credentials grant (a JWT for our audience)."""
        response = httpx.post(
            f"{self.issuer}/token",
            data={"grant_type": "client_credentials", "scope": "plants"},
            auth=(client_id, f"{client_id}-secret"),
            timeout=10,
        )
        assert response.status_code == 200, response.text
        return str(response.json()["access_token"])


def kid_of(token: str) -> str:
    header = token.split(".")[0]
    return str(json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))["kid"])


@pytest.fixture
def oidc(tmp_path: Path) -> Iterator[OidcProvider]:
    if not (OIDC_DIR / "node_modules" / "oidc-provider").is_dir():
        # A failure in CI, whose PLANTSTORE_TEST_NO_SKIPS=1 turns every skip into one.
        pytest.skip("node-oidc-provider is missing: `make node-tools` installs it (needs npm)")
    provider = OidcProvider(free_port(), tmp_path / "oidc.log")
    try:
        yield provider
    finally:
        provider.stop()


def serve_with(oidc: OidcProvider, db_url: str, log_path: Path) -> LiveServer:
    env = {
        "PLANTSTORE_JWT_JWKS_URL": f"{oidc.issuer}/jwks",
        "PLANTSTORE_JWT_ISSUER": oidc.issuer,
        "PLANTSTORE_JWT_AUDIENCE": AUDIENCE,
        "PLANTSTORE_JWT_ALGORITHMS": "ES256",
    }
    return start_server(db_url, log_path, "--workers", "2", **env)


@pytest.fixture
def database(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    return new_database_url(backend, tmp_path, request)


def eventually_ok(server: LiveServer, token: str) -> httpx.Response:
    """GET /plants until it answers 200 or the refetch interval has surely passed."""
    deadline = time.monotonic() + REFETCH_WAIT
    while True:
        response = httpx.get(f"{server.base_url}/plants", headers=bearer(token), timeout=10)
        if response.status_code == 200 or time.monotonic() > deadline:
            return response
        time.sleep(0.5)


@pytest.mark.server
def test_client_credentials_tokens_work_and_keys_rotate_without_a_restart(
    oidc: OidcProvider, database: str, tmp_path: Path
) -> None:
    first_kid = oidc.start()
    server = serve_with(oidc, database, tmp_path / "server.log")
    try:
        gardener = oidc.token("gardener-app")
        assert kid_of(gardener) == first_kid
        with server.client() as http:
            created = http.post("/plants", json={"id": 1, "name": "Fern"}, headers=bearer(gardener))
            assert created.status_code == 200, created.text
            assert http.get("/plants", headers=bearer(gardener)).json() == [{"name": "Fern"}]
            other = oidc.token("other-app")  # another client: another user
            assert http.get("/plants", headers=bearer(other)).json() == []
            assert_error(http.delete("/plants/1", headers=bearer(other)), 404)

        oidc.stop()
        second_kid = oidc.start()  # the same port, a new signing key
        assert second_kid != first_kid
        rotated = oidc.token("gardener-app")
        assert kid_of(rotated) == second_kid
        response = eventually_ok(server, rotated)
        assert response.status_code == 200, response.text
        assert response.json() == [{"name": "Fern"}]  # the same user, whichever key signed
        assert server.process.poll() is None  # no restart happened
    finally:
        stop_server(server)
    assert "Traceback" not in server.log_path.read_text()


@pytest.mark.server
def test_a_provider_away_at_start_is_503_until_it_is_back(
    oidc: OidcProvider, database: str, tmp_path: Path
) -> None:
    server = serve_with(oidc, database, tmp_path / "server.log")  # nothing listens there yet
    try:
        oidc.start()
        token = oidc.token()
        oidc.stop()
        with server.client() as http:
            response = http.get("/plants", headers=bearer(token))
        assert_error(response, 503)
        assert int(response.headers["retry-after"]) >= 1
        oidc.start()  # a new key again; the token of the first run is signed by a gone key
        fresh = oidc.token()
        response = eventually_ok(server, fresh)
        assert response.status_code == 200, response.text
    finally:
        stop_server(server)


def test_make_test_installs_the_provider_with_npm_ci() -> None:
    """``make test`` (which .ci/run calls) installs it exactly as the lock file pins it."""
    makefile = (Path(__file__).parents[3] / "Makefile").read_text()
    assert re.search(r"^test: .*\bnode-tools\b", makefile, re.M)
    assert re.search(
        r"^NODE_TOOLS := .*tests/auth/jwt/oidc/node_modules/\.installed", makefile, re.M
    )
    assert "npm ci --prefix $*" in makefile
    lock = json.loads((OIDC_DIR / "package-lock.json").read_text())
    pinned = lock["packages"]["node_modules/oidc-provider"]["version"]
    assert json.loads((OIDC_DIR / "package.json").read_text())["dependencies"] == {
        "oidc-provider": pinned  # exact, as in the lock file
    }
