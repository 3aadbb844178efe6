"""The shipped artifacts, not the source tree: every other test imports plantstore from
``src/`` (an editable install), so a wheel that lacks the docs assets or the Alembic
migrations, or that cannot be installed with the pinned versions, would pass them all.

Here a wheel is built with ``python -m build`` from a clean copy of the repository, its
contents are compared with the tree, and it is installed into a fresh virtual environment
with the very ``pip install`` command the Dockerfile's runtime stage runs. The README quick
start then runs against ``plantstore serve`` from that environment (in a directory without
the sources), and the Dockerfile's healthcheck command is run against it. The Dockerfile's
other promises (stages, non-root user, volume, settings, COPY sources against .dockerignore)
are checked statically here; tests/e2e/test_container.py builds the image and runs it.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "plantstore"
DOCS = PACKAGE / "openapi" / "static" / "docs"
MIGRATIONS = PACKAGE / "db" / "migrations"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
# Building and installing download from PyPI (pip's cache helps); give them room.
SLOW = pytest.mark.timeout(900)
# As in conftest.py (not imported, so that mypy can check this file on its own: the
# source tree it would pull in has no py.typed marker when analysed from here).
QUIET_SERVER_ENV = {
    "PLANTSTORE_RATE_LIMIT": "off",
    "PLANTSTORE_AUTH_FAILURE_LIMIT": "off",
    "PLANTSTORE_METRICS_ADDRESS": "off",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- the Dockerfile, parsed -------------------------------------------------------------


@dataclass
class Instruction:
    keyword: str  # upper case: FROM, RUN, COPY, ...
    arguments: str  # continuation lines joined


def dockerfile_stages() -> list[list[Instruction]]:
    """The Dockerfile's build stages, each starting with its FROM (ARGs before the first
    FROM are left out)."""
    logical: list[str] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue  # comments and blank lines, also inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued instruction"
    stages: list[list[Instruction]] = []
    for text in logical:
        keyword, _, arguments = text.strip().partition(" ")
        instruction = Instruction(keyword.upper(), arguments.strip())
        if instruction.keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def arguments_of(stage: list[Instruction], keyword: str) -> list[str]:
    return [item.arguments for item in stage if item.keyword == keyword]


def stage_name(stage: list[Instruction]) -> str | None:
    words = stage[0].arguments.split()
    return words[2] if len(words) == 3 and words[1].upper() == "AS" else None


def copy_sources(arguments: str) -> tuple[dict[str, str], list[str], str]:
    """A COPY's flags, sources and destination (shell form only)."""
    words = shlex.split(arguments)
    flags: dict[str, str] = {}
    for word in words:
        if word.startswith("--"):
            name, _, value = word[2:].partition("=")
            flags[name] = value
    paths = [word for word in words if not word.startswith("--")]
    assert len(paths) >= 2, f"COPY {arguments}"
    return flags, paths[:-1], paths[-1]


def environment_of(stage: list[Instruction]) -> dict[str, str]:
    values: dict[str, str] = {}
    for arguments in arguments_of(stage, "ENV"):
        for word in shlex.split(arguments):
            name, equals, value = word.partition("=")
            assert equals, f"ENV {arguments}: use the NAME=value form"
            values[name] = value
    return values


@dataclass
class RuntimeInstall:
    """The runtime stage's ``python -m venv DIR && DIR/bin/pip install ARGS`` command."""

    venv: PurePosixPath
    pip: PurePosixPath
    arguments: list[str]


def runtime_install() -> RuntimeInstall:
    commands = [
        shlex.split(command)
        for run in arguments_of(dockerfile_stages()[-1], "RUN")
        for command in run.split("&&")
    ]
    venvs = [words for words in commands if words[:3] == ["python", "-m", "venv"]]
    installs = [words for words in commands if words[1:2] == ["install"] and "pip" in words[0]]
    assert len(venvs) == 1, "the runtime stage should create one virtual environment"
    assert len(installs) == 1, "the runtime stage should run exactly one pip install"
    return RuntimeInstall(
        PurePosixPath(venvs[0][3]), PurePosixPath(installs[0][0]), installs[0][2:]
    )


