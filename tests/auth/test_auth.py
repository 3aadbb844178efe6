"""Authentication: RFC 6750 bearer tokens, the two 401 challenges, revocation and expiry."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import httpx2
import pytest
from starlette.testclient import TestClient

from plantstore.settings import Settings
from tests.fixtures.calls import IssueToken, bearer, run_cli, token_from_output
from tests.fixtures.servers import LiveServer
from tests.ops.test_observability import instrumented, sample

# HTTP to the service alone (no in-process app, settings or logs): on the two-worker server too.
pytestmark = pytest.mark.backends("sqlite", "postgres", "sqlite-2workers")

TOKEN_CACHE_SECONDS = Settings.model_fields["token_cache_seconds"].default

CHALLENGE = 'Bearer realm="plantstore"'
INVALID_TOKEN = 'Bearer realm="plantstore", error="invalid_token"'

# starlette's TestClient answers with httpx2 responses, the live server with httpx ones
Response = httpx.Response | httpx2.Response

OPERATIONS = [
    ("GET", "/plants", None),
    ("POST", "/plants", {"id": 1, "name": "Monstera"}),
    ("DELETE", "/plants/1", None),
]


def _request(
    client: TestClient | httpx.Client,
    method: str,
    path: str,
    body: object,
    headers: dict[str, str],
) -> Response:
    if body is None:
        return client.request(method, path, headers=headers)
    return client.request(method, path, json=body, headers=headers)


def assert_unauthorized(response: Response, challenge: str, *secrets: str) -> None:
    """A 401 with the Error body, exactly ``challenge`` and no echoed secret."""
    assert response.status_code == 401, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert isinstance(body, dict)
    assert body["error"] == 401
    assert isinstance(body["message"], str)
    assert body["message"]
    assert set(body) == {"error", "message"}
    assert response.headers.get_list("www-authenticate") == [challenge]
    for secret in secrets:
        if secret:
            assert secret not in response.text
            assert secret not in str(response.headers)


# --- no credentials, or not Bearer ------------------------------------------------------------


@pytest.mark.parametrize(("method", "path", "body"), OPERATIONS)
def test_every_operation_without_authorization_is_401(
    client: TestClient, method: str, path: str, body: object
) -> None:
    response = _request(client, method, path, body, {})
    assert_unauthorized(response, CHALLENGE)


@pytest.mark.parametrize(("method", "path", "body"), OPERATIONS)
@pytest.mark.parametrize("scheme", ["Basic", "Token", "Digest"])
def test_every_operation_with_another_scheme_is_401(
    client: TestClient, alice: dict[str, str], method: str, path: str, body: object, scheme: str
) -> None:
    token = alice["Authorization"].removeprefix("Bearer ")
    response = _request(client, method, path, body, {"Authorization": f"{scheme} {token}"})
    assert_unauthorized(response, CHALLENGE, token)


@pytest.mark.parametrize("value", ["Basic abc", "Token x", "Basic YWxpY2U6c2VjcmV0"])
def test_non_bearer_schemes_get_the_plain_challenge(client: TestClient, value: str) -> None:
    assert_unauthorized(client.get("/plants", headers={"Authorization": value}), CHALLENGE)


def test_a_valid_token_under_another_scheme_is_still_refused(
    client: TestClient, issue_token: IssueToken
) -> None:
    token = issue_token("alice")
    response = client.get("/plants", headers={"Authorization": f"Token {token}"})
    assert_unauthorized(response, CHALLENGE, token)


# --- malformed, unknown, revoked, expired ------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("Bearer", id="bearer-alone"),
        # httpx (h11) refuses to send a header value with trailing whitespace
        pytest.param(
            "Bearer ", id="bearer-space-empty", marks=pytest.mark.backends("sqlite", "postgres")
        ),
        pytest.param("Bearer a b", id="two-credentials"),
        pytest.param("Bearer pst_", id="prefix-only"),
        pytest.param("Bearer not-a-real-token", id="no-prefix-garbage"),
        pytest.param("Bearer pst_!!!!", id="bad-characters"),
    ],
)
def test_malformed_bearer_credentials_are_invalid_token(client: TestClient, value: str) -> None:
    response = client.get("/plants", headers={"Authorization": value})
    assert_unauthorized(response, INVALID_TOKEN)


def test_a_real_token_without_its_prefix_is_invalid(
    client: TestClient, issue_token: IssueToken
) -> None:
    token = issue_token("alice")
    bare = token.removeprefix("pst_")
    response = client.get("/plants", headers=bearer(bare))
    assert_unauthorized(response, INVALID_TOKEN, token, bare)


@pytest.mark.parametrize("cut", [1, 5, 20])
def test_a_truncated_token_is_invalid(
    client: TestClient, issue_token: IssueToken, cut: int
) -> None:
    token = issue_token("alice")
    truncated = token[:-cut]
    response = client.get("/plants", headers=bearer(truncated))
    assert_unauthorized(response, INVALID_TOKEN, token, truncated)


def test_a_token_with_an_extra_character_is_invalid(
    client: TestClient, issue_token: IssueToken
) -> None:
    token = issue_token("alice")
    response = client.get("/plants", headers=bearer(token + "A"))
    assert_unauthorized(response, INVALID_TOKEN, token)


def test_an_unknown_well_formed_token_is_invalid(
    client: TestClient, issue_token: IssueToken
) -> None:
    issue_token("alice")  # the store holds tokens, just not this one
    unknown = "pst_" + "A" * 43
    response = client.get("/plants", headers=bearer(unknown))
    assert_unauthorized(response, INVALID_TOKEN, unknown)


def test_a_token_with_one_character_changed_is_invalid(
    client: TestClient, issue_token: IssueToken
) -> None:
    token = issue_token("alice")
    last = token[-1]
    forged = token[:-1] + ("B" if last != "B" else "C")
    response = client.get("/plants", headers=bearer(forged))
    assert_unauthorized(response, INVALID_TOKEN, token, forged)


@pytest.mark.parametrize(("method", "path", "body"), OPERATIONS)
def test_every_operation_with_an_unknown_token_is_invalid_token(
    client: TestClient, method: str, path: str, body: object
) -> None:
    unknown = "pst_" + "z" * 43
    response = _request(client, method, path, body, bearer(unknown))
    assert_unauthorized(response, INVALID_TOKEN, unknown)


def _token_id(db_url: str, user: str) -> int:
    ids = [
        record["id"]
        for line in run_cli(db_url, "token", "list", "--json").splitlines()
        if line.strip()
        for record in [json.loads(line)]
        if record["user"] == user
    ]
    assert len(ids) == 1, ids
    return int(ids[0])


def test_a_token_revoked_before_use_is_invalid(
    client: TestClient, issue_token: IssueToken, db_url: str
) -> None:
    token = issue_token("carol")
    run_cli(db_url, "token", "revoke", str(_token_id(db_url, "carol")))
    for method, path, body in OPERATIONS:
        response = _request(client, method, path, body, bearer(token))
        assert_unauthorized(response, INVALID_TOKEN, token)


def test_revoking_one_token_leaves_the_users_other_tokens_working(
    client: TestClient, db_url: str
) -> None:
    first_out = run_cli(db_url, "token", "create", "dora")
    second = token_from_output(run_cli(db_url, "token", "create", "dora"))
    first = token_from_output(first_out)
    match = re.search(r"Token (\d+) for user", first_out)
    assert match is not None, first_out
    run_cli(db_url, "token", "revoke", match.group(1))
    assert_unauthorized(client.get("/plants", headers=bearer(first)), INVALID_TOKEN, first)
    assert client.get("/plants", headers=bearer(second)).status_code == 200


def test_an_expired_token_is_refused(client: TestClient, issue_token: IssueToken) -> None:
    token = issue_token("erin", expires_in="3s")  # room for a slow start of the command
    expires_by = time.time() + 3.1
    assert client.get("/plants", headers=bearer(token)).status_code == 200
    time.sleep(max(0.0, expires_by - time.time()))
    for method, path, body in OPERATIONS:
        response = _request(client, method, path, body, bearer(token))
        assert_unauthorized(response, INVALID_TOKEN, token)


def test_a_token_with_a_long_expiry_works(client: TestClient, issue_token: IssueToken) -> None:
    token = issue_token("frank", expires_in="30d")
    assert client.get("/plants", headers=bearer(token)).status_code == 200


# --- what succeeds ------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_the_scheme_is_case_insensitive(
    client: TestClient, issue_token: IssueToken, scheme: str
) -> None:
    token = issue_token("alice")
    response = client.get("/plants", headers={"Authorization": f"{scheme} {token}"})
    assert response.status_code == 200, response.text
    assert response.json() == []


def test_all_three_operations_accept_a_valid_token(
    client: TestClient, alice: dict[str, str]
) -> None:
    assert client.post("/plants", json={"id": 1, "name": "Fern"}, headers=alice).status_code == 200
    assert client.get("/plants", headers=alice).status_code == 200
    assert client.delete("/plants/1", headers=alice).status_code == 204


def test_authentication_is_checked_before_the_media_type(client: TestClient) -> None:
    response = client.post(
        "/plants", content=b"id=1", headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert_unauthorized(response, CHALLENGE)


def test_authentication_is_checked_before_validation(client: TestClient) -> None:
    unknown = "pst_" + "q" * 43
    response = client.post("/plants", json={"nonsense": True}, headers=bearer(unknown))
    assert_unauthorized(response, INVALID_TOKEN, unknown)


def test_a_refused_request_changes_nothing(client: TestClient, alice: dict[str, str]) -> None:
    assert client.post("/plants", json={"id": 1, "name": "Fern"}, headers=alice).status_code == 200
    assert client.delete("/plants/1").status_code == 401
    assert client.post("/plants", json={"id": 2, "name": "Ivy"}).status_code == 401
    assert client.get("/plants", headers=alice).json() == [{"name": "Fern"}]


def test_two_tokens_of_one_user_see_the_same_plants(
    client: TestClient, issue_token: IssueToken
) -> None:
    first = bearer(issue_token("gina"))
    second = bearer(issue_token("gina"))
    assert first != second
    assert client.post("/plants", json={"id": 1, "name": "Aloe"}, headers=first).status_code == 200
    assert (
        client.post("/plants", json={"id": 2, "name": "Basil"}, headers=second).status_code == 200
    )
    expected = [{"name": "Aloe"}, {"name": "Basil"}]
    assert client.get("/plants", headers=first).json() == expected
    assert client.get("/plants", headers=second).json() == expected
    # a plant made through one token can be deleted through the other
    assert client.delete("/plants/1", headers=second).status_code == 204
    assert client.get("/plants", headers=first).json() == [{"name": "Basil"}]


def test_tokens_of_different_users_see_different_plants(
    client: TestClient, alice: dict[str, str], bob: dict[str, str]
) -> None:
    assert (
        client.post("/plants", json={"id": 7, "name": "Cactus"}, headers=alice).status_code == 200
    )
    assert client.post("/plants", json={"id": 8, "name": "Daisy"}, headers=bob).status_code == 200
    assert client.get("/plants", headers=alice).json() == [{"name": "Cactus"}]
    assert client.get("/plants", headers=bob).json() == [{"name": "Daisy"}]
    assert client.delete("/plants/7", headers=bob).status_code == 404
    assert client.get("/plants", headers=alice).json() == [{"name": "Cactus"}]


# --- over the wire: revocation reaches a running server within one second -------------------


def _refused_within_a_second(http: httpx.Client, headers: dict[str, str]) -> Response:
    """Ask until refused; fail if a request *sent* a second or more after now was served. The
    promise is the server's: a stalled host may delay an answer, and that is not its breach."""
    revoked_at = time.monotonic()
    while True:
        sent = time.monotonic() - revoked_at
        response = http.get("/plants", headers=headers)
        if response.status_code != 200:
            return response
        assert sent < 1.0, f"a request sent {sent:.3f} s after the revocation was served"
        time.sleep(0.02)


