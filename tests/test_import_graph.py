"""No import circles between the project's modules, save the known ones listed here (a list that only shrinks).

The graph is read statically: an edge for every import of a project module, at the top of a module, inside a
function (lazy) or under `if TYPE_CHECKING:` (a type named is a dependency too), so a circle that a lazy import
hides from the interpreter still shows. `from rlep.a import b` points at the module `rlep.a.b` where there is
one, else at the package `rlep.a`. A circle is a strongly connected component of two or more modules. The
implicit import of a module's parent package is left out: a package's `__init__` re-exporting its modules
(`rlep.tasks.replay`, `rlep.verifiers`, ...) is a facade, not a circle.
"""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROJECT = ("flows", "tasks", "data", "verifiers")

# Circles that exist today, each to be removed from this list when it is broken. None since issue 36 broke the last two,
# inside tasks/training/: the backends build from tasks/training/backends/policy.py below the seam that picks one, and
# `train` (trainer) launches ranks (launch) whose entry point runs the loop (loop) below it, the Ray launcher being
# handed that entry point rather than importing it.
KNOWN_CIRCLES: list[set[str]] = []


def project_modules(root: Path = REPO) -> dict[str, Path]:
    """Every module of the project by its import name (`tasks/settings/train.py` -> `rlep.tasks.settings.train`)."""
    found = {}
    for top in PROJECT:
        for path in sorted((root / top).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found["rlep." + ".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph(root: Path = REPO) -> dict[str, set[str]]:
    """module -> the project modules it imports anywhere in its text."""
    modules = project_modules(root)
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: `from . import x`, `from ..a import b`
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            else:
                continue
            for target in names:
                while target and target not in modules:  # `import rlep.a.b.attr` -> the module rlep.a.b
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of two or more modules (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(component)
    return found


def test_no_import_circles_but_the_known_ones():
    graph = import_graph()
    found = circles(graph)
    new = [{m: sorted(graph[m] & circle) for m in sorted(circle)} for circle in found if circle not in KNOWN_CIRCLES]
    assert new == [], "a new import circle (module -> the members it imports)"
    gone = [sorted(circle) for circle in KNOWN_CIRCLES if circle not in found]
    assert gone == [], "a known circle is broken or changed: update KNOWN_CIRCLES"


def test_the_graph_sees_lazy_relative_and_type_checking_imports(tmp_path):
    (tmp_path / "tasks" / "sub").mkdir(parents=True)
    for folder in PROJECT:
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "tasks" / "sub" / "__init__.py").write_text("from .b import f\n")
    (tmp_path / "tasks" / "a.py").write_text("def g():\n    from rlep.tasks.sub import b\n")
    (tmp_path / "tasks" / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import g\nimport rlep.data.c.X\n"
    )
    (tmp_path / "data" / "c.py").write_text("import os\n")
    graph = import_graph(tmp_path)
    assert graph["rlep.tasks.a"] == {"rlep.tasks.sub.b"}
    assert graph["rlep.tasks.sub.b"] == {"rlep.tasks.a", "rlep.data.c"}
    assert graph["rlep.tasks.sub"] == {"rlep.tasks.sub.b"}
    assert circles(graph) == [{"rlep.tasks.a", "rlep.tasks.sub.b"}]
