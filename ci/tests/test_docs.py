"""The README and docs/ say what is: the README stays a front door, its examples call the port its first command
serves, every relative link and anchor resolves, every `BLINK_*` variable they name exists, every repository path
they name under bench/, ci/, fleet/ and docs/ exists, and `build.py --docs` (old name `--readme`) rewrites the
knob tables. (The tables themselves: test_settings.py::test_docs_tables_match_the_schema.)"""

from __future__ import annotations

import ast
import re

import pytest

import build
from blink.settings import Listen, Settings, SpaceSettings, knobs
from helpers import ROOT

README = ROOT / "README.md"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
SOURCES = ("blink", "space")  # the packages docs/architecture.md maps module by module
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def text(path) -> str:
    return path.read_text(encoding="utf-8")


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path) -> set[str]:
    prose = FENCE.sub("", text(path))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", prose, re.M)}


def test_the_readme_is_a_front_door():
    lines = text(README).count("\n")
    assert lines <= 250, f"README.md has {lines} lines: the reference belongs in docs/"


def test_the_readme_examples_call_the_port_its_first_command_serves():
    readme = text(README)
    served = re.search(r"GRADIO_SERVER_PORT=(\d+)", readme)
    assert served, "README.md's first command names no GRADIO_SERVER_PORT"
    called = set(re.findall(r"127\.0\.0\.1:(\d+)", readme))
    port = served.group(1)
    assert called == {port}, f"README.md's examples call {sorted(called)}; the first command serves {port}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page):
    prose = FENCE.sub("", text(page))
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_every_blink_variable_named_exists():
    variables = {k.env for schema in (Listen, Settings, SpaceSettings) for k in knobs(schema)}
    code = "\n".join(text(p) for pattern in ("*.py", "*.sh") for p in ROOT.rglob(pattern) if ".venv" not in str(p))
    unknown = {
        f"{page.relative_to(ROOT)}: {name}"
        for page in PAGES
        for name in re.findall(r"\bBLINK_[A-Z][A-Z0-9_]*\b", text(page))
        if name not in variables and name not in code
    }
    assert not unknown, f"variables no knob or code reads: {sorted(unknown)}"


def test_every_repository_path_named_exists():
    made = ("ci/artifacts/", "bench/out/", "bench/.whl")  # what the tests and benchmarks write (.gitignore)
    missing = {
        f"{page.relative_to(ROOT)}: {path}"
        for page in PAGES
        for path in re.findall(r"`((?:bench|ci|fleet|docs)/[\w./-]*\w)`", text(page))
        if not (ROOT / path).exists() and not path.startswith(made)
    }
    assert not missing, f"paths that are not in the repository: {sorted(missing)}"


@pytest.mark.parametrize("flag", ["--docs", "--readme"])
def test_build_rewrites_the_docs_tables_under_both_names(monkeypatch, capsys, flag):
    calls = []
    monkeypatch.setattr(build, "write_docs", lambda: calls.append(flag) or False)
    assert build.main([flag]) == 0
    assert calls == [flag]
    assert "docs/configuration.md, docs/api-systemone.md: tables already up to date" in capsys.readouterr().out


def test_the_error_table_is_what_the_code_raises():
    """docs/api-systemone.md's error types are generated from the code that raises them (fleet/errors_doc.py)."""
    from fleet.errors_doc import PAGE, with_error_table

    page = (ROOT / PAGE).read_text(encoding="utf-8")
    assert with_error_table(page) == page, f"{PAGE}'s error table drifted: run `python build.py --docs`"
    assert "| 415 | `api_usage_error` | 415 | `invalid_request_error` | `unsupported_encoding` |" in page


def layout_map() -> tuple[set[str], set[str]]:
    """docs/architecture.md's layout: the packages it has a heading for (a heading that is the package's path in
    backticks) and the modules its tables name, one row each, under their package's heading or "The top level"."""
    layout = text(ARCHITECTURE).split("\n## The layout\n", 1)[1].split("\n## ", 1)[0]
    packages, modules, prefix = set(), set(), None
    for line in layout.splitlines():
        if line.startswith("### "):
            heading = re.fullmatch(r"### `((?:blink|space)(?:/\w+)*/)`", line)
            prefix = heading.group(1) if heading else ("" if line == "### The top level" else None)
            packages |= {prefix} if heading else set()
        elif prefix is not None and (row := re.match(r"\| `(\w+\.py)` \|", line)):
            modules.add(prefix + row.group(1))
    return packages, modules


def test_the_architecture_map_names_every_module_and_only_those():
    """The map stays true: a module added under blink/ or space/ (or at the top) needs its line, a module gone
    takes its line (and any other mention of its path in the page) with it."""
    files = [p for source in SOURCES for p in (ROOT / source).rglob("*.py")]
    packages = {p.parent.relative_to(ROOT).as_posix() + "/" for p in files if p.name == "__init__.py"}
    modules = {p.relative_to(ROOT).as_posix() for p in files if p.name != "__init__.py"}
    modules |= {p.name for p in ROOT.glob("*.py")}
    mapped_packages, mapped = layout_map()
    named = set(re.findall(r"`((?:blink|space)/[\w/]+\.py)`", text(ARCHITECTURE)))
    page = ARCHITECTURE.relative_to(ROOT)
    assert not modules - mapped, (
        f"modules with no line in {page}'s layout (add one: what it is): {sorted(modules - mapped)}"
    )
    assert not mapped - modules, f"{page}'s layout names modules that are gone: {sorted(mapped - modules)}"
    assert packages == mapped_packages, (
        f"{page}: packages with no heading {sorted(packages - mapped_packages)}, "
        f"headings of no package {sorted(mapped_packages - packages)}"
    )
    assert named <= modules, f"{page} names modules that are gone: {sorted(named - modules)}"


def test_every_package_says_what_it_holds():
    packages = [p for source in SOURCES for p in sorted((ROOT / source).rglob("__init__.py"))]
    silent = [str(p.relative_to(ROOT)) for p in packages if not ast.get_docstring(ast.parse(text(p)))]
    assert not silent, f"packages whose __init__.py has no docstring saying what the package holds: {silent}"
