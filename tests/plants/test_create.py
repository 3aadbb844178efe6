"""POST /plants against the contract (docs/api.md, "Plants" and "POST /plants: create").

Every rejected request is followed by a look at GET /plants: a refusal must store nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest
from starlette.testclient import TestClient

from tests.fixtures.calls import IssueToken, assert_error, bearer

# HTTP to the service alone (no in-process app, settings or logs): on the two-worker server too.
pytestmark = pytest.mark.backends("sqlite", "postgres", "sqlite-2workers")

JSON = "application/json"
LIMIT = 65_536
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

Headers = dict[str, str]
# starlette's TestClient answers with httpx2 responses, the live server with httpx ones
Response = httpx.Response | httpx2.Response


# --- helpers -------------------------------------------------------------------------------


def post_raw(
    client: TestClient,
    headers: Headers,
    body: bytes,
    content_type: str | None = JSON,
) -> Response:
    """POST raw bytes to /plants with exactly the given Content-Type (None: no header)."""
    all_headers = dict(headers)
    if content_type is not None:
        all_headers["Content-Type"] = content_type
    return client.post("/plants", content=body, headers=all_headers)


def post_json(client: TestClient, headers: Headers, document: Any) -> Response:
    body = json.dumps(document, ensure_ascii=False).encode("utf-8")
    return post_raw(client, headers, body)


def listing(client: TestClient, headers: Headers) -> list[dict[str, Any]]:
    response = client.get("/plants", headers=headers)
    assert response.status_code == 200, response.text
    assert_json_content_type(response)
    plants = response.json()
    assert isinstance(plants, list)
    return plants


def assert_json_content_type(response: Response) -> None:
    content_type = response.headers.get("content-type", "")
    media_type, *params = (part.strip().lower() for part in content_type.split(";"))
    assert media_type == "application/json", content_type
    assert all(param.replace(" ", "") == "charset=utf-8" for param in params), content_type


def assert_plant(response: Response, expected: dict[str, str]) -> None:
    """A 200 with exactly the Plant: ``name``, ``tag`` only when present, never ``id``."""
    assert response.status_code == 200, response.text
    assert_json_content_type(response)
    body = response.json()
    assert body == expected
    assert "id" not in body
    assert body.get("tag", "") is not None


def padded(document: dict[str, Any], size: int) -> bytes:
    """``document`` as JSON followed by spaces up to exactly ``size`` bytes (still valid JSON)."""
    body = json.dumps(document, ensure_ascii=False).encode("utf-8")
    assert len(body) <= size
    return body + b" " * (size - len(body))


@pytest.fixture
def seeded(client: TestClient, alice: Headers) -> list[dict[str, Any]]:
    """Alice owns one plant already, so 'unchanged' is checked against a non-empty list."""
    response = post_json(client, alice, {"id": 1000, "name": "Seed", "tag": "kept"})
    assert_plant(response, {"name": "Seed", "tag": "kept"})
    before = listing(client, alice)
    assert before == [{"name": "Seed", "tag": "kept"}]
    return before


# --- 200: the Plant is answered and stored ---------------------------------------------------


def test_create_without_tag_answers_plant_without_tag_member(
    client: TestClient, alice: Headers
) -> None:
    response = post_json(client, alice, {"id": 1, "name": "Monstera"})
    assert_plant(response, {"name": "Monstera"})
    assert "tag" not in response.json()
    assert b"null" not in response.content
    assert listing(client, alice) == [{"name": "Monstera"}]


def test_create_with_tag_answers_plant_with_tag(client: TestClient, alice: Headers) -> None:
    response = post_json(client, alice, {"id": 2, "name": "Monstera", "tag": "tropical"})
    assert_plant(response, {"name": "Monstera", "tag": "tropical"})
    assert listing(client, alice) == [{"name": "Monstera", "tag": "tropical"}]


def test_create_answers_200_not_201(client: TestClient, alice: Headers) -> None:
    response = post_json(client, alice, {"id": 3, "name": "Fern"})
    assert response.status_code == 200


def test_member_order_and_whitespace_do_not_matter(client: TestClient, alice: Headers) -> None:
    body = b' \n\t{ "tag" : "t" ,\r\n "name":"Fern", "id" : 4 }\n '
    assert_plant(post_raw(client, alice, body), {"name": "Fern", "tag": "t"})
    assert listing(client, alice) == [{"name": "Fern", "tag": "t"}]


@pytest.mark.parametrize("plant_id", [INT64_MIN, INT64_MAX, 0, -1, 1, 2**53 + 1])
def test_every_int64_id_is_accepted(client: TestClient, alice: Headers, plant_id: int) -> None:
    body = f'{{"id":{plant_id},"name":"Edge"}}'.encode()
    assert_plant(post_raw(client, alice, body), {"name": "Edge"})
    assert listing(client, alice) == [{"name": "Edge"}]
    assert client.delete(f"/plants/{plant_id}", headers=alice).status_code == 204


def test_both_int64_extremes_coexist_in_id_order(client: TestClient, alice: Headers) -> None:
    assert_plant(
        post_raw(client, alice, b'{"id":9223372036854775807,"name":"max"}'), {"name": "max"}
    )
    assert_plant(
        post_raw(client, alice, b'{"id":-9223372036854775808,"name":"min"}'), {"name": "min"}
    )
    assert listing(client, alice) == [{"name": "min"}, {"name": "max"}]


@pytest.mark.parametrize(
    "name",
    [
        "a" * 256,
        "é" * 256,  # 512 bytes in UTF-8: the limit counts code points
        "😀" * 256,  # 1024 bytes in UTF-8, 512 UTF-16 units
        "x",
        " ",  # U+0020 is not a control character
        "~",  # U+007E, just below U+007F
        "\u00a0",  # U+00A0, just above U+009F
        "\u2028",  # a line separator, category Zl, not Cc
        "e\u0301",  # two code points
    ],
)
def test_name_of_1_to_256_code_points_without_controls_is_accepted(
    client: TestClient, alice: Headers, name: str
) -> None:
    assert_plant(post_json(client, alice, {"id": 5, "name": name}), {"name": name})
    assert listing(client, alice) == [{"name": name}]


@pytest.mark.parametrize("tag", ["t" * 64, "é" * 64, "😀" * 64, "t", " ", "~", "\u00a0"])
def test_tag_of_1_to_64_code_points_without_controls_is_accepted(
    client: TestClient, alice: Headers, tag: str
) -> None:
    assert_plant(
        post_json(client, alice, {"id": 6, "name": "n", "tag": tag}), {"name": "n", "tag": tag}
    )
    assert listing(client, alice) == [{"name": "n", "tag": tag}]


def test_escaped_surrogate_pair_is_one_code_point(client: TestClient, alice: Headers) -> None:
    body = b'{"id":7,"name":"\\ud83d\\ude00","tag":"' + b"\\ud83d\\ude00" * 64 + b'"}'
    assert_plant(post_raw(client, alice, body), {"name": "😀", "tag": "😀" * 64})


# --- 400: id ------------------------------------------------------------------------------


ID_CASES = {
    "string": b'{"id":"1","name":"bad-id"}',
    "numeric string": b'{"id":"9223372036854775807","name":"bad-id"}',
    "float 1.0": b'{"id":1.0,"name":"bad-id"}',
    "float 1e2": b'{"id":1e2,"name":"bad-id"}',
    "float 1E2": b'{"id":1E2,"name":"bad-id"}',
    "float 1.5": b'{"id":1.5,"name":"bad-id"}',
    "negative zero float": b'{"id":-0.0,"name":"bad-id"}',
    "true": b'{"id":true,"name":"bad-id"}',
    "false": b'{"id":false,"name":"bad-id"}',
    "null": b'{"id":null,"name":"bad-id"}',
    "array": b'{"id":[1],"name":"bad-id"}',
    "object": b'{"id":{},"name":"bad-id"}',
    "missing": b'{"name":"bad-id"}',
    "missing with tag": b'{"name":"bad-id","tag":"t"}',
    "2**63": b'{"id":9223372036854775808,"name":"bad-id"}',
    "-2**63-1": b'{"id":-9223372036854775809,"name":"bad-id"}',
    "2**64": b'{"id":18446744073709551616,"name":"bad-id"}',
    "10**30": b'{"id":1000000000000000000000000000000,"name":"bad-id"}',
    "-10**30": b'{"id":-1000000000000000000000000000000,"name":"bad-id"}',
}


# --- 400: name ----------------------------------------------------------------------------


CONTROL_CHARS = {
    "U+0000": "\u0000",
    "U+0009": "\t",
    "U+000A": "\n",
    "U+000D": "\r",
    "U+001F": "\u001f",
    "U+007F": "\u007f",
    "U+0080": "\u0080",
    "U+0085": "\u0085",
    "U+009F": "\u009f",
}


def control_char_values(limit: int) -> tuple[list[str], list[str]]:
    """Strings holding a control character at the start, middle, end, or alone."""
    values: list[str] = []
    ids: list[str] = []
    for label, char in CONTROL_CHARS.items():
        for where, value in {
            "alone": char,
            "start": char + "ab",
            "middle": "a" + char + "b",
            "end": "ab" + char,
            "end of longest": "a" * (limit - 1) + char,
        }.items():
            values.append(value)
            ids.append(f"{label} {where}")
    return values, ids


NAME_CONTROL_VALUES, NAME_CONTROL_IDS = control_char_values(256)
TAG_CONTROL_VALUES, TAG_CONTROL_IDS = control_char_values(64)


@pytest.mark.parametrize("name", NAME_CONTROL_VALUES, ids=NAME_CONTROL_IDS)
def test_name_with_control_character_is_400_naming_name(
    client: TestClient, alice: Headers, seeded: list[dict[str, Any]], name: str
) -> None:
    # json.dumps escapes C0 controls (\u0000, \n, ...) and, with ensure_ascii, C1 too.
    assert_error(post_json(client, alice, {"id": 10, "name": name}), 400, "name")
    escaped = json.dumps({"id": 10, "name": name}, ensure_ascii=True).encode("ascii")
    assert_error(post_raw(client, alice, escaped), 400, "name")
    assert listing(client, alice) == seeded


@pytest.mark.parametrize("char", ["\u007f", "\u0085", "\u009f"], ids=["U+007F", "U+0085", "U+009F"])
def test_raw_utf8_c1_control_in_name_is_400(
    client: TestClient, alice: Headers, seeded: list[dict[str, Any]], char: str
) -> None:
    """DEL and C1 controls may appear unescaped in JSON text; they are still refused."""
    body = b'{"id":11,"name":"a' + char.encode("utf-8") + b'b"}'
    assert_error(post_raw(client, alice, body), 400, "name")
    assert listing(client, alice) == seeded


NAME_CASES = {
    "missing": b'{"id":12}',
    "missing with tag": b'{"id":12,"tag":"t"}',
    "empty": b'{"id":12,"name":""}',
    "257 ascii": b'{"id":12,"name":"' + b"a" * 257 + b'"}',
    "257 e-acute": ('{"id":12,"name":"' + "é" * 257 + '"}').encode(),
    "257 emoji": ('{"id":12,"name":"' + "😀" * 257 + '"}').encode(),
    "257 escaped emoji": b'{"id":12,"name":"' + b"\\ud83d\\ude00" * 257 + b'"}',
    "null": b'{"id":12,"name":null}',
    "number": b'{"id":12,"name":1}',
    "boolean": b'{"id":12,"name":true}',
    "array": b'{"id":12,"name":["a"]}',
    "object": b'{"id":12,"name":{"a":"b"}}',
}


# --- 400: tag -----------------------------------------------------------------------------


TAG_CASES = {
    "empty": b'{"id":13,"name":"n","tag":""}',
    "65 ascii": b'{"id":13,"name":"n","tag":"' + b"t" * 65 + b'"}',
    "65 e-acute": ('{"id":13,"name":"n","tag":"' + "é" * 65 + '"}').encode(),
    "65 emoji": ('{"id":13,"name":"n","tag":"' + "😀" * 65 + '"}').encode(),
    "null": b'{"id":13,"name":"n","tag":null}',
    "number": b'{"id":13,"name":"n","tag":1}',
    "boolean": b'{"id":13,"name":"n","tag":false}',
    "array": b'{"id":13,"name":"n","tag":["t"]}',
    "object": b'{"id":13,"name":"n","tag":{}}',
}


FIELD_CASES = {
    f"{field}: {case}": (field, body)
    for field, cases in (("id", ID_CASES), ("name", NAME_CASES), ("tag", TAG_CASES))
    for case, body in cases.items()
}


@pytest.mark.parametrize(("field", "body"), list(FIELD_CASES.values()), ids=list(FIELD_CASES))
def test_invalid_member_is_400_naming_it(
    client: TestClient, alice: Headers, seeded: list[dict[str, Any]], field: str, body: bytes
) -> None:
    assert_error(post_raw(client, alice, body), 400, field)
    assert listing(client, alice) == seeded


@pytest.mark.parametrize("tag", TAG_CONTROL_VALUES, ids=TAG_CONTROL_IDS)
def test_tag_with_control_character_is_400_naming_tag(
    client: TestClient, alice: Headers, seeded: list[dict[str, Any]], tag: str
) -> None:
    assert_error(post_json(client, alice, {"id": 14, "name": "n", "tag": tag}), 400, "tag")
    escaped = json.dumps({"id": 14, "name": "n", "tag": tag}, ensure_ascii=True).encode("ascii")
    assert_error(post_raw(client, alice, escaped), 400, "tag")
    assert listing(client, alice) == seeded


# --- 400: unknown and duplicate members ----------------------------------------------------


UNKNOWN_MEMBER_CASES = {
    "color": b'{"id":15,"name":"n","color":"green"}',
    "owner": b'{"id":15,"name":"n","tag":"t","owner":"bob"}',
    "Name": b'{"id":15,"name":"n","Name":"m"}',
    "tags": b'{"id":15,"name":"n","tags":null}',
    "nested": b'{"id":15,"name":"n","nested":{"a":1}}',
}


@pytest.mark.parametrize(
    ("member", "body"), list(UNKNOWN_MEMBER_CASES.items()), ids=list(UNKNOWN_MEMBER_CASES)
)
def test_unknown_member_is_400_naming_it(
    client: TestClient, alice: Headers, seeded: list[dict[str, Any]], member: str, body: bytes
) -> None:
    assert_error(post_raw(client, alice, body), 400, member)
    assert listing(client, alice) == seeded


DUPLICATE_MEMBER_CASES = {
    "name differs": ("name", b'{"id":16,"name":"a","name":"b"}'),
    "name same": ("name", b'{"id":16,"name":"a","name":"a"}'),
    "id differs": ("id", b'{"id":16,"id":17,"name":"a"}'),
    "id same": ("id", b'{"id":16,"name":"a","id":16}'),
    "tag": ("tag", b'{"id":16,"name":"a","tag":"x","tag":"y"}'),
    "escaped spelling": ("name", b'{"id":16,"name":"a","\\u006eame":"b"}'),
}


@pytest.mark.parametrize(
    ("member", "body"), list(DUPLICATE_MEMBER_CASES.values()), ids=list(DUPLICATE_MEMBER_CASES)
)
def test_duplicate_member_is_400_naming_it(
    client: TestClient, alice: Headers, seeded: list[dict[str, Any]], member: str, body: bytes
) -> None:
    assert_error(post_raw(client, alice, body), 400, member)
    assert listing(client, alice) == seeded


# --- 400: the body as a whole ---------------------------------------------------------------


BODY_CASES = {
    # not a JSON object
    "array": b"[]",
    "array of plant": b'[{"id":18,"name":"n"}]',
    "string": b'"{\\"id\\":18,\\"name\\":\\"n\\"}"',
    "number": b"18",
    "null": b"null",
    "true": b"true",
    # not JSON
    "empty": b"",
    "whitespace only": b"   \n",
    "truncated": b'{"id":18,"name":"n"',
    "single quotes": b"{'id':18,'name':'n'}",
    "trailing comma": b'{"id":18,"name":"n",}',
    "unquoted key": b'{id:18,"name":"n"}',
    "NaN id": b'{"id":NaN,"name":"n"}',
    "raw newline in string": b'{"id":18,"name":"a\nb"}',
    "form encoded": b"id=18&name=n",
    # trailing garbage
    "trailing text": b'{"id":18,"name":"n"} x',
    "second object": b'{"id":18,"name":"n"}{"id":19,"name":"m"}',
    "trailing bracket": b'{"id":18,"name":"n"}]',
    "trailing nul": b'{"id":18,"name":"n"}\x00',
    # not UTF-8
    "lone 0xff": b"\xff",
    "0xff in name": b'{"id":18,"name":"a\xffb"}',
    "truncated sequence": b'{"id":18,"name":"\xc3"}',
    "bad continuation": b'{"id":18,"name":"\xc3\x28"}',
    "overlong slash": b'{"id":18,"name":"\xc0\xaf"}',
    "utf-8 encoded surrogate": b'{"id":18,"name":"\xed\xa0\x80"}',
    "beyond U+10FFFF": b'{"id":18,"name":"\xf4\x90\x80\x80"}',
    "latin-1 e-acute": b'{"id":18,"name":"caf\xe9"}',
    "utf-16": '{"id":18,"name":"n"}'.encode("utf-16"),
    # lone surrogate escapes
    "lone high surrogate": b'{"id":18,"name":"\\ud800"}',
    "lone low surrogate": b'{"id":18,"name":"\\udc00"}',
    "high surrogate then text": b'{"id":18,"name":"\\ud83dx"}',
    "high surrogate then non-low escape": b'{"id":18,"name":"\\ud800\\u0041"}',
    "reversed pair": b'{"id":18,"name":"\\ude00\\ud83d"}',
    "lone surrogate in tag": b'{"id":18,"name":"n","tag":"\\udfff"}',
}


@pytest.mark.parametrize("body", list(BODY_CASES.values()), ids=list(BODY_CASES))
def test_body_that_is_not_a_json_object_in_utf8_is_400(
    client: TestClient, alice: Headers, seeded: list[dict[str, Any]], body: bytes
) -> None:
    assert_error(post_raw(client, alice, body), 400)
    assert listing(client, alice) == seeded


# --- 415 ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "",
        "text/plain",
        "text/plain; charset=utf-8",
        "application/json; charset=latin-1",
        "application/json; charset=iso-8859-1",
        "application/json; charset=utf-16",
        "application/json; charset=utf-8; foo=bar",
        'application/json; charset=utf-8"',  # an unbalanced quote
        'application/json; charset="utf-8',
        "application/json; foo=bar",
        "application/jsonx",
        "application/json-patch+json",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "text/json",
        "json",
    ],
)
def test_wrong_content_type_is_415(
    client: TestClient,
    alice: Headers,
    seeded: list[dict[str, Any]],
    content_type: str | None,
) -> None:
    response = post_raw(client, alice, b'{"id":20,"name":"typed"}', content_type)
    if content_type is None:
        assert "content-type" not in response.request.headers
    message = assert_error(response, 415)
    assert "content-type" in message.lower()  # names the offending header
    assert listing(client, alice) == seeded


@pytest.mark.parametrize("second", ["text/plain", "application/json"], ids=["other", "same"])
def test_two_content_types_are_415_whichever_comes_first(
    client: TestClient, alice: Headers, seeded: list[dict[str, Any]], second: str
) -> None:
    for pair in ((JSON, second), (second, JSON)):
        headers = [*alice.items(), *(("Content-Type", value) for value in pair)]
        response = client.post("/plants", content=b'{"id":21,"name":"twice"}', headers=headers)
        assert_error(response, 415)
    assert listing(client, alice) == seeded


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/json; charset=utf-8",
        "application/json;charset=UTF-8",
        "application/json; charset=UTF-8",
        'application/json; charset="utf-8"',
        # httpx (h11) refuses to send a header value with trailing whitespace
        pytest.param(
            "application/json\t; charset=utf-8 ", marks=pytest.mark.backends("sqlite", "postgres")
        ),
    ],
)
def test_json_content_type_with_optional_utf8_charset_is_accepted(
    client: TestClient, alice: Headers, content_type: str
) -> None:
    response = post_raw(client, alice, '{"id":21,"name":"café"}'.encode(), content_type)
    assert_plant(response, {"name": "café"})
    assert listing(client, alice) == [{"name": "café"}]


@pytest.mark.parametrize(
    "padding",
    [
        b"\xa0",
        b"\x85",
        # a control character: h11 will not send it, and granian answers a bare 400 unread
        pytest.param(b"\x0b", marks=pytest.mark.backends("sqlite", "postgres")),
    ],
)
def test_content_type_padded_with_other_than_space_or_tab_is_415(
    client: TestClient, alice: Headers, padding: bytes
) -> None:
    """HTTP pads header parts with spaces and tabs only; Python's ``str.strip`` takes more."""
    headers = [(name.encode(), value.encode()) for name, value in alice.items()]
    headers.append((b"Content-Type", b"application/json" + padding))
    response = client.post("/plants", content=b'{"id":22,"name":"x"}', headers=headers)
    assert_error(response, 415)
    assert listing(client, alice) == []


