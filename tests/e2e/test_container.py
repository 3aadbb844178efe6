"""The container image, built and run for real: podman builds the Dockerfile on a Debian
bookworm base made here with debootstrap (no image registry is needed), and the tests run it
as an operator would: health check, tini reaping orphans, ``--cpus=1``, a read-only root,
``podman stop`` keeping every acknowledged write, no pip left behind.

podman runs with runc (crun refuses a cgroup v1 host) and an open-file limit the machine
allows. The base tarball is kept under pytest's temporary directory between runs; CI starts
from nothing. The default worker count's cgroup arithmetic has unit tests here too.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from plantstore.settings import cgroup_cpu_quota, default_workers

pytestmark = [pytest.mark.container, pytest.mark.root]

ROOT = Path(__file__).resolve().parents[2]
SLOW = pytest.mark.timeout(900)  # the first test builds the base and the image
BASE_IMAGE = "localhost/plantstore-base"
IMAGE = "localhost/plantstore-test"
# The Dockerfile needs python (3.11 in bookworm) with venv, and apt (in minbase) for tini.
BASE_PACKAGES = "python3,python3-venv,python-is-python3,ca-certificates"
MACHINE_CA = Path("/etc/ssl/certs/ca-certificates.crt")


# --- default_workers and the cgroup's CPU quota ----------------------------------------


def cgroup_tree(tmp_path: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return str(tmp_path)


@pytest.mark.parametrize(
    ("files", "quota"),
    [
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu.max": "100000 100000\n"}, 1),
        ({"cpu.max": "150000 100000\n"}, 2),  # 1.5 CPUs: rounded up
        ({"cpu.max": "20000 100000\n"}, 1),  # at least one
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3),
        (
            {
                "cpu,cpuacct/cpu.cfs_quota_us": "50000\n",
                "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            },
            1,
        ),
        ({}, None),
    ],
)
def test_cgroup_cpu_quota(tmp_path: Path, files: dict[str, str], quota: int | None) -> None:
    assert cgroup_cpu_quota(cgroup_tree(tmp_path, files)) == quota


def test_default_workers_follow_the_quota_below_the_cores(tmp_path: Path) -> None:
    cores = min(8, len(os.sched_getaffinity(0)))
    assert default_workers(cgroup_tree(tmp_path / "none", {"cpu.max": "max 100000"})) == cores
    assert default_workers(cgroup_tree(tmp_path / "one", {"cpu.max": "100000 100000"})) == 1
    many = cgroup_tree(tmp_path / "many", {"cpu.max": "6400000 100000"})  # 64 CPUs' worth
    assert default_workers(many) == cores, "a quota above the cores adds no worker"


# --- podman ----------------------------------------------------------------------------


def podman(*arguments: str, check: bool = True, timeout: float = 120) -> str:
    result = subprocess.run(["podman", *arguments], capture_output=True, text=True, timeout=timeout)
    if check:
        assert result.returncode == 0, f"podman {' '.join(arguments)}: {result.stderr}"
    return result.stdout


def run_flags() -> list[str]:
    """runc, and limits runc may set without CAP_SYS_RESOURCE: podman's defaults (and, for
    processes, even the machine's own) are refused with "error setting rlimit"."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    files = min(hard, 65536) if hard != resource.RLIM_INFINITY else 65536
    return ["--runtime", "runc", f"--ulimit=nofile={files}:{files}", "--ulimit=nproc=4096:4096"]


def user_temp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pytest's directory for this user (``/tmp/pytest-of-root``), which outlives a run: above
    the run's own, and above each xdist worker's inside that."""
    base = tmp_path_factory.getbasetemp()
    return next((path for path in base.parents if path.name.startswith("pytest-of-")), base.parent)


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The Dockerfile built on a fresh bookworm base (the base's tarball reused across runs)."""
    for tool in ("podman", "runc", "debootstrap"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install podman runc debootstrap)")
    tarball = user_temp(tmp_path_factory) / "plantstore-bookworm-base.tar"
    if not tarball.exists():
        root = tmp_path_factory.mktemp("bookworm")
        subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}", "bookworm",
             str(root), "http://deb.debian.org/debian"],
            check=True, capture_output=True, timeout=600,
        )  # fmt: skip
        # The machine's CA bundle (Debian's plus any the machine adds, a TLS-inspecting
        # proxy's): pip and apt in the build download through the same network as this host.
        shutil.copyfile(MACHINE_CA, root / MACHINE_CA.relative_to("/"))
        partial = tarball.with_suffix(".partial")
        subprocess.run(["tar", "-C", str(root), "-cf", str(partial), "."], check=True)
        partial.rename(tarball)
        shutil.rmtree(root)
    podman("import", "--quiet", str(tarball), BASE_IMAGE, timeout=300)
    podman(
        "build", "--runtime", "runc", "--format", "docker", "--quiet",
        "--build-arg", f"PYTHON_IMAGE={BASE_IMAGE}", "-t", IMAGE, str(ROOT),
        timeout=800,
    )  # fmt: skip
    return IMAGE


