"""What every command shares: the user-error type, settings from a file plus flags, the `--config` flag."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from rlep.flows.options import ConfigError, build_config, flag_overrides


class UserError(Exception):
    """An error caused by the user's input: printed as one line, exit code 2."""


def config_from_args(model: type, args: argparse.Namespace, base_file: Path | None = None, extra: dict | None = None):
    """The command's settings: `base_file` or --config, then flags, then `extra`, validated once. A file written
    for another command (demo.yaml given to `rlep train`) is named as such, not as a list of unknown settings."""
    overrides = {**flag_overrides(args), **(extra or {})}
    path = base_file or args.config
    try:
        return build_config(model, path, overrides)
    except ConfigError:
        other = _command_of(model, path) if path is not None else None
        if other is None:
            raise
        raise ConfigError(
            f"{path}: the settings of `rlep {other}`, not of this command: run `rlep {other} --config {path}`"
        ) from None


def _command_of(model: type, path: Path) -> str | None:
    """The one other command whose settings every top-level key of `path` is, when `model` lacks two or more."""
    from rlep.flows.options import read_yaml
    from rlep.tasks.settings.collect import CollectConfig
    from rlep.tasks.settings.evaluate import EvalConfig
    from rlep.tasks.settings.pipeline import PipelineConfig
    from rlep.tasks.settings.study import StudyConfig
    from rlep.tasks.settings.train import TrainConfig

    try:
        keys = set(read_yaml(path))
    except ConfigError:
        return None
    if len(keys - set(model.model_fields)) < 2:
        return None
    commands = {"train": TrainConfig, "collect": CollectConfig, "eval": EvalConfig, "pipeline": PipelineConfig}
    fits = [name for name, other in {**commands, "study": StudyConfig}.items() if keys <= set(other.model_fields)]
    return fits[0] if len(fits) == 1 else None


def add_command(sub, name: str, help_text: str, handler: Callable) -> argparse.ArgumentParser:
    """A command that reads its settings from `--config FILE.yaml` and flags; its help is its description too."""
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.set_defaults(handler=handler)
    # the file the settings come from, not a setting itself
    p.add_argument("--config", type=Path, default=None, help="YAML file of settings; flags override it.")
    return p


def check_pool(config) -> None:
    """The replay design's inputs (RLEP's pool) must exist: a missing one fails here, before any model is loaded."""
    from rlep.tasks.replay import check_inputs

    check_inputs(config.replay)


def check_inputs(model: str, **problem_sources) -> None:
    """What a user can get wrong, checked in seconds before Prefect starts and before a model is built or fetched:
    each problem source readable as configured (file, split, rows; its error named by its setting), then the model
    there (a directory holding an HF model; a hub name cached, or the hub reachable)."""
    from rlep.data.sources import check_source
    from rlep.tasks.models import check_model

    for setting, source in problem_sources.items():
        check_source(source, setting)
    check_model(model)
