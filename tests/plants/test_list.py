"""GET /plants: the caller's plants in id order, `limit`, and keyset paging with cursors."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import re
import struct
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, quote, urljoin, urlsplit

import httpx2
import pytest
from starlette.testclient import TestClient

from plantstore.app import create_app
from plantstore.auth.tokens import hash_token
from plantstore.settings import Settings
from tests.fixtures.calls import IssueToken, assert_error, bearer
from tests.stores import Stores

# HTTP to the service alone (no in-process app, settings or logs): on the two-worker server too.
pytestmark = pytest.mark.backends("sqlite", "postgres", "sqlite-2workers")

Headers = dict[str, str]

INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_LINK = re.compile(r'^<([^>]*)>\s*;\s*rel="next"$')


# --- helpers ---------------------------------------------------------------------------------


def name_of(plant_id: int) -> str:
    return f"plant {plant_id}"


def create(client: TestClient, headers: Headers, plant_id: int, tag: str | None = None) -> None:
    body: dict[str, Any] = {"id": plant_id, "name": name_of(plant_id)}
    if tag is not None:
        body["tag"] = tag
    response = client.post("/plants", json=body, headers=headers)
    assert response.status_code == 200, response.text


def delete(client: TestClient, headers: Headers, plant_id: int) -> None:
    response = client.delete(f"/plants/{plant_id}", headers=headers)
    assert response.status_code == 204, response.text


def expected(ids: list[int]) -> list[dict[str, str]]:
    return [{"name": name_of(plant_id)} for plant_id in sorted(ids)]


def ids_of(plants: list[dict[str, str]]) -> list[int]:
    ids = []
    for plant in plants:
        assert plant["name"].startswith("plant ")
        ids.append(int(plant["name"].removeprefix("plant ")))
    return ids


def is_json(response: httpx2.Response) -> bool:
    media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
    return media_type == "application/json"


def next_link(response: httpx2.Response) -> str | None:
    """The target of the response's rel="next" link, resolved against the request URL."""
    link = response.headers.get("link")
    if link is None:
        return None
    match = _LINK.fullmatch(link.strip())
    assert match is not None, f"not an RFC 8288 next link: {link!r}"
    target = urljoin(str(response.request.url), str(match.group(1)))
    assert urlsplit(target).path == "/plants", target
    return target


def link_query(target: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(target).query, keep_blank_values=True)


def cursor_of(response: httpx2.Response) -> str:
    target = next_link(response)
    assert target is not None, "expected a next link"
    cursors = link_query(target)["cursor"]
    assert len(cursors) == 1
    assert cursors[0]
    return cursors[0]


def get_list(client: TestClient, url: str, headers: Headers) -> httpx2.Response:
    response = client.get(url, headers=headers)
    assert response.status_code == 200, response.text
    assert is_json(response)
    assert isinstance(response.json(), list)
    return response


def walk(client: TestClient, url: str, headers: Headers) -> Iterator[httpx2.Response]:
    """Yield every page, following next links until a page has none."""
    target: str | None = url
    for _ in range(10_000):
        if target is None:
            return
        response = get_list(client, target, headers)
        yield response
        target = next_link(response)
    raise AssertionError("paging never ended")


@pytest.fixture
def capped(db_url: str) -> Iterator[TestClient]:
    """A client whose page cap is 3."""
    settings = Settings(database_url=db_url, page_cap=3)
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


# --- the list itself -------------------------------------------------------------------------


def test_empty_list_is_an_empty_array(client: TestClient, alice: Headers) -> None:
    response = get_list(client, "/plants", alice)
    assert response.json() == []
    assert response.content.strip() == b"[]"
    assert "link" not in response.headers


def test_lists_callers_plants_in_id_order(client: TestClient, alice: Headers) -> None:
    ids = [5, -3, 100, 0, INT64_MAX, -1, INT64_MIN, 42, -200, 7]
    for plant_id in ids:
        create(client, alice, plant_id)
    response = get_list(client, "/plants", alice)
    assert response.json() == expected(ids)
    assert "link" not in response.headers


NAMES_OF_EVERY_KIND = [
    'a "quoted" name',
    "back\\slash and /slash/",
    "é, ß, 日本語, 🌵",
    "\u2028 and \u2029 (line separators), \ufeff",
    "<script>&amp;</script>",
    "  spaces around  ",
    "x" * 256,
]


