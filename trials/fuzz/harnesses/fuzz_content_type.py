"""Fuzz the media-type check of a create: ``check_content_type`` on any header value.

Starlette hands a header value over as its bytes decoded as Latin-1, so every input is
a possible value. The only exception allowed is the 415 (``UnsupportedMediaType``), and a
value is accepted only if it is ``application/json``, optionally with ``charset=utf-8``.

    .venv/bin/python -m trials.fuzz.harnesses.fuzz_content_type -runs=100000
"""

from __future__ import annotations

from .fuzzlib import fuzz, instrumented_imports

with instrumented_imports():
    from plantstore.errors import UnsupportedMediaType
    from plantstore.http.parsing import check_content_type

_WHITESPACE = " \t"  # HTTP's optional whitespace; not Latin-1's NBSP or NEL


def acceptable(value: str) -> bool:
    """The contract's rule, written independently: the media type, then at most a charset."""
    media_type, *params = value.split(";")
    if media_type.strip(_WHITESPACE).lower() != "application/json" or len(params) > 1:
        return False
    for param in params:
        name, equals, charset = param.partition("=")
        if not equals or name.strip(_WHITESPACE).lower() != "charset":
            return False
        if charset.strip(_WHITESPACE).lower() not in ("utf-8", '"utf-8"'):
            return False
    return True


def test_one_input(data: bytes) -> None:
    value = data.decode("latin-1")
    try:
        check_content_type([value])
    except UnsupportedMediaType as exc:
        refusal = exc
    else:
        assert acceptable(value), f"accepted {value!r}"
        return
    assert refusal.status == 415, refusal
    assert refusal.message, refusal
    assert not acceptable(value), f"refused {value!r}"


SEEDS = [
    b"application/json",
    b"application/json; charset=utf-8",
    b'Application/JSON;charset="UTF-8"',
    b"application/json; charset=latin-1",
    b"application/json; charset=utf-8; x=y",
    b"application/json;",
    b"text/plain",
    b"application/json\xa0",
    b'application/json; charset=utf-8"',
    b"",
]

if __name__ == "__main__":
    fuzz(test_one_input, SEEDS, max_len=512)