@dataclass
class Container:
    name: str
    volume: str

    def exec(self, *command: str, check: bool = True) -> str:
        return podman("exec", self.name, *command, check=check)

    def logs(self) -> str:
        result = subprocess.run(
            ["podman", "logs", self.name], capture_output=True, text=True, timeout=30
        )
        return result.stdout + result.stderr

    def url(self, port: int = 8000) -> str:
        published = podman("port", self.name, f"{port}/tcp").split()[0]
        return f"http://{published}"

    def healthy(self) -> bool:
        run = ["podman", "healthcheck", "run", self.name]
        return subprocess.run(run, capture_output=True, timeout=30).returncode == 0

    def wait_healthy(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not self.healthy():
            state = podman("inspect", "--format", "{{.State.Status}}", self.name).strip()
            assert state == "running", f"{self.name} is {state}: {self.logs()}"
            assert time.monotonic() < deadline, f"never healthy: {self.logs()}"
            time.sleep(0.5)


@pytest.fixture
def containers(image: str) -> Iterator[Callable[..., Container]]:
    """Start containers of the image (each with a volume on /data); remove them all after."""
    made: list[Container] = []

    def start(*flags: str, command: tuple[str, ...] = ()) -> Container:
        name = f"plantstore-test-{uuid.uuid4().hex[:8]}"
        container = Container(name, f"{name}-data")
        made.append(container)
        podman(
            "run", "-d", "--name", name, *run_flags(), "-v", f"{container.volume}:/data",
            "-p", "127.0.0.1::8000", *flags, image, *command,
        )  # fmt: skip
        return container

    yield start
    for container in made:
        podman("rm", "--force", "--time", "0", container.name, check=False)
        podman("volume", "rm", "--force", container.volume, check=False)


def compose_flags() -> list[str]:
    """compose.yaml's read-only root and tmpfs as podman run flags (its lines read as text:
    no YAML parser among the dependencies)."""
    lines = [line.strip() for line in (ROOT / "compose.yaml").read_text().splitlines()]
    assert "read_only: true" in lines
    assert lines[lines.index("tmpfs:") + 1] == "- /tmp"
    assert "- plantstore-data:/data" in lines
    return ["--read-only", "--tmpfs=/tmp"]


def token_for(container: Container, user: str) -> str:
    printed = container.exec("plantstore", "token", "create", user)
    token = printed.rstrip("\n").splitlines()[-1]  # alone on the last line
    assert token.startswith("pst_"), printed
    return token


def processes(container: Container) -> list[tuple[int, str, str]]:
    """(pid, state, command) of every process in the container, from /proc (minbase has no ps)."""
    script = (
        "import os\n"
        "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "    try:\n"
        "        stat = open(f'/proc/{pid}/stat').read()\n"
        "    except OSError:\n"
        "        continue\n"
        "    name, state = stat[stat.index('(') + 1 : stat.rindex(')')], stat[stat.rindex(')') + 2]\n"
        "    print(pid, state, name)\n"
    )
    rows = container.exec("python", "-c", script).splitlines()
    return [(int(pid), state, name) for pid, state, name in (row.split(" ", 2) for row in rows)]


def worker_count(container: Container) -> int:
    """The workers ``serve`` started, as its start-up line says."""
    for line in container.logs().splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and "workers" in record:
                return int(record["workers"])
    raise AssertionError(f"no start-up line with the workers: {container.logs()}")


# --- the image, run --------------------------------------------------------------------


@SLOW
def test_serves_reaps_orphans_and_keeps_writes_across_stop(
    containers: Callable[..., Container],
) -> None:
    served = containers()
    served.wait_healthy()
    with httpx.Client(base_url=served.url(), timeout=10) as http:
        assert http.get("/healthz").status_code == 200
        token = token_for(served, "someone")
        http.headers["Authorization"] = f"Bearer {token}"
        plants = [{"id": n, "name": f"Fern {n}", "tag": "shade"} for n in range(1, 21)]
        for plant in plants:
            created = http.post("/plants", json=plant)
            assert created.status_code == 200, created.text
        listed = http.get("/plants")
        assert [p["name"] for p in listed.json()] == [p["name"] for p in plants], listed.text
    # Unlimited CPU: one worker per core the container may use, as on the machine.
    assert worker_count(served) == min(8, len(os.sched_getaffinity(0)))

    # tini is PID 1 and reaps what an exec'd shell leaves behind.
    assert (1, "S", "tini") in [(pid, state, name) for pid, state, name in processes(served)]
    served.exec("sh", "-c", "sleep 0.2 & sleep 0.2 & exit 0")
    time.sleep(1)
    zombies = [row for row in processes(served) if row[1] == "Z"]
    assert not zombies, zombies

    # pip and setuptools are not importable by any python in the image.
    for python in ("python", "/usr/bin/python3"):
        found = served.exec(
            python, "-c", "import importlib.util as u; print([m for m in ('pip', 'setuptools') "
            "if u.find_spec(m)])",
        )  # fmt: skip
        assert found.strip() == "[]", (python, found)

    # SIGTERM (through tini) stops the server gracefully; every acknowledged write is kept.
    podman("stop", "--time", "20", served.name, timeout=60)
    exit_code = podman("inspect", "--format", "{{.State.ExitCode}}", served.name).strip()
    assert exit_code == "0", f"unclean stop ({exit_code}): {served.logs()}"
    podman("start", served.name)
    served.wait_healthy()
    with httpx.Client(base_url=served.url(), timeout=10, headers=bearer(token)) as http:
        assert [p["name"] for p in http.get("/plants").json()] == [p["name"] for p in plants]


@SLOW
def test_health_check_follows_the_port_flag(containers: Callable[..., Container]) -> None:
    served = containers(command=("plantstore", "serve", "--port", "9000"))
    served.wait_healthy()  # PLANTSTORE_PORT still says 8000
    answered = served.exec(
        "python", "-c", "import urllib.request as r; "
        "print(r.urlopen('http://127.0.0.1:9000/readyz', timeout=5).status)",
    )  # fmt: skip
    assert answered.strip() == "200"
    health = subprocess.run(
        ["podman", "exec", served.name, "plantstore", "health"], capture_output=True, text=True
    )
    assert health.returncode == 0, health.stderr
    # No server of that database: unhealthy, with one line saying why.
    other = subprocess.run(
        ["podman", "exec", served.name, "plantstore", "--database", "sqlite:////data/other.db",
         "health"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert other.returncode == 1
    assert other.stderr.startswith("Error: no server recorded its address"), other.stderr
    assert len(other.stderr.splitlines()) == 1, other.stderr


@SLOW
def test_one_cpu_starts_one_worker(containers: Callable[..., Container]) -> None:
    served = containers("--cpus=1")
    served.wait_healthy()
    assert worker_count(served) == 1
    quota = served.exec(
        "python", "-c", "from plantstore.settings import *; print(cgroup_cpu_quota())"
    )
    assert quota.strip() == "1"


@SLOW
def test_read_only_root_writes_only_data_and_tmp(containers: Callable[..., Container]) -> None:
    # compose.yaml's service, as docker's --read-only: no tmpfs but the ones given (podman's
    # own --read-only would add /tmp, /var/tmp and /run).
    served = containers(*compose_flags(), "--read-only-tmpfs=false")
    served.wait_healthy()
    with httpx.Client(base_url=served.url(), timeout=10) as http:
        http.headers["Authorization"] = f"Bearer {token_for(served, 'someone')}"
        created = http.post("/plants", json={"id": 1, "name": "Aloe", "tag": "sun"})
        assert created.status_code == 200, created.text
    data, runtime = listing(served, "/data"), listing(served, "/tmp")
    assert "plantstore.db" in data
    assert all(name.startswith("plantstore.db") for name in data), data
    assert any(name.startswith("plantstore-serve-") for name in runtime), runtime  # health's
    if worker_count(served) > 1:  # the duty's lock file, shared by the workers
        assert any(name.startswith("plantstore-duty-") for name in runtime), runtime
    # Only podman's own change: the mount points of /etc/hosts, /etc/resolv.conf, /etc/hostname
    # (a container made but never started shows the same).
    assert podman("diff", served.name).split() == ["C", "/etc"]

    # With no writable /tmp at all, serve refuses rather than write into the /data volume.
    refused = containers("--read-only", "--read-only-tmpfs=false")
    deadline = time.monotonic() + 60
    while podman("inspect", "--format", "{{.State.Status}}", refused.name).strip() == "running":
        assert time.monotonic() < deadline, refused.logs()
        time.sleep(0.5)
    assert "no writable temporary directory" in refused.logs(), refused.logs()
    assert podman("inspect", "--format", "{{.State.ExitCode}}", refused.name).strip() == "1"


def listing(container: Container, directory: str) -> list[str]:
    names = container.exec(
        "python", "-c", f"import json, os; print(json.dumps(os.listdir({directory!r})))"
    )
    return [str(name) for name in json.loads(names)]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