def test_revocation_bites_a_running_server_within_one_second(live_server: LiveServer) -> None:
    created = run_cli(live_server.db_url, "token", "create", "revoke-me")
    token = token_from_output(created)
    match = re.search(r"Token (\d+) for user", created)
    assert match is not None, created
    headers = bearer(token)
    with live_server.client() as http:
        assert http.get("/plants", headers=headers).status_code == 200
        assert http.get("/plants", headers=headers).status_code == 200  # now surely cached
        run_cli(live_server.db_url, "token", "revoke", match.group(1))
        response = _refused_within_a_second(http, headers)
        assert_unauthorized(response, INVALID_TOKEN, token)
        # and it stays refused
        assert_unauthorized(http.get("/plants", headers=headers), INVALID_TOKEN, token)


@pytest.mark.backends("sqlite", "postgres")  # servers of its own
@pytest.mark.server
def test_tokens_looked_up_after_a_start_are_not_looked_up_again(
    db_url: str, tmp_path: Path, issue_token: IssueToken
) -> None:
    """The first check of the auth generation after a start keeps the tokens looked up so far:
    a service with many callers does not look each of them up twice after a restart."""
    callers = [bearer(issue_token(f"caller-{number}")) for number in range(3)]
    with instrumented(db_url, tmp_path / "server.log") as live, live.server.client() as http:
        before = live.scrape()
        for _ in range(3):  # the check of the generation falls due between the rounds
            for headers in callers:
                assert http.get("/plants", headers=headers).status_code == 200
            time.sleep(TOKEN_CACHE_SECONDS + 0.1)
        after = live.scrape()
    lookups = "plantstore_store_operation_duration_seconds_count"
    assert sample(after, lookups, operation="find_token") - sample(
        before, lookups, operation="find_token"
    ) == len(callers)