# --- 413 ------------------------------------------------------------------------------------


def test_body_of_exactly_the_limit_is_accepted(client: TestClient, alice: Headers) -> None:
    body = padded({"id": 22, "name": "Exactly", "tag": "limit"}, LIMIT)
    assert len(body) == LIMIT
    assert_plant(post_raw(client, alice, body), {"name": "Exactly", "tag": "limit"})
    assert listing(client, alice) == [{"name": "Exactly", "tag": "limit"}]


@pytest.mark.parametrize("size", [LIMIT + 1, LIMIT + 1024, 1024 * 1024])
def test_body_over_the_limit_is_413(
    client: TestClient, alice: Headers, seeded: list[dict[str, Any]], size: int
) -> None:
    body = padded({"id": 23, "name": "Oversized"}, size)
    assert len(body) == size
    assert_error(post_raw(client, alice, body), 413)
    assert listing(client, alice) == seeded


def chunks(body: bytes, size: int = 8192) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


def test_chunked_body_over_the_limit_is_413(
    client: TestClient, alice: Headers, seeded: list[dict[str, Any]]
) -> None:
    """Without a Content-Length the limit still holds, counted as the body arrives."""
    body = padded({"id": 24, "name": "Chunked"}, LIMIT + 1)
    response = client.post("/plants", content=chunks(body), headers={**alice, "Content-Type": JSON})
    assert "content-length" not in response.request.headers
    assert_error(response, 413)
    assert listing(client, alice) == seeded