def test_names_and_tags_of_every_kind_come_back_as_they_went_in(
    client: TestClient, alice: Headers
) -> None:
    sent = []
    for plant_id, name in enumerate(NAMES_OF_EVERY_KIND):
        plant: dict[str, Any] = {"id": plant_id, "name": name}
        if plant_id % 2:
            plant["tag"] = name[:64]
        assert client.post("/plants", json=plant, headers=alice).status_code == 200
        sent.append({key: value for key, value in plant.items() if key != "id"})
    for limit in (len(sent), 3):  # one page; pages that end mid-way
        plants = [
            plant for page in walk(client, f"/plants?limit={limit}", alice) for plant in page.json()
        ]
        assert plants == sent


def test_lists_only_the_callers_plants(client: TestClient, alice: Headers, bob: Headers) -> None:
    for plant_id in [3, 1, 2]:
        create(client, alice, plant_id)
    for plant_id in [2, 9, -4]:  # 2 is shared by both users
        client.post("/plants", json={"id": plant_id, "name": f"bob {plant_id}"}, headers=bob)
    assert get_list(client, "/plants", alice).json() == expected([1, 2, 3])
    assert get_list(client, "/plants", bob).json() == [
        {"name": "bob -4"},
        {"name": "bob 2"},
        {"name": "bob 9"},
    ]


def test_same_user_sees_same_plants_through_every_token(
    client: TestClient, alice: Headers, issue_token: IssueToken
) -> None:
    create(client, alice, 1)
    other_alice = bearer(issue_token("alice"))
    create(client, other_alice, 2)
    assert get_list(client, "/plants", alice).json() == expected([1, 2])
    assert get_list(client, "/plants", other_alice).json() == expected([1, 2])


def test_plant_without_tag_has_no_tag_key(client: TestClient, alice: Headers) -> None:
    create(client, alice, 1)
    create(client, alice, 2, tag="tropical")
    response = get_list(client, "/plants", alice)
    plants = response.json()
    assert plants == [{"name": "plant 1"}, {"name": "plant 2", "tag": "tropical"}]
    assert "tag" not in plants[0]
    assert b"null" not in response.content


# --- limit -----------------------------------------------------------------------------------


def test_absent_limit_returns_the_default_cap_of_1000(client: TestClient, alice: Headers) -> None:
    for plant_id in range(1001, 0, -1):
        create(client, alice, plant_id)
    response = get_list(client, "/plants", alice)
    assert response.json() == expected(list(range(1, 1001)))
    target = next_link(response)
    assert target is not None
    last = get_list(client, target, alice)
    assert last.json() == expected([1001])
    assert "link" not in last.headers


def test_limit_above_the_default_cap_is_capped(client: TestClient, alice: Headers) -> None:
    for plant_id in range(1001, 0, -1):
        create(client, alice, plant_id)
    response = get_list(client, f"/plants?limit={INT32_MAX}", alice)
    assert response.json() == expected(list(range(1, 1001)))
    target = next_link(response)
    assert target is not None
    assert link_query(target)["limit"] == [str(INT32_MAX)]


@pytest.mark.backends("sqlite", "postgres")  # an app of its own settings
def test_absent_limit_uses_the_configured_cap(capped: TestClient, alice: Headers) -> None:
    for plant_id in [5, 1, 4, 2, 3]:
        create(capped, alice, plant_id)
    response = get_list(capped, "/plants", alice)
    assert response.json() == expected([1, 2, 3])
    target = next_link(response)
    assert target is not None
    assert get_list(capped, target, alice).json() == expected([4, 5])


@pytest.mark.backends("sqlite", "postgres")  # an app of its own settings
def test_limit_above_configured_cap_returns_the_cap(capped: TestClient, alice: Headers) -> None:
    for plant_id in range(1, 8):
        create(capped, alice, plant_id)
    response = get_list(capped, "/plants?limit=5", alice)
    assert response.json() == expected([1, 2, 3])
    target = next_link(response)
    assert target is not None
    assert link_query(target)["limit"] == ["5"]
    pages = [ids_of(page.json()) for page in walk(capped, "/plants?limit=5", alice)]
    assert pages == [[1, 2, 3], [4, 5, 6], [7]]