def test_revocation_by_listed_id_on_a_running_server(live_server: LiveServer) -> None:
    token = token_from_output(run_cli(live_server.db_url, "token", "create", "revoke-by-list"))
    headers = bearer(token)
    with live_server.client() as http:
        assert (
            http.post("/plants", json={"id": 5, "name": "Moss"}, headers=headers).status_code == 200
        )
        run_cli(
            live_server.db_url,
            "token",
            "revoke",
            str(_token_id(live_server.db_url, "revoke-by-list")),
        )
        response = _refused_within_a_second(http, headers)
        assert_unauthorized(response, INVALID_TOKEN, token)
        for method, path, body in OPERATIONS:
            assert_unauthorized(_request(http, method, path, body, headers), INVALID_TOKEN, token)


def test_expiry_bites_a_running_server(live_server: LiveServer) -> None:
    token = token_from_output(
        run_cli(live_server.db_url, "token", "create", "expire-me", "--expires-in", "3s")
    )
    expires_by = time.time() + 3.1  # room for a slow start of the command above
    headers = bearer(token)
    with live_server.client() as http:
        assert http.get("/plants", headers=headers).status_code == 200
        time.sleep(max(0.0, expires_by - time.time()))
        assert_unauthorized(http.get("/plants", headers=headers), INVALID_TOKEN, token)


