"""The package's import graph has no cycle (issue 22): every `import` and `from ... import` of a symmem module,
at module level, inside functions and under TYPE_CHECKING alike, read from the source with `ast`. Dynamic imports
(`importlib.import_module`, the family registry's discovery) are not edges: they name no module in the source."""

import ast
from pathlib import Path

import symmem

ROOT = Path(symmem.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for f in ROOT.rglob("*.py"):
        parts = f.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for a in node.names:  # `from pkg import mod` imports the module pkg.mod; `from mod import x`, mod
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
    return {m for m in found if m in modules and m != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert sum(len(e) for e in graph.values()) > 200  # the walk itself sees the package's imports
    assert _cycles(graph) == []


def test_the_walk_finds_a_cycle():
    # the detector on a graph with a known cycle (a -> b -> c -> a) and a tail (c -> d)
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}) == [["a", "b", "c"]]


# ------------------------------------------------------------------------------------- the CLI on top (issue 29)
def _cli_imports(name: str, path: Path) -> list[str]:
    """Every way module `name` (file `path`) names symmem.cli: `import symmem.cli...`, `from symmem.cli... import`,
    `from symmem import cli`, a relative import reaching it, `importlib.import_module("symmem.cli...")`; at any
    depth."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    hits = []
    for node in ast.walk(ast.parse(path.read_text())):
        named: list[str] = []
        if isinstance(node, ast.Import):
            named = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            named = [base] + [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and getattr(node.func, "attr", getattr(node.func, "id", "")) \
                in ("import_module", "__import__"):
            named = [node.args[0].value]
        hits += [f"{name}:{node.lineno} {n}" for n in named if n == "symmem.cli" or n.startswith("symmem.cli.")]
    return hits


def test_only_the_cli_imports_the_cli():
    # the library flows one way: the CLI imports it, never the reverse. `python -m symmem` (symmem/__main__.py) is
    # the CLI's own entry point, above it.
    above = {"symmem.__main__"}
    hits = [h for name, f in sorted(_modules().items())
            if name != "symmem.cli" and not name.startswith("symmem.cli.") and name not in above
            for h in _cli_imports(name, f)]
    assert hits == []


def test_the_cli_check_sees_every_form(tmp_path):
    src = ("import symmem.cli.main\nfrom symmem.cli.args import x\nfrom symmem import cli\n"
           "def f():\n    from ..cli import main\n    importlib.import_module('symmem.cli.main')\n"
           "from symmem import config\n")
    f = tmp_path / "probe.py"
    f.write_text(src)
    assert len({h.split()[0] for h in _cli_imports("symmem.validate.probe", f)}) == 5


def test_no_run_time_registration_circle():
    """A lower module must not be handed a function of a higher one at import time to call back (issue 29: the
    ModelConfig -> Family lookup that `symmem.family` installed in `symmem.model_config` with `set_family_lookup`).
    Such a setter hides an import cycle from the static walk above; so no module defines or calls a `set_*_lookup`,
    and symmem.model_config, which symmem.family imports, imports nothing above it."""
    modules = _modules()
    setters = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            fn = node.name if isinstance(node, ast.FunctionDef) else (
                getattr(node.func, "id", getattr(node.func, "attr", "")) if isinstance(node, ast.Call) else "")
            if fn.startswith("set_") and fn.endswith("_lookup"):
                setters.append(f"{name}:{node.lineno} {fn}")
    assert setters == []
    below = _imports("symmem.model_config", modules["symmem.model_config"], modules)
    assert "symmem.family" not in below and not any(m.startswith("symmem.families") for m in below)
    dynamic = [node.lineno for node in ast.walk(ast.parse(modules["symmem.model_config"].read_text()))
               if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", ""))
               in ("import_module", "__import__")]
    assert dynamic == []  # nor does it import one at run time
