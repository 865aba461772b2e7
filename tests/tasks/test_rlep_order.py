"""RLEP's phase order is decided once (tasks.rlep_order, laid out by tasks.plan) and the pipeline and the study
follow it alike."""

from rlep.tasks import pipeline as pipeline_plan
from rlep.tasks.rlep_order import rlep_order
from rlep.tasks.settings.pipeline import PipelineConfig
from rlep.tasks.settings.train import TrainConfig
from rlep.tasks.study import StudyConfig, plan

RLEP = {"kind": "rlep"}


def _arms(**arms):
    return {name: TrainConfig.model_validate({"replay": replay, **extra}) for name, (replay, extra) in arms.items()}


def test_the_order_of_a_set_of_arms():
    arms = _arms(baseline=({"kind": "none"}, {}), rlep=(RLEP, {}), fifo=({"kind": "fifo", "batch_size": 256}, {}))
    order = rlep_order(arms, "baseline")
    assert order.pooled == ("rlep",) and order.explore_arm == "baseline" and order.explores
    assert rlep_order(arms, "baseline", explore_steps=5).explore_arm is None  # a shorter exploration is its own run
    assert rlep_order(arms, "baseline", explore_steps=5).explore_steps == 5
    assert not rlep_order(arms, "baseline", pool_from="collect-model").explores  # the pool comes from a named model
    given = _arms(baseline=({"kind": "none"}, {}), rlep=({"kind": "rlep", "pool": "p.parquet"}, {}))
    assert rlep_order(given, "baseline").pooled == () and not rlep_order(given, "baseline").explores
    not_plain = _arms(baseline=({"kind": "fifo", "batch_size": 256}, {}), rlep=(RLEP, {"steps": 7}))
    assert (rlep_order(not_plain, "baseline").explore_arm, rlep_order(not_plain, "baseline").explore_steps) == (
        None,
        40,
    )


def test_the_pipeline_and_a_one_seed_study_explore_the_same_way(tmp_path):
    for explore_steps, explorer in ((None, "baseline"), (5, "explore")):
        pipeline = PipelineConfig.model_validate(
            {"out": str(tmp_path / "p"), "train": {"replay": RLEP, "steps": 10}, "explore_steps": explore_steps}
        )
        runs = {r.key: r for r in pipeline_plan.plan(pipeline)}
        explore = runs[runs["collect/seed-0"].needs[0]].config
        name = runs["collect/seed-0"].needs[0].split("/")[0]
        study = plan(
            StudyConfig.model_validate(
                {
                    "out": str(tmp_path / "s"),
                    "seeds": [0],
                    "train": {"steps": 10},
                    "explore_steps": explore_steps,
                    "arms": {"rlep": {"replay": RLEP}, "baseline": {"replay": {"kind": "none"}}},
                }
            )
        )
        collect = next(r for r in study if r.kind == "collect")
        assert name == explorer and collect.needs == [f"{explorer}/seed-0"]
        assert (
            explore.steps == next(r for r in study if r.key == collect.needs[0]).config.steps == (explore_steps or 10)
        )