def local_install_command(install: RuntimeInstall, venv: Path, wheel: Path) -> list[str]:
    """The runtime stage's pip install, with its paths pointed at this machine's files:
    the repository's constraints.txt and the wheel just built. ``--no-cache-dir`` (which keeps
    the image small) is dropped so that pip's cache spares CI the downloads."""
    assert install.pip == install.venv / "bin" / "pip", "pip should be the venv's own"
    command = [str(venv / "bin" / "pip"), "install"]
    arguments = iter(install.arguments)
    for argument in arguments:
        if argument == "--no-cache-dir":
            continue
        if argument in ("-c", "--constraint"):
            constraints = next(arguments)
            assert PurePosixPath(constraints).name == "constraints.txt", constraints
            command += ["-c", str(ROOT / "constraints.txt")]
        elif argument.endswith(".whl"):
            assert fnmatch.fnmatch(wheel.name, PurePosixPath(argument).name), (
                f"{argument} does not name the built {wheel.name}"
            )
            command.append(str(wheel))
        else:
            assert argument.startswith("-"), f"unexpected pip install argument {argument}"
            command.append(argument)
    assert "-c" in command, "the wheel should be installed with -c constraints.txt"
    assert str(wheel) in command, "the runtime stage should install the built wheel"
    return command


def healthcheck_command() -> list[str]:
    [healthcheck] = arguments_of(dockerfile_stages()[-1], "HEALTHCHECK")
    exec_form = re.search(r"(?:^|\s)CMD\s+(\[.*\])\s*$", healthcheck)
    assert exec_form is not None, f"HEALTHCHECK {healthcheck}: use the exec form"
    command = json.loads(exec_form.group(1))
    assert isinstance(command, list)
    assert all(isinstance(word, str) for word in command)
    return [str(word) for word in command]


# --- .dockerignore ---------------------------------------------------------------------


def _pattern(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go filepath.Match plus ``**``) as a regular expression."""
    out, index = "", 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            out, index = out + "(?:.*/)?", index + 3
        elif pattern.startswith("**", index):
            out, index = out + ".*", index + 2
        else:
            char = pattern[index]
            out += {"*": "[^/]*", "?": "[^/]"}.get(char, re.escape(char))
            index += 1
    return re.compile(out)


def dockerignored(path: str) -> bool:
    """Whether ``docker build`` leaves ``path`` (relative to the root) out of the context:
    the last pattern matching the path or one of its parent directories decides."""
    patterns: list[tuple[bool, re.Pattern[str]]] = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            negated = line.startswith("!")
            cleaned = os.path.normpath(line.removeprefix("!")).lstrip("/")
            patterns.append((negated, _pattern(cleaned)))
    parts = PurePosixPath(os.path.normpath(path)).parts
    prefixes = ["/".join(parts[: end + 1]) for end in range(len(parts))]
    ignored = False
    for negated, pattern in patterns:
        if any(pattern.fullmatch(prefix) for prefix in prefixes):
            ignored = not negated
    return ignored


# --- building and installing -----------------------------------------------------------


def repository_files() -> list[str]:
    """What a checkout of the working tree holds: tracked files (as edited, not as committed)
    plus new files not yet added, without anything .gitignore names (.venv, caches, dbs)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return sorted(name for name in set(listed.split("\0")) if name and (ROOT / name).is_file())


