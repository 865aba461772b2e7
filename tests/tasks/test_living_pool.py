"""A living-pool arm as parts of the plan (`tasks.plan`, `tasks.living_pool`): train to each refresh step,
re-collect from that checkpoint, train on; each part carried out by the executor's stages like any run, and a
killed study resumed without training or collecting anything twice. The stages here only record their calls
and write what the executor looks for (checkpoints, a collection's manifest and pool); the real loop runs in
tests/tasks/study/test_study.py."""

import json
from types import SimpleNamespace

from conftest import judged_row, write_rows

from rlep.data.pool import PoolStore
from rlep.data.problem import Problem
from rlep.data.run_layout import CollectRunLayout, TrainRunLayout
from rlep.tasks.carry import Stages
from rlep.tasks.execute import execute_run
from rlep.tasks.study import StudyConfig, plan

PROBLEMS = {"source": "tiny-math", "split": "train", "limit": 6}


def _living_study(out, steps=5):
    settings = {
        "out": str(out),
        "seeds": [1],
        "collect": {"model": "tiny", "problems": PROBLEMS, "engine": {"backend": "transformers"}},
        "train": {"model": "tiny", "problems": PROBLEMS, "steps": steps, "engine": {"backend": "transformers"}},
        "arms": {
            "baseline": {"replay": {"kind": "none"}},
            "living": {"replay": {"kind": "rlep", "follow": True, "refresh_every": 2}},
        },
    }
    return plan(StudyConfig.model_validate(settings))


def _pool_file(path, problem_id):
    problem = Problem(id=problem_id, problem=f"{problem_id}=?", answer="1", data_source="tiny-math/add")
    return write_rows(path, [judged_row(problem, "\\boxed{1}", prompt="Q", run_id=path.parent.name, model="m")])


class RecordingStages:
    """Stages that record each call and leave behind what a real one would: checkpoints, a collection."""

    def __init__(self):
        self.calls = []

    def stages(self):
        return Stages(collect=self.collect, train=self.train, evaluate=self.evaluate)

    def train(self, config, resume):
        self.calls.append(("train", config.steps, resume))
        checkpoint = TrainRunLayout(config.out).checkpoint(config.steps)
        checkpoint.mkdir(parents=True)
        (checkpoint / "trainer_state.pt").write_bytes(b"")
        return SimpleNamespace(final_checkpoint=checkpoint)

    def collect(self, config):
        self.calls.append(("collect", config.model, config.seed))
        out = CollectRunLayout(config.out)
        _pool_file(out.pool, f"p-{config.seed}")
        out.manifest.write_text(json.dumps({"parameters": config.model_dump(mode="json")}))

    def evaluate(self, config):
        self.calls.append(("evaluate", config.model))


def _execute(runs, stages):
    results = {"collect/seed-1": {"key": "collect/seed-1"}}  # the collected pool the arm starts from
    for run in runs:
        results[run.key] = execute_run(run, {key: results[key] for key in run.needs}, stages.stages())
    return results


def test_a_living_arm_is_planned_as_parts_each_resuming_the_one_before(tmp_path):
    runs = [run for run in _living_study(tmp_path) if run.arm == "living"]
    assert [(run.key, run.kind, run.span, run.needs) for run in runs] == [
        ("living/seed-1", "train", (0, 2), ["collect/seed-1"]),
        ("living/seed-1/collect-after-2", "recollect", (2, 2), ["living/seed-1"]),
        ("living/seed-1/steps-3-4", "train", (2, 4), ["living/seed-1", "living/seed-1/collect-after-2"]),
        ("living/seed-1/collect-after-4", "recollect", (4, 4), ["living/seed-1/steps-3-4"]),
        ("living/seed-1/steps-5-5", "train", (4, 5), ["living/seed-1/steps-3-4", "living/seed-1/collect-after-4"]),
    ]
    assert [run.continues for run in runs] == [False, True, True, True, True]
    # Every training part carries the whole run's settings (one record, one digest); the part trains to its end.
    assert {run.config.steps for run in runs if run.kind == "train"} == {5}
    recollect = runs[3].config
    assert recollect.model == str(tmp_path / "runs" / "living" / "seed-1" / "checkpoints" / "step-4")
    assert recollect.out == tmp_path / "pools" / "living" / "seed-1" / "runs" / "after-step-4"
    assert recollect.seed == 1 * 1_000_003 + 4 and recollect.run_id == "seed-1-after-step-4"


def test_each_part_goes_through_the_stages_and_a_killed_study_resumes_without_collecting_twice(tmp_path):
    runs = [run for run in _living_study(tmp_path) if run.arm == "living"]
    _pool_file(tmp_path / "collect" / "seed-1" / "pool.parquet", "first")
    recording = RecordingStages()
    _execute(runs[:2], recording)  # killed after the first re-collection was published
    checkpoint = tmp_path / "runs" / "living" / "seed-1" / "checkpoints"
    assert recording.calls == [("train", 2, False), ("collect", str(checkpoint / "step-2"), 1_000_003 + 2)]
    resumed = RecordingStages()
    results = _execute(runs, resumed)  # the whole arm again: what was done is not done twice
    assert resumed.calls == [
        ("train", 4, True),
        ("collect", str(checkpoint / "step-4"), 1_000_003 + 4),
        ("train", 5, True),
        ("evaluate", str(checkpoint / "step-5")),
    ]
    store = PoolStore(tmp_path / "pools" / "living" / "seed-1")
    assert store.versions() == [1, 2, 3]
    assert [c["after_step"] for c in store.lineage(3)["contributions"]] == [0, 2, 4]
    assert results["living/seed-1/steps-5-5"]["final_checkpoint"] == str(checkpoint / "step-5")
    again = RecordingStages()
    _execute(runs, again)  # finished: its record, written by the last part, says so
    assert again.calls == [] and store.versions() == [1, 2, 3]