def test_chunked_body_of_exactly_the_limit_is_accepted(client: TestClient, alice: Headers) -> None:
    body = padded({"id": 25, "name": "Chunked"}, LIMIT)
    response = client.post("/plants", content=chunks(body), headers={**alice, "Content-Type": JSON})
    assert "content-length" not in response.request.headers
    assert_plant(response, {"name": "Chunked"})
    assert listing(client, alice) == [{"name": "Chunked"}]


# --- idempotency and 409 --------------------------------------------------------------------


@pytest.mark.parametrize(
    "plant",
    [{"id": 30, "name": "Fern"}, {"id": 30, "name": "Fern", "tag": "shade"}],
    ids=["without tag", "with tag"],
)
def test_repeating_the_same_create_is_200_and_changes_nothing(
    client: TestClient, alice: Headers, plant: dict[str, Any]
) -> None:
    expected = {key: value for key, value in plant.items() if key != "id"}
    assert_plant(post_json(client, alice, plant), expected)
    stored = listing(client, alice)
    assert stored == [expected]
    for _ in range(3):
        assert_plant(post_json(client, alice, plant), expected)
        assert listing(client, alice) == stored


def test_repeat_in_other_member_order_and_spacing_is_still_the_same_plant(
    client: TestClient, alice: Headers
) -> None:
    assert_plant(
        post_raw(client, alice, b'{"id":31,"name":"Ivy","tag":"climber"}'),
        {"name": "Ivy", "tag": "climber"},
    )
    again = b'{ "tag":"climber", "name":"Iv\\u0079", "id":31 }'
    assert_plant(post_raw(client, alice, again), {"name": "Ivy", "tag": "climber"})
    assert listing(client, alice) == [{"name": "Ivy", "tag": "climber"}]


