"""Layers import only downward: core -> sinks -> sources -> dashboard -> config -> run -> cli (and the package's
public API on top). Every import in every module is read from its source, those inside functions too."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tuitrain"

LAYERS = [  # lowest first; a module may import its own layer and those before it
    ("core", ("tuitrain.core",)),
    ("sinks", ("tuitrain.sinks",)),
    ("sources", ("tuitrain.sources",)),
    ("dashboard", ("tuitrain.dashboard",)),
    ("config", ("tuitrain.config",)),
    ("run", ("tuitrain.run",)),
    ("front", ("tuitrain.cli", "tuitrain.__main__", "tuitrain")),
    ("integrations", ("tuitrain.integrations",)),  # imported by users only, never by tuitrain
]


def layer_of(module: str) -> int:
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if prefix == "tuitrain":
                if module == "tuitrain":
                    return rank
            elif module == prefix or module.startswith(prefix + "."):
                return rank
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS in {__file__}")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, name: str | None = None) -> list[tuple[int, str]]:
    """(line, absolute module name) of every tuitrain import in the file (module `name`)."""
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from tuitrain.config import loading` may name a submodule: judged by its package alike
            found.append((node.lineno, target))
    return [(line, m) for line, m in found if m == "tuitrain" or m.startswith("tuitrain.")]


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_belongs_to_a_layer():
    names = [module_name(p) for p in modules()]
    assert len(names) > 40
    for name in names:
        layer_of(name)


def test_no_module_imports_a_layer_above_its_own():
    upward = []
    for path in modules():
        me = module_name(path)
        mine = layer_of(me)
        for line, target in imports_of(path):
            if layer_of(target) > mine:
                upward.append(
                    f"{path.relative_to(PACKAGE.parent)}:{line}: {me} ({LAYERS[mine][0]}) imports "
                    f"{target} ({LAYERS[layer_of(target)][0]})"
                )
    assert not upward, "imports that point up a layer:\n" + "\n".join(upward)


def test_the_walker_sees_relative_and_function_level_imports(tmp_path):
    """The check above can fail: a core module importing the run layer inside a function is caught."""
    fake = tmp_path / "probe.py"
    fake.write_text("def f():\n    from ..run import runner\n    import tuitrain.sinks.jsonl\n")
    found = imports_of(fake, "tuitrain.core.probe")
    assert [m for _, m in found] == ["tuitrain.run", "tuitrain.sinks.jsonl"]
    assert all(layer_of(m) > layer_of("tuitrain.core.probe") for _, m in found)


def import_graph() -> dict[str, set[str]]:
    """module -> the tuitrain modules it imports (at any level of the file); `from pkg import name`
    points at the module pkg.name when there is one, else at pkg."""
    names = {module_name(p): p for p in modules()}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):  # those under `if TYPE_CHECKING:` too: a circle for a reader all the same
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in names}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = ".".join(base[: len(base) - (node.level - 1)] + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    edges.add(sub if sub in names else base)
        graph[name] = {e for e in edges if e in names and e != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    """No two modules import each other, directly or round a loop (lazy imports inside functions, and
    imports for type checkers only, too)."""
    found = cycles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_circle_check_can_fail():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_run_failed_is_made_in_one_place():
    """Whatever fails (the user's code, a full disk, a stall, a crashed rank, the screen), its RunFailed
    comes from core/lifecycle.py's run_failed: one line, one traceback, one cause, said alike."""
    makers = []
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "RunFailed":
                makers.append(f"{module_name(path)}:{node.lineno}")
    assert [m.partition(":")[0] for m in makers] == ["tuitrain.core.lifecycle"], makers


def test_no_module_is_over_600_lines():
    long = {module_name(p): n for p in modules() if (n := len(p.read_text().splitlines())) > 600}
    assert not long, long


def test_the_core_s_tests_use_the_core_alone():
    """tests/core mirrors tuitrain/core: its tests import no layer above it (they would test two at once)."""
    above = [
        f"{p.name}:{line} {m}"
        for p in sorted((PACKAGE.parent / "tests" / "core").glob("*.py"))
        for line, m in imports_of(p, "tests.core." + p.stem)
        if not (m == "tuitrain.core" or m.startswith("tuitrain.core."))
    ]
    assert not above, above
