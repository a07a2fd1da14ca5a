"""docs/api-systemone.md's table of error types, generated from the code that raises them (`python build.py --docs`
rewrites it between its markers; a test fails when it drifts): every construction of a blink error in blink/ and
space/ with a literal `status` and `kind`, rendered by the two wires' own renderers (System One's `error_body`,
OpenAI's `render`), so the table says what a client reads, not what an error is called in the code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from blink import errors
from blink.api import systemone
from blink.api.openai import protocol

ROOT = Path(__file__).resolve().parents[1]
PAGE = "docs/api-systemone.md"
SOURCES = ("blink", "space")
ERRORS = {
    name: cls
    for name, cls in vars(errors).items()
    if isinstance(cls, type) and issubclass(cls, errors.BlinkError) and cls.__module__ == errors.__name__
}


def constructions() -> dict[tuple, set[str]]:
    """(class, status, kind) of each blink error built with literal arguments -> the modules that build it."""
    found: dict[tuple, set[str]] = {}
    for source in SOURCES:
        for path in sorted((ROOT / source).rglob("*.py")):
            if path.name == "errors.py" and path.parent.name == "blink":
                continue
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ERRORS):
                    continue
                kwargs = {k.arg: k.value.value for k in node.keywords if isinstance(k.value, ast.Constant)}
                cls = ERRORS[node.func.id]
                key = (cls, kwargs.get("status", cls.status), kwargs.get("kind", "value_error"))
                found.setdefault(key, set()).add(module)
    return found


def table() -> list[str]:
    """One row per answer a client can get: its status and type on each wire, and where it is raised."""
    rows: dict[tuple, set[str]] = {}
    for (cls, status, kind), modules in constructions().items():
        error = cls("m", status=status, kind=kind)
        one = systemone.error_body(error)
        o_status, o_body = protocol.render(error)
        if isinstance(error, errors.InvalidRequest):  # one row: the kind is the field's fault, in `detail[].type`
            key = (error.status, "`detail[].type`: the fault (`missing`, `invalid_value`, …)", o_status, "", "")
        else:
            key = (
                error.status,
                f"`{one['detail']['error_type']}`",
                o_status,
                o_body["error"]["type"],
                o_body["error"]["code"],
            )
        rows.setdefault(key, set()).update(modules)
    out = [
        "| status | System One: `detail.error_type` | OpenAI status | OpenAI `error.type` | OpenAI `error.code` |"
        " raised in |",
        "|---|---|---|---|---|---|",
    ]
    for (status, one, o_status, o_type, code), modules in sorted(rows.items(), key=lambda r: (r[0][0], r[0][4])):
        where = ", ".join(f"`{m}`" for m in sorted(modules)) if len(modules) <= 6 else f"{len(modules)} modules"
        o_type = f"`{o_type}`" if o_type else "`invalid_request_error`"
        code = f"`{code}`" if code else "the fault"
        out.append(f"| {status} | {one} | {o_status} | {o_type} | {code} | {where} |")
    return out


def with_error_table(text: str, page: str = PAGE) -> str:
    pattern = re.compile(r"(<!-- ERROR-TYPES:START[^>]*-->\n).*?(<!-- ERROR-TYPES:END -->)", re.S)
    if len(pattern.findall(text)) != 1:
        raise ValueError(f"{page}: expected one <!-- ERROR-TYPES:START --> ... <!-- ERROR-TYPES:END --> block")
    rows = "\n".join(table()) + "\n"
    return pattern.sub(lambda m: m.group(1) + rows + m.group(2), text)