@pytest.mark.backends("sqlite", "postgres")  # an app of its own settings
@pytest.mark.parametrize("count", [0, 1, 2, 3])
def test_no_more_than_the_cap_comes_in_one_response(
    capped: TestClient, alice: Headers, count: int
) -> None:
    ids = list(range(count, 0, -1))
    for plant_id in ids:
        create(capped, alice, plant_id)
    response = get_list(capped, "/plants", alice)
    assert response.json() == expected(ids)
    assert "link" not in response.headers


def test_fewer_plants_than_the_limit_come_in_one_response(
    client: TestClient, alice: Headers
) -> None:
    for plant_id in [3, 1, 2]:
        create(client, alice, plant_id)
    for limit in [3, 4, 1000]:
        response = get_list(client, f"/plants?limit={limit}", alice)
        assert response.json() == expected([1, 2, 3])
        assert "link" not in response.headers


def test_limit_zero_is_empty_and_announces_no_next_page(client: TestClient, alice: Headers) -> None:
    for plant_id in [1, 2, 3]:
        create(client, alice, plant_id)
    response = get_list(client, "/plants?limit=0", alice)
    assert response.json() == []
    assert "link" not in response.headers


def test_limit_zero_with_a_cursor_is_empty_and_announces_no_next_page(
    client: TestClient, alice: Headers
) -> None:
    for plant_id in [1, 2, 3]:
        create(client, alice, plant_id)
    cursor = cursor_of(get_list(client, "/plants?limit=1", alice))
    response = get_list(client, f"/plants?limit=0&cursor={quote(cursor)}", alice)
    assert response.json() == []
    assert "link" not in response.headers


@pytest.mark.parametrize(
    ("raw", "count"), [("1", 1), ("2", 2), ("0002", 2), (str(INT32_MAX), 4), ("1000", 4)]
)
def test_valid_limits(client: TestClient, alice: Headers, raw: str, count: int) -> None:
    for plant_id in [4, 3, 2, 1]:
        create(client, alice, plant_id)
    response = get_list(client, f"/plants?limit={raw}", alice)
    assert response.json() == expected([1, 2, 3, 4][:count])
    assert ("link" in response.headers) == (count < 4)


@pytest.mark.parametrize(
    "raw",
    [
        "-1",
        "+1",
        " 1",
        "1 ",
        "1.0",
        "abc",
        "",
        "1e3",
        "0x10",
        "\uff11",  # a fullwidth digit: a digit, but not a plain decimal one
        "²",
        "2147483648",
        "9999999999",
        "123456789012345678901234567890",
        "000000000000000000000000000001" + "0" * 10,
    ],
)
def test_invalid_limit_is_400_naming_limit(client: TestClient, alice: Headers, raw: str) -> None:
    create(client, alice, 1)
    response = client.get(f"/plants?limit={quote(raw, safe='')}", headers=alice)
    assert_error(response, 400, "limit")


def test_limit_given_twice_is_400(client: TestClient, alice: Headers) -> None:
    create(client, alice, 1)
    assert_error(client.get("/plants?limit=1&limit=1", headers=alice), 400, "limit")
    assert_error(client.get("/plants?limit=1&limit=2", headers=alice), 400, "limit")


# --- paging ----------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 6, 7])
def test_following_links_walks_every_plant_once(
    client: TestClient, alice: Headers, bob: Headers, limit: int
) -> None:
    ids = [4, -7, 12, 0, -1, 3, 99]
    for plant_id in ids:
        create(client, alice, plant_id)
    for plant_id in [1, 2, 5]:
        create(client, bob, plant_id)
    pages = list(walk(client, f"/plants?limit={limit}", alice))
    seen: list[int] = []
    for index, page in enumerate(pages):
        plants = ids_of(page.json())
        target = next_link(page)
        if index < len(pages) - 1:
            assert len(plants) == limit
            assert target is not None
            query = link_query(target)
            assert query["limit"] == [str(limit)]
            assert len(query["cursor"]) == 1
        else:
            assert 0 < len(plants) <= limit
            assert target is None
        seen.extend(plants)
    assert seen == sorted(ids)
    assert len(pages) == -(-len(ids) // limit)


def test_link_header_shape(client: TestClient, alice: Headers) -> None:
    for plant_id in [1, 2, 3]:
        create(client, alice, plant_id)
    response = get_list(client, "/plants?limit=2", alice)
    link = response.headers["link"]
    match = _LINK.fullmatch(link)
    assert match is not None, link
    query = link_query(urljoin("http://testserver/plants", match.group(1)))
    assert set(query) == {"limit", "cursor"}
    assert query["limit"] == ["2"]


@pytest.mark.backends("sqlite", "postgres")  # an app of its own settings
def test_following_links_with_the_cap(capped: TestClient, alice: Headers) -> None:
    ids = list(range(10, 0, -1))
    for plant_id in ids:
        create(capped, alice, plant_id)
    pages = [ids_of(page.json()) for page in walk(capped, "/plants", alice)]
    assert pages == [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10]]


