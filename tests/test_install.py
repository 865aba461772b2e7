"""Pinned installs: `make setup` installs from constraints/cpu.txt, which pins every dependency, and the
environment the tests run in is that set (a release upstream cannot change a machine that worked)."""

import re
import sys
from importlib import metadata
from pathlib import Path

import pytest
import setuptools
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"{path.name}: {line!r} is not pinned with =="
            pins[canonicalize_name(name.split("[")[0])] = version.strip()
    return pins


def _declared(*extras: str) -> set[str]:
    requirements = PYPROJECT["dependencies"] + [r for e in extras for r in PYPROJECT["optional-dependencies"][e]]
    return {canonicalize_name(Requirement(r).name) for r in requirements}


@pytest.mark.parametrize(
    "lock, extras",
    [("cpu.txt", ("cpu", "dev", "real")), ("gpu.txt", ("gpu", "dev", "real"))],
)
def test_every_declared_dependency_is_pinned(lock, extras):
    pins = _pins(REPO / "constraints" / lock)
    assert sorted(_declared(*extras) - set(pins)) == []
    # and each pin satisfies the range pyproject.toml declares
    for text in PYPROJECT["dependencies"]:
        requirement = Requirement(text)
        assert requirement.specifier.contains(pins[canonicalize_name(requirement.name)], prereleases=True), text


def test_setup_installs_from_the_cpu_lock():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^LOCK\s+\?=\s+constraints/cpu\.txt$", makefile, re.M)
    setup = makefile.split("$(STAMP): pyproject.toml $(LOCK)")[1].split("\n\n")[0]
    installs = [line for line in setup.splitlines() if "pip install" in line and '"$(PIP)"' not in line]
    assert installs and all("-c $(LOCK)" in line for line in installs)
    # pip itself (which pip freeze leaves out of the lock) is pinned too, never upgraded to whatever is newest
    assert re.search(r"^PIP\s+\?=\s+pip==[0-9.]+$", makefile, re.M) and "--upgrade" not in setup


def test_the_tests_run_on_the_locked_versions(monkeypatch):
    # As after an earlier test imported setuptools: its vendored copies are on sys.path too, after the venv's own.
    vendored = Path(setuptools.__file__).parent / "_vendor"
    monkeypatch.setattr(sys, "path", [*sys.path, str(vendored)])
    pins = _pins(REPO / "constraints" / "cpu.txt")
    # The distribution each name imports as (the first on sys.path): iterating every distribution would also
    # count the copies setuptools vendors (packaging, platformdirs, ...) once it has put its _vendor on sys.path.
    installed = {}
    for name in pins:
        try:
            installed[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    drift = {name: (installed[name], pin) for name, pin in pins.items() if name in installed and installed[name] != pin}
    assert drift == {}, "installed != locked; run `make setup` (or `make lock` to move the lock)"
    assert sorted(_declared("cpu", "dev", "real") - set(installed)) == []
