"""The README's and docs' examples, run against the demo Space, their shown outputs produced from the run.

An example is a fenced code block right after a marker line `<!-- example <runner> -->`:
- `curl` (a ```bash block of curl commands): run by bash; the ```json block after it shows what it printed, one
  line on the wire, laid out by `wire_layout` (one answer, one result or one score a line, wrapped to the width);
- `shell` (a ```bash block of commands, run by bash in a fresh folder holding a link to `.venv`, the demo model's
  folder in `BLINK_DEMO_DIR`): the ```text block after it shows what it printed, as printed;
- `python` / `python-mcp` / `python-labels` (a ```python block, run by `.venv` / `.venv-mcp`, built by
  ci/mcp-venv.sh: Gradio pins the server's `mcp` below 2 / `.venv-labels`, built by ci/labels-venv.sh: LiteLLM,
  LlamaIndex, run with `LITELLM_LOCAL_MODEL_COST_MAP=True`) and `node` (a ```js block, run in ci/js with the JS
  clients its lock pins): what it
  printed is shown in comments, either one `# <output>` (`// <output>`) at the end of each top-level `print(...)`
  (`console.log(...)`) line (a note may follow two spaces later: `# 0.52  (why)`), or, for code that prints from
  inside a function or a block, every line at once in a comment block closing the code, wrapped at `, ` to the
  page's width.
  `<!-- example python with-previous -->` runs the file's previous python example first (its `client`, ...),
  showing only this one's output.
ruff formats the Markdown's Python blocks too (`ruff format --check .`): a print line with its output must stay
within the line length, so print a few short values, not a whole body.

Every example talks to `http://127.0.0.1:7860` as written (the Space's first command, `BLINK_MODEL=demo`, which
answers as `blink-4b`); here that address is replaced by a fresh Space's on a free port, and the examples run one
after another in file order (README first), so the prefix-state cache's counts come out the same on every run.
What differs from run to run by design (a response's random `id`, `created`) is masked when a shown output is
compared with the run's (`masked`), and numbers compare within 1e-6 (`same`: absolute for numbers up to 1 in size,
relative above; float kernels differ across CPUs and thread counts in the 8th or 9th digit), everything else
exactly: a page is rewritten only when something else changed, so its ids and digits are a real run's, not
placeholders.

    python ci/examples.py            # run them; exit 1 with a diff if a shown output is not what the run printed
    python ci/examples.py --write    # rewrite the shown outputs from the run
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "ci" / "tests"))

from helpers import ARTIFACTS, JS, free_port, launch, npm_installed, server_env, stop_group, wait_healthy  # noqa: E402

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHOWN_URL = "http://127.0.0.1:7860"
WIDTH = 116  # a comment line's width, `# ` included
MARKER = re.compile(r"^<!-- example (?P<runner>[\w-]+)(?P<previous> with-previous)? -->$")
PYTHONS = {
    "python": ROOT / ".venv" / "bin" / "python",
    "python-mcp": ROOT / ".venv-mcp" / "bin" / "python",
    "python-labels": ROOT / ".venv-labels" / "bin" / "python",
}
VENV_SCRIPTS = {"python-mcp": "ci/mcp-venv.sh", "python-labels": "ci/labels-venv.sh"}
# a response's id and time, random or the clock's: `"id":"rerank-<hex>"`, `"created":1796452378`
VOLATILE = [
    (re.compile(r'"id":"(rerank|score|modr|chatcmpl|cmpl|resp)-[0-9a-f]+"'), r'"id":"\1-<id>"'),
    (re.compile(r'"created":\d+'), '"created":<time>'),
]
NOTE = "  ("  # an output's note starts here, in a print line's comment
# a number as printed (JSON, Python, JS), its sign with it: `-0.25`, `3`, `1e-07`, `2.5E+3`
NUMBER = re.compile(r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")
TOLERANCE = 1e-6
# how long one example may run: the slowest, docs/batch.md's `--ray local` run-batch (a Ray cluster, two actors each
# loading the model), took 698 s on a 2-core machine at load 10-11 (2026-12-07; 300 s, the bound before, was too
# short in CI at load 8-11): ~2.5 times that, so a busy machine is never a failure and a hung example still is
EXAMPLE_TIMEOUT_S = 1800


@dataclass
class Example:
    page: Path
    runner: str
    previous: bool
    start: int  # the first code line's index in the page
    end: int  # the closing fence's index


def examples(lines: list[str], page: Path) -> list[Example]:
    found = []
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        if not m:
            continue
        assert lines[i + 1].startswith("```"), f"{page.name}:{i + 1}: an example marker must precede a code block"
        end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
        found.append(Example(page, m["runner"], bool(m["previous"]), i + 2, end))
    return found


def run(code: str, runner: str, url: str) -> str:
    code = code.replace(SHOWN_URL, url)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    if runner == "curl":
        argv = ["bash", "-c", code]
    elif runner == "shell":  # commands that write files: in a folder of their own, `.venv` linked into it
        with tempfile.TemporaryDirectory() as folder:
            os.symlink(ROOT / ".venv", Path(folder) / ".venv")
            shutil.copytree(ROOT / "examples", Path(folder) / "examples")  # the tables they name, as shipped
            demo = os.environ.get("BLINK_TEST_DEMO_ROOT") or str(Path.home() / ".cache" / "blink")
            env = {**env, "BLINK_DEMO_DIR": demo, "HF_HUB_OFFLINE": "1"}
            argv = ["bash", "-c", code]
            proc = bounded(argv, env=env, cwd=folder)
        return checked(proc, code)
    elif runner == "node":  # in ci/js, whose node_modules hold the pinned JS clients (package.json)
        script = JS / f".example-{os.getpid()}.mjs"
        script.write_text(code + "\nprocess.exit(0);\n")  # @gradio/client's open stream would keep node running
        try:
            proc = bounded(["node", script.name], cwd=JS)
        finally:
            script.unlink()
        return checked(proc, code)
    else:
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:
            fh.write(code)
        argv = [str(PYTHONS[runner]), fh.name]
    return checked(bounded(argv, env=env, cwd=ROOT), code)


def bounded(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """`argv` run to its end in a process group of its own, its output captured; past EXAMPLE_TIMEOUT_S the whole
    group is stopped (what the example started goes with it: a run-batch and its Ray cluster outlived the bash that
    a plain timeout killed) and the error says so."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kwargs
    )
    try:
        out, err = proc.communicate(timeout=EXAMPLE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # something that left the group still holds the pipes
            out, err = "", ""
        raise RuntimeError(
            f"the example ran past its {EXAMPLE_TIMEOUT_S} s bound (EXAMPLE_TIMEOUT_S in ci/examples.py):\n{argv[-1]}\n"
            f"{out}\n{err[-4000:]}"
        ) from None
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def checked(proc: subprocess.CompletedProcess, code: str) -> str:
    if proc.returncode:
        raise RuntimeError(f"the example failed ({proc.returncode}):\n{code}\n{proc.stdout}\n{proc.stderr[-4000:]}")
    return proc.stdout


def masked(text: str) -> str:
    for pattern, mask in VOLATILE:
        text = pattern.sub(mask, text)
    return text


def same(shown: str, ran: str) -> bool:
    """Whether a page as shown and as run say the same: every number within TOLERANCE of its counterpart (absolute
    for numbers up to 1 in size, relative above), the text around the numbers character for character."""
    a, b = NUMBER.split(shown), NUMBER.split(ran)
    if len(a) != len(b) or a[0::2] != b[0::2]:
        return False
    return all(math.isclose(float(x), float(y), rel_tol=TOLERANCE, abs_tol=TOLERANCE) for x, y in zip(a[1::2], b[1::2]))


# --- how outputs are shown ---------------------------------------------------------------------------------
def wire_layout(text: str) -> list[str]:
    """A System One answer as the README shows it: the same bytes, a line break before each answer and before
    `usage`, and an answer broken before its `probabilities` when it runs past the width. Another answer (rerank,
    score, moderation): `list_layout`."""
    body = json.loads(text)
    compact = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    assert compact == text.strip(), "the answer is not compact JSON"
    if "answers" not in body:
        return list_layout(body, compact)
    head = compact[: compact.index('"answers":{') + len('"answers":{')]
    lines = [head]
    answers = list(body["answers"].items())
    for n, (name, answer) in enumerate(answers):
        item = f"  {json.dumps(name)}:{json.dumps(answer, separators=(',', ':'), ensure_ascii=False)}"
        item += "}," if n == len(answers) - 1 else ","
        cut = item.find(',"probabilities":')
        if len(item) > WIDTH and cut > 0:
            indent = " " * (item.index(":{") + 2)
            lines += [item[: cut + 1], indent + item[cut + 1 :]]
        else:
            lines.append(item)
    rest = {k: v for k, v in body.items() if k not in ("model", "answers")}
    tail = json.dumps(rest, separators=(",", ":"), ensure_ascii=False)[1:]
    lines.append(" " + tail)
    assert json.loads("".join(line.strip() for line in lines)) == body
    return lines


def list_layout(body: dict, compact: str) -> list[str]:
    """An answer whose first list (`results`, `data`) holds one entry per input: the same bytes, a line break
    before each entry and after the list, each piece wrapped between two keys to the width."""
    key = next(k for k, v in body.items() if isinstance(v, list))
    head = compact[: compact.index(f'"{key}":[') + len(key) + 4]
    entries = [json.dumps(entry, separators=(",", ":"), ensure_ascii=False) for entry in body[key]]
    rest = compact[len(head) + len(",".join(entries)) + 1 :]  # after the list's `]`: `,"usage":...}` or `}`
    entries = [entry + "," for entry in entries[:-1]] + [entries[-1] + "]" + (rest if rest == "}" else ",")]
    lines = [head]
    for entry in entries:
        lines += wrapped_json(entry, "  ")
    if rest != "}":
        lines += wrapped_json(rest[1:], " ")
    assert json.loads("".join(line.strip() for line in lines)) == body
    return lines


def wrapped_json(piece: str, indent: str) -> list[str]:
    """Compact JSON cut between two keys (`,"`) where it runs past the width; continuations indented once more."""
    out, current = [], indent
    for part in re.split(r'(?<=,)(?=")', piece):
        if len(current) + len(part) > WIDTH and current.strip():
            out.append(current)
            current = indent + " "
        current += part
    return [*out, current]


@dataclass(frozen=True)
class Syntax:
    """How a language comments and prints, for the outputs shown in its comments."""

    comment: str  # "#" or "//"
    prints: str  # a top-level printing line starts with this

    def wrapped(self, line: str) -> list[str]:
        """One printed line as a comment block, broken after `, ` to the width (continuations indented)."""
        out, current = [], f"{self.comment} "
        for piece in re.split(r'(?<=, )|(?<=,)(?=")', line):  # after `, `, or between compact JSON's keys
            if len(current) + len(piece) > WIDTH and current.strip(f"{self.comment} "):
                out.append(current.rstrip())
                current = f"{self.comment}  "
            current += piece
        out.append(current.rstrip())
        return out

    def code_lines(self, block: list[str]) -> list[str]:
        """The block without its closing comment block (the output of code that prints inside a function)."""
        end = len(block)
        while end and block[end - 1].startswith(self.comment):
            end -= 1
        return block[:end] if end < len(block) and self.prints_inside(block[:end]) else block

    def prints_inside(self, code: list[str]) -> bool:
        return not any(self.print_line(line) for line in code)

    def print_line(self, line: str) -> bool:
        return line.startswith(self.prints) and f"  {self.comment} " in line

    def shown(self, block: list[str], printed: list[str]) -> list[str]:
        code = self.code_lines(block)
        if len(code) < len(block) or (self.prints_inside(code) and printed):
            return code + [c for line in printed for c in self.wrapped(line)]
        out, outputs, mark = [], iter(printed), f"  {self.comment} "
        for line in code:
            if self.print_line(line):
                statement, comment = line.split(mark, 1)
                note = comment[comment.index(NOTE) :] if NOTE in comment else ""
                line = f"{statement}{mark}{next(outputs)}{note}"
            out.append(line)
        return out


PYTHON, NODE = Syntax("#", "print("), Syntax("//", "console.log(")


# --- the pages ---------------------------------------------------------------------------------------------
SEPARATOR = "=== example output starts here ==="


def refreshed(page: Path, url: str) -> str:
    lines = page.read_text().split("\n")
    previous: list[str] = []  # the code a `with-previous` example runs first
    for k in range(len(examples(lines, page))):
        ex = examples(lines, page)[k]  # found again: a block grows or shrinks with its outputs
        block = lines[ex.start : ex.end]
        if ex.runner == "shell":
            printed = run("\n".join(block), "shell", url)
            assert lines[ex.end + 1] == "" and lines[ex.end + 2] == "```text", f"{page.name}: no ```text after shell"
            close = next(j for j in range(ex.end + 3, len(lines)) if lines[j].startswith("```"))
            lines[ex.end + 3 : close] = printed.rstrip("\n").split("\n")
            continue
        if ex.runner == "curl":
            printed = run("\n".join(block), "curl", url)
            assert lines[ex.end + 1] == "" and lines[ex.end + 2] == "```json", f"{page.name}: no ```json after curl"
            close = next(j for j in range(ex.end + 3, len(lines)) if lines[j].startswith("```"))
            lines[ex.end + 3 : close] = wire_layout(printed)
            continue
        syntax = NODE if ex.runner == "node" else PYTHON
        code = syntax.code_lines(block)
        prefix = [*previous, f"print('\\n' + {SEPARATOR!r})"] if ex.previous else []
        printed = run("\n".join(prefix + code), ex.runner, url).split("\n")
        if ex.previous:
            printed = printed[printed.index(SEPARATOR) + 1 :]
        if printed and printed[-1] == "":
            printed.pop()
        lines[ex.start : ex.end] = syntax.shown(block, printed)
        previous = [*(previous if ex.previous else []), *code]
    return "\n".join(lines)


def space(demo_root: Path):
    port = free_port()
    env = server_env(demo_root, {"BLINK_MODEL": "demo", "GRADIO_SERVER_PORT": str(port)})
    log = ARTIFACTS / f"examples-space-{port}.log"
    proc = launch([str(PYTHONS["python"]), str(ROOT / "app.py")], port, env, log)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc, log)
    return proc, url


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the shown outputs from the run")
    parser.add_argument("--url", help="a running demo Space to use instead of starting one")
    a = parser.parse_args()
    for runner, script in VENV_SCRIPTS.items():
        if not (PYTHONS[runner].parent / ".." / ".ready").exists():
            subprocess.run(["bash", str(ROOT / script)], check=True)
    npm_installed()  # ci/js's node_modules, from its lock
    demo_root = Path(os.environ.get("BLINK_TEST_DEMO_ROOT") or Path.home() / ".cache" / "blink")
    proc, url = (None, a.url) if a.url else space(demo_root)
    stale = 0
    try:
        for page in PAGES:
            text = page.read_text()
            if not examples(text.split("\n"), page):
                continue
            new = refreshed(page, url)
            if same(masked(text), masked(new)):
                continue
            if a.write:
                page.write_text(new)
                print(f"{page.relative_to(ROOT)}: outputs rewritten")
            else:
                stale += 1
                shown, ran = masked(text).split("\n"), masked(new).split("\n")
                diff = difflib.unified_diff(shown, ran, str(page), "as run", lineterm="")
                print("\n".join(diff))
    finally:
        if proc is not None:
            stop_group(proc)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