def test_another_users_cursor_is_400(client: TestClient, alice: Headers, bob: Headers) -> None:
    for plant_id in [1, 2, 3]:
        create(client, alice, plant_id)
        create(client, bob, plant_id)
    cursor = cursor_of(get_list(client, "/plants?limit=1", alice))
    response = client.get(f"/plants?limit=1&cursor={quote(cursor, safe='')}", headers=bob)
    assert_error(response, 400, "cursor")
    # still good for its owner
    owner = get_list(client, f"/plants?limit=1&cursor={quote(cursor, safe='')}", alice)
    assert owner.json() == expected([2])


def _flip(cursor: str, index: int) -> str:
    replacement = "A" if cursor[index] != "A" else "B"
    return cursor[:index] + replacement + cursor[index + 1 :]


@pytest.mark.parametrize("position", ["first", "middle", "last"])
def test_damaged_cursor_is_400(client: TestClient, alice: Headers, position: str) -> None:
    for plant_id in [1, 2, 3]:
        create(client, alice, plant_id)
    cursor = cursor_of(get_list(client, "/plants?limit=1", alice))
    index = {"first": 0, "middle": len(cursor) // 2, "last": len(cursor) - 1}[position]
    damaged = _flip(cursor, index)
    assert damaged != cursor
    response = client.get(f"/plants?limit=1&cursor={quote(damaged, safe='')}", headers=alice)
    assert_error(response, 400, "cursor")


def test_every_single_character_damage_is_400(client: TestClient, alice: Headers) -> None:
    for plant_id in [1, 2, 3]:
        create(client, alice, plant_id)
    cursor = cursor_of(get_list(client, "/plants?limit=1", alice))
    for index in range(len(cursor)):
        damaged = _flip(cursor, index)
        response = client.get(f"/plants?limit=1&cursor={quote(damaged, safe='')}", headers=alice)
        assert_error(response, 400, "cursor")


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "x",
        "not-a-cursor",
        "A" * 32,
        "é" * 32,
        "!" * 32,
        "0123456789abcdefghijklmnopqrstuvwxyz",
        "eyJpZCI6IDJ9",  # base64 of a JSON object: a forgery, not a cursor
    ],
)
def test_forged_cursor_is_400(client: TestClient, alice: Headers, cursor: str) -> None:
    create(client, alice, 1)
    response = client.get(f"/plants?limit=1&cursor={quote(cursor, safe='')}", headers=alice)
    assert_error(response, 400, "cursor")


def test_cursor_in_the_standard_base64_alphabet_is_400(client: TestClient, alice: Headers) -> None:
    """Base64 decoding would read "+" as "-" and "/" as "_"; only the issued spelling counts."""
    for plant_id in range(1, 41):
        create(client, alice, plant_id)
    cursors = [
        cursor_of(page) for page in walk(client, "/plants?limit=1", alice) if next_link(page)
    ]
    respelled = [c.translate(str.maketrans("-_", "+/")) for c in cursors if {"-", "_"} & set(c)]
    assert respelled, "no cursor had a '-' or '_' to respell"
    for cursor in respelled:
        response = client.get(f"/plants?limit=1&cursor={quote(cursor, safe='')}", headers=alice)
        assert_error(response, 400, "cursor")


