"""Dependencies point one way: flows -> tasks -> data -> verifiers. Prefect lives in flows/ only.

Read statically from every module's imports (lazy ones inside functions included), so a layer breach is found
even on a code path no other test runs.
"""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "verifiers": {"data", "tasks", "flows", "prefect", "prefect_ray", "ray", "torch", "vllm"},
    "data": {"tasks", "flows", "prefect", "prefect_ray", "ray", "vllm"},
    "tasks": {"flows", "prefect", "prefect_ray"},
}


def imported_packages(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_nothing_above_it(package):
    breaches = {
        str(path.relative_to(REPO)): sorted(imported_packages(path) & FORBIDDEN[package])
        for path in sorted((REPO / package).rglob("*.py"))
    }
    assert {k: v for k, v in breaches.items() if v} == {}


def test_the_check_sees_lazy_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from flows.cli import main\n    import prefect.artifacts\n")
    assert imported_packages(module) == {"flows", "prefect"}
