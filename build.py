#!/usr/bin/env python3
"""The fleet: one app, many Hugging Face ZeroGPU Spaces; the only per-Space difference is its config.

    python build.py                      build dist/<space>/ for every Space in spaces.toml
    python build.py --space blink-4b     only that Space (repeatable)
    python build.py --check              validate spaces.toml, the shared files and the pins; write nothing
    python build.py --dry-run            print what --push would do (repo, hardware, secrets by name, files)
    python build.py --push OWNER         build, then create or update OWNER/<space> on the Hub
    python build.py --docs               rewrite the generated tables: docs/configuration.md's knobs (settings.py),
                                         docs/api-systemone.md's error types (fleet/errors_doc.py)
                                         (--readme: the same, by its old name)

Each `dist/<space>/` is uploadable as it is: `app.py`, `auth.py`, `theme.py`, `requirements.txt`, `space/` and
`blink/` copied byte for byte from the repository root, plus
`space_config.py` (every knob of blink/settings.py, as that Space's table sets it) and `README.md` (the YAML
front matter the Hub reads, and a body that tells a visitor how to call the Space). The checks,
renderings and push live in `fleet/`.

Light: the standard library and blink's settings schema (no torch, transformers or Pillow).
Exit status: 0 ok, 2 a configuration error (the message names the Space and the key), 1 a push failure.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from blink.errors import StartupError
from blink.settings import resolve_space
from fleet import ConfigError
from fleet.docs import PAGE, with_tables
from fleet.hub import files_of, plan, push
from fleet.pins import ZEROGPU_TORCH, check_requirements  # noqa: F401 - the tests read them here
from fleet.render import front_matter, readme, space_config
from fleet.schema import Fleet, Space, load

SHARED_FILES = ("app.py", "auth.py", "theme.py", "requirements.txt")
SHARED_DIRS = ("blink", "space")
GENERATED = ("space_config.py", "README.md")


def shared_paths() -> list[tuple[Path, str]]:
    """(source, relative path) for every shared file; a missing one is an error."""
    out = []
    for name in SHARED_FILES:
        path = ROOT / name
        if not path.is_file():
            raise ConfigError(name, None, "shared file missing from the repository root (every Space needs it)")
        out.append((path, name))
    for name in SHARED_DIRS:
        folder = ROOT / name
        if not folder.is_dir():
            raise ConfigError(name + "/", None, "shared folder missing from the repository root")
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(ROOT)
            if path.is_file() and "__pycache__" not in rel.parts and path.suffix not in (".pyc", ".pyo"):
                out.append((path, rel.as_posix()))
    return out


def build_space(space: Space, fleet: Fleet, out: Path) -> list[str]:
    """Write the Space's folder at `out` (replacing it whole); return its files (relative, sorted)."""
    shared = shared_paths()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{space.name}.", dir=out.parent))
    try:
        for src, rel in shared:
            dest = staging / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
        (staging / "space_config.py").write_text(space_config(space), encoding="utf-8")
        (staging / "README.md").write_text(readme(space, fleet), encoding="utf-8")
        compile((staging / "space_config.py").read_text(encoding="utf-8"), "space_config.py", "exec")
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return files_of(out)


def verify_space(space: Space, fleet: Fleet, folder: Path) -> None:
    """The built folder: shared files byte-identical to the source, nothing else but the generated ones,
    a space_config.py the app resolves to exactly the settings meant, a README whose front matter parses back."""
    expected = {rel for _, rel in shared_paths()} | set(GENERATED)
    present = set(files_of(folder))
    if present != expected:
        raise ConfigError(
            f"dist/{space.name}",
            None,
            f"unexpected files {sorted(present - expected)}, missing {sorted(expected - present)}",
        )
    for src, rel in shared_paths():
        if (folder / rel).read_bytes() != src.read_bytes():
            raise ConfigError(f"dist/{space.name}", rel, "differs from the repository's copy")
    namespace: dict = {}
    exec(compile((folder / "space_config.py").read_text(encoding="utf-8"), "space_config.py", "exec"), namespace)
    try:
        with contextlib.chdir(folder):  # as the Space runs: its files (a moderation policy) read from its folder
            resolved = resolve_space(namespace, env={})
    except StartupError as exc:
        raise ConfigError(f"[spaces.{space.name}]", None, f"the app would refuse this config: {exc}") from None
    if resolved != (space.settings, space.space):
        raise ConfigError(f"dist/{space.name}", "space_config.py", "the app would not run with what was meant")
    try:  # the front matter reads back as written (when PyYAML, which the Hub's parser matches, is here)
        import yaml
    except ImportError:
        return
    text = (folder / "README.md").read_text(encoding="utf-8")
    head = text.split("---\n", 2)[1] if text.startswith("---\n") else ""
    if yaml.safe_load(head) != front_matter(space, fleet):
        raise ConfigError(f"dist/{space.name}", "README.md", "front matter does not read back as written")


