"""The operator's command line: token create|list|revoke, db upgrade, --version, settings."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from calendar import timegm
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result
from starlette.testclient import TestClient

from plantstore.app import create_app
from plantstore.auth.tokens import hash_token, new_token
from plantstore.cli import main
from plantstore.db.migrate import upgrade
from plantstore.settings import Settings
from tests.fixtures.backends import new_database_url, stored_data
from tests.fixtures.calls import bearer, run_cli, token_from_output
from tests.fixtures.servers import free_port, start_server, stop_server
from tests.pg import PostgresServer, with_database
from tests.stores import Stores

TOKEN_LINE = re.compile(r"^pst_[A-Za-z0-9_-]{43,}$")


def invoke(db_url: str, *args: str) -> Result:
    """Run a command in-process without insisting on success."""
    return CliRunner().invoke(main, ["--database", db_url, *args])


IMPORT_TIMES = {"PYTHONPROFILEIMPORTTIME": "1"}  # each module imported, on stderr


def plantstore(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run the real ``python -m plantstore`` with a clean PLANTSTORE_* environment."""
    base = {key: value for key, value in os.environ.items() if not key.startswith("PLANTSTORE_")}
    return subprocess.run(
        [sys.executable, "-m", "plantstore", *args],
        env={**base, **(env or {})},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def list_json(db_url: str, *args: str) -> list[dict[str, Any]]:
    lines = [line for line in run_cli(db_url, "token", "list", "--json", *args).splitlines()]
    records = [json.loads(line) for line in lines if line.strip()]
    assert all(isinstance(record, dict) for record in records)
    return records


def parse_time(text: str) -> float:
    return float(timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))


def assert_one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert "Traceback" not in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# --- token create -----------------------------------------------------------------------------


def test_token_create_prints_the_token_alone_on_the_last_line(db_url: str) -> None:
    stdout = run_cli(db_url, "token", "create", "alice")
    last = stdout.rstrip("\n").splitlines()[-1]
    assert TOKEN_LINE.fullmatch(last), repr(last)
    assert token_from_output(stdout) == last


@pytest.mark.server
def test_token_create_on_the_real_command_line(db_url: str) -> None:
    result = plantstore("--database", db_url, "token", "create", "alice")
    assert result.returncode == 0, result.stderr
    last = result.stdout.rstrip("\n").splitlines()[-1]
    assert TOKEN_LINE.fullmatch(last), repr(last)
    assert "pst_" not in result.stderr


@pytest.mark.server
def test_a_command_starts_without_the_servers_runtime(db_url: str) -> None:
    """Only ``serve`` needs granian, the server's runtime: loading it would add its import
    time to every command an operator or a script runs."""
    result = plantstore("--database", db_url, "token", "create", "alice", env=IMPORT_TIMES)
    assert result.returncode == 0, result.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()]
    assert "plantstore.auth.cli" in imported  # the import times were written
    assert not [name for name in imported if name.split(".")[0] == "granian"]


def test_two_creates_give_different_tokens(db_url: str) -> None:
    first = token_from_output(run_cli(db_url, "token", "create", "alice"))
    second = token_from_output(run_cli(db_url, "token", "create", "alice"))
    third = token_from_output(run_cli(db_url, "token", "create", "bob"))
    assert len({first, second, third}) == 3


def test_tokens_carry_at_least_256_random_bits(db_url: str) -> None:
    tokens = [token_from_output(run_cli(db_url, "token", "create", "alice")) for _ in range(4)]
    for token in tokens:
        body = token.removeprefix("pst_")
        assert len(body) >= 43  # 43 base64url characters carry 258 bits
        assert TOKEN_LINE.fullmatch(token)
    # no shared prefix beyond pst_ (a counter or timestamp would show here)
    bodies = [token.removeprefix("pst_") for token in tokens]
    assert len({body[:8] for body in bodies}) == len(bodies)


