"""A database URL's password is never printed: not in a refusal of a URL that cannot be
parsed, not in a banner, not by any command, whatever characters the password holds."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from plantstore.cli import main
from plantstore.db.urls import backend_of, postgres_hosts, redacted
from plantstore.settings import SettingsError, load_settings

PASSWORDS = ["S3cret/PW", "S3cret?PW", "S3cret#PW", "S3cret@PW", "S3cret%PW", "S/3?c#r@e%t"]
COMMANDS = [
    ["serve"],
    ["token", "create", "bob"],
    ["token", "list"],
    ["token", "revoke", "1"],
    ["user", "list"],
    ["user", "disable", "bob"],
    ["user", "enable", "bob"],
    ["db", "upgrade"],
    ["db", "backup", "copy.db"],
    ["webhook", "list"],
    ["webhook", "disable", "1"],
    ["webhook", "enable", "1"],
    ["webhook", "rotate-secret", "1"],
]


def url_with(password: str) -> str:
    """Nothing listens on port 1: every command fails fast, after reading the URL."""
    return f"postgresql://admin:{password}@127.0.0.1:1/plants"


@pytest.mark.parametrize("password", PASSWORDS)
def test_redacted_hides_the_whole_password(password: str) -> None:
    assert redacted(url_with(password)) == "postgresql://admin:***@127.0.0.1:1/plants"


def test_redacted_leaves_urls_without_a_password_alone() -> None:
    for url in ("postgresql://admin@db:5432/plants", "postgresql://db/plants", "sqlite:///x.db"):
        assert redacted(url) == url


@pytest.mark.parametrize("password", ["S3cret/PW", "S3cret?PW", "S3cret#PW"])
def test_a_url_the_parser_misreads_is_refused_naming_no_part_of_the_password(
    password: str,
) -> None:
    """A ``/``, ``?`` or ``#`` ends the authority early: the parser takes "S3cret" for a port."""
    with pytest.raises(ValueError, match=r"admin:\*\*\*@127\.0\.0\.1:1/plants") as refused:
        backend_of(url_with(password))
    assert "S3cret" not in str(refused.value)
    assert "PW" not in str(refused.value)


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_no_command_prints_the_password(
    password: str, command: list[str], tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(str(tmp_path))
    for given in (["--database", url_with(password)], []):
        if not given:
            monkeypatch.setenv("PLANTSTORE_DATABASE_URL", url_with(password))
        result = CliRunner().invoke(main, [*given, *command])
        output = result.output + (str(result.exception) if result.exception else "")
        assert result.exit_code != 0, output
        for fragment in ("S3cret", "PW", "3?c", "r@e", "e%t"):
            assert fragment not in output, output


def test_several_hosts_are_taken_as_libpq_writes_them() -> None:
    url = "postgresql://admin:pw@h1:5432,h2:5433,[::1]:5434/plants"
    assert backend_of(url) == "postgresql"
    assert postgres_hosts(url) == ["h1:5432", "h2:5433", "[::1]:5434"]


def test_with_several_hosts_the_service_asks_for_the_one_that_takes_writes() -> None:
    """libpq's default, any, would keep the service on a standby that answers first."""
    several = "postgresql://admin:pw@h1:5432,h2:5432/plants?connect_timeout=3"
    assert load_settings(database_url=several).database_url == (
        f"{several}&target_session_attrs=read-write"
    )
    one = "postgresql://admin:pw@h1:5432/plants"
    assert load_settings(database_url=one).database_url == one
    chosen = "postgresql://h1,h2/plants?target_session_attrs=primary"
    assert load_settings(database_url=chosen).database_url == chosen


@pytest.mark.parametrize("attrs", ["standby", "read-only", "prefer-standby"])
def test_the_service_refuses_to_be_sent_to_a_standby(attrs: str) -> None:
    with pytest.raises(SettingsError, match="plantstore writes"):
        load_settings(database_url=f"postgresql://h1,h2/plants?target_session_attrs={attrs}")


def test_an_unknown_session_attribute_and_a_bad_second_port_are_refused() -> None:
    with pytest.raises(ValueError, match="target_session_attrs must be one of"):
        backend_of("postgresql://h1,h2/plants?target_session_attrs=writable")
    with pytest.raises(ValueError, match=r"admin:\*\*\*@h1:5432,h2:x/plants") as refused:
        backend_of("postgresql://admin:S3cret@h1:5432,h2:x/plants")
    assert "S3cret" not in str(refused.value)