CONFLICTS = {
    "different name": ({"id": 32, "name": "Fern"}, {"id": 32, "name": "Moss"}),
    "name differs in case": ({"id": 32, "name": "Fern"}, {"id": 32, "name": "fern"}),
    "name with extra space": ({"id": 32, "name": "Fern"}, {"id": 32, "name": "Fern "}),
    "different tag": (
        {"id": 32, "name": "Fern", "tag": "shade"},
        {"id": 32, "name": "Fern", "tag": "sun"},
    ),
    "tag added": ({"id": 32, "name": "Fern"}, {"id": 32, "name": "Fern", "tag": "shade"}),
    "tag removed": ({"id": 32, "name": "Fern", "tag": "shade"}, {"id": 32, "name": "Fern"}),
    "name and tag swapped": (
        {"id": 32, "name": "a", "tag": "b"},
        {"id": 32, "name": "b", "tag": "a"},
    ),
    "both differ": (
        {"id": 32, "name": "Fern", "tag": "shade"},
        {"id": 32, "name": "Moss", "tag": "sun"},
    ),
}


@pytest.mark.parametrize(("original", "retry"), list(CONFLICTS.values()), ids=list(CONFLICTS))
def test_same_id_with_different_plant_is_409_and_keeps_the_stored_one(
    client: TestClient, alice: Headers, original: dict[str, Any], retry: dict[str, Any]
) -> None:
    expected = {key: value for key, value in original.items() if key != "id"}
    assert_plant(post_json(client, alice, original), expected)
    assert listing(client, alice) == [expected]

    assert_error(post_json(client, alice, retry), 409, "id")
    assert listing(client, alice) == [expected]

    # The conflict changed nothing: the original is still an idempotent repeat.
    assert_plant(post_json(client, alice, original), expected)
    assert listing(client, alice) == [expected]


