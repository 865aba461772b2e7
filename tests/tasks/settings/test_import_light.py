"""The settings package imports without torch, numpy or pyarrow (nor vLLM, Prefect, Ray, transformers): the CLI's
flags, the Prefect forms and the executor's reuse check read settings without the machinery that runs them. Each
module is imported in a fresh interpreter, where nothing else has loaded them first."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SETTINGS = Path(__file__).resolve().parents[3] / "tasks" / "settings"
HEAVY = ("torch", "numpy", "pyarrow", "vllm", "prefect", "ray", "transformers")
MODULES = sorted(p.stem for p in SETTINGS.glob("*.py") if p.stem != "__init__")


def _loaded_after(code: str) -> list[str]:
    """The heavy packages in `sys.modules` of a fresh interpreter once it has run `code`."""
    probe = f"import json, sys\n{code}\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_every_settings_module_is_listed():
    assert {"collect", "train", "evaluate", "migrate", "layering"} <= set(MODULES)


@pytest.mark.parametrize("module", ["", *MODULES])
def test_a_settings_module_imports_nothing_heavy(module):
    name = "rlep.tasks.settings" + (f".{module}" if module else "")
    assert _loaded_after(f"import {name}") == []
