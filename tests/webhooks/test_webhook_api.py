"""``/webhooks`` over HTTP: the same bearer rules, Error body, 415/413/400 precedence and
per-user isolation as ``/plants``, and the SSRF rule at subscription (the default settings:
private addresses refused)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.calls import assert_error

# HTTP to the service alone (no in-process app, settings or logs): on the two-worker server too.
pytestmark = pytest.mark.backends("sqlite", "postgres", "sqlite-2workers")

PUBLIC_URL = "http://192.0.2.1/hook"  # TEST-NET-1 is 'reserved'; see the public one below
GLOBAL_URL = "https://8.8.8.8/hook"  # a global address; no plant is created, so nothing is sent

ROUTES = [
    ("GET", "/webhooks"),
    ("POST", "/webhooks"),
    ("DELETE", "/webhooks/1"),
    ("GET", "/webhooks/1/deliveries"),
    ("POST", "/webhooks/1/deliveries/1/redeliver"),
    ("POST", "/webhooks/1/redeliver"),
]


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_route_needs_a_bearer_token(client: Any, method: str, path: str) -> None:
    response = client.request(method, path, json={"url": GLOBAL_URL})
    assert_error(response, 401)
    assert response.headers["www-authenticate"] == 'Bearer realm="plantstore"'
    response = client.request(method, path, headers={"Authorization": "Bearer nope"})
    assert_error(response, 401)
    assert "invalid_token" in response.headers["www-authenticate"]


def test_subscribe_list_and_delete(client: Any, alice: dict[str, str], bob: dict[str, str]) -> None:
    response = client.post(
        "/webhooks", json={"url": GLOBAL_URL, "events": ["plant.deleted"]}, headers=alice
    )
    assert response.status_code == 200, response.text
    created = response.json()
    assert set(created) == {"id", "url", "events", "secret"}
    assert created["url"] == GLOBAL_URL
    assert created["events"] == ["plant.deleted"]
    assert created["secret"].startswith("whsec_")
    assert len(created["secret"]) == 6 + 44
    listed = client.get("/webhooks", headers=alice).json()
    assert listed == [
        {"id": created["id"], "url": GLOBAL_URL, "events": ["plant.deleted"], "enabled": True}
    ]
    assert client.get("/webhooks", headers=bob).json() == []
    assert client.get(f"/webhooks/{created['id']}/deliveries", headers=alice).json() == []
    assert_error(client.get(f"/webhooks/{created['id']}/deliveries", headers=bob), 404)
    assert_error(
        client.post(
            f"/webhooks/{created['id']}/redeliver",
            json={"since": "2020-01-01T00:00:00Z"},
            headers=bob,
        ),
        404,
    )
    assert_error(client.delete(f"/webhooks/{created['id']}", headers=bob), 404)
    assert client.delete(f"/webhooks/{created['id']}", headers=alice).status_code == 204
    assert_error(client.delete(f"/webhooks/{created['id']}", headers=alice), 404)
    assert client.get("/webhooks", headers=alice).json() == []


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hook",
        "http://127.1.2.3:8080/hook",
        "http://10.0.0.1/hook",
        "http://172.16.5.4/",
        "http://192.168.1.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://[fe80::1]/",
        "http://[fd00::1]/",
        "http://100.64.0.1/",
        "http://224.0.0.1/",
        "http://0.0.0.0/",
        "http://240.0.0.1/",
        PUBLIC_URL,
        "http://localhost/hook",
        "http://localhost.:9/hook",
        # Ranges Python 3.11's tables miss, and the rest of IANA's special-purpose ones:
        "http://[fec0::1]/",  # deprecated site-local
        "http://[feff:ffff::1]/",
        "http://[3fff::1]/",  # documentation (RFC 9637)
        "http://[3fff:fff:ffff::1]/",
        "http://192.88.99.1/",  # deprecated 6to4 relay anycast
        "http://192.0.0.1/",  # IETF protocol assignments
        "http://192.0.0.9/",
        "http://198.18.0.1/",  # benchmarking
        "http://198.19.255.254/",
        "http://198.51.100.7/",  # documentation
        "http://203.0.113.7/",
        "http://[2001:db8::1]/",
        "http://[64:ff9b:1::808:808]/",  # local-use NAT64, even of a global address
        "http://[100::1]/",  # discard-only
        "http://[100:0:0:1::1]/",  # dummy prefix
        "http://[2001::1]/",  # Teredo, within IETF protocol assignments
        "http://[2001:2::1]/",  # benchmarking
        "http://[5f00::1]/",  # SRv6 SIDs
        "http://[::ffff:192.88.99.1]/",
        "http://[64:ff9b::c0a8:101]/",  # NAT64 of 192.168.1.1
    ],
)
def test_non_global_addresses_are_refused(client: Any, alice: dict[str, str], url: str) -> None:
    assert_error(client.post("/webhooks", json={"url": url}, headers=alice), 400, "url")
    assert client.get("/webhooks", headers=alice).json() == []


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://8.8.8.8/",
        "gopher://8.8.8.8/",
        "//8.8.8.8/hook",
        "/hook",
        "8.8.8.8",
        "http://user:secret@8.8.8.8/hook",
        "http://user@8.8.8.8/hook",
        "http:///hook",
        "http://8.8.8.8:99999/",
        "http://8.8.8.8/ hook",
        "http://8.8.8.8/\x7fhook",
        "http://8.8.8.8/\x85hook",  # C1 controls (NEL here) are controls too
        "http://8.8.8.8/\x9fhook",
        "http://8.8.8.8/\u2028hook",  # and a Unicode line separator is a space
        "http://no-such-host.invalid/hook",
        "http://a..b/hook",  # the idna codec refuses an empty label
        f"http://{'a' * 64}.example.com/hook",  # and a label over 63 characters
        "http://.example.com/",
        "",
        "https://8.8.8.8/" + "a" * 2100,
    ],
)
def test_malformed_urls_are_refused(client: Any, alice: dict[str, str], url: str) -> None:
    assert_error(client.post("/webhooks", json={"url": url}, headers=alice), 400, "url")


@pytest.mark.parametrize(
    ("body", "names"),
    [
        (b'{"url": "https://8.8.8.8/", "extra": 1}', ("extra",)),
        (b'{"events": ["plant.created"]}', ("url",)),
        (b'{"url": "https://8.8.8.8/", "events": []}', ("events",)),
        (b'{"url": "https://8.8.8.8/", "events": ["plant.updated"]}', ("events",)),
        (b'{"url": "https://8.8.8.8/", "events": null}', ("events",)),
        (b'{"url": 5}', ("url",)),
        (b'{"url": "https://8.8.8.8/", "url": "https://8.8.4.4/"}', ("url",)),
        (b"[]", ()),
        (b"{", ("JSON",)),
        (b'{"url": "\xff"}', ("UTF-8",)),
    ],
)
def test_invalid_bodies_are_400(
    client: Any, alice: dict[str, str], body: bytes, names: tuple[str, ...]
) -> None:
    response = client.post(
        "/webhooks", content=body, headers={**alice, "Content-Type": "application/json"}
    )
    assert_error(response, 400, *names)


def test_precedence_401_415_413_400(client: Any, alice: dict[str, str]) -> None:
    huge = b'{"url": "' + b"a" * 70_000 + b'"}'
    assert_error(
        client.post("/webhooks", content=huge, headers={"Content-Type": "text/plain"}), 401
    )
    assert_error(
        client.post("/webhooks", content=huge, headers={**alice, "Content-Type": "text/plain"}), 415
    )
    assert_error(
        client.post(
            "/webhooks", content=huge, headers={**alice, "Content-Type": "application/json"}
        ),
        413,
    )
    assert_error(
        client.post(
            "/webhooks", content=b"{}", headers={**alice, "Content-Type": "application/json"}
        ),
        400,
    )


def without_subscriptions(client: Any, auth: dict[str, str]) -> None:
    """Start from none: on the two-worker server the SQLite file is emptied of users, tokens
    and plants between tests, but subscriptions stay, and a new user may reuse an old id."""
    for subscription in client.get("/webhooks", headers=auth).json():
        assert client.delete(f"/webhooks/{subscription['id']}", headers=auth).status_code == 204
    assert client.get("/webhooks", headers=auth).json() == []


MALFORMED_IDS = ["abc", "1.0", "+1", "--1", "1e3", "99999999999999999999", "9223372036854775808"]
UNKNOWN_IDS = ["0", "-1", "-9223372036854775808", "9223372036854775807", "000123456"]


@pytest.mark.parametrize("raw", MALFORMED_IDS)
def test_malformed_path_ids_are_400(client: Any, alice: dict[str, str], raw: str) -> None:
    without_subscriptions(client, alice)
    created = client.post("/webhooks", json={"url": GLOBAL_URL}, headers=alice).json()
    mine = created["id"]
    assert_error(client.delete(f"/webhooks/{raw}", headers=alice), 400, "'id'")
    assert_error(client.get(f"/webhooks/{raw}/deliveries", headers=alice), 400, "'id'")
    assert_error(client.post(f"/webhooks/{raw}/deliveries/1/redeliver", headers=alice), 400, "'id'")
    assert_error(
        client.post(f"/webhooks/{mine}/deliveries/{raw}/redeliver", headers=alice),
        400,
        "'delivery_id'",
    )
    since = {"since": "2026-01-01T00:00:00Z"}
    assert_error(client.post(f"/webhooks/{raw}/redeliver", json=since, headers=alice), 400, "'id'")


@pytest.mark.parametrize("raw", UNKNOWN_IDS)
def test_well_formed_ids_not_the_callers_are_404(
    client: Any, alice: dict[str, str], raw: str
) -> None:
    """As for ``/plants``: any decimal int64, 0 and negatives too, is a 404 when not yours."""
    without_subscriptions(client, alice)
    created = client.post("/webhooks", json={"url": GLOBAL_URL}, headers=alice).json()
    mine = created["id"]
    assert_error(client.delete(f"/webhooks/{raw}", headers=alice), 404)
    assert_error(client.get(f"/webhooks/{raw}/deliveries", headers=alice), 404)
    assert_error(client.post(f"/webhooks/{raw}/deliveries/1/redeliver", headers=alice), 404)
    assert_error(client.post(f"/webhooks/{mine}/deliveries/{raw}/redeliver", headers=alice), 404)
    since = {"since": "2026-01-01T00:00:00Z"}
    assert_error(client.post(f"/webhooks/{raw}/redeliver", json=since, headers=alice), 404)
    assert mine in [listed["id"] for listed in client.get("/webhooks", headers=alice).json()]


def test_415_and_413_win_over_a_malformed_path_id(client: Any, alice: dict[str, str]) -> None:
    """The contract's order on a POST with a body: 401, 415, 413, then 400 (the id too)."""
    huge = b'{"since": "' + b"a" * 70_000 + b'"}'
    path = "/webhooks/abc/redeliver"
    assert_error(client.post(path, content=huge, headers={"Content-Type": "text/plain"}), 401)
    plain = {**alice, "Content-Type": "text/plain"}
    assert_error(client.post(path, content=b"{}", headers=plain), 415)
    assert_error(client.post(path, content=huge, headers=plain), 415)
    json_type = {**alice, "Content-Type": "application/json"}
    assert_error(client.post(path, content=huge, headers=json_type), 413)
    body = b'{"since": "2026-01-01T00:00:00Z"}'
    assert_error(client.post(path, content=body, headers=json_type), 400, "'id'")


