"""The house keeps its plan: features above the mechanics (the import-linter contract in
pyproject.toml), no import circle anywhere (an import inside a function counts), small
modules, a short top level, tests that mirror the source and lean on no benchmark, and a
repository that never talks about its own issue tracker."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "plantstore"
LONGEST_MODULE = 400
MOST_TOP_LEVEL_MODULES = 6


def import_circles() -> list[list[str]]:
    """The strongly connected sets of plantstore modules (Tarjan), larger than one."""
    graph = grimp.build_graph("plantstore", include_external_packages=False)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            circle = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                circle.append(member)
                if member == module:
                    break
            if len(circle) > 1:
                circles.append(sorted(circle))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return circles


def test_no_module_imports_a_module_that_imports_it_back() -> None:
    assert import_circles() == []


@pytest.mark.server
def test_the_layers_contract_is_kept() -> None:
    """The same check ``make lint`` runs with ``lint-imports``."""
    lint_imports = Path(sys.executable).parent / "lint-imports"
    completed = subprocess.run(
        [str(lint_imports), "--config", str(ROOT / "pyproject.toml")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "1 kept, 0 broken" in completed.stdout, completed.stdout


def test_modules_are_small_and_the_top_level_is_short() -> None:
    long = {
        str(path.relative_to(PACKAGE)): lines
        for path in PACKAGE.rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > LONGEST_MODULE
    }
    assert long == {}
    top = sorted(
        path.name
        for path in PACKAGE.glob("*.py")
        if path.name not in ("__init__.py", "__main__.py")
    )
    assert len(top) <= MOST_TOP_LEVEL_MODULES, top


def test_every_package_has_a_test_folder_of_its_name() -> None:
    packages = {
        path.parent.relative_to(PACKAGE)
        for path in PACKAGE.rglob("__init__.py")
        if path.parent != PACKAGE and "migrations" not in path.parts
    }
    missing = [str(package) for package in packages if not (ROOT / "tests" / package).is_dir()]
    assert missing == []
    assert packages, "the package has sub-packages"


def test_test_files_sit_in_folders() -> None:
    """Only the shared fixtures and helpers, and this file, sit directly in tests/."""
    flat = sorted(path.name for path in (ROOT / "tests").glob("test_*.py"))
    assert flat == ["test_architecture.py"]


def imported_top_packages(path: Path) -> set[str]:
    """The top-level packages a module imports by absolute name (an import inside a function
    counts)."""
    tops: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            tops.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            tops.add(node.module.split(".")[0])
    return tops


def test_the_tests_and_the_trials_import_nothing_from_bench() -> None:
    """What the tests share with the benchmarks (free ports, servers, PgBouncer, the trials'
    harnesses) lives in harness/ and trials/, which bench/ imports too, never the reverse."""
    modules = [
        path for folder in ("tests", "harness", "trials") for path in (ROOT / folder).rglob("*.py")
    ]
    leaning = [
        str(path.relative_to(ROOT)) for path in modules if "bench" in imported_top_packages(path)
    ]
    assert leaning == []
    assert len(modules) > 100


@pytest.mark.server
def test_the_repository_does_not_talk_about_its_tracker() -> None:
    tracked = subprocess.run(
        ["git", "ls-files"], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.split()
    tracker_talk = re.compile(  # issue numbers, talk of one, owner/repo#number
        r"\bissues? ?#?\d|\b(?:the|this) issue\b|\bthe issue's\b|[\w.-]+/[\w.-]+#\d",
        re.IGNORECASE,
    )
    talking = [
        name
        for name in tracked
        if (ROOT / name).is_file()
        and not name.endswith(("package-lock.json", ".js", ".png", ".css"))
        and tracker_talk.search((ROOT / name).read_text(errors="replace"))
    ]
    assert talking == [], talking
