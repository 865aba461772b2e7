"""The planner (tasks/plan.py): the pipeline is the one-seed preset of the study's planning, not a second planner."""

from conftest import tiny_study_settings

from rlep.tasks.pipeline import experiment as pipeline_experiment
from rlep.tasks.pipeline import plan as pipeline_plan
from rlep.tasks.plan import plan_experiment
from rlep.tasks.settings.pipeline import PipelineConfig
from rlep.tasks.study import StudyConfig
from rlep.tasks.study import plan as study_plan

ARMS = {"rlep": {"replay": {"kind": "rlep"}}, "baseline": {"replay": {"kind": "none"}}}


def _shape(runs) -> list[tuple]:
    return [(run.key, run.kind, run.arm, run.needs) for run in runs]


def test_the_pipeline_is_a_one_seed_study_with_the_start_evaluated_first(tmp_path):
    settings = tiny_study_settings("tiny", tmp_path / "study", ARMS, seeds=[3])
    study = study_plan(StudyConfig.model_validate(settings))
    pipeline = PipelineConfig.model_validate(
        {
            "out": str(tmp_path / "pipeline"),
            "collect": {**settings["collect"], "seed": 3},
            "train": {**settings["train"], "seed": 3, "replay": {"kind": "rlep"}},
        }
    )
    experiment = pipeline_experiment(pipeline)
    runs = plan_experiment(experiment)
    assert runs == pipeline_plan(pipeline)
    assert list(experiment.seeds) == [3] and experiment.always_collect and experiment.baseline == "baseline"
    # The same graph (RLEP's order: the baseline explores, the pool is collected from it, rlep trains on it),
    # with the start evaluated first.
    assert _shape(runs) == [("evaluate/base", "evaluate", None, []), *_shape(study)]
    assert (
        runs[0].config.model == pipeline.train.model and runs[0].config.out == tmp_path / "pipeline" / "eval" / "base"
    )
    # The same settings, only where each run writes differs.
    where = {"out": True, "replay": {"pool"}}
    for ours, theirs in zip(runs[1:], study):
        assert ours.config.model_dump(exclude=where) == theirs.config.model_dump(exclude=where)
    rlep = runs[-1].config.replay.pool, study[-1].config.replay.pool
    assert rlep == (
        tmp_path / "pipeline" / "collect" / "pool.parquet",
        tmp_path / "study" / "collect" / "seed-3" / "pool.parquet",
    )


def test_the_names_no_arm_may_take_are_the_keys_of_the_runs_the_plan_makes_besides_the_arms(tmp_path):
    from rlep.tasks.settings.study import RESERVED_ARMS

    settings = tiny_study_settings("tiny", tmp_path / "study", ARMS, seeds=[3], explore_steps=1)
    study = study_plan(StudyConfig.model_validate(settings))
    pipeline = PipelineConfig.model_validate(
        {"out": str(tmp_path / "pipeline"), "collect": settings["collect"], "train": settings["train"]}
    )
    keys = {run.key.split("/")[0] for run in [*study, *pipeline_plan(pipeline)] if run.arm is None}
    # explore/seed-3 and collect/seed-3 (the study's separate exploration), evaluate/base (the pipeline's start)
    assert keys == set(RESERVED_ARMS)