def test_the_wire_challenges_match_the_contract(live_server: LiveServer) -> None:
    with live_server.client() as http:
        assert_unauthorized(http.get("/plants"), CHALLENGE)
        assert_unauthorized(http.get("/plants", headers={"Authorization": "Basic abc"}), CHALLENGE)
        unknown = "pst_" + "w" * 43
        assert_unauthorized(http.get("/plants", headers=bearer(unknown)), INVALID_TOKEN, unknown)
        assert (
            http.get(
                "/plants", headers={"Authorization": f"bearer {live_server.token}"}
            ).status_code
            == 200
        )


@pytest.mark.parametrize(
    "value", [b"Bearer pst_\xc3\xa9", b"Bearer \xff\xfe", b"Bearer pst_" + b"w" * 43 + b"\x80"]
)
def test_credentials_that_are_not_ascii_are_invalid_token_on_the_wire(
    live_server: LiveServer, value: bytes
) -> None:
    """granian hides a header value that is not visible ASCII; the header was still sent, so
    the answer is the malformed token's, not the missing header's, on every operation."""
    headers = {b"Authorization": value, b"Content-Type": b"application/json"}
    with live_server.client() as http:
        for response in (
            http.get("/plants", headers=headers),
            http.post("/plants", content=b'{"id": 1, "name": "x"}', headers=headers),
            http.delete("/plants/1", headers=headers),
        ):
            assert_unauthorized(response, INVALID_TOKEN)
            assert "missing" not in response.json()["message"]


def test_two_authorization_lines_are_invalid_token_whichever_is_good(
    live_server: LiveServer,
) -> None:
    """A proxy in front may read another of two Authorization lines than the service would:
    two are a malformed credential (401 invalid_token), even when the first is a good token
    the cache knows (the list's fast path) and even when both are the same."""
    good = live_server.token
    other = token_from_output(run_cli(live_server.db_url, "token", "create", "second-line"))
    with live_server.client() as http:
        assert http.get("/plants", headers=bearer(good)).status_code == 200  # now cached
        for first, second in [(good, other), (other, good), (good, good)]:
            lines = [
                (b"Authorization", f"Bearer {first}".encode()),
                (b"Authorization", f"Bearer {second}".encode()),
                (b"Content-Type", b"application/json"),
            ]
            for response in (
                http.get("/plants", headers=lines),
                http.post("/plants", content=b'{"id": 1, "name": "x"}', headers=lines),
                http.delete("/plants/1", headers=lines),
            ):
                assert_unauthorized(response, INVALID_TOKEN, good, other)
                assert response.json()["message"] == "send one Authorization header, not 2"
        # a line granian cannot read, then a good one: refused too, never the good one served
        lines = [
            (b"Authorization", b"Bearer pst_\xc3\xa9"),
            (b"Authorization", f"Bearer {good}".encode()),
        ]
        assert_unauthorized(http.get("/plants", headers=lines), INVALID_TOKEN, good)
        assert http.get("/plants", headers=bearer(good)).status_code == 200  # one line: fine
