"""The executor decides, the caller does: a run's actions one at a time (`decide`), each carried out by whoever
drives it, and a plan's runs each after the runs it needs, one after another or each in a thread of its own."""

import threading
import time
from types import SimpleNamespace

from rlep.data.run_layout import TrainRunLayout
from rlep.tasks.carry import Outcome
from rlep.tasks.execute import decide, execute_plan
from rlep.tasks.plan import Run
from rlep.tasks.study import StudyConfig, plan

PROBLEMS = {"source": "tiny-math", "split": "train", "limit": 6}


def _baseline_run(out) -> Run:
    settings = {
        "out": str(out),
        "seeds": [0],
        "collect": {"model": "tiny", "problems": PROBLEMS, "engine": {"backend": "transformers"}},
        "train": {"model": "tiny", "problems": PROBLEMS, "steps": 2, "engine": {"backend": "transformers"}},
        "arms": {"baseline": {"replay": {"kind": "none"}}},
    }
    (run,) = plan(StudyConfig.model_validate(settings))
    return run


def test_a_training_run_is_decided_as_train_then_evaluate_and_recorded_with_the_trainers_process(tmp_path):
    run = _baseline_run(tmp_path)
    actions = decide(run, {})
    train = next(actions)
    assert (train.kind, train.key, train.resume, train.config) == ("train", "baseline/seed-0", False, run.config)
    final = TrainRunLayout(run.config.out).checkpoint(2)
    evaluate = actions.send(Outcome(SimpleNamespace(final_checkpoint=final), process=11))
    assert (evaluate.kind, evaluate.config.model) == ("evaluate", str(final))
    try:
        actions.send(Outcome(None, process=12))
    except StopIteration as finished:
        record = finished.value
    assert (record["final_checkpoint"], record["process"]) == (str(final), 11)  # the process that trained
    assert list(decide(run, {})) == []  # finished with the same settings: nothing to do


def test_a_record_of_an_earlier_digest_keeps_the_training_and_evaluates_again(tmp_path):
    """A record written before digests were versioned cannot tell; the settings the run saved can: the same
    training is kept, its evaluation done again, and the record gets today's versioned digest."""
    import json

    from rlep.data.run_layout import EvalRunLayout
    from rlep.tasks.settings.digest import DIGEST_VERSION

    run = _baseline_run(tmp_path)
    final = TrainRunLayout(run.config.out).checkpoint(2)
    done = EvalRunLayout(run.config.out).record
    done.parent.mkdir(parents=True)
    done.write_text(
        json.dumps({"key": run.key, "final_checkpoint": str(final), "start_weights": None, "settings": "x"})
    )
    TrainRunLayout(run.config.out).config.write_text(run.config.model_dump_json())
    actions = decide(run, {})
    evaluate = next(actions)
    assert (evaluate.kind, evaluate.config.model) == ("evaluate", str(final))  # no training action
    try:
        actions.send(Outcome(None, process=12))
    except StopIteration as finished:
        assert finished.value["settings_digest_version"] == DIGEST_VERSION
    assert list(decide(run, {})) == []
    other = run.config.model_copy(update={"optimizer": run.config.optimizer.model_copy(update={"lr": 0.5})})
    TrainRunLayout(run.config.out).config.write_text(other.model_dump_json())  # another training saved there
    done.write_text(json.dumps({**json.loads(done.read_text()), "settings_digest_version": None}))
    assert next(decide(run, {})).kind == "train"  # started over


def test_an_interim_report_counts_a_run_finished_under_an_earlier_digest_with_the_same_training(tmp_path):
    """`rlep study --report-only` after an upgrade of rlep: a run whose record is of an earlier digest but whose
    saved training is the plan's is finished for the report (going on would only evaluate it again); one that
    trained otherwise is not."""
    import json

    from rlep.data.run_layout import EvalRunLayout
    from rlep.tasks.reuse import finished_record

    run = _baseline_run(tmp_path)
    final = TrainRunLayout(run.config.out).checkpoint(2)
    done = EvalRunLayout(run.config.out).record
    done.parent.mkdir(parents=True)
    done.write_text(json.dumps({"final_checkpoint": str(final), "start_weights": None, "settings": "x"}))
    TrainRunLayout(run.config.out).config.write_text(run.config.model_dump_json())
    assert finished_record(run) is None  # running the study on would evaluate it again
    assert finished_record(run, earlier_digest=True)["final_checkpoint"] == str(final)
    other = run.config.model_copy(update={"optimizer": run.config.optimizer.model_copy(update={"lr": 0.5})})
    TrainRunLayout(run.config.out).config.write_text(other.model_dump_json())
    assert finished_record(run, earlier_digest=True) is None


def test_a_plan_in_parallel_starts_each_run_once_the_runs_it_needs_have_finished():
    runs = [
        Run("explore", "train", 0, None, None),
        Run("other", "train", 0, "other", None),
        Run("collect", "collect", 0, None, None, needs=["explore"]),
        Run("rlep", "train", 0, "rlep", None, needs=["collect"]),
    ]
    started, finished, lock = {}, {}, threading.Lock()

    def execute(run, needs):
        with lock:
            started[run.key] = time.monotonic()
        assert set(needs) == set(run.needs) and all(finished[key] <= started[run.key] for key in needs)
        time.sleep(0.2)
        with lock:
            finished[run.key] = time.monotonic()
        return run.key.upper()

    results = execute_plan(runs, execute, parallel=True)
    assert results == {"explore": "EXPLORE", "other": "OTHER", "collect": "COLLECT", "rlep": "RLEP"}
    assert started["other"] < finished["explore"]  # a run that needs nothing does not wait for the others
