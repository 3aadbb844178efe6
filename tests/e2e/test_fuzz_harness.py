"""Every atheris harness in trials/fuzz/harnesses/ works: from its seeds, a few thousand
coverage-guided runs, and no crash. ``make fuzz`` (``python -m trials.fuzz``) runs them for over
a million."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from trials.fuzz import harnesses

# A skip while collecting: with PLANTSTORE_TEST_NO_SKIPS=1 (CI) conftest makes it an error.
pytest.importorskip(
    "atheris", reason="atheris is in the 'fuzz' extra: pip install -e '.[dev,fuzz]'"
)

HARNESSES = harnesses.names()
RUNS = 2000


def fuzz(name: str, directory: Path) -> subprocess.CompletedProcess[str]:
    command = harnesses.command(name)
    corpus = directory / "corpus"
    subprocess.run(
        [*command, "--write-seeds", str(corpus)],
        check=True,
        capture_output=True,
        env=harnesses.environment(),
    )
    return subprocess.run(
        [
            *command,
            str(corpus),
            f"-runs={RUNS}",
            "-seed=1",
            f"-artifact_prefix={directory}/",
            "-print_final_stats=1",
        ],
        capture_output=True,
        text=True,
        env=harnesses.environment(PLANTSTORE_FUZZ_WORKDIR=str(directory)),
        cwd=directory,
        timeout=180,
    )


@pytest.fixture(scope="module")
def results(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    """All harnesses at once: each is one process, mostly waiting on its own CPU share."""
    with ThreadPoolExecutor(max_workers=len(HARNESSES)) as pool:
        yield {
            name: pool.submit(fuzz, name, tmp_path_factory.mktemp(f"fuzz-{name}"))
            for name in HARNESSES
        }


def test_every_harness_is_found() -> None:
    assert {"app", "body", "content_type", "headers", "path", "query"} <= set(HARNESSES)


@pytest.mark.parametrize("name", HARNESSES)
@pytest.mark.server
def test_harness_runs_without_a_crash(
    name: str, results: dict[str, Future[subprocess.CompletedProcess[str]]]
) -> None:
    result = results[name].result()
    output = result.stdout + result.stderr
    crash = output[output.find("FUZZ-CRASH-SIGNATURE") :][:6000]
    assert result.returncode == 0, f"fuzz_{name}.py crashed:\n{crash or output[-4000:]}"
    executed = re.findall(r"stat::number_of_executed_units: (\d+)", output)
    assert executed, output[-2000:]
    assert int(executed[-1]) >= RUNS
