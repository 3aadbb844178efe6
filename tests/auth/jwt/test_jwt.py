"""JWT bearer tokens from an identity provider, with keys made in the test (``jwt_support``).

Every refusal the contract lists answers 401 ``invalid_token`` exactly as a bad ``pst_``
token does; a JWT's user is its issuer's, never the operator's user of the same name; a
JWKS that cannot be fetched is a 503 with ``Retry-After``.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from plantstore.app import create_app
from plantstore.cli import main
from plantstore.settings import Settings, SettingsError, load_settings
from tests.auth.jwt.jwt_support import (
    AUDIENCE,
    ISSUER,
    TestProvider,
    b64url,
    claims,
    hmac_token,
    tampered,
)
from tests.fixtures.calls import IssueToken, assert_error, bearer, run_cli
from tests.fixtures.servers import free_port

INVALID_TOKEN = 'Bearer realm="plantstore", error="invalid_token"'


@pytest.fixture
def provider(tmp_path: Path) -> TestProvider:
    return TestProvider(tmp_path)


def jwt_settings(db_url: str, **jwt: Any) -> Settings:
    """The test suite's settings (see conftest's ``settings``) with a provider configured."""
    return Settings(database_url=db_url, connect_timeout=5.0, statement_timeout=5.0, **jwt)


@pytest.fixture
def jwt_client(db_url: str, provider: TestProvider) -> Iterator[TestClient]:
    app = create_app(jwt_settings(db_url, **provider.settings()))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def assert_invalid_token(response: Any) -> None:
    assert_error(response, 401)
    assert response.headers["www-authenticate"] == INVALID_TOKEN


# --- accepted ---------------------------------------------------------------------------------


@pytest.mark.parametrize("alg", ["RS256", "ES256", "EdDSA"])
def test_a_valid_token_of_each_default_algorithm_works(
    jwt_client: TestClient, provider: TestProvider, alg: str
) -> None:
    headers = bearer(provider.token("alice", alg))
    created = jwt_client.post("/plants", json={"id": 1, "name": "Fern"}, headers=headers)
    assert created.status_code == 200, created.text
    assert jwt_client.get("/plants", headers=headers).json() == [{"name": "Fern"}]
    assert jwt_client.delete("/plants/1", headers=headers).status_code == 204


def test_tokens_of_one_subject_share_its_plants(
    jwt_client: TestClient, provider: TestProvider
) -> None:
    first, second = provider.token("alice", "RS256"), provider.token("alice", "ES256")
    jwt_client.post("/plants", json={"id": 5, "name": "Aloe"}, headers=bearer(first))
    assert jwt_client.get("/plants", headers=bearer(second)).json() == [{"name": "Aloe"}]


def test_clocks_may_disagree_by_the_leeway(jwt_client: TestClient, provider: TestProvider) -> None:
    now = int(time.time())
    token = provider.token("alice", exp=now - 10, iat=now + 10, nbf=now + 10)
    assert jwt_client.get("/plants", headers=bearer(token)).status_code == 200


def test_the_user_claim_is_configurable(db_url: str, provider: TestProvider) -> None:
    settings = jwt_settings(db_url, **provider.settings(), jwt_user_claim="preferred_username")
    token = provider.token("opaque-id-1", preferred_username="alice")
    with TestClient(create_app(settings)) as client:
        client.post("/plants", json={"id": 1, "name": "Fern"}, headers=bearer(token))
        users = [line for line in run_cli(db_url, "user", "list").splitlines() if ISSUER in line]
    assert [line.split()[1] for line in users] == ["alice"]


# --- refused: 401 invalid_token, like a bad pst_ token ----------------------------------------


def refusals(provider: TestProvider) -> dict[str, str]:
    now = int(time.time())
    stranger = TestProvider(provider.jwks_path.parent, kid_suffix="unpublished")
    return {
        "expired": provider.token(exp=now - 60),
        "not yet valid": provider.token(nbf=now + 120),
        "issued in the future": provider.token(iat=now + 120),
        "no exp": provider.token(exp=None),
        "wrong issuer": provider.token(iss="https://evil.example.test"),
        "no issuer": provider.token(iss=None),
        "wrong audience": provider.token(aud="https://another-api.example.test"),
        "no audience": provider.token(aud=None),
        "alg none": provider.alg_none(),
        "alg a list": hmac_token(
            {"alg": ["ES256"], "kid": provider.keys["ES256"].kid}, claims(), b"x"
        ),
        "alg an object": hmac_token({"alg": {"ES256": 1}}, claims(), b"x"),
        "HS256 keyed with the PEM public key": provider.hs256_keyed_with_public_key(form="pem"),
        "HS256 keyed with the JWK public key": provider.hs256_keyed_with_public_key(form="jwk"),
        "unknown kid": stranger.token(),
        "signed by a stranger under a published kid": stranger.sign(
            claims(), "ES256", kid=provider.keys["ES256"].kid
        ),
        "tampered payload": tampered(provider.token("alice"), sub="bob"),
        "algorithm not allowed": provider.sign(claims(), "RS256", signing_alg="RS512"),
        "no user claim": provider.token(sub=None),
        "a user claim that is not a string": provider.sign({**claims(), "sub": 42}),
        "a user claim with a control character": provider.token("ali\nce"),
    }


REFUSAL_NAMES = [
    "expired",
    "not yet valid",
    "issued in the future",
    "no exp",
    "wrong issuer",
    "no issuer",
    "wrong audience",
    "no audience",
    "alg none",
    "alg a list",
    "alg an object",
    "HS256 keyed with the PEM public key",
    "HS256 keyed with the JWK public key",
    "unknown kid",
    "signed by a stranger under a published kid",
    "tampered payload",
    "algorithm not allowed",
    "no user claim",
    "a user claim that is not a string",
    "a user claim with a control character",
]


@pytest.mark.parametrize("case", REFUSAL_NAMES)
def test_every_refusal_is_401_invalid_token(
    jwt_client: TestClient, provider: TestProvider, db_url: str, case: str
) -> None:
    headers = bearer(refusals(provider)[case])
    assert_invalid_token(jwt_client.get("/plants", headers=headers))
    assert_invalid_token(jwt_client.post("/plants", json={"id": 1, "name": "X"}, headers=headers))
    assert_invalid_token(jwt_client.delete("/plants/1", headers=headers))
    assert json_lines(run_cli(db_url, "user", "list", "--json")) == []  # nobody was made


def test_the_refusals_cover_every_case() -> None:
    assert set(REFUSAL_NAMES) == set(refusals(TestProvider(Path(tempfile.mkdtemp()))))


def test_an_expired_token_cached_while_valid_is_refused_at_its_exp(
    jwt_client: TestClient, provider: TestProvider
) -> None:
    exp = int(time.time()) - 30 + 4  # 3 to 4 s left of the leeway
    token = provider.token("alice", exp=exp)
    assert jwt_client.get("/plants", headers=bearer(token)).status_code == 200
    time.sleep(max(0.0, exp + 30 + 0.2 - time.time()))
    assert_invalid_token(jwt_client.get("/plants", headers=bearer(token)))


def test_a_jwt_without_a_configured_provider_is_just_an_unknown_token(
    client: TestClient, settings: Settings, provider: TestProvider
) -> None:
    assert not settings.jwt_enabled
    assert_invalid_token(client.get("/plants", headers=bearer(provider.token())))


# --- users: the issuer's namespace --------------------------------------------------------------


def test_a_jwt_user_is_not_the_operator_user_of_the_same_name(
    jwt_client: TestClient, provider: TestProvider, issue_token: IssueToken
) -> None:
    operator_alice = bearer(issue_token("alice"))
    jwt_alice = bearer(provider.token("alice"))
    jwt_client.post("/plants", json={"id": 1, "name": "Operator's"}, headers=operator_alice)
    assert jwt_client.get("/plants", headers=jwt_alice).json() == []
    assert_error(jwt_client.delete("/plants/1", headers=jwt_alice), 404)
    created = jwt_client.post("/plants", json={"id": 1, "name": "Issuer's"}, headers=jwt_alice)
    assert created.status_code == 200  # the same id, another owner: no conflict
    assert jwt_client.get("/plants", headers=operator_alice).json() == [{"name": "Operator's"}]
    assert jwt_client.get("/plants", headers=jwt_alice).json() == [{"name": "Issuer's"}]


def test_a_token_for_another_users_plants_sees_none_of_them(
    jwt_client: TestClient, provider: TestProvider
) -> None:
    alice, bob = bearer(provider.token("alice")), bearer(provider.token("bob"))
    jwt_client.post("/plants", json={"id": 7, "name": "Alice's"}, headers=alice)
    assert jwt_client.get("/plants", headers=bob).json() == []
    assert_error(jwt_client.delete("/plants/7", headers=bob), 404)
    changed = tampered(provider.token("bob"), sub="alice")  # bob's token, rewritten
    assert_invalid_token(jwt_client.get("/plants", headers=bearer(changed)))
    assert jwt_client.get("/plants", headers=alice).json() == [{"name": "Alice's"}]


def test_user_list_and_token_list_show_both_kinds_of_users(
    jwt_client: TestClient, provider: TestProvider, issue_token: IssueToken, db_url: str
) -> None:
    issue_token("alice")
    jwt_client.post("/plants", json={"id": 1, "name": "F"}, headers=bearer(provider.token("alice")))
    users = [
        (fields["user"], fields["issuer"], fields["plants"])
        for fields in json_lines(run_cli(db_url, "user", "list", "--json"))
    ]
    assert users == [("alice", None, 0), ("alice", ISSUER, 1)]
    tokens = [
        (fields["user"], fields["issuer"], fields["id"] is None)
        for fields in json_lines(run_cli(db_url, "token", "list", "--json"))
    ]
    assert tokens == [("alice", None, False), ("alice", ISSUER, True)]
    table = run_cli(db_url, "user", "list")
    assert "(operator)" in table
    assert ISSUER in table


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_disabling_a_user_refuses_both_kinds_of_tokens_within_a_second(
    jwt_client: TestClient, provider: TestProvider, issue_token: IssueToken, db_url: str
) -> None:
    jwt_alice, operator_bob = bearer(provider.token("alice")), bearer(issue_token("bob"))
    for headers in (jwt_alice, operator_bob):  # both cached now
        assert jwt_client.get("/plants", headers=headers).status_code == 200

    assert "disabled" in run_cli(db_url, "user", "disable", "alice")
    assert "disabled" in run_cli(db_url, "user", "disable", "bob")
    time.sleep(1.0)  # the contract's "within a second"
    for headers in (jwt_alice, operator_bob, bearer(provider.token("alice"))):
        assert_invalid_token(jwt_client.get("/plants", headers=headers))

    run_cli(db_url, "user", "enable", "alice")
    run_cli(db_url, "user", "enable", "bob")
    time.sleep(1.0)
    for headers in (jwt_alice, operator_bob):
        assert jwt_client.get("/plants", headers=headers).status_code == 200


def test_disable_asks_which_user_when_a_name_is_in_two_namespaces(
    jwt_client: TestClient, provider: TestProvider, issue_token: IssueToken, db_url: str
) -> None:
    issue_token("alice")
    jwt_client.get("/plants", headers=bearer(provider.token("alice")))
    ambiguous = CliRunner().invoke(main, ["--database", db_url, "user", "disable", "alice"])
    assert ambiguous.exit_code == 1
    assert "--issuer" in ambiguous.output
    assert "of" in run_cli(db_url, "user", "disable", "alice", "--issuer", ISSUER)
    listed = {
        (fields["issuer"], fields["disabled"] is not None)
        for fields in json_lines(run_cli(db_url, "user", "list", "--json"))
    }
    assert listed == {(None, False), (ISSUER, True)}
    assert "(operator)" in run_cli(db_url, "user", "disable", "alice", "--operator")


def test_disable_names_the_issuer_it_tried_and_hints_at_its_trailing_slash(
    jwt_client: TestClient, provider: TestProvider, db_url: str
) -> None:
    jwt_client.get("/plants", headers=bearer(provider.token("alice")))
    assert not ISSUER.endswith("/")
    for issuer, named, hint in [(f"{ISSUER}/", "alice", True), (ISSUER, "carol", False)]:
        result = CliRunner().invoke(
            main, ["--database", db_url, "user", "disable", named, "--issuer", issuer]
        )
        assert result.exit_code == 1, result.output
        assert f"no user named '{named}' of issuer {issuer}" in result.output
        assert ("trailing slash" in result.output) is hint, result.output
    [alice] = json_lines(run_cli(db_url, "user", "list", "--json"))
    assert alice["disabled"] is None


# --- keys ---------------------------------------------------------------------------------------


def test_an_unreachable_jwks_is_503_with_retry_after(db_url: str, provider: TestProvider) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}/jwks"
    settings = jwt_settings(db_url, **{**provider.settings(), "jwt_jwks_url": nowhere})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        response = client.get("/plants", headers=bearer(provider.token()))
        assert_error(response, 503, "keys")
        assert int(response.headers["retry-after"]) >= 1
        assert client.get("/healthz").status_code == 200  # the service itself runs on


def test_a_missing_jwks_file_is_503_and_pst_tokens_work_on(
    db_url: str, provider: TestProvider, issue_token: IssueToken, tmp_path: Path
) -> None:
    settings = jwt_settings(
        db_url, **{**provider.settings(), "jwt_jwks_url": f"file://{tmp_path}/absent.json"}
    )
    token = issue_token("carol")
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        assert_error(client.get("/plants", headers=bearer(provider.token())), 503)
        assert client.get("/plants", headers=bearer(token)).status_code == 200


def test_a_symmetric_key_in_the_jwks_is_never_used(
    jwt_client: TestClient, provider: TestProvider
) -> None:
    secret = b"published-secret"
    document = json.loads(provider.jwks_path.read_text())
    document["keys"].append({"kty": "oct", "kid": "hmac", "k": b64url(secret), "alg": "HS256"})
    provider.jwks_path.write_text(json.dumps(document))
    forged = hmac_token({"alg": "HS256", "kid": "hmac"}, claims(), secret)
    assert_invalid_token(jwt_client.get("/plants", headers=bearer(forged)))


# --- settings -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"jwt_jwks_url": "file:///tmp/jwks.json"}, "PLANTSTORE_JWT_ISSUER"),
        ({"jwt_issuer": ISSUER, "jwt_audience": AUDIENCE}, "PLANTSTORE_JWT_JWKS_URL"),
        ({"jwt_jwks_url": "ftp://example.test/jwks"}, "PLANTSTORE_JWT_JWKS_URL"),
        ({"jwt_algorithms": "RS256,HS256"}, "HS256"),
        ({"jwt_algorithms": "none"}, "none"),
        ({"jwt_algorithms": ""}, "PLANTSTORE_JWT_ALGORITHMS"),
    ],
)
def test_unsafe_or_partial_jwt_settings_are_refused(values: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        load_settings(**values)


# --- limits apply to JWT users as to any other ----------------------------------------------------


def test_the_plant_quota_and_the_rate_limit_apply_to_a_jwt_user(
    db_url: str, provider: TestProvider
) -> None:
    settings = jwt_settings(
        db_url, **provider.settings(), max_plants_per_user=1, rate_limit="3/minute"
    )
    headers = bearer(provider.token("alice"))
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        first = client.post("/plants", json={"id": 1, "name": "A"}, headers=headers)
        assert first.status_code == 200, first.text
        assert_error(client.post("/plants", json={"id": 2, "name": "B"}, headers=headers), 403)
        assert client.get("/plants", headers=headers).status_code == 200
        limited = client.get("/plants", headers=headers)
        assert_error(limited, 429)
        assert int(limited.headers["retry-after"]) >= 1