def build(fleet: Fleet, out: Path) -> dict[str, list[str]]:
    built = {}
    for space in fleet.spaces:
        built[space.name] = build_space(space, fleet, out / space.name)
        verify_space(space, fleet, out / space.name)
    return built


def write_docs(path: Path = ROOT / PAGE) -> bool:
    """Rewrite the generated knob tables of docs/configuration.md and the error types of docs/api-systemone.md;
    True when that changed a file. The error table reads the wires' renderers, which import the model libraries:
    imported here, so `--check` and the builds stay free of them."""
    from fleet.errors_doc import PAGE as ERRORS_PAGE
    from fleet.errors_doc import with_error_table

    changed = False
    for page, rewrite in ((path, lambda text: with_tables(text, PAGE)), (ROOT / ERRORS_PAGE, with_error_table)):
        before = page.read_text(encoding="utf-8")
        after = rewrite(before)
        if after != before:
            page.write_text(after, encoding="utf-8")
            changed = True
    return changed


def main(argv=None, api=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--config", type=Path, default=ROOT / "spaces.toml", help="the fleet file (spaces.toml)")
    ap.add_argument("--out", type=Path, default=ROOT / "dist", help="where the Space folders go (dist)")
    ap.add_argument("--space", action="append", metavar="NAME", help="only this Space (repeatable)")
    ap.add_argument("--owner", help="the Hub owner for URLs in the READMEs (default: [fleet] owner)")
    ap.add_argument("--check", action="store_true", help="validate everything, write nothing")
    ap.add_argument("--push", metavar="OWNER", help="build, then create or update OWNER/<space> on the Hub")
    ap.add_argument("--dry-run", action="store_true", help="print what --push would do, change nothing")
    ap.add_argument(
        "--docs", "--readme", dest="docs", action="store_true", help=f"rewrite {PAGE}'s knob tables from the schema"
    )
    a = ap.parse_args(argv)
    if a.docs:
        pages = f"{PAGE}, docs/api-systemone.md"
        print(f"{pages}: tables rewritten" if write_docs() else f"{pages}: tables already up to date")
        return 0
    try:
        fleet = load(a.config, owner=a.push or a.owner, only=a.space)
        if (a.push or a.dry_run) and not fleet.owner:
            raise ConfigError("[fleet]", "owner", "required to push (or pass --push OWNER)")
        if a.check or a.dry_run:
            with tempfile.TemporaryDirectory(prefix="blink-build-") as tmp:
                built = build(fleet, Path(tmp))
                if a.dry_run:
                    print(f"dry run: --push {fleet.owner} would do this (nothing is changed)")
                    for space in fleet.spaces:
                        print("\n".join(plan(space, fleet, built[space.name])))
                else:
                    for space in fleet.spaces:
                        print(f"ok {space.name}: {space.model}@{space.revision}, {len(built[space.name])} files")
            return 0
        built = build(fleet, a.out)
        for space in fleet.spaces:
            print(f"built {a.out / space.name} ({len(built[space.name])} files)")
    except ConfigError as exc:
        print(f"build.py: {exc}", file=sys.stderr)
        return 2
    if a.push:
        try:
            push(fleet, {s.name: a.out / s.name for s in fleet.spaces}, api=api)
        except Exception as exc:  # noqa: BLE001 - the Hub's own message is the useful part
            print(f"build.py: push failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
