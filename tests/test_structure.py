"""The import structure of ``dmocker/``: no import circles, no private names across modules.

Every module under ``dmocker/`` is parsed (never imported) and every import is collected at any
depth: at module level, inside functions and classes, under ``if TYPE_CHECKING:``, and
``importlib.import_module("literal")``.  An import inside a function still makes the importer
depend on the imported module; it only delays the cycle to the first call.

Rules:

* **No circles.** The graph has an edge from a module to each project module it names:
  ``import dmocker.a.b`` and ``from dmocker.a import b`` (``b`` a submodule) name
  ``dmocker.a.b``; ``from dmocker.a import name`` (an attribute) names ``dmocker.a`` (its
  ``__init__``).  Parent packages a dotted import runs on the way are not edges: a package's
  ``__init__`` re-exporting its submodules is not a circle with them.  Each strongly connected
  component of more than one module is reported with one shortest circle and every edge inside
  it (file and line).
* **No private name across modules.** A name with a leading underscore (not a dunder) is the
  business of the module that defines it: neither ``from .x import _y`` nor ``module._y``
  through an imported module.
* **No private module from outside its package.** ``dmocker/handoff/_types.py`` belongs to
  ``dmocker.handoff``: only modules of that package import it; others import the package.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "dmocker"


@dataclass(frozen=True)
class Module:
    name: str  # dotted, ``dmocker.a.b`` (a package is named by its folder)
    path: Path
    is_package: bool  # an ``__init__.py``


@dataclass(frozen=True)
class Edge:
    """``importer`` imports ``target`` (both project modules) at ``line``."""

    importer: str
    target: str
    path: Path
    line: int
    where: str  # "module level", "in f()", "under TYPE_CHECKING", ...


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    message: str


def discover(root: Path, package: str = PROJECT) -> dict[str, Module]:
    """Every ``.py`` module under ``root/package``, by dotted name."""
    modules: dict[str, Module] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        modules[".".join(parts)] = Module(".".join(parts), path, is_package)
    return modules


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


class _ImportCollector(ast.NodeVisitor):
    """The imports of one module, each with the project module it names and where it sits."""

    def __init__(self, module: Module, modules: Mapping[str, Module]) -> None:
        self.module = module
        self.modules = modules
        self.edges: list[Edge] = []
        self.private_names: list[Violation] = []
        #: local names bound to a project module (``import dmocker.a as m``, ``from . import b``)
        self.module_names: dict[str, str] = {}
        self._scope: list[str] = []

    # -- where an import sits -------------------------------------------------------------
    def _where(self) -> str:
        return " / ".join(self._scope) if self._scope else "module level"

    def _nested(self, label: str, node: ast.AST) -> None:
        self._scope.append(label)
        self.generic_visit(node)
        self._scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._nested(f"in {node.name}()", node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._nested(f"in {node.name}()", node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._nested(f"in class {node.name}", node)

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        ):
            self.visit(test)
            self._scope.append("under TYPE_CHECKING")
            for child in node.body:
                self.visit(child)
            self._scope.pop()
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    # -- the imports ------------------------------------------------------------------------
    def _edge(self, target: str, node: ast.stmt | ast.expr) -> None:
        edge = Edge(self.module.name, target, self.module.path, node.lineno, self._where())
        if target in self.modules and target != self.module.name and edge not in self.edges:
            self.edges.append(edge)

    def _package(self) -> str:
        """The package relative imports start from."""
        name = self.module.name
        return name if self.module.is_package else name.rpartition(".")[0]

    def _resolve(self, node: ast.ImportFrom) -> str:
        if node.level == 0:
            return node.module or ""
        base = self._package().split(".")
        if node.level > 1:
            base = base[: len(base) - (node.level - 1)]
        return ".".join([*base, *([node.module] if node.module else [])])

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._edge(alias.name, node)
            if alias.name in self.modules:
                if alias.asname:
                    self.module_names[alias.asname] = alias.name
                else:  # ``import dmocker.a.b`` binds ``dmocker``; attribute chains resolve from it
                    top = alias.name.split(".")[0]
                    self.module_names[top] = top

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._resolve(node)
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            if submodule in self.modules:
                self._edge(submodule, node)
                self.module_names[alias.asname or alias.name] = submodule
                continue
            self._edge(base, node)
            if base in self.modules and _is_private(alias.name):
                self.private_names.append(
                    Violation(self.module.path, node.lineno, f"imports the private name {alias.name!r} from {base}")
                )

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if called == "import_module" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                self._edge(first.value, node)
        self.generic_visit(node)


def _dotted(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]`` (None for anything but names and attributes)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def _private_attributes(tree: ast.Module, collector: _ImportCollector) -> Iterator[Violation]:
    """``m._y`` where ``m`` names an imported project module and ``_y`` is not a submodule."""
    modules = collector.modules
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _is_private(node.attr):
            continue
        parts = _dotted(node.value)
        if parts is None or parts[0] not in collector.module_names:
            continue
        owner = collector.module_names[parts[0]]
        for part in parts[1:]:
            owner = f"{owner}.{part}"
        if owner in modules and f"{owner}.{node.attr}" not in modules and owner != collector.module.name:
            yield Violation(
                collector.module.path, node.lineno, f"uses the private name {node.attr!r} of {owner} ({ast.unparse(node)})"
            )


@dataclass
class Scan:
    modules: dict[str, Module]
    edges: list[Edge]
    private_names: list[Violation]
    root: Path

    def private_modules_from_outside(self) -> list[Violation]:
        found: list[Violation] = []
        for edge in self.edges:
            parts = edge.target.split(".")
            for i, part in enumerate(parts):
                if _is_private(part):
                    owner = ".".join(parts[:i])
                    if edge.importer != owner and not edge.importer.startswith(owner + "."):
                        found.append(Violation(
                            edge.path, edge.line,
                            f"imports {edge.target}, a private module of {owner}, from outside {owner} "
                            f"(import what it needs from {owner})",
                        ))
                    break
        return found


def scan(root: Path, package: str = PROJECT) -> Scan:
    modules = discover(root, package)
    edges: list[Edge] = []
    private: list[Violation] = []
    for module in modules.values():
        tree = ast.parse(module.path.read_text(encoding="utf-8"), str(module.path))
        collector = _ImportCollector(module, modules)
        collector.visit(tree)
        edges.extend(collector.edges)
        private.extend(collector.private_names)
        private.extend(_private_attributes(tree, collector))
    return Scan(modules, edges, sorted(private, key=lambda v: (str(v.path), v.line)), root)


def strongly_connected(nodes: Iterable[str], edges: Iterable[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    succ: dict[str, set[str]] = {n: set() for n in nodes}
    for e in edges:
        succ[e.importer].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(succ):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(succ[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(succ[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def shortest_circle(component: list[str], edges: list[Edge]) -> list[str]:
    """A shortest circle through the component's first module (BFS inside the component)."""
    inside = set(component)
    succ: dict[str, list[str]] = {n: [] for n in component}
    for e in edges:
        if e.importer in inside and e.target in inside:
            succ[e.importer].append(e.target)
    start = component[0]
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(set(succ[node])):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*path[::-1], start]
            if child not in came_from:
                came_from[child] = node
                queue.append(child)
    raise AssertionError(f"{component} is not a circle")


