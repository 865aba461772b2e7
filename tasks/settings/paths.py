"""Paths as a user writes them in a settings file or a Prefect form: `~` is the home directory (a shell expands it
in a flag, but nothing did in a YAML, so `out: ~/runs` made a directory named `~` while pyarrow wrote under the home
directory), and an empty path is refused (it is the current directory: a run's files would land among the user's;
`.` says so on purpose)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator


def expand_home(value: Any) -> Any:
    """`value` with a leading `~` (or `~user`) expanded; an empty or blank one refused."""
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("an empty path: name one (`.` is the current directory)")
        if value.startswith("~"):
            return os.path.expanduser(value)
    return value


UserPath = Annotated[Path, BeforeValidator(expand_home)]  # a file or directory the user names
UserPathOrName = Annotated[str, BeforeValidator(expand_home)]  # a path, or a name such as a model's (`tiny`, a hub id)
