"""Dependencies point one way: flows -> tasks -> data -> verifiers. Prefect lives in flows/ only.

The settings (`rlep.tasks.settings`, tasks/settings/) are a layer of their own that every other reads (data's
sources and the verifiers take settings models): they import no other part of tasks, nothing of flows and no
heavy library, only data's light modules (constants such as the default prompt, the tiny-math families);
tests/tasks/settings/test_import_light.py checks what importing them loads.

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
    "settings": {
        "tasks",
        "flows",
        "prefect",
        "prefect_ray",
        "ray",
        "torch",
        "vllm",
        "numpy",
        "pyarrow",
        "transformers",
    },
}
FOLDERS = {"settings": "tasks/settings"}


PROJECT = ("flows", "tasks", "verifiers", "data")


def imported_packages(path: Path, package: str | None = None) -> set[str]:
    """Top-level packages `path` imports; the project's own by their folder (`rlep.tasks.x` -> `tasks`; the
    settings package, `rlep.tasks.settings.x`, -> `settings`), and a bare project name (`tasks.x`, which would
    shadow or be shadowed by another distribution) as `bare:tasks`. A relative import is resolved against
    `package`, the module's own (by default its place in the checkout: tasks/training/x.py -> rlep.tasks.training)."""
    if package is None:
        package = ".".join(["rlep", *path.relative_to(REPO).parent.parts])
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.ImportFrom):  # `from . import x`, `from ..a import b`
            base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
            names = [f"{base}.{node.module}"] if node.module else [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[:3] == ["rlep", "tasks", "settings"]:
                found.add("settings")
            elif parts[0] == "rlep" and len(parts) > 1:
                found.add(parts[1])
            else:
                found.add(f"bare:{parts[0]}" if parts[0] in PROJECT else parts[0])
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_nothing_above_it(package):
    breaches = {
        str(path.relative_to(REPO)): sorted(imported_packages(path) & FORBIDDEN[package])
        for path in sorted((REPO / FOLDERS.get(package, package)).rglob("*.py"))
    }
    assert {k: v for k, v in breaches.items() if v} == {}


def test_the_check_sees_lazy_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    from rlep.flows.cli import main\n    import prefect.artifacts\n    import tasks.x\n"
    )
    assert imported_packages(module, package="rlep.data") == {"flows", "prefect", "bare:tasks"}


def test_the_check_resolves_relative_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from ...flows import cli\nfrom . import fs\nfrom ...tasks.settings import train\n")
    assert imported_packages(module, package="rlep.data.sub") == {"data", "flows", "settings"}


def test_every_module_imports_the_project_under_its_namespace():
    bare = {
        str(path.relative_to(REPO)): sorted(n for n in imported_packages(path) if n.startswith("bare:"))
        for folder in (*PROJECT, "tests")
        for path in sorted((REPO / folder).rglob("*.py"))
    }
    assert {k: v for k, v in bare.items() if v} == {}


def test_every_package_folder_is_installed():
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {
        "rlep." + ".".join(p.parent.relative_to(REPO).parts)
        for top in PROJECT
        for p in (REPO / top).rglob("__init__.py")
    }
    assert listed == folders