def test_conflict_leaves_other_plants_alone(client: TestClient, alice: Headers) -> None:
    assert_plant(post_json(client, alice, {"id": 33, "name": "A"}), {"name": "A"})
    assert_plant(
        post_json(client, alice, {"id": 34, "name": "B", "tag": "b"}), {"name": "B", "tag": "b"}
    )
    before = listing(client, alice)
    assert_error(post_json(client, alice, {"id": 34, "name": "B"}), 409, "id")
    assert_error(post_json(client, alice, {"id": 33, "name": "A", "tag": "a"}), 409, "id")
    assert listing(client, alice) == before == [{"name": "A"}, {"name": "B", "tag": "b"}]


def test_create_after_delete_takes_the_new_plant(client: TestClient, alice: Headers) -> None:
    assert_plant(post_json(client, alice, {"id": 35, "name": "Old"}), {"name": "Old"})
    assert client.delete("/plants/35", headers=alice).status_code == 204
    assert_plant(post_json(client, alice, {"id": 35, "name": "New"}), {"name": "New"})
    assert listing(client, alice) == [{"name": "New"}]


# --- ids are scoped to their owner ----------------------------------------------------------


def test_two_users_may_each_have_plant_7(client: TestClient, alice: Headers, bob: Headers) -> None:
    assert_plant(
        post_json(client, alice, {"id": 7, "name": "Alice's", "tag": "a"}),
        {"name": "Alice's", "tag": "a"},
    )
    assert_plant(post_json(client, bob, {"id": 7, "name": "Bob's"}), {"name": "Bob's"})
    assert listing(client, alice) == [{"name": "Alice's", "tag": "a"}]
    assert listing(client, bob) == [{"name": "Bob's"}]

    # Each user's repeat and conflict are judged against their own plant 7 only.
    assert_plant(post_json(client, bob, {"id": 7, "name": "Bob's"}), {"name": "Bob's"})
    assert_error(post_json(client, bob, {"id": 7, "name": "Alice's", "tag": "a"}), 409, "id")
    assert_error(post_json(client, alice, {"id": 7, "name": "Bob's"}), 409, "id")
    assert listing(client, alice) == [{"name": "Alice's", "tag": "a"}]
    assert listing(client, bob) == [{"name": "Bob's"}]