def test_token_create_works_on_a_fresh_path_never_served(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "fresh.db"
    path.parent.mkdir()
    assert not path.exists()
    url = f"sqlite:///{path}"
    token = token_from_output(run_cli(url, "token", "create", "alice"))
    assert TOKEN_LINE.fullmatch(token)
    assert path.exists()
    assert [record["user"] for record in list_json(url)] == ["alice"]


def test_token_list_works_on_a_fresh_path(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    url = f"sqlite:///{path}"
    assert list_json(url) == []
    assert path.exists()


def test_create_reports_the_new_tokens_id(db_url: str) -> None:
    stdout = run_cli(db_url, "token", "create", "alice")
    match = re.search(r"Token (\d+) for user", stdout)
    assert match is not None, stdout
    [record] = list_json(db_url)
    assert record["id"] == int(match.group(1))
    assert record["user"] == "alice"


@pytest.mark.parametrize(
    ("duration", "seconds"),
    [("90s", 90), ("15m", 900), ("12h", 43_200), ("30d", 2_592_000), ("2w", 1_209_600)],
)
def test_expires_in_accepts_the_documented_units(db_url: str, duration: str, seconds: int) -> None:
    before = time.time()
    token = token_from_output(run_cli(db_url, "token", "create", "alice", "--expires-in", duration))
    after = time.time()
    assert TOKEN_LINE.fullmatch(token)
    [record] = list_json(db_url)
    assert record["expires"] is not None
    expires = parse_time(record["expires"])
    assert before + seconds - 2 <= expires <= after + seconds + 2


def test_a_token_without_expires_in_never_expires(db_url: str) -> None:
    run_cli(db_url, "token", "create", "alice")
    [record] = list_json(db_url)
    assert record["expires"] is None


@pytest.mark.parametrize(
    "duration", ["10", "-1d", "abc", "", "1x", "d", "1.5h", "30 days", "0s", "0d"]
)
def test_expires_in_rejects_bad_durations(db_url: str, duration: str) -> None:
    result = invoke(db_url, "token", "create", "alice", f"--expires-in={duration}")
    assert result.exit_code != 0, result.output
    assert "pst_" not in result.output
    assert list_json(db_url) == []  # nothing was issued


@pytest.mark.parametrize("duration", ["0s", "0d", "00w"])
def test_a_zero_expires_in_is_said_to_be_not_positive(db_url: str, duration: str) -> None:
    result = invoke(db_url, "token", "create", "alice", f"--expires-in={duration}")
    assert result.exit_code == 2, result.output
    assert "--expires-in: must be positive" in result.output
    assert list_json(db_url) == []


@pytest.mark.parametrize("duration", ["10", "-1d", "abc"])
@pytest.mark.server
def test_expires_in_rejects_bad_durations_on_the_real_command_line(
    db_url: str, duration: str
) -> None:
    result = plantstore("--database", db_url, "token", "create", "alice", "--expires-in", duration)
    assert result.returncode != 0, result.stdout
    assert "pst_" not in result.stdout
    assert "Traceback" not in result.stderr
    assert "error" in result.stderr.lower()
    assert list_json(db_url) == []


@pytest.mark.parametrize("user", ["", "two words", " alice", "alice ", "tab\tname", "line\nbreak"])
def test_invalid_user_names_are_rejected(db_url: str, user: str) -> None:
    result = invoke(db_url, "token", "create", user)
    assert result.exit_code != 0, result.output
    assert "pst_" not in result.output
    assert list_json(db_url) == []


@pytest.mark.server
def test_invalid_user_name_on_the_real_command_line(db_url: str) -> None:
    result = plantstore("--database", db_url, "token", "create", "two words")
    assert result.returncode != 0
    assert "pst_" not in result.stdout
    assert "Traceback" not in result.stderr


# --- token list ---------------------------------------------------------------------------------


def test_token_list_shows_every_column_and_no_secret(db_url: str) -> None:
    secrets = [
        token_from_output(run_cli(db_url, "token", "create", "alice")),
        token_from_output(run_cli(db_url, "token", "create", "bob", "--expires-in", "30d")),
    ]
    listing = run_cli(db_url, "token", "list")
    header = listing.splitlines()[0].upper()
    for column in ("ID", "USER", "CREATED", "EXPIRES", "LAST USED", "REVOKED"):
        assert column in header, header
    assert "alice" in listing
    assert "bob" in listing
    for secret in secrets:
        assert secret not in listing
        assert secret.removeprefix("pst_") not in listing
        assert hashlib.sha256(secret.encode()).hexdigest() not in listing
    assert "pst_" not in listing


def test_token_list_json_lines_parse_and_hold_no_secret(db_url: str) -> None:
    secrets = [
        token_from_output(run_cli(db_url, "token", "create", "alice")),
        token_from_output(run_cli(db_url, "token", "create", "bob")),
    ]
    raw = run_cli(db_url, "token", "list", "--json")
    for secret in secrets:
        assert secret not in raw
    records = list_json(db_url)
    assert len(records) == 2
    for record in records:
        assert {"id", "user", "created", "expires", "last_used", "revoked"} <= set(record)
        assert isinstance(record["id"], int)
        assert record["revoked"] is None
        assert record["last_used"] is None
        assert abs(parse_time(record["created"]) - time.time()) < 60
    assert sorted(record["user"] for record in records) == ["alice", "bob"]
    assert len({record["id"] for record in records}) == 2


def test_token_list_user_filters(db_url: str) -> None:
    run_cli(db_url, "token", "create", "alice")
    run_cli(db_url, "token", "create", "alice")
    run_cli(db_url, "token", "create", "bob")
    assert [record["user"] for record in list_json(db_url, "alice")] == ["alice", "alice"]
    assert [record["user"] for record in list_json(db_url, "bob")] == ["bob"]
    assert list_json(db_url, "nobody") == []
    table = run_cli(db_url, "token", "list", "alice")
    assert "alice" in table
    assert "bob" not in table
    assert len([line for line in table.splitlines() if line.strip()]) == 3  # header + 2


def test_token_list_records_last_use(db_url: str, settings: Settings) -> None:
    token = token_from_output(run_cli(db_url, "token", "create", "alice"))
    with TestClient(create_app(settings)) as client:
        assert client.get("/plants", headers=bearer(token)).status_code == 200
    [record] = list_json(db_url)
    assert record["last_used"] is not None
    assert abs(parse_time(record["last_used"]) - time.time()) < 60


# --- token revoke -------------------------------------------------------------------------------


def test_token_revoke_marks_the_token_revoked(db_url: str) -> None:
    run_cli(db_url, "token", "create", "alice")
    run_cli(db_url, "token", "create", "alice")
    first, second = list_json(db_url)
    run_cli(db_url, "token", "revoke", str(first["id"]))
    by_id = {record["id"]: record for record in list_json(db_url)}
    assert by_id[first["id"]]["revoked"] is not None
    assert abs(parse_time(by_id[first["id"]]["revoked"]) - time.time()) < 60
    assert by_id[second["id"]]["revoked"] is None
    table = run_cli(db_url, "token", "list")
    assert "alice" in table  # a revoked token is still listed


def test_a_revoked_token_is_refused(db_url: str, settings: Settings) -> None:
    token = token_from_output(run_cli(db_url, "token", "create", "alice"))
    [record] = list_json(db_url)
    run_cli(db_url, "token", "revoke", str(record["id"]))
    with TestClient(create_app(settings)) as client:
        response = client.get("/plants", headers=bearer(token))
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]


@pytest.mark.server
def test_revoking_twice_fails_with_one_line(db_url: str) -> None:
    run_cli(db_url, "token", "create", "alice")
    [record] = list_json(db_url)
    first = plantstore("--database", db_url, "token", "revoke", str(record["id"]))
    assert first.returncode == 0, first.stderr
    second = plantstore("--database", db_url, "token", "revoke", str(record["id"]))
    line = assert_one_line_error(second)
    assert str(record["id"]) in line


@pytest.mark.server
def test_revoking_an_unknown_id_fails_with_one_line(db_url: str) -> None:
    run_cli(db_url, "token", "create", "alice")
    result = plantstore("--database", db_url, "token", "revoke", "999999")
    line = assert_one_line_error(result)
    assert "999999" in line
    [record] = list_json(db_url)
    assert record["revoked"] is None


def test_revoking_an_unknown_id_in_process_fails(db_url: str) -> None:
    result = invoke(db_url, "token", "revoke", "424242")
    assert result.exit_code != 0


# --- only a hash is stored ----------------------------------------------------------------------


def test_the_database_holds_the_hash_not_the_token(db_url: str) -> None:
    tokens = [
        token_from_output(run_cli(db_url, "token", "create", "alice")),
        token_from_output(run_cli(db_url, "token", "create", "bob", "--expires-in", "1h")),
    ]
    data = stored_data(db_url)
    assert data
    for token in tokens:
        assert token.encode() not in data
        assert token.removeprefix("pst_").encode() not in data
        assert hashlib.sha256(token.encode()).hexdigest().encode() in data


@pytest.mark.server
def test_the_database_of_the_real_command_holds_only_the_hash(db_url: str) -> None:
    result = plantstore("--database", db_url, "token", "create", "alice")
    assert result.returncode == 0, result.stderr
    token = token_from_output(result.stdout)
    data = stored_data(db_url)
    assert token.encode() not in data
    assert token.removeprefix("pst_").encode() not in data
    assert hashlib.sha256(token.encode()).hexdigest().encode() in data


# --- version, db upgrade ------------------------------------------------------------------------


@pytest.mark.server
def test_version_prints_the_package_version() -> None:
    result = plantstore("--version")
    assert result.returncode == 0, result.stderr
    assert version("plantstore") in result.stdout
    assert "plantstore" in result.stdout
    assert "unknown" not in result.stdout


def test_version_in_process() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert version("plantstore") in result.output


def test_db_upgrade_creates_the_database_and_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "upgrade.db"
    url = f"sqlite:///{path}"
    assert not path.exists()
    run_cli(url, "db", "upgrade")
    assert path.exists()
    assert path.stat().st_size > 0
    run_cli(url, "db", "upgrade")
    token = token_from_output(run_cli(url, "token", "create", "alice"))
    run_cli(url, "db", "upgrade")  # and leaves existing data alone
    assert [record["user"] for record in list_json(url)] == ["alice"]
    assert hashlib.sha256(token.encode()).hexdigest().encode() in stored_data(url)


@pytest.mark.server
def test_db_upgrade_on_the_real_command_line_twice(tmp_path: Path) -> None:
    path = tmp_path / "twice.db"
    url = f"sqlite:///{path}"
    for _ in range(2):
        result = plantstore("--database", url, "db", "upgrade")
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
    assert path.exists()


# --- where the database comes from --------------------------------------------------------------


@pytest.mark.server
def test_the_environment_variable_names_the_database(tmp_path: Path) -> None:
    path = tmp_path / "from-env.db"
    url = f"sqlite:///{path}"
    result = plantstore("token", "create", "alice", env={"PLANTSTORE_DATABASE_URL": url})
    assert result.returncode == 0, result.stderr
    token = token_from_output(result.stdout)
    assert path.exists()
    assert [record["user"] for record in list_json(url)] == ["alice"]
    assert hashlib.sha256(token.encode()).hexdigest().encode() in stored_data(url)
    listed = plantstore("token", "list", "--json", env={"PLANTSTORE_DATABASE_URL": url})
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["user"] for line in listed.stdout.splitlines() if line] == ["alice"]


