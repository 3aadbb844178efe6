"""The process model hands a worker what it shares explicitly: importing the service
registers no fork hook, and no module hands settings to workers through the environment."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import plantstore

SOURCE = Path(plantstore.__file__).parent

IMPORT_EVERYTHING = """
import os, pkgutil, importlib, plantstore
hooks = []  # the plantstore functions registered (the standard library registers its own)
os.register_at_fork = lambda **kw: hooks.extend(
    f for f in kw.values() if (getattr(f, "__module__", None) or "").startswith("plantstore")
)
for module in pkgutil.walk_packages(plantstore.__path__, "plantstore."):
    if ".migrations." not in module.name and not module.name.endswith("__main__"):
        importlib.import_module(module.name)
print(len(hooks))
"""


@pytest.mark.server
def test_importing_the_service_registers_no_fork_hook() -> None:
    """Only the supervisor registers its hooks, when it starts (processes/forks.py)."""
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_EVERYTHING], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "0"


def environment_writes(tree: ast.AST) -> list[int]:
    """Lines that assign to or delete from ``os.environ``, or call ``os.putenv``."""
    lines = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in {
            "os.putenv",
            "os.environ.update",
            "os.environ.setdefault",
        }:
            lines.append(node.lineno)
        lines.extend(
            target.lineno
            for target in targets
            if isinstance(target, ast.Subscript) and ast.unparse(target.value) == "os.environ"
        )
    return lines


def test_no_module_hands_settings_to_workers_through_the_environment() -> None:
    """Only prometheus_client's own variable is set: the library reads its directory there."""
    writers = {
        str(path.relative_to(SOURCE)): lines
        for path in sorted(SOURCE.rglob("*.py"))
        if (lines := environment_writes(ast.parse(path.read_text())))
    }
    assert set(writers) == {"ops/metrics_server.py", "processes/supervisor.py"}
    for module in writers:
        text = (SOURCE / module).read_text()
        assert all("MULTIPROCESS_VARIABLE" in text.splitlines()[n - 1] for n in writers[module])
