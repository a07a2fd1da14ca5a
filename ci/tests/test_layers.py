"""The package's layering, read from the source: no import cycles, nothing imports a layer above its own, and
`blink/` imports neither gradio nor spaces (it runs under plain uvicorn; the Space's glue lives in `space/`)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# lowest first: a module may import its own layer and the layers below it
LAYERS = [
    (
        "vocabulary",
        [
            "errors",
            "limits",
            "plan",
            "tokens",
            "memory",
            "knob_parsers",
            "moderation_policy",
            "backend",
            "settings",
            "settings_flags",
            "logs",
        ],
    ),
    ("web", ["web"]),
    ("images", ["images"]),
    ("executor", ["executor"]),
    ("model", ["model"]),
    ("generate", ["generate"]),
    ("vllm", ["vllm"]),
    ("decide", ["decide"]),
    # answers measured against labels (numbers alone today; fitting will read blink.decide's calibration)
    ("tasks", ["tasks"]),
    ("context", ["context"]),
    ("api", ["api"]),
    # bulk below the server: the Batch API the server mounts and the rows every bulk surface shares
    ("batch", ["batch"]),
    ("server", ["server"]),
    # run-batch assembles a server in its process (blink.server) and calls its routes
    ("run_batch", ["run_batch"]),
    ("entry", ["__main__"]),
]
RANK = {name: rank for rank, (_, names) in enumerate(LAYERS) for name in names}


def module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{alias.name}" for alias in node.names}
    return out


def modules() -> dict[str, set[str]]:
    found = {module_of(p): imports_of(p) for p in (ROOT / "blink").rglob("*.py")}
    return {
        m: {i for i in imports if i in found or i.split(".")[0] in ("gradio", "spaces")} for m, imports in found.items()
    }


def rank_of(module: str) -> int:
    return RANK[module.split(".")[1]] if module != "blink" else -1


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in modules() if m != "blink" and m.split(".")[1] not in RANK)
    assert not unplaced, f"modules with no layer in LAYERS: {unplaced}"


def test_nothing_imports_upward_and_blink_imports_no_space_library():
    upward = []
    for module, imports in modules().items():
        for imported in imports:
            if imported.split(".")[0] in ("gradio", "spaces"):
                upward.append(f"{module} imports {imported}")
            elif imported != "blink" and rank_of(imported) > rank_of(module):
                upward.append(
                    f"{module} ({LAYERS[rank_of(module)][0]}) imports {imported} ({LAYERS[rank_of(imported)][0]})"
                )
    assert not upward, "\n".join(sorted(upward))


def test_no_import_cycles():
    graph = modules()
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph or nxt in ("blink", node):  # a package's __init__ importing its own modules
                continue
            if state.get(nxt) == 1:
                return [*path, node, nxt]
            if nxt not in state and (cycle := visit(nxt, [*path, node])):
                return cycle
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [])):
            raise AssertionError("import cycle: " + " -> ".join(cycle[cycle.index(cycle[-1]) :]))