def test_another_users_plant_is_not_visible(
    client: TestClient, alice: Headers, bob: Headers
) -> None:
    assert_plant(post_json(client, alice, {"id": 8, "name": "Private"}), {"name": "Private"})
    assert listing(client, bob) == []
    assert_plant(post_json(client, bob, {"id": 9, "name": "Other"}), {"name": "Other"})
    assert listing(client, alice) == [{"name": "Private"}]


def test_a_users_tokens_share_the_same_plants(client: TestClient, issue_token: IssueToken) -> None:
    first = bearer(issue_token("carol"))
    second = bearer(issue_token("carol"))
    assert_plant(post_json(client, first, {"id": 40, "name": "Shared"}), {"name": "Shared"})
    assert_plant(post_json(client, second, {"id": 40, "name": "Shared"}), {"name": "Shared"})
    assert_error(post_json(client, second, {"id": 40, "name": "Other"}), 409, "id")
    assert listing(client, first) == listing(client, second) == [{"name": "Shared"}]


# --- 401 stores nothing --------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    [None, "Basic YWxpY2U6cGFzcw==", "Bearer", "Bearer not-a-token", "Bearer pst_" + "A" * 43],
    ids=["missing", "basic", "bearer without token", "malformed", "unknown"],
)
def test_unauthenticated_create_is_401_and_stores_nothing(
    client: TestClient,
    alice: Headers,
    seeded: list[dict[str, Any]],
    authorization: str | None,
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    response = post_raw(client, headers, b'{"id":41,"name":"Sneaky"}')
    message = assert_error(response, 401)
    assert response.headers["www-authenticate"].startswith('Bearer realm="plantstore"')
    credentials = (authorization or "").partition(" ")[2]
    if credentials:
        assert credentials not in message  # never echoes a token
    assert listing(client, alice) == seeded