def describe_circles(result: Scan) -> list[str]:
    reports: list[str] = []
    for component in strongly_connected(result.modules, result.edges):
        inside = set(component)
        lines = [
            f"import circle among {len(component)} modules: " + " -> ".join(shortest_circle(component, result.edges))
        ]
        for e in sorted(result.edges, key=lambda e: (e.importer, e.line)):
            if e.importer in inside and e.target in inside:
                where = e.path.relative_to(result.root)
                lines.append(f"    {where}:{e.line}: {e.importer} -> {e.target} ({e.where})")
        reports.append("\n".join(lines))
    return reports


def _listing(violations: list[Violation], root: Path) -> str:
    return "\n".join(f"    {v.path.relative_to(root)}:{v.line}: {v.message}" for v in violations)


# -- the scanner itself, on small made-up packages --------------------------------------------


def _tree(tmp_path: Path, files: Mapping[str, str]) -> Scan:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return scan(tmp_path, "pkg")


def test_the_scanner_finds_circles_at_any_depth(tmp_path: Path) -> None:
    result = _tree(tmp_path, {
        "pkg/__init__.py": "from .a import A\n",
        "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\nA = 1\n",
        "pkg/b.py": "def f():\n    from pkg import a\n    return a\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "import importlib\nclass C:\n    def g(self):\n        importlib.import_module('pkg.sub.d')\n",
        "pkg/sub/d.py": "from .. import sub\nfrom ..sub import c\n",
        "pkg/e.py": "from . import a\n",  # a one-way import: no circle
    })
    assert strongly_connected(result.modules, result.edges) == [["pkg.a", "pkg.b"], ["pkg.sub.c", "pkg.sub.d"]]
    report = "\n".join(describe_circles(result))
    assert "pkg/a.py:3: pkg.a -> pkg.b (under TYPE_CHECKING)" in report
    assert "pkg/b.py:2: pkg.b -> pkg.a (in f())" in report
    assert "pkg/sub/c.py:4: pkg.sub.c -> pkg.sub.d (in class C / in g())" in report
    assert "pkg/sub/d.py:2: pkg.sub.d -> pkg.sub.c (module level)" in report
    assert "import circle among 2 modules: pkg.a -> pkg.b -> pkg.a" in report