def files_under(directory: Path) -> set[str]:
    """The files on disk under ``directory`` (bytecode caches aside), as wheel paths."""
    return {
        path.relative_to(PACKAGE.parent).as_posix()
        for path in directory.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built the way a release is: ``python -m build --wheel`` in a clean copy."""
    source = tmp_path_factory.mktemp("source")
    for name in repository_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    dist = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(source)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    wheels = list(dist.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment holding the wheel, installed as the Dockerfile does."""
    directory = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(directory)], check=True, timeout=120)
    result = subprocess.run(
        local_install_command(runtime_install(), directory, wheel),
        cwd=directory,
        env=outside_environment(directory),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return directory


def outside_environment(venv: Path, **extra: str) -> dict[str, str]:
    """This process's environment with nothing that could lead Python back to the source tree
    or this project's .venv, and the fresh venv first on PATH."""
    hidden = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PLANTSTORE_")
    environment = {name: value for name, value in os.environ.items() if not name.startswith(hidden)}
    environment["PATH"] = f"{venv / 'bin'}{os.pathsep}{environment.get('PATH', '')}"
    return {**environment, **QUIET_SERVER_ENV, **extra}


# --- the tests --------------------------------------------------------------------------


@SLOW
@pytest.mark.server
def test_wheel_ships_docs_and_migrations_but_not_tests(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = {name for name in archive.namelist() if not name.endswith("/")}
    docs, migrations = files_under(DOCS), files_under(MIGRATIONS)
    assert "plantstore/openapi/static/docs/index.html" in docs
    assert {
        "plantstore/db/migrations/env.py",
        "plantstore/db/migrations/script.py.mako",
    } <= migrations
    assert any(name.startswith("plantstore/db/migrations/versions/") for name in migrations)
    assert {name for name in names if name.startswith("plantstore/openapi/static/docs/")} == docs
    assert {name for name in names if name.startswith("plantstore/db/migrations/")} == migrations
    assert files_under(PACKAGE) <= names, "the wheel lacks part of src/plantstore"
    tops = {name.split("/")[0] for name in names}
    assert tops == {"plantstore", wheel.name.split("-py")[0] + ".dist-info"}, tops
    outside = ("tests/", "bench/", "harness/", "trials/")
    assert not [name for name in names if any(part in name for part in outside)]
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]


@dataclass
class Served:
    process: subprocess.Popen[str]
    base_url: str
    port: int
    log: Path


@pytest.fixture
def served(venv: Path, tmp_path: Path) -> Iterator[Served]:
    """``plantstore serve`` from the fresh venv, run from a directory without the sources."""
    port = free_port()
    log = tmp_path / "serve.log"
    environment = outside_environment(
        venv, PLANTSTORE_DATABASE_URL=f"sqlite:///{tmp_path / 'x.db'}"
    )
    with log.open("w") as output:
        process = subprocess.Popen(
            [str(venv / "bin" / "plantstore"), "serve", "--port", str(port)],
            cwd=tmp_path,
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    server = Served(process, f"http://127.0.0.1:{port}", port, log)
    try:
        wait_until_healthy(server)
        yield server
    finally:
        stop(process)
    assert process.returncode == 0, f"unclean shutdown: {log.read_text()}"


def wait_until_healthy(server: Served) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert server.process.poll() is None, f"serve exited: {server.log.read_text()}"
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{server.base_url}/healthz", timeout=1).status_code == 200:
                return
        time.sleep(0.1)
    raise AssertionError(f"serve never answered /healthz: {server.log.read_text()}")


def stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM, as ``docker stop`` sends; SIGKILL to the whole group only if it hangs."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def run_in_venv(venv: Path, cwd: Path, *command: str, **extra: str) -> str:
    result = subprocess.run(
        command,
        cwd=cwd,
        env=outside_environment(venv, **extra),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@SLOW
@pytest.mark.server
def test_installed_wheel_runs_the_quick_start(venv: Path, served: Served, tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'x.db'}"
    # The code that runs is the installed copy, not src/ and not the project's .venv.
    location = run_in_venv(
        venv,
        tmp_path,
        str(venv / "bin" / "python"),
        "-c",
        "import plantstore; print(plantstore.__file__)",
    )
    assert Path(location.strip()).resolve().is_relative_to(venv.resolve()), location
    cmdline = Path(f"/proc/{served.process.pid}/cmdline").read_bytes().split(b"\0")
    assert Path(cmdline[0].decode()).parent == venv / "bin", cmdline  # the venv's python
    mapped = {
        line.split(maxsplit=5)[-1]
        for line in Path(f"/proc/{served.process.pid}/maps").read_text().splitlines()
        if "site-packages" in line
    }
    assert mapped, "no compiled dependency (granian, msgspec) is loaded"
    assert all(path.startswith(str(venv)) for path in mapped), mapped

    token = next((w for w in served.log.read_text().split() if w.startswith("pst_")), None)
    assert token is not None, served.log.read_text()
    plant = {"name": "Monstera", "tag": "tropical"}
    with httpx.Client(base_url=served.base_url, timeout=10, headers=bearer(token)) as http:
        created = http.post("/plants", json={"id": 1, **plant})
        assert created.status_code == 200, created.text
        assert created.json() == plant
        assert http.get("/plants").json() == [plant]
        assert http.delete("/plants/1").status_code == 204
        assert http.get("/plants").json() == []

        page = http.get("/docs")
        assert page.status_code == 200
        assert page.content == (DOCS / "index.html").read_bytes()
        assets = re.findall(r'"/docs/assets/([^"]+)"', page.text)
        assert "swagger-ui-bundle.js" in assets, page.text
        for asset in assets:
            response = http.get(f"/docs/assets/{asset}")
            assert response.status_code == 200, asset
            assert response.content == (DOCS / asset).read_bytes(), asset
        document = http.get("/openapi.json")
        assert document.status_code == 200
        assert document.json()["openapi"].startswith("3.1")
        assert "/plants" in document.json()["paths"]

        issued = run_in_venv(
            venv,
            tmp_path,
            str(venv / "bin" / "plantstore"),
            "token",
            "create",
            "someone",
            PLANTSTORE_DATABASE_URL=db_url,
        )
        someone = issued.rstrip("\n").splitlines()[-1]  # alone on the last line
        assert someone.startswith("pst_"), issued
        listed = http.get("/plants", headers=bearer(someone))
        assert listed.status_code == 200, listed.text
        assert listed.json() == []


@SLOW
@pytest.mark.server
def test_dockerfile_healthcheck_runs_against_the_installed_server(
    venv: Path, served: Served, tmp_path: Path
) -> None:
    command = healthcheck_command()
    assert command[0] == "plantstore", "the image has the venv's plantstore on PATH, not curl"
    # No PLANTSTORE_PORT: the server was given --port, and the health check follows it.
    environment = outside_environment(
        venv, PLANTSTORE_DATABASE_URL=f"sqlite:///{tmp_path / 'x.db'}"
    )
    healthy = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True)
    assert healthy.returncode == 0, healthy.stderr
    stop(served.process)
    down = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True)
    assert down.returncode != 0, "the healthcheck passed with the server stopped"


def test_dockerfile_keeps_its_promises() -> None:
    """What the image promises, read from the Dockerfile (no Docker engine here). Its install
    step is run for real by the ``venv`` fixture (``local_install_command``)."""
    stages = dockerfile_stages()
    assert len(stages) >= 2, "a builder stage and a runtime stage"
    builder, runtime = stages[0], stages[-1]
    assert stage_name(builder) == "builder"
    assert any("python -m build --wheel" in run for run in arguments_of(builder, "RUN"))

    users = arguments_of(runtime, "USER")
    assert users, "the runtime stage never leaves root"
    assert users[-1].split(":")[0] not in ("root", "0"), users[-1]
    assert any(
        "/data" in (json.loads(v) if v.startswith("[") else v.split())
        for v in arguments_of(runtime, "VOLUME")
    ), "no VOLUME /data"
    environment = environment_of(runtime)
    assert environment["PLANTSTORE_DATABASE_URL"] == "sqlite:////data/plantstore.db"
    assert environment["PLANTSTORE_HOST"] == "0.0.0.0"
    assert "8000" in " ".join(arguments_of(runtime, "EXPOSE")).split()
    assert healthcheck_command() == ["plantstore", "health"], "HEALTHCHECK asks /readyz"
    assert [json.loads(e) for e in arguments_of(runtime, "ENTRYPOINT")] == [
        ["/usr/bin/tini", "--"]
    ], "no init as PID 1 to reap orphans"
    assert not {"curl", "wget"} & set(" ".join(healthcheck_command()).split()), (
        "the slim image has neither curl nor wget"
    )
    assert [json.loads(cmd) for cmd in arguments_of(runtime, "CMD")] == [["plantstore", "serve"]]

    # The runtime stage installs the builder's wheel, constrained by the repo's pins.
    install = runtime_install()
    wheel_copies = [
        copy_sources(copy) for copy in arguments_of(runtime, "COPY") if "--from" in copy
    ]
    assert [flags["from"] for flags, _, _ in wheel_copies] == ["builder"]
    [(_, _, wheel_destination)] = wheel_copies
    wheels = [arg for arg in install.arguments if arg.endswith(".whl")]
    assert len(wheels) == 1
    assert wheels[0].startswith(wheel_destination), (wheels, wheel_destination)
    assert "-c" in install.arguments, "the wheel is installed without -c constraints.txt"
    constraints = install.arguments[install.arguments.index("-c") + 1]
    copied = {
        destination: sources
        for copy in arguments_of(runtime, "COPY")
        if "--from" not in copy
        for _, sources, destination in [copy_sources(copy)]
    }
    assert copied.get(constraints) == ["constraints.txt"], copied
    assert install.venv / "bin" in [
        PurePosixPath(part) for part in environment.get("PATH", "").split(":")
    ], "plantstore (the CMD) is not on PATH"

    # Every file the build copies from the context exists and is let through .dockerignore.
    for stage in stages:
        for copy in arguments_of(stage, "COPY"):
            flags, sources, _ = copy_sources(copy)
            if "from" in flags:
                continue
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: no such file in the repo"
                assert not dockerignored(source), f"COPY {source}: .dockerignore leaves it out"
    assert not dockerignored("src/plantstore/openapi/static/docs/swagger-ui-bundle.js")
    assert not dockerignored("src/plantstore/db/migrations/versions/0001_initial.py")
    for kept_out in (".git", ".venv/bin/python", "tests/conftest.py", "src/plantstore/__pycache__"):
        assert dockerignored(kept_out), f"{kept_out} would be sent to the Docker daemon"