def test_cursor_given_twice_is_400(client: TestClient, alice: Headers) -> None:
    for plant_id in [1, 2, 3]:
        create(client, alice, plant_id)
    cursor = quote(cursor_of(get_list(client, "/plants?limit=1", alice)), safe="")
    response = client.get(f"/plants?limit=1&cursor={cursor}&cursor={cursor}", headers=alice)
    assert_error(response, 400, "cursor")


@pytest.mark.backends("sqlite", "postgres")  # apps of its own settings
def test_cursor_stays_valid_across_restarts(settings: Settings, alice: Headers) -> None:
    with TestClient(create_app(settings), raise_server_exceptions=False) as first:
        for plant_id in [1, 2, 3, 4]:
            create(first, alice, plant_id)
        response = get_list(first, "/plants?limit=2", alice)
        assert response.json() == expected([1, 2])
        target = next_link(response)
        assert target is not None
    with TestClient(create_app(settings), raise_server_exceptions=False) as second:
        page = get_list(second, target, alice)
        assert page.json() == expected([3, 4])
        assert "link" not in page.headers


@pytest.mark.backends("sqlite", "postgres")  # reads the app's settings
def test_a_cursor_of_the_former_hmac_format_is_honoured(
    client: TestClient, settings: Settings, alice: Headers, bob: Headers
) -> None:
    """Cursors were once signed with HMAC-SHA256: a client paging through the upgrade to
    keyed BLAKE2b goes on. Built here as that release built them, with the database's key."""
    for plant_id in [1, 2, 3, 4]:
        create(client, alice, plant_id)

    async def key_and_user() -> tuple[bytes, int]:
        stores = Stores(settings)
        await stores.open()
        try:
            record = await stores.tokens.find_token(hash_token(alice["Authorization"][7:]))
            assert record is not None
            return await stores.plants.cursor_key(), record.user_id
        finally:
            await stores.close()

    key, user_id = asyncio.run(key_and_user())
    body = struct.pack(">q", 2)
    signed = b"plantstore-cursor-v1" + struct.pack(">q", user_id) + body
    mac = hmac.new(key, signed, hashlib.sha256).digest()[:16]
    former = base64.urlsafe_b64encode(body + mac).decode("ascii").rstrip("=")
    assert former != cursor_of(get_list(client, "/plants?limit=2", alice))  # not today's
    page = get_list(client, f"/plants?limit=2&cursor={former}", alice)
    assert page.json() == expected([3, 4])
    assert_error(client.get(f"/plants?limit=2&cursor={former}", headers=bob), 400, "cursor")


def test_keyset_paging_survives_creates_and_deletes(client: TestClient, alice: Headers) -> None:
    for plant_id in [60, 10, 50, 20, 40, 30]:
        create(client, alice, plant_id)
    first = get_list(client, "/plants?limit=3", alice)
    assert first.json() == expected([10, 20, 30])
    target = next_link(first)
    assert target is not None
    # before the cursor: these were passed already and must not appear again
    create(client, alice, 5)
    create(client, alice, 25)
    delete(client, alice, 20)
    # after the cursor: new ones must appear, the deleted one must not
    create(client, alice, 35)
    create(client, alice, 70)
    delete(client, alice, 50)
    rest: list[int] = []
    for page in walk(client, target, alice):
        rest.extend(ids_of(page.json()))
    assert rest == [35, 40, 60, 70]
    seen = [10, 20, 30, *rest]
    assert len(seen) == len(set(seen))


def test_keyset_paging_survives_deleting_the_last_plant_seen(
    client: TestClient, alice: Headers
) -> None:
    for plant_id in [1, 2, 3, 4, 5]:
        create(client, alice, plant_id)
    first = get_list(client, "/plants?limit=2", alice)
    assert first.json() == expected([1, 2])
    target = next_link(first)
    assert target is not None
    delete(client, alice, 2)
    rest = [plant_id for page in walk(client, target, alice) for plant_id in ids_of(page.json())]
    assert rest == [3, 4, 5]


def test_cursor_after_every_plant_is_gone_gives_empty_page(
    client: TestClient, alice: Headers
) -> None:
    for plant_id in [1, 2]:
        create(client, alice, plant_id)
    target = next_link(get_list(client, "/plants?limit=1", alice))
    assert target is not None
    delete(client, alice, 2)
    page = get_list(client, target, alice)
    assert page.json() == []
    assert "link" not in page.headers
