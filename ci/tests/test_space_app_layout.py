"""app.py read from its source (no model): it reads top to bottom, and the context it builds is complete when
built (nothing at module scope is changed afterwards)."""

from __future__ import annotations

import ast

import pytest

pytestmark = pytest.mark.space


def test_app_reads_top_to_bottom_and_builds_its_context_complete():
    """app.py: every module-level function uses only names bound above it (no forward reference: a GPU function
    reading a global defined later), and nothing bound at module scope is mutated after it is built
    (no `CTX.auth = ...`, no `CTX.live_health.append(...)`)."""
    import builtins

    from helpers import ROOT

    tree = ast.parse((ROOT / "app.py").read_text())
    bound: set[str] = set(dir(builtins))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            free = _names_read_not_bound(node)
            assert free <= bound | {node.name}, (node.name, sorted(free - bound))
        for target in _assigned_targets(node):
            assert not (
                isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id in bound
            ), f"line {target.lineno}: {ast.unparse(target)} mutates a global"
        assert not _calls_a_method_of_ctx(node), (
            f"line {node.lineno}: {ast.unparse(node)} changes the context after it is built"
        )
        bound |= _names_bound_by(node)


def _names_read_not_bound(func) -> set[str]:
    """The names a function reads that it does not bind itself (arguments, assignments, `except ... as`)."""
    local = {a.arg for a in ast.walk(func.args) if isinstance(a, ast.arg)}
    local |= {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    local |= {n.name for n in ast.walk(func) if isinstance(n, ast.ExceptHandler) and n.name}
    used = {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return used - local


def _assigned_targets(node) -> list:
    """Every target of an assignment (plain or augmented) anywhere in `node`."""
    return [
        t
        for n in ast.walk(node)
        if isinstance(n, (ast.Assign, ast.AugAssign))
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
    ]


def _calls_a_method_of_ctx(node) -> bool:
    """`node` is a statement calling a method of one of the context's attributes (`CTX.live_health.append(...)`)."""
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return False
    func = node.value.func
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Attribute)
        and isinstance(func.value.value, ast.Name)
        and func.value.value.id == "CTX"
    )


def _names_bound_by(node) -> set[str]:
    """The names a top-level statement binds: a function its own name only (what it binds inside is its own);
    any other statement every name stored, imported, or given to a function or class anywhere in it."""
    names = set()
    for n in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else [node]:
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
    return names
