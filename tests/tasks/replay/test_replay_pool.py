"""RLEP's pool as training reads it: matched by (data source, problem id), refused when the problem differs,
its coverage of the training problems reported, and pinned to one version of a pool store."""

import pytest

from rlep.data.fs import write_parquet_atomic
from rlep.data.pool import PoolError, PoolStore
from rlep.data.problem import Problem
from rlep.data.trajectory import to_table, trajectory_row
from rlep.tasks.replay.config import RLEPReplayConfig
from rlep.tasks.replay.factory import make_replay, pinned
from rlep.tasks.replay.pool_source import load_pool


def _problem(pid, source="tiny-math/add", text=None, answer="1"):
    return Problem(id=pid, problem=text or f"{pid}: 0+1=?", answer=answer, data_source=source)


def _pool(path, problems, answers=("\\boxed{1}",)):
    rows = [
        trajectory_row(
            p,
            f"Q: {p.problem}",
            response=a,
            response_token_ids=[1],
            behaviour_logprobs=[-0.1],
            finish_reason="stop",
            correct=True,
            extracted_answer="1",
            verdict_reason="equal",
            reward=1.0,
            run_id=path.stem,
            policy_version=0,
            model="m",
            sampling={},
            sample_index=i,
        )
        for p in problems
        for i, a in enumerate(answers)
    ]
    write_parquet_atomic(path, to_table(rows))
    return path


def _by_key(problems):
    return {(p.data_source, p.id): p for p in problems}


def test_pool_is_matched_by_source_and_id(tmp_path):
    path = _pool(tmp_path / "pool.parquet", [_problem("0", "tiny-math/add"), _problem("1", "tiny-math/sub")])
    training = [_problem("0", "tiny-math/add"), _problem("0", "tiny-math/sub", text="other: 0+1=?")]
    pool = load_pool(path, _by_key(training))
    assert list(pool) == [("tiny-math/add", "0")]  # the sub problem "0" is another problem; "1" is not trained on


@pytest.mark.parametrize(
    ("training", "message"),
    [
        (_problem("0", answer="2"), "gold answer '1' in the pool but '2' in training"),
        (_problem("0", text="a different question"), "other problem text"),
    ],
)
def test_a_pool_for_other_problems_under_the_same_key_is_refused(tmp_path, training, message):
    path = _pool(tmp_path / "pool.parquet", [_problem("0")])
    with pytest.raises(PoolError, match=message) as error:
        load_pool(path, _by_key([training]))
    assert str(path) in str(error.value) and "('tiny-math/add', '0')" in str(error.value)


def test_coverage_is_recorded_and_low_coverage_warns(tmp_path, capsys):
    training = [_problem(str(i)) for i in range(10)]
    path = _pool(tmp_path / "pool.parquet", training[:1])
    replay = make_replay(RLEPReplayConfig(pool=path), problems=_by_key(training))
    assert replay.stats()["pool_coverage"] == pytest.approx(0.1)
    err = capsys.readouterr().err
    assert "covers only 10% of the training problems" in err
    path = _pool(tmp_path / "pool.parquet", training[:5])
    assert make_replay(RLEPReplayConfig(pool=path), problems=_by_key(training)).stats()[
        "pool_coverage"
    ] == pytest.approx(0.5)
    assert "covers only" not in capsys.readouterr().err


def test_a_pool_store_is_pinned_to_the_version_resolved_at_the_start(tmp_path):
    store = PoolStore(tmp_path / "pools")
    v1 = store.publish(_pool(tmp_path / "a.parquet", [_problem("0")]), {"run_dir": "a", "policy_version": 0})
    config = pinned(RLEPReplayConfig(pool=tmp_path / "pools"))
    assert config.pool == v1 / "pool.parquet"
    store.publish(
        _pool(tmp_path / "b.parquet", [_problem("1")], answers=("\\boxed{1}", "1")),
        {"run_dir": "b", "policy_version": 5},
    )
    assert pinned(config).pool == v1 / "pool.parquet"  # a resumed run keeps its version ...
    assert (
        pinned(RLEPReplayConfig(pool=tmp_path / "pools")).pool != v1 / "pool.parquet"
    )  # ... a new run takes the latest
