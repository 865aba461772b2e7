"""YAML + flag configuration: one source of settings, one clear message per bad field."""

import argparse
from pathlib import Path
from typing import Literal

import pytest
import yaml
from pydantic import BaseModel, ConfigDict, Field

from rlep.flows.options import ConfigError, add_model_flags, build_config, dump_yaml, flag_overrides


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seed: int = Field(0, ge=0, description="inner seed")
    split: str = Field("train", description="split")
    backend: str = Field("auto", description="engine", json_schema_extra={"cli_flag": "engine"})


class Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seed: int = Field(1, ge=0, description="outer seed")
    temperature: float = Field(1.0, ge=0, le=10, description="temperature")
    greedy: bool = Field(False, description="greedy")
    stop: list[str] = Field(default_factory=list, description="stops")
    levels: list[Literal[1, 2, 3]] = Field(default_factory=lambda: [1, 2, 3], description="levels")
    inner: Inner = Field(default_factory=Inner)


def _parse(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    add_model_flags(parser, Outer)
    return parser.parse_args(argv)


def test_flags_are_leaf_names_unless_ambiguous():
    args = _parse(
        [
            "--temperature",
            "0.5",
            "--split",
            "test",
            "--engine",
            "vllm",
            "--seed",
            "3",
            "--inner-seed",
            "4",
            "--greedy",
            "--stop",
            "a",
            "b",
        ]
    )
    assert flag_overrides(args) == {
        "temperature": "0.5",
        "inner.split": "test",
        "inner.backend": "vllm",
        "seed": "3",
        "inner.seed": "4",
        "greedy": True,
        "stop": ["a", "b"],
    }
    config = build_config(Outer, None, flag_overrides(args))
    assert (config.temperature, config.inner.split, config.inner.backend, config.seed, config.inner.seed) == (
        0.5,
        "test",
        "vllm",
        3,
        4,
    )
    assert flag_overrides(_parse([])) == {}


class FileKind(BaseModel):
    model_config = ConfigDict(extra="forbid", title="file")
    source: str = Field("f.jsonl", description="file")
    answer_format: Literal["value", "boxed"] = Field("value", description="gold format")


class GeneratorKind(BaseModel):
    model_config = ConfigDict(extra="forbid", title="generator")
    source: Literal["gen"] = Field("gen", description="generator")
    seed: int = Field(0, description="generator seed")


class Checker(BaseModel):
    model_config = ConfigDict(extra="forbid")
    answer_format: Literal["any", "boxed"] = Field("any", description="answer format")


class Collect(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seed: int = Field(0, description="sampling seed")
    problems: FileKind | GeneratorKind = Field(default_factory=GeneratorKind)
    checker: Checker = Field(default_factory=Checker)


class Train(BaseModel):
    model_config = ConfigDict(extra="forbid")
    problems: FileKind | GeneratorKind = Field(default_factory=GeneratorKind)
    eval_problems: FileKind | GeneratorKind = Field(default_factory=GeneratorKind)


def _flags(model, argv):
    parser = argparse.ArgumentParser()
    add_model_flags(parser, model)
    return flag_overrides(parser.parse_args(argv))


def test_a_problem_source_keeps_its_flag_names_beside_a_section_sharing_one(capsys):
    # Issue 34: `rlep collect` named the source's answer_format `--problems-answer-format` (the verifier has an
    # answer_format too) where `rlep problems` and the README say `--answer-format`.
    assert _flags(Collect, ["--answer-format", "boxed", "--checker-answer-format", "boxed", "--source", "a"]) == {
        "problems.answer_format": "boxed",
        "checker.answer_format": "boxed",
        "problems.source": "a",
    }
    # A top-level setting keeps its name: `--seed` stays the sampling seed, the generator's is prefixed.
    assert _flags(Collect, ["--seed", "1", "--problems-seed", "2"]) == {"seed": "1", "problems.seed": "2"}
    # Two sources: each prefixed by its section, as before.
    assert _flags(Train, ["--problems-answer-format", "boxed", "--eval-problems-answer-format", "value"]) == {
        "problems.answer_format": "boxed",
        "eval_problems.answer_format": "value",
    }
    assert capsys.readouterr().err == ""
    # The old spelling still works, with a note; it is not in the help.
    assert _flags(Collect, ["--problems-answer-format", "boxed"]) == {"problems.answer_format": "boxed"}
    assert capsys.readouterr().err == (
        "note: --problems-answer-format is renamed --answer-format; the old spelling still works\n"
    )
    parser = argparse.ArgumentParser()
    add_model_flags(parser, Collect)
    assert "--problems-answer-format" not in parser.format_help()
    with pytest.raises(SystemExit):
        _flags(Collect, ["--problems-answer-format", "latex"])  # checked as the new flag is


def test_list_of_literal_ints_converts_and_checks_each_value(capsys):
    assert build_config(Outer, None, flag_overrides(_parse(["--levels", "1", "3"]))).levels == [1, 3]
    with pytest.raises(SystemExit):
        _parse(["--levels", "4"])
    assert "invalid choice: 4" in capsys.readouterr().err


def test_yaml_then_flags(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("temperature: 2.0\ninner:\n  split: test\n  seed: 9\n")
    config = build_config(Outer, path, {"inner.seed": "5"})
    assert (config.temperature, config.inner.split, config.inner.seed) == (2.0, "test", 5)


def test_dump_yaml_round_trips(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(dump_yaml(Outer(temperature=0.25)))
    assert build_config(Outer, path) == Outer(temperature=0.25)


@pytest.mark.parametrize(
    "text, overrides, message",
    [
        (
            "temperature: 20\n",
            {},
            r"c\.yaml: invalid configuration: temperature: Input should be less than or equal to 10 \(got 20\)",
        ),
        # a flag's value beside a file: named by the flag (the file is not to blame)
        ("", {"inner.seed": "-1"}, r"^invalid configuration: --inner-seed: Input should be greater than or equal to 0"),
        ("tempreature: 1\n", {}, r"tempreature: not a setting \(got 1\); did you mean temperature\?"),
        ("- 1\n- 2\n", {}, r"top level must be a mapping"),
        ("a: [1\n", {}, r"not valid YAML"),
    ],
)
def test_bad_settings_name_the_field(tmp_path, text, overrides, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        build_config(Outer, path, overrides)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        build_config(Outer, tmp_path / "nope.yaml")


class WithNestedDefault(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inner: Inner = Field(default_factory=lambda: Inner(split="test"))


def test_partial_nested_section_keeps_the_parent_default():
    assert build_config(WithNestedDefault, None, {"inner.seed": "2"}).inner == Inner(split="test", seed=2)


class Optional_(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dual_clip: float | None = Field(10.0, description="off with none")


def test_none_switches_an_optional_setting_off():
    parser = argparse.ArgumentParser()
    add_model_flags(parser, Optional_)
    assert build_config(Optional_, None, flag_overrides(parser.parse_args(["--dual-clip", "none"]))).dual_clip is None
    assert build_config(Optional_, None, flag_overrides(parser.parse_args(["--dual-clip", "3"]))).dual_clip == 3.0


def test_switching_a_variant_drops_the_default_variants_settings(tmp_path):
    from rlep.tasks.settings.pipeline import PipelineConfig

    fifo = {"train.replay.kind": "fifo", "train.replay.batch_size": "256"}  # a setting of the variant's own
    assert build_config(PipelineConfig, None, fifo).train.replay.kind == "fifo"
    path = tmp_path / "p.yaml"
    path.write_text("train:\n  replay: {kind: prioritized, max_age: 3}\n")
    replay = build_config(PipelineConfig, path).train.replay
    assert (replay.kind, replay.max_age) == ("prioritized", 3)
    # Same variant: a partial section still merges with the default one.
    replay = build_config(PipelineConfig, None, {"train.replay.replay_per_group": "4"}).train.replay
    default = PipelineConfig().train.replay
    assert (replay.kind, replay.replay_per_group) == ("rlep", 4) and default.replay_per_group != 4
    assert replay.model_dump(exclude={"replay_per_group"}) == default.model_dump(exclude={"replay_per_group"})


def test_tiny_math_settings_given_for_another_source_are_refused(tmp_path):
    from rlep.tasks.settings.collect import CollectConfig

    path = tmp_path / "collect.yaml"
    path.write_text("problems: {source: mine.jsonl, levels: [2]}\n")
    with pytest.raises(
        ConfigError,
        match=rf"^{path}: invalid configuration: problems.levels: not a setting of kind 'file' \(got \[2\]\); "
        r"the kinds that have it: tiny-math$",
    ):
        build_config(CollectConfig, path)
    with pytest.raises(
        ConfigError,
        match=r"problems.families: not a setting of kind 'hf'.*; problems.seed: not a setting of kind 'hf' \(got 1\)",
    ):
        build_config(CollectConfig, None, {"problems.source": "hf:d", "problems.families": ["add"], "problems.seed": 1})
    # The default section's tiny-math settings do not follow it to a file (it switches kind); tiny-math takes them.
    assert build_config(CollectConfig, None, {"problems.source": "mine.jsonl"}).problems.source == "mine.jsonl"
    assert build_config(CollectConfig, path, {"problems.source": "tiny-math"}).problems.levels == [2]
    # `--source` names the kind over a YAML section that gives one; the kind's own settings are still checked.
    path.write_text("problems: {kind: file, source: mine.jsonl, problem_column: q}\n")
    assert build_config(CollectConfig, path, {"problems.source": "hf:d"}).problems.kind == "hf"
    with pytest.raises(ConfigError, match=r"^invalid configuration: --families: not a setting of kind 'file' \(got"):
        build_config(CollectConfig, path, {"problems.families": ["add"]})


def test_a_split_flag_for_a_file_without_a_split_column_is_refused_even_at_its_default(tmp_path):
    # `--split train` equals the default split: it was taken for no choice of the user's and passed silently.
    import json

    from rlep.tasks.settings.collect import CollectConfig

    plain = tmp_path / "p.jsonl"
    plain.write_text(json.dumps({"problem": "1+1", "answer": "2"}) + "\n")
    refused = (
        rf"^invalid configuration: problems.split: {plain} has no split column \(split or extra_info.split\) to "
        r"choose rows by; a file without one is read whole \(drop the split, or name the column with split_column\)$"
    )
    for split in ("train", "test"):
        with pytest.raises(ConfigError, match=refused):
            build_config(CollectConfig, None, {"problems.source": str(plain), "problems.split": split})
    # In YAML the default stays no choice (a saved run's settings and `rlep show-config` output hold every field);
    # another split there is refused.
    path = tmp_path / "collect.yaml"
    path.write_text(f"problems: {{source: {plain}, split: train}}\n")
    assert build_config(CollectConfig, path).problems.split == "train"
    path.write_text(f"problems: {{source: {plain}, split: test}}\n")
    with pytest.raises(ConfigError, match="problems.split: .* has no split column"):
        build_config(CollectConfig, path)


def test_a_full_dump_of_the_settings_loads_back(tmp_path):
    # `rlep show-config` output and a run's saved train_config.json (`--resume`) hold every field, defaults
    # included; a source's dump holds only its own kind's settings, and one of another kind is refused.
    import json

    from rlep.tasks.settings.train import TrainConfig

    path = tmp_path / "train.json"
    dumped = json.loads(TrainConfig().model_dump_json())
    assert "problem_column" not in dumped["problems"] and dumped["problems"]["families"] == ["decimal"]
    assert dumped["problems"]["kind"] == "tiny-math"
    path.write_text(json.dumps(dumped))
    assert build_config(TrainConfig, path) == TrainConfig()
    dumped["problems"]["problem_column"] = "question"
    path.write_text(json.dumps(dumped))
    with pytest.raises(ConfigError, match="problems.problem_column: not a setting of kind 'tiny-math'"):
        build_config(TrainConfig, path)
    file_run = TrainConfig.model_validate({"problems": {"source": "mine.parquet", "problem_column": "q"}})
    path.write_text(file_run.model_dump_json())
    assert "families" not in json.loads(path.read_text())["problems"]
    assert build_config(TrainConfig, path) == file_run
    # A dump made before the sources became a union holds every setting of every kind: it loads.
    every = {
        "subset": None, "seed": 0, "tiny_math_size": 2000, "families": ["decimal"], "levels": [1], "layout": "auto",
        "problem_column": None, "answer_column": None, "answer_format": "value", "id_column": None,
        "data_source_column": None, "split_column": None, "invalid_rows": "error", "no_answer_values": ["proof"],
    }  # fmt: skip
    before = json.loads(file_run.model_dump_json())
    for section in ("problems", "eval_problems"):
        before[section] = every | {k: v for k, v in before[section].items() if k != "kind"}
    path.write_text(json.dumps(before))
    assert build_config(TrainConfig, path) == file_run


def test_a_setting_the_pipeline_sets_per_run_given_in_its_file_is_said_to_be_unused(tmp_path, capsys):
    from rlep.tasks.settings.pipeline import PipelineConfig

    path = tmp_path / "p.yaml"
    path.write_text("out: runs/p\ntrain: {out: runs/mine, steps: 1}\ncollect: {out: runs/p/collect}\n")
    config = build_config(PipelineConfig, path)
    assert config.collect.out == Path("runs/p/collect") and config.train.steps == 1
    said = capsys.readouterr().err.splitlines()
    assert said == [f"warning: {path}: train.out 'runs/mine' is not used: the command sets it for each run"]
    # the collection's own directory is said once the run goes elsewhere (--out)
    build_config(PipelineConfig, path, {"out": "runs/q"})
    assert f"warning: {path}: collect.out 'runs/p/collect' is not used" in capsys.readouterr().err
    # a dump of the settings (every field, at its default or at what the pipeline set) passes unsaid: show-config's
    # with out changed, and a run's as it was saved
    path.write_text(yaml.safe_dump(PipelineConfig().model_dump(mode="json") | {"out": "runs/next"}))
    assert build_config(PipelineConfig, path).collect.out == Path("runs/next/collect")
    path.write_text(yaml.safe_dump(PipelineConfig(out=Path("runs/earlier")).model_dump(mode="json")))
    assert build_config(PipelineConfig, path).collect.out == Path("runs/earlier/collect")
    assert capsys.readouterr().err == ""


def test_a_setting_the_study_sets_per_run_given_in_its_file_is_said_to_be_unused(tmp_path, capsys):
    # Each seed's pool is collected from its exploration's checkpoint, and every run gets its seed and directory from
    # the study: a model, seed or directory of the file's own there is said to be unused, once each.
    from rlep.tasks.settings.study import StudyConfig

    path = tmp_path / "s.yaml"
    path.write_text("collect: {model: smollm2, seed: 3}\ntrain: {out: runs/mine, steps: 2}\n")
    config = build_config(StudyConfig, path)
    assert config.collect.model == "smollm2" and config.train.steps == 2
    assert capsys.readouterr().err.splitlines() == [
        f"warning: {path}: {setting} is not used: the command sets it for each run"
        for setting in ("collect.model 'smollm2'", "collect.seed 3", "train.out 'runs/mine'")
    ]
    # The collection's model follows the training model, the one its exploration starts from: the shipped
    # real-model studies name the same model in both, and pass unsaid; so do show-config's dump and a study's own.
    path.write_text("collect: {model: smollm2}\ntrain: {model: smollm2}\n")
    assert build_config(StudyConfig, path).collect.model == "smollm2"
    path.write_text("train: {model: tiny-worked}\n")
    assert build_config(StudyConfig, path).collect.model == "tiny-worked"
    path.write_text(yaml.safe_dump(StudyConfig().model_dump(mode="json") | {"out": "runs/next"}))
    build_config(StudyConfig, path)
    path.write_text(yaml.safe_dump(StudyConfig(train={"model": "smollm2"}).model_dump(mode="json")))
    assert build_config(StudyConfig, path).collect.model == "smollm2"
    assert capsys.readouterr().err == ""


def test_settings_saved_before_sources_had_a_kind_load_as_the_same_settings(tmp_path):
    # A run's train_config.json as this release wrote it up to issue 36 (the sources without `kind`, read from
    # `source`): `--resume` (build_config) and a study's check of finished runs (model_validate_json) read it
    # as the settings it was written from, now with their kinds.
    import json

    from rlep.tasks.settings.digest import resolved
    from rlep.tasks.settings.train import TrainConfig

    saved = json.loads(TrainConfig().model_dump_json())
    saved["problems"] = json.loads(
        '{"source": "data/math.parquet", "split": "train", "limit": null, "layout": "auto", "problem_column": null, '
        '"answer_column": null, "answer_format": "boxed", "id_column": null, "data_source_column": null, '
        '"split_column": null, "invalid_rows": "error", "no_answer_values": ["proof", "notfound"]}'
    )
    saved["eval_problems"] = json.loads(
        '{"source": "hf:openai/gsm8k", "split": "test", "limit": 200, "layout": "auto", "problem_column": null, '
        '"answer_column": null, "answer_format": "gsm8k", "id_column": null, "data_source_column": null, '
        '"split_column": null, "invalid_rows": "error", "no_answer_values": ["proof", "notfound"], "subset": "main"}'
    )
    (tmp_path / "train_config.json").write_text(json.dumps(saved, indent=2))
    written_from = TrainConfig(
        problems={"kind": "file", "source": "data/math.parquet", "answer_format": "boxed"},
        eval_problems={"kind": "hf", "source": "hf:openai/gsm8k", "subset": "main", "split": "test", "limit": 200,
                       "answer_format": "gsm8k"},
    )  # fmt: skip
    assert resolved(TrainConfig, (tmp_path / "train_config.json").read_text()) == written_from  # the reuse check's
    assert build_config(TrainConfig, tmp_path / "train_config.json") == written_from
    assert (written_from.problems.kind, written_from.eval_problems.kind) == ("file", "hf")
    upgraded = json.loads(written_from.model_dump_json())
    assert {**upgraded["problems"], "kind": None} == {**saved["problems"], "kind": None}  # the kind added, alone
    # And what is written now reads back the same.
    assert TrainConfig.model_validate_json(written_from.model_dump_json()) == written_from


def test_a_mapping_of_names_given_replaces_the_defaults_one_whole(tmp_path):
    # A study that lists its arms runs those arms: its `arms` merged key by key into the default
    # {baseline, rlep} ran an rlep arm (exploration and collection included) nobody asked for.
    from rlep.tasks.settings.study import StudyConfig

    path = tmp_path / "study.yaml"
    path.write_text("arms: {baseline: {replay: {kind: none}}, reuse: {replay: {kind: reuse}}}\ntrain: {steps: 3}\n")
    config = build_config(StudyConfig, path)
    assert list(config.arms) == ["baseline", "reuse"]
    assert config.train.steps == 3 and config.train.prompts_per_step == StudyConfig().train.prompts_per_step
    assert list(build_config(StudyConfig).arms) == ["baseline", "rlep"]  # not given: the default arms


def test_a_flag_the_designs_share_says_what_it_means_and_defaults_to_in_each():
    from rlep.tasks.settings.train import TrainConfig

    parser = argparse.ArgumentParser()
    add_model_flags(parser, TrainConfig)
    helps = {a.option_strings[0]: " ".join(a.help.split()) for a in parser._actions if a.option_strings}
    # FIFO's replayed share of the batch and ExGRPO's rho share a flag, not a meaning or a default.
    ratio = helps["--replay-ratio"]
    assert ratio.startswith("fifo: 1 - fresh / batch") and "[default: 0.25] | exgrpo: rho:" in ratio
    assert ratio.endswith("[default: 0.5]")
    assert "prioritized: tau_max: rollouts older than this many steps are evicted. [default: 4]" in helps["--max-age"]
    assert (
        "prioritized: N: most rollouts kept; after age eviction, the lowest priority leaves first."
        in helps["--buffer-size"]
    )
    # One meaning and one default in every design that has it: said once, with the designs it applies to.
    rescore = "Re-check replayed answers with the current verifier (paper: yes). [only for: rlep] [default: True]"
    assert helps["--rescore"] == rescore
    assert helps["--replay"] == "Replay strategy. [default: 'none']"  # the union's tag, not a setting of each design


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        (
            "problems: mine.jsonl\n",
            "problems: a section of settings, not one value (got 'mine.jsonl'): write it as a "
            "mapping, e.g. `problems: {source: mine.jsonl}`",
        ),
        (
            "replay: rlep\n",
            "replay: a section of settings, not one value (got 'rlep'): write it as a mapping, e.g. "
            "`replay: {kind: rlep}`",
        ),
        (
            "optimizer: 3\n",
            "optimizer: a section of settings, not one value (got 3): write it as a mapping of its "
            "settings, e.g. `optimizer: {lr: ...}`",
        ),
        (
            "replay: [rlep]\n",
            "replay: a section of settings, not one value (got ['rlep']): write it as a mapping, e.g. "
            "`replay: {kind: ...}`",
        ),
        ("lr: 0.1\n", "lr: not a setting (got 0.1); did you mean optimizer.lr?"),  # a section's setting, one level up
        ("sampling: {top_pp: 0.9}\n", "sampling.top_pp: not a setting (got 0.9); did you mean top_p?"),
        (
            "replay: {kind: rlep, replay_per_grop: 2}\n",
            "replay.replay_per_grop: not a setting of kind 'rlep' (got 2); did you mean replay_per_group?",
        ),
        ("zzzz: 1\n", "zzzz: not a setting (got 1)"),  # nothing alike: no hint
        (
            "optimizer:\n  # lr: 0.1\n",
            "optimizer: an empty section (are all its lines commented out?): remove it, or write `{}`",
        ),
    ],
    ids=[
        "a-source",
        "a-kind",
        "a-section",
        "a-list",
        "misplaced",
        "misspelled",
        "misspelled-of-a-kind",
        "unknown",
        "empty",
    ],
)
def test_one_value_where_a_section_goes_shows_the_section_as_a_mapping(tmp_path, yaml_text, message):
    # pydantic's words were "Input should be a valid dictionary or object to extract fields from" and "Extra inputs
    # are not permitted"; a misspelled or misplaced setting is named with the ones spelled alike.
    from rlep.tasks.settings.train import TrainConfig

    (tmp_path / "train.yaml").write_text(yaml_text)
    with pytest.raises(ConfigError) as refused:
        build_config(TrainConfig, tmp_path / "train.yaml")
    assert str(refused.value) == f"{tmp_path / 'train.yaml'}: invalid configuration: {message}"


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("steps: 5\nsteps: 6\n", "not valid YAML at line 2, column 1: 'steps' is given twice (lines 1 and 2)"),
        (
            "optimizer: {lr: 0.001}\noptimizer: {warmup_steps: 3}\n",  # the first section was dropped, silently
            "not valid YAML at line 2, column 1: 'optimizer' is given twice (lines 1 and 2)",
        ),
        ("optimizer:\n  lr: 1\n  lr: 2\n", "not valid YAML at line 3, column 3: 'lr' is given twice (lines 2 and 3)"),
        ("steps: [1\n", "not valid YAML at line 2, column 1: expected ',' or ']', but got '<stream end>'"),
        ("steps:\t3\n", "not valid YAML at line 1, column 7: found character '\\t' that cannot start any token"),
    ],
    ids=["a-setting-twice", "a-section-twice", "a-nested-setting-twice", "unclosed", "a-tab"],
)
def test_a_settings_file_yaml_would_misread_is_one_line_naming_its_line(tmp_path, yaml_text, message):
    # PyYAML kept the last of two equal keys without a word, and its errors spanned lines naming "<unicode string>".
    from rlep.tasks.settings.train import TrainConfig

    (tmp_path / "train.yaml").write_text(yaml_text)
    with pytest.raises(ConfigError) as refused:
        build_config(TrainConfig, tmp_path / "train.yaml")
    assert str(refused.value).startswith(f"{tmp_path / 'train.yaml'}: {message}")
    assert "\n" not in str(refused.value)


def test_only_true_and_false_are_booleans_in_a_settings_file(tmp_path, capsys):
    # YAML 1.1 read `chat_template: on` (a documented value) as True, which the setting then refused.
    from rlep.tasks.settings.train import TrainConfig

    (tmp_path / "train.yaml").write_text("chat_template: on\n")
    assert build_config(TrainConfig, tmp_path / "train.yaml").chat_template == "on"
    (tmp_path / "train.yaml").write_text("chat_template: off\n")
    assert build_config(TrainConfig, tmp_path / "train.yaml").chat_template == "off"
    for written, value in (("off", False), ("no", False), ("false", False), ("yes", True), ("on", True)):
        (tmp_path / "train.yaml").write_text(f"loss: {{scale_advantages_by_std: {written}}}\n")  # a boolean setting
        assert build_config(TrainConfig, tmp_path / "train.yaml").loss.scale_advantages_by_std is value, written
    (tmp_path / "train.yaml").write_text("# every line commented out\n")
    assert build_config(TrainConfig, tmp_path / "train.yaml") == TrainConfig()
    assert "holds no settings" in capsys.readouterr().err


def test_true_or_false_where_a_number_goes_is_named_not_read_as_1_or_0(tmp_path):
    # pydantic's lax mode read `steps: true` as one step and `seeds: [0, true]` as seeds 0 and 1.
    from rlep.tasks.settings.study import StudyConfig
    from rlep.tasks.settings.train import TrainConfig

    path = tmp_path / "train.yaml"
    path.write_text("steps: true\noptimizer: {lr: 1.0e-4, warmup_steps: false}\nsampling: {temperature: true}\n")
    with pytest.raises(ConfigError) as refused:
        build_config(TrainConfig, path)
    assert str(refused.value) == (
        f"{path}: invalid configuration: steps: a number, not true; optimizer.warmup_steps: a number, not false; "
        "sampling.temperature: a number, not true"
    )
    with pytest.raises(ConfigError, match=r"^invalid configuration: seeds\[1\]: a number, not true$"):
        build_config(StudyConfig, None, {"seeds": [0, True]})
    # a setting that takes a boolean or a word keeps its boolean; a number stays a number
    path.write_text("steps: 3\nengine: {sleep_during_update: true}\nloss: {scale_advantages_by_std: false}\n")
    config = build_config(TrainConfig, path)
    assert (config.steps, config.engine.sleep_during_update, config.loss.scale_advantages_by_std) == (3, True, False)


def test_a_bad_flag_beside_a_settings_file_is_named_by_the_flag_not_blamed_on_the_file(tmp_path):
    # `rlep train --config tr.yaml --lr -1` said "tr.yaml: invalid configuration: optimizer.lr: ...": tr.yaml has no lr.
    from rlep.tasks.settings.train import TrainConfig

    path = tmp_path / "tr.yaml"
    path.write_text("steps: 2\n")
    with pytest.raises(ConfigError) as refused:
        build_config(TrainConfig, path, {"optimizer.lr": "-1"})
    assert str(refused.value) == "invalid configuration: --lr: Input should be greater than 0 (got '-1')"
    path.write_text("steps: -2\n")  # the file's own mistake beside it: the file is named, each setting as given
    with pytest.raises(ConfigError) as refused:
        build_config(TrainConfig, path, {"optimizer.lr": "-1"})
    assert str(refused.value) == (
        f"{path}: invalid configuration: --lr: Input should be greater than 0 (got '-1'); steps: Input should be "
        "greater than or equal to 1 (got -2)"
    )


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_number_that_is_not_finite_is_named_as_such(value):
    # NaN was refused by a bound, in the bound's words: `--lr nan` "should be less than or equal to 1".
    from rlep.tasks.settings.train import TrainConfig

    with pytest.raises(ConfigError, match=r"^invalid configuration: optimizer\.lr: Input should be a finite number"):
        build_config(TrainConfig, None, {"optimizer.lr": value})


class _Window(BaseModel):
    model_config = ConfigDict(extra="forbid")
    size: int = 1


class _Sliding(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["sliding"] = "sliding"
    window: _Window = Field(default_factory=_Window)


class _Fixed(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["fixed"] = "fixed"
    every: int = 1


class _Schedule(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schedule: _Sliding | _Fixed = Field(default_factory=_Sliding, discriminator="kind")


def test_a_setting_deeper_than_a_kinds_own_is_not_blamed_on_the_kind(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("schedule: {kind: sliding, window: {sise: 2}}\n")
    with pytest.raises(ConfigError, match=r"schedule\.window\.sise: not a setting \(got 2\); did you mean size\?$"):
        build_config(_Schedule, path)
    path.write_text("schedule: {kind: fixed, window: {size: 2}}\n")  # the kind's own: it is the kind that lacks it
    with pytest.raises(ConfigError, match=r"schedule\.window: not a setting of kind 'fixed'; the kinds that have it"):
        build_config(_Schedule, path)
