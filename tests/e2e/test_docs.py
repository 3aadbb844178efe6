"""The documentation holds: every relative link in the repository's Markdown leads somewhere
(a file inside the repository, and a heading there for an ``#anchor``), and the ``## Status
codes`` tables of docs/ give each operation exactly the statuses /openapi.json gives it."""

from __future__ import annotations

import re
import subprocess
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import httpx
import pytest

from plantstore.app import openapi_document as build_document
from plantstore.settings import Settings
from tests.fixtures.servers import start_server, stop_server

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SKIPPED_DIRECTORIES = {".git", ".venv", "node_modules", ".pytest_cache", ".mypy_cache"}
METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")

_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)"
)
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
_HTML_LINK = re.compile(r"""<a\s[^>]*href=["']([^"']+)["']""", re.I)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
_HTML_ANCHOR = re.compile(r"""<a\s[^>]*(?:name|id)=["']([^"']+)["']""", re.I)
_STATUS_ROW = re.compile(r"^\| `([A-Z]+) (/\S*)` \| (\d{3}(?:, \d{3})*) \|$")


def markdown_files() -> list[Path]:
    """The repository's Markdown files: tracked or new, not ignored (git), else every one."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")
        files = [ROOT / name for name in listed if name]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout
        files = [
            path
            for path in ROOT.rglob("*.md")
            if not SKIPPED_DIRECTORIES & set(path.relative_to(ROOT).parts)
        ]
    return sorted(path for path in files if path.is_file())


def prose_lines(text: str) -> Iterator[str]:
    """The lines outside fenced code blocks, with inline code and HTML comments removed."""
    fence: str | None = None
    for line in _COMMENT.sub("", text).splitlines():
        marker = _FENCE.match(line)
        if marker and (fence is None or marker.group(1) == fence):
            fence = marker.group(1) if fence is None else None
            continue
        if fence is None:
            yield _INLINE_CODE.sub("", line)


def link_targets(text: str) -> list[str]:
    prose = "\n".join(prose_lines(text))
    return _INLINE_LINK.findall(prose) + _REFERENCE.findall(prose) + _HTML_LINK.findall(prose)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lowercased, punctuation but ``-`` and ``_``
    dropped, spaces made hyphens (github-slugger's rule)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link counts by its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    kept = (
        char for char in text.lower() if char in " -_" or unicodedata.category(char)[0] in "LNM"
    )
    return "".join(kept).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every ``#anchor`` a Markdown file offers: its headings' slugs (repeats numbered, as
    GitHub does) and any HTML ``name``/``id``."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    text = path.read_text()
    for line in prose_lines(text):
        heading = _HEADING.match(line)
        if heading is None:
            continue
        slug = github_slug(heading.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    found.update(_HTML_ANCHOR.findall(text))
    return found


def broken_links(path: Path) -> list[str]:
    """Each relative link of ``path`` that leads nowhere, with the reason."""
    problems: list[str] = []
    for target in link_targets(path.read_text()):
        if _SCHEME.match(target) or target.startswith("//"):
            continue  # another site: not ours to check offline
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / unquote(file_part)).resolve() if file_part else path
        where = f"{path.relative_to(ROOT)}: {target}"
        if not linked.is_relative_to(ROOT):
            problems.append(f"{where} leads outside the repository")
        elif not linked.exists():
            problems.append(f"{where} names no file")
        elif anchor and linked.suffix == ".md" and unquote(anchor) not in anchors(linked):
            problems.append(f"{where} names no heading of {linked.relative_to(ROOT)}")
    return problems


@pytest.mark.server
def test_every_relative_link_in_the_markdown_leads_somewhere() -> None:
    files = markdown_files()
    assert ROOT / "README.md" in files
    assert DOCS / "api.md" in files
    problems = [problem for path in files for problem in broken_links(path)]
    assert problems == []


def test_the_link_checker_sees_what_github_sees(tmp_path: Path) -> None:
    """The checker's own rules, on a page made for them: slugs, repeats, code left alone."""
    assert github_slug("DELETE /plants/{id}: delete") == "delete-plantsid-delete"
    assert github_slug("POST /plants — create") == "post-plants--create"
    assert github_slug("`db backup` and [restore](x.md)") == "db-backup-and-restore"
    page = DOCS / "api.md"
    assert {"status-codes", "which-error-wins"} <= anchors(page)
    text = "# A\n## A\n[x](#a-1) `[no](nowhere.md)`\n```\n[no](nowhere.md)\n```\n[y](../z.md)"
    assert link_targets(text) == ["#a-1", "../z.md"]


def status_tables() -> dict[tuple[str, str], set[int]]:
    """(METHOD, path) -> statuses, from every ``## Status codes`` table under docs/."""
    tables: dict[tuple[str, str], set[int]] = {}
    for path in sorted(DOCS.glob("*.md")):
        lines = path.read_text().splitlines()
        if "## Status codes" not in lines:
            continue
        section = lines[lines.index("## Status codes") + 1 :]
        end = next((n for n, line in enumerate(section) if line.startswith("## ")), None)
        rows = [line for line in section[:end] if line.startswith("|")]
        assert rows[:2] == ["| operation | statuses |", "|---|---|"], path
        for row in rows[2:]:
            match = _STATUS_ROW.match(row)
            assert match is not None, f"{path.name}: a row not in the table's form: {row!r}"
            operation = (match.group(1), match.group(2))
            statuses = {int(code) for code in match.group(3).split(", ")}
            assert tables.setdefault(operation, statuses) == statuses, (path.name, operation)
    return tables


def document_statuses(document: dict[str, object]) -> dict[tuple[str, str], set[int]]:
    """(METHOD, path) -> the response codes the OpenAPI document gives that operation."""
    paths = document["paths"]
    assert isinstance(paths, dict)
    return {
        (method.upper(), path): {int(code) for code in item[method]["responses"]}
        for path, item in paths.items()
        for method in METHODS
        if method in item
    }


def test_status_tables_give_each_documented_operation_its_statuses() -> None:
    tables = status_tables()
    # Sandbox mode on: the document then holds every operation there is.
    documented = document_statuses(build_document(Settings(sandbox=True)))
    assert set(documented) <= set(tables), "operations of /openapi.json missing from docs/"
    for operation, statuses in documented.items():
        assert tables[operation] == statuses, operation


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("docs-server")
    server = start_server(
        f"sqlite:///{directory / 'plantstore.db'}",
        directory / "server.log",
        PLANTSTORE_SANDBOX="true",  # every operation there is, POST /sandbox/tokens too
    )
    yield server.base_url
    stop_server(server)


@pytest.mark.server
def test_the_served_document_and_the_routes_beyond_it_match_the_tables(served: str) -> None:
    """Against a real server: the served /openapi.json agrees with the tables, and each
    operation the tables name beyond it (the document itself, the docs page) answers its
    one status."""
    tables = status_tables()
    document = httpx.get(f"{served}/openapi.json", timeout=10).json()
    documented = document_statuses(document)
    assert {operation: tables.get(operation) for operation in documented} == documented
    beyond = set(tables) - set(documented)
    assert beyond, "the tables name the operational routes the document leaves out"
    for method, path in sorted(beyond):
        answer = httpx.request(method, f"{served}{path}", timeout=10)
        assert tables[(method, path)] == {answer.status_code}, (method, path)