def test_subscriptions_per_user_are_capped(
    client: Any, alice: dict[str, str], bob: dict[str, str]
) -> None:
    """PLANTSTORE_WEBHOOK_MAX_SUBSCRIPTIONS (default 10): one more is a 403 naming it."""
    without_subscriptions(client, alice)
    without_subscriptions(client, bob)
    ids = []
    for number in range(10):
        url = f"{GLOBAL_URL}/{number}"
        response = client.post("/webhooks", json={"url": url}, headers=alice)
        assert response.status_code == 200, response.text
        ids.append(response.json()["id"])
    message = assert_error(
        client.post("/webhooks", json={"url": GLOBAL_URL}, headers=alice), 403, "10"
    )
    assert "webhook" in message
    assert len(client.get("/webhooks", headers=alice).json()) == 10
    assert client.post("/webhooks", json={"url": GLOBAL_URL}, headers=bob).status_code == 200
    assert client.delete(f"/webhooks/{ids[0]}", headers=alice).status_code == 204
    assert client.post("/webhooks", json={"url": GLOBAL_URL}, headers=alice).status_code == 200
    assert_error(client.post("/webhooks", json={"url": GLOBAL_URL}, headers=alice), 403, "10")


def test_a_refused_url_is_400_before_the_cap(client: Any, alice: dict[str, str]) -> None:
    without_subscriptions(client, alice)
    for number in range(10):
        url = f"{GLOBAL_URL}/{number}"
        assert client.post("/webhooks", json={"url": url}, headers=alice).status_code == 200
    bad = {"url": "http://127.0.0.1/"}
    assert_error(client.post("/webhooks", json=bad, headers=alice), 400, "url")


def test_redeliver_needs_an_existing_delivery_and_a_valid_time(
    client: Any, alice: dict[str, str]
) -> None:
    without_subscriptions(client, alice)
    created = client.post("/webhooks", json={"url": GLOBAL_URL}, headers=alice).json()
    base = f"/webhooks/{created['id']}"
    assert_error(client.post(f"{base}/deliveries/12345/redeliver", headers=alice), 404)
    assert_error(client.post(f"{base}/deliveries/x/redeliver", headers=alice), 400, "delivery_id")
    for since in ("yesterday", "2026-01-01", "2026-01-01T00:00:00"):
        response = client.post(f"{base}/redeliver", json={"since": since}, headers=alice)
        assert_error(response, 400, "since")
    response = client.post(
        f"{base}/redeliver", json={"since": "2026-01-01T00:00:00+02:00"}, headers=alice
    )
    assert response.status_code == 202, response.text
    assert response.json() == {"redelivered": 0}
    assert_error(client.get(f"{base}/deliveries?limit=-1", headers=alice), 400, "limit")
