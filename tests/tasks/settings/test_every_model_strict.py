"""Every settings model refuses what `tasks.settings.strict.SETTINGS` says: a setting it does not have and a number
that is not finite, so a model added later cannot take `lr: .nan` or a misspelled key by forgetting it."""

import importlib
import inspect
from pathlib import Path

from pydantic import BaseModel

SETTINGS_DIR = Path(__file__).resolve().parents[3] / "tasks" / "settings"


def test_every_settings_model_forbids_unknown_settings_and_numbers_that_are_not_finite():
    models = []
    for path in sorted(SETTINGS_DIR.glob("*.py")):
        module = importlib.import_module(f"rlep.tasks.settings.{path.stem}")
        models += [
            cls
            for _, cls in inspect.getmembers(module, inspect.isclass)
            if issubclass(cls, BaseModel) and cls.__module__ == module.__name__
        ]
    assert len(models) >= 35  # the commands' settings and their sections
    lax = [
        m.__qualname__
        for m in models
        if (m.model_config.get("extra"), m.model_config.get("allow_inf_nan"))
        != (
            "forbid",
            False,
        )
    ]
    assert lax == []