def test_a_package_init_reexporting_its_submodules_is_no_circle(tmp_path: Path) -> None:
    result = _tree(tmp_path, {
        "pkg/__init__.py": "from .a import A\nfrom .b import B\n",
        "pkg/a.py": "A = 1\n",
        "pkg/b.py": "from pkg.a import A\nimport pkg.a\nB = A\n",
    })
    assert strongly_connected(result.modules, result.edges) == []
    # ...but importing a name from the package itself is an import of its __init__
    result = _tree(tmp_path, {"pkg/a.py": "from pkg import B\nA = 1\n"})
    assert strongly_connected(result.modules, result.edges) == [["pkg", "pkg.a", "pkg.b"]]


def test_the_scanner_finds_private_names_and_private_modules(tmp_path: Path) -> None:
    result = _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/_hidden.py": "_X = 1\nY = 2\n",
        "pkg/inner/__init__.py": "from . import _impl\nfrom ._impl import Z\n",
        "pkg/inner/_impl.py": "from .._hidden import Y\nZ = Y\n_Z = 3\n",
        "pkg/a.py": (
            "from ._hidden import _X, Y\n"
            "from pkg.inner._impl import Z\n"
            "import pkg.inner._impl as impl\n"
            "from pkg import inner\n"
            "def f():\n    return impl._Z + inner._impl.Z + pkg_dunder()\n"
            "def pkg_dunder():\n    return impl.__name__\n"
        ),
    })
    assert [(v.path.name, v.line, v.message) for v in result.private_names] == [
        ("a.py", 1, "imports the private name '_X' from pkg._hidden"),
        ("a.py", 6, "uses the private name '_Z' of pkg.inner._impl (impl._Z)"),
    ]
    assert [(v.path.name, v.line) for v in result.private_modules_from_outside()] == [("a.py", 2), ("a.py", 3)]
    assert "a private module of pkg.inner, from outside pkg.inner" in result.private_modules_from_outside()[0].message


# -- the project ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def project() -> Scan:
    result = scan(ROOT)
    assert len(result.modules) > 100 and len(result.edges) > 300  # the scan really covers dmocker/
    return result


def test_no_import_circles(project: Scan) -> None:
    circles = describe_circles(project)
    if circles:
        pytest.fail(
            f"{len(circles)} import circle(s) among dmocker's modules (an import inside a function or under "
            "TYPE_CHECKING counts); make the dependencies point one way, e.g. move what both sides need "
            "into a module of its own:\n" + "\n".join(circles),
            pytrace=False,
        )


def test_no_private_name_is_used_across_modules(project: Scan) -> None:
    if project.private_names:
        pytest.fail(
            "private names (leading underscore) used by another module; make them public or move the "
            "code that needs them:\n" + _listing(project.private_names, project.root),
            pytrace=False,
        )


def test_no_private_module_is_imported_from_outside_its_package(project: Scan) -> None:
    found = project.private_modules_from_outside()
    if found:
        pytest.fail("private modules imported from outside their package:\n" + _listing(found, project.root), pytrace=False)