@pytest.mark.server
def test_the_flag_wins_over_the_environment(tmp_path: Path) -> None:
    env_path = tmp_path / "env.db"
    flag_path = tmp_path / "flag.db"
    result = plantstore(
        "--database",
        f"sqlite:///{flag_path}",
        "token",
        "create",
        "alice",
        env={"PLANTSTORE_DATABASE_URL": f"sqlite:///{env_path}"},
    )
    assert result.returncode == 0, result.stderr
    assert flag_path.exists()
    assert not env_path.exists()


@pytest.mark.server
def test_a_relative_url_resolves_against_the_working_directory(tmp_path: Path) -> None:
    result = plantstore("--database", "sqlite:///relative.db", "db", "upgrade", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "relative.db").exists()


@pytest.mark.server
def test_a_relative_url_from_the_environment(tmp_path: Path) -> None:
    result = plantstore(
        "token",
        "create",
        "alice",
        env={"PLANTSTORE_DATABASE_URL": "sqlite:///sub.db"},
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    path = tmp_path / "sub.db"
    assert path.exists()
    token = token_from_output(result.stdout)
    assert hashlib.sha256(token.encode()).hexdigest().encode() in stored_data(f"sqlite:///{path}")


@pytest.mark.server
def test_an_absolute_url_is_absolute(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    workdir = tmp_path / "workdir"
    elsewhere.mkdir()
    workdir.mkdir()
    target = elsewhere / "absolute.db"
    url = f"sqlite:///{target}"
    assert url.startswith("sqlite:////")
    result = plantstore("--database", url, "db", "upgrade", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert target.exists()
    assert list(workdir.iterdir()) == []


# --- a bad setting is one clear line ------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "args", "names"),
    [
        pytest.param(
            {"PLANTSTORE_DATABASE_URL": "mysql://x"},
            ["db", "upgrade"],
            "DATABASE_URL",
            id="database-url-env",
        ),
        pytest.param(
            {"PLANTSTORE_DATABASE_URL": "mysql://x"},
            ["token", "create", "alice"],
            "DATABASE_URL",
            id="database-url-env-token",
        ),
        pytest.param({}, ["--database", "mysql://x", "db", "upgrade"], "DATABASE", id="flag"),
        pytest.param({"PLANTSTORE_PAGE_CAP": "0"}, ["db", "upgrade"], "PAGE_CAP", id="page-cap"),
        pytest.param(
            {"PLANTSTORE_PAGE_CAP": "0"}, ["token", "list"], "PAGE_CAP", id="page-cap-list"
        ),
        pytest.param({"PLANTSTORE_PORT": "notanumber"}, ["db", "upgrade"], "PORT", id="port"),
        pytest.param({"PLANTSTORE_PORT": "notanumber"}, ["serve"], "PORT", id="port-serve"),
        pytest.param(
            {"PLANTSTORE_DATABASE_URL": "postgresql://db:notaport/plants"},
            ["db", "upgrade"],
            "DATABASE_URL",
            id="postgres-url-port",
        ),
        pytest.param({"PLANTSTORE_POOL_SIZE": "0"}, ["token", "list"], "POOL_SIZE", id="pool-size"),
        pytest.param(
            {"PLANTSTORE_CONNECT_TIMEOUT": "0"}, ["db", "upgrade"], "CONNECT_TIMEOUT", id="timeout"
        ),
        # Any backend takes 1 to 64 workers (SQLite too, since the writers share its lock).
        # A bad flag is named as the flag that was given, not as its variable.
        pytest.param({}, ["serve", "--workers", "0"], "INVALID --WORKERS 0:", id="workers-flag-0"),
        pytest.param(
            {"PLANTSTORE_WORKERS": "65"}, ["serve"], "PLANTSTORE_WORKERS", id="workers-env-65"
        ),
        pytest.param(
            {"PLANTSTORE_WORKERS": "0"}, ["db", "upgrade"], "PLANTSTORE_WORKERS", id="workers-env-0"
        ),
    ],
)
@pytest.mark.server
def test_a_bad_setting_stops_with_one_line(
    tmp_path: Path, env: dict[str, str], args: list[str], names: str
) -> None:
    environment = {"PLANTSTORE_DATABASE_URL": f"sqlite:///{tmp_path / 'bad.db'}", **env}
    if "serve" in args:
        environment.setdefault("PLANTSTORE_PORT", str(free_port()))
    result = plantstore(*args, env=environment, cwd=tmp_path, timeout=30)
    line = assert_one_line_error(result)
    assert names in line.upper(), line
    assert "pst_" not in result.stdout


# --- the first serve issues a token for 'default' -----------------------------------------------


@pytest.mark.server
def test_first_serve_issues_one_token_for_default_and_later_serves_do_not(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = new_database_url(backend, tmp_path, request)
    first = start_server(url, tmp_path / "first.log")
    try:
        assert TOKEN_LINE.fullmatch(first.token), first.log_path.read_text()
        assert first.log_path.read_text().count("pst_") == 1
        response = httpx.get(f"{first.base_url}/plants", headers=bearer(first.token), timeout=10)
        assert response.status_code == 200
        assert response.json() == []
    finally:
        stop_server(first)
    records = list_json(first.db_url)
    assert [record["user"] for record in records] == ["default"]
    data = stored_data(url)
    assert first.token.encode() not in data
    assert hashlib.sha256(first.token.encode()).hexdigest().encode() in data

    second = start_server(url, tmp_path / "second.log")
    try:
        assert second.token == ""
        assert "pst_" not in second.log_path.read_text()
        response = httpx.get(f"{second.base_url}/plants", headers=bearer(first.token), timeout=10)
        assert response.status_code == 200  # the first token still works
    finally:
        stop_server(second)
    assert [record["user"] for record in list_json(first.db_url)] == ["default"]


@pytest.mark.server
def test_serve_issues_no_token_when_one_already_exists(db_url: str, tmp_path: Path) -> None:
    url = db_url
    run_cli(url, "token", "create", "alice")
    server = start_server(url, tmp_path / "serve.log")
    try:
        assert server.token == ""
        assert "pst_" not in server.log_path.read_text()
    finally:
        stop_server(server)
    assert [record["user"] for record in list_json(url)] == ["alice"]


@pytest.mark.server
def test_serve_issues_no_token_when_only_revoked_tokens_exist(db_url: str, tmp_path: Path) -> None:
    """'If no token exists yet': a revoked token still exists, so nothing new is issued."""
    url = db_url
    run_cli(url, "token", "create", "alice")
    [record] = list_json(url)
    run_cli(url, "token", "revoke", str(record["id"]))
    server = start_server(url, tmp_path / "serve.log")
    try:
        assert server.token == ""
    finally:
        stop_server(server)


# --- PostgreSQL: unreachable or missing databases, and passwords ---------------------------------


@pytest.mark.parametrize("command", [["db", "upgrade"], ["token", "list"], ["serve"]])
@pytest.mark.server
def test_an_unreachable_postgres_stops_with_one_line(command: list[str]) -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/plantstore"  # nothing listens there
    env = {"PLANTSTORE_DATABASE_URL": url, "PLANTSTORE_PORT": str(free_port())}
    result = plantstore(*command, env=env, timeout=60)
    line = assert_one_line_error(result)
    assert "cannot open the database" in line, line


@pytest.mark.server
def test_a_missing_postgres_database_is_named_in_one_line(postgres: PostgresServer) -> None:
    url = with_database(postgres.admin_url, "plantstore_no_such_database")
    line = assert_one_line_error(plantstore("--database", url, "token", "list"))
    assert "cannot open the database" in line, line
    assert "does not exist" in line, line


@pytest.mark.server
def test_the_serve_banner_hides_the_database_password(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    """The machine's PostgreSQL trusts local users, so a password is accepted and ignored."""
    url = postgres.create_database().replace(
        "postgresql://postgres@", "postgresql://postgres:hunter2@"
    )
    server = start_server(url, tmp_path / "serve.log")
    try:
        output = server.log_path.read_text()
    finally:
        stop_server(server)
    assert "postgres:***@" in output, output
    assert "hunter2" not in output


def test_postgres_scheme_spellings_are_both_accepted(postgres: PostgresServer) -> None:
    url = postgres.create_database()
    short = url.replace("postgresql://", "postgres://", 1)
    token = token_from_output(run_cli(short, "token", "create", "alice"))
    assert [record["user"] for record in list_json(url)] == ["alice"]
    assert token.startswith("pst_")


def test_the_first_token_is_issued_once_however_many_starts_race(db_url: str) -> None:
    """Instances starting together each ask for the first token; one gets it."""

    async def race() -> list[bool]:
        stores = [Stores(Settings(database_url=db_url)) for _ in range(4)]
        for store in stores:
            await store.open()
        try:
            issued = await asyncio.gather(
                *(
                    store.tokens.create_first_token("default", hash_token(new_token()))
                    for store in stores
                )
            )
        finally:
            for store in stores:
                await store.close()
        return [record is not None for record in issued]

    upgrade(db_url)
    assert sorted(asyncio.run(race())) == [False, False, False, True]
    assert [record["user"] for record in list_json(db_url)] == ["default"]
