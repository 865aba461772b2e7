"""Settings layered by one rule: nested sections merge, a section switched to another variant starts again."""

from rlep.tasks.settings.layering import merge_settings
from rlep.tasks.settings.source import ProblemSourceConfig, default_task, problem_source
from rlep.tasks.settings.train import TrainConfig


def test_a_problem_source_switched_to_another_kind_keeps_only_what_every_kind_has():
    base = TrainConfig().model_dump(mode="json")
    merged = merge_settings(base, {"eval_problems": {"source": "data/x.parquet"}}, TrainConfig)
    # The evaluation's test split and 200 problems hold for a file too; tiny-math's own settings do not follow.
    assert merged["eval_problems"] == {"split": "test", "limit": 200, "source": "data/x.parquet"}
    assert TrainConfig.model_validate(merged).eval_problems == problem_source(
        kind="file", source="data/x.parquet", split="test", limit=200
    )
    # A partial section keeps the kind of the one it is merged onto, with that one's settings.
    file_base = TrainConfig.model_validate(merged).model_dump(mode="json")
    partial = merge_settings(file_base, {"eval_problems": {"limit": 5, "problem_column": "q"}}, TrainConfig)
    assert TrainConfig.model_validate(partial).eval_problems == problem_source(
        source="data/x.parquet", split="test", limit=5, problem_column="q"
    )
    # A tiny-math setting given over a file is not dropped: validation refuses it.
    wrong = merge_settings(file_base, {"eval_problems": {"families": ["add"]}}, TrainConfig)
    assert wrong["eval_problems"]["families"] == ["add"]
    # Back to tiny-math: the class's own defaults, the section's split and limit.
    back = merge_settings(file_base, {"eval_problems": {"source": "tiny-math"}}, TrainConfig)
    assert TrainConfig.model_validate(back).eval_problems == problem_source(split="test", limit=200)


def test_a_section_given_its_kind_switches_by_it():
    tiny = default_task("test", limit=5).model_dump()
    assert merge_settings(tiny, {"kind": "hf", "source": "hf:d"}, ProblemSourceConfig) == {
        "split": "test",
        "limit": 5,
        "kind": "hf",
        "source": "hf:d",
    }
    # Replay kinds share no setting: a switched section is the update alone, as before sources had kinds.
    rlep = {"replay": {"kind": "rlep", "replay_per_group": 2, "pool": None}}
    assert merge_settings(rlep, {"replay": {"kind": "fifo"}}, TrainConfig) == {"replay": {"kind": "fifo"}}
    assert merge_settings(rlep, {"replay": {"replay_per_group": 4}}, TrainConfig)["replay"]["kind"] == "rlep"
    # Without a model, a section whose `kind` changes is replaced whole.
    assert merge_settings(rlep, {"replay": {"kind": "fifo"}}) == {"replay": {"kind": "fifo"}}
