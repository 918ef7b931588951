"""The package's shape stays as docs/design.md describes it: no module imports
another in a circle, no module reaches into another module's private
attributes (``obj._name`` where ``_name`` is not this module's own), and no
class is over ``MAX_CLASS_LINES`` lines (one doing two jobs is split: issue
30). Read from the source with ``ast``, so the check needs nothing imported."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "exporter"

#: Underscore names that are the public API of the standard library
#: (``os._exit``, a namedtuple's ``_replace``, ``ssl``'s unverified context
#: for the healthcheck's loopback self-signed certificate).
STDLIB = {"_exit", "_replace", "_create_unverified_context", "_asdict", "_fields", "_make"}
#: The most lines a class may take, its docstring and comments included.
MAX_CLASS_LINES = 300


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        out[".".join(["exporter", *parts])] = ast.parse(path.read_text(), str(path))
    return out


def _is_package(name: str) -> bool:
    return (PKG / Path(*name.split(".")[1:]) / "__init__.py").exists() if name != "exporter" else True


def _imports(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """Modules of the package that ``name`` imports when it is imported (its
    top-level statements, ``if TYPE_CHECKING:`` blocks and function bodies
    left out: they run later or never)."""
    pkg = name if _is_package(name) else name.rsplit(".", 1)[0]
    out: set[str] = set()

    def visit(stmts):
        for st in stmts:
            if isinstance(st, ast.If):
                test = ast.unparse(st.test)
                if "TYPE_CHECKING" not in test:
                    visit(st.body)
                visit(st.orelse)
            elif isinstance(st, ast.Try):
                visit(st.body)
                for h in st.handlers:
                    visit(h.body)
                visit(st.orelse)
                visit(st.finalbody)
            elif isinstance(st, ast.Import):
                out.update(a.name for a in st.names if a.name in known)
            elif isinstance(st, ast.ImportFrom):
                if st.level:
                    base = pkg.split(".")
                    base = base[: len(base) - (st.level - 1)]
                    mod = ".".join(base + ([st.module] if st.module else []))
                else:
                    mod = st.module or ""
                for a in st.names:
                    sub = f"{mod}.{a.name}"
                    if sub in known:
                        out.add(sub)
                    elif mod in known:
                        out.add(mod)

    visit(tree.body)
    out.discard(name)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import circles of ``graph`` (each once, as a path back to its start)."""
    found, state, stack = [], {}, []

    def dfs(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                found.append(stack[stack.index(m):] + [m])
            elif m not in state:
                dfs(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            dfs(n)
    return found


def _own_private(tree: ast.Module) -> set[str]:
    """Underscore names a module defines itself: its top-level names,
    names in its class bodies, and attributes it assigns on ``self``/``cls``."""
    own: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(n.name)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            own.add(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) \
                and isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"):
            own.add(n.attr)
    return {x for x in own if x.startswith("_")}


def _private_reaches(tree: ast.Module) -> list[str]:
    own = _own_private(tree)
    bad = []
    for n in ast.walk(tree):
        if not isinstance(n, ast.Attribute):
            continue
        a = n.attr
        if not a.startswith("_") or a.startswith("__") or a in STDLIB or a in own:
            continue
        if isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"):
            continue
        bad.append((n.lineno, f"line {n.lineno}: {ast.unparse(n)}"))
    return [text for _line, text in sorted(bad)]


def _big_classes(tree: ast.Module, limit: int = MAX_CLASS_LINES) -> list[str]:
    return [f"{n.name}: {n.end_lineno - n.lineno + 1} lines" for n in ast.walk(tree)
            if isinstance(n, ast.ClassDef) and n.end_lineno - n.lineno + 1 > limit]


def test_no_class_is_over_300_lines():
    """FileTable, Alerter and Registry were 399, 456 and 302 lines (issue 30); each was split where it
    did two jobs (Poller, RecordFolder; Alerter's Gate and Courier)."""
    big = {name: got for name, tree in _modules().items() if (got := _big_classes(tree))}
    assert big == {}


def test_no_import_cycles():
    mods = _modules()
    graph = {name: _imports(name, tree, set(mods)) for name, tree in mods.items()}
    assert graph["exporter.store"] and "exporter.ingest" in graph["exporter.store"]  # the walk sees imports
    assert _cycles(graph) == []


#: Modules that read a library's private state on purpose, and what keeps that safe.
LIBRARY_PRIVATE = {
    "exporter.exposition": "prometheus-client's metric children, read without collect() (issue 34); any other "
                           "shape falls back to collect(), and tests/test_exposition.py holds the bytes equal to "
                           "the library's own exposition",
}


def test_no_module_reaches_into_another_modules_private_attributes():
    bad = {name: got for name, tree in _modules().items() if name not in LIBRARY_PRIVATE
           and (got := _private_reaches(tree))}
    assert bad == {}
    assert all(_private_reaches(_modules()[name]) for name in LIBRARY_PRIVATE)  # not kept once it is gone


def test_the_checks_catch_what_they_are_for():
    """The checks fail on a circle, on a private reach and on a big class (so a pass means something)."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    tree = ast.parse("def f(store):\n    store._dirty.add(1)\n    return store._lock\n")
    assert _private_reaches(tree) == ["line 2: store._dirty", "line 3: store._lock"]
    tree = ast.parse("class A:\n    def __init__(self):\n        self._x = 1\n"
                     "    def same(self, other):\n        return other._x\n")
    assert _private_reaches(tree) == []  # a module's own attribute, on another instance of its class
    tree = ast.parse("class Big:\n" + "    x = 1\n" * MAX_CLASS_LINES + "\n\nclass Small:\n    y = 2\n")
    assert _big_classes(tree) == [f"Big: {MAX_CLASS_LINES + 1} lines"]
