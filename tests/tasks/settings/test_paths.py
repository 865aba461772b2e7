"""Paths in settings as a user writes them in a YAML: `~` expanded, an empty path refused."""

import os
from pathlib import Path

import pytest

from rlep.flows.options import ConfigError, build_config
from rlep.tasks.settings.collect import CollectConfig
from rlep.tasks.settings.evaluate import EvalConfig
from rlep.tasks.settings.pipeline import PipelineConfig
from rlep.tasks.settings.study import StudyConfig
from rlep.tasks.settings.train import TrainConfig


def test_a_home_directory_path_in_a_settings_file_is_expanded(tmp_path):
    # `out: ~/runs` made a directory named `~` while pyarrow wrote under the home directory: a traceback after work.
    home = os.path.expanduser("~")
    path = tmp_path / "train.yaml"
    path.write_text(
        "out: ~/runs/t\nmodel: ~/models/m\nproblems: {source: ~/data/p.jsonl}\nreplay: {kind: rlep, pool: ~/pool}\n"
    )
    config = build_config(TrainConfig, path)
    assert config.out == Path(home, "runs/t") and config.model == f"{home}/models/m"
    assert config.problems.source == f"{home}/data/p.jsonl" and config.replay.pool == Path(home, "pool")
    for model in (CollectConfig, EvalConfig, PipelineConfig, StudyConfig):
        path.write_text("out: ~/runs/x\n")
        assert build_config(model, path).out == Path(home, "runs/x"), model.__name__
    # names stay names
    assert (
        build_config(TrainConfig, None, {"model": "Qwen/Qwen2.5-0.5B-Instruct"}).model == "Qwen/Qwen2.5-0.5B-Instruct"
    )


@pytest.mark.parametrize("model", [TrainConfig, CollectConfig, EvalConfig, PipelineConfig, StudyConfig])
def test_an_empty_out_is_refused_not_read_as_the_current_directory(tmp_path, model):
    # `out: ""` wrote a run's files into the current directory.
    path = tmp_path / "settings.yaml"
    path.write_text('out: ""\n')
    with pytest.raises(ConfigError) as refused:
        build_config(model, path)
    assert str(refused.value) == (
        f"{path}: invalid configuration: out: an empty path: name one (`.` is the current directory) (got '')"
    )
    path.write_text("out: .\n")  # on purpose: allowed
    assert build_config(model, path).out == Path(".")
