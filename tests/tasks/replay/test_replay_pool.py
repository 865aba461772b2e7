"""RLEP's pool as training reads it: matched by (data source, problem id), refused when the problem differs,
its coverage of the training problems reported, pinned to one version of a pool store, or following the store
(a living pool) between steps."""

import threading

import pyarrow.parquet as pq
import pytest
from conftest import judged_row, write_rows

from rlep.data.pool import PoolError, PoolStore
from rlep.data.problem import Problem
from rlep.data.rollout import Group, Rollout
from rlep.tasks.replay.factory import make_replay, pinned
from rlep.tasks.replay.pool_source import load_pool
from rlep.tasks.settings.replay import RLEPReplayConfig


def _problem(pid, source="tiny-math/add", text=None, answer="1"):
    return Problem(id=pid, problem=text or f"{pid}: 0+1=?", answer=answer, data_source=source)


def _pool(path, problems, answers=("\\boxed{1}",)):
    rows = [
        judged_row(
            p,
            a,
            prompt=f"Q: {p.problem}",
            response_token_ids=[1],
            behaviour_logprobs=[-0.1],
            extracted_answer="1",
            run_id=path.stem,
            model="m",
            sample_index=i,
        )
        for p in problems
        for i, a in enumerate(answers)
    ]
    return write_rows(path, rows)


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


# ---------------------------------------------------------------- a living pool: following a store
# A run that follows a pool store takes newer versions between steps (at most every K steps), records the version
# each step replayed from, resumes with the version its checkpoint recorded, and fails clearly when that version was
# pruned; the store stays consistent with publishers and a reader racing.

PROBLEMS = [_problem(str(i)) for i in range(4)]


def _publish(store, tmp_path, name, problems, answers):
    """A collection's pool of `answers` to each of `problems`, published as the store's next version."""
    return store.publish(_pool(tmp_path / f"{name}.parquet", problems, answers), {"run_dir": name})


def _fresh(step):
    return [
        Group(
            p.id,
            [
                Rollout(
                    problem_id=p.id,
                    data_source=p.data_source,
                    prompt="Q",
                    gold_answer="1",
                    response="r",
                    response_token_ids=[1],
                    policy_version=step - 1,
                )
            ],
        )
        for p in PROBLEMS
    ]


def test_a_following_run_takes_newer_versions_between_steps_at_most_every_k(tmp_path):
    store = PoolStore(tmp_path / "store")
    _publish(store, tmp_path, "c1", PROBLEMS[:1], ("\\boxed{1}",))
    config = RLEPReplayConfig(pool=store.root, follow=True, refresh_every=3, replay_per_group=4)
    assert pinned(config).pool == store.root  # not pinned to v0001: it follows the store
    replay = make_replay(config, problems=_by_key(PROBLEMS))
    versions = []
    for step in range(1, 8):
        if step == 2:  # a re-collection publishes while the run trains
            _publish(store, tmp_path, "c2", PROBLEMS, ("\\boxed{1}", "1"))
        groups = replay.join(_fresh(step), step)
        versions.append(replay.stats()["pool_version"])
        replayed = sum(r.origin == "replay" for g in groups for r in g.rollouts)
        assert replayed == (1 if replay.version == 1 else 8)  # v1: one answer to one problem; v2: 2 x 4
    assert versions == [1, 1, 1, 2, 2, 2, 2]  # looked at steps 1, 4, 7: v0002 taken at step 4, never mid-step
    assert replay.stats()["pool_coverage"] == 1.0


def test_resume_uses_the_recorded_version_and_a_pruned_one_is_an_error(tmp_path):
    store = PoolStore(tmp_path / "store")
    for n in (1, 2):
        _publish(store, tmp_path, f"c{n}", PROBLEMS[:n], (f"\\boxed{{{1}}} #{n}",))
    config = RLEPReplayConfig(pool=store.root, follow=True)
    replay = make_replay(config, problems=_by_key(PROBLEMS))
    state = replay.state_dict()
    assert state["pool_version"] == 2
    _publish(store, tmp_path, "c3", PROBLEMS, ("\\boxed{1} #3",))
    resumed = make_replay(config, problems=_by_key(PROBLEMS))
    assert resumed.version == 3
    resumed.load_state_dict(state)
    assert resumed.version == 2 and len(resumed.pool) == 2  # the checkpoint's version, not the newest
    assert store.prune(keep=1) == [1, 2] and store.versions() == [3]
    with pytest.raises(
        PoolError, match=r"version v0002 is not there \(pruned, or never published\); the store holds v0003"
    ):
        make_replay(config, problems=_by_key(PROBLEMS)).load_state_dict(state)
    with pytest.raises(PoolError, match="replay.follow needs a pool store"):
        make_replay(RLEPReplayConfig(pool=tmp_path / "c1.parquet", follow=True), problems=_by_key(PROBLEMS))


def test_publishers_and_a_reader_racing_never_see_a_half_version(tmp_path):
    store = PoolStore(tmp_path / "store")
    _publish(store, tmp_path, "c0", PROBLEMS[:1], ("\\boxed{1}",))
    errors, seen = [], set()

    def publisher(name):
        try:
            for n in range(6):
                _publish(store, tmp_path, f"{name}-{n}", PROBLEMS, (f"\\boxed{{1}} {name} {n}",))
        except Exception as err:  # a failure in the thread must fail the test
            errors.append(err)

    writers = [threading.Thread(target=publisher, args=(name,)) for name in ("a", "b")]
    for w in writers:
        w.start()
    while any(w.is_alive() for w in writers):
        version = store.versions()[-1]
        rows = pq.read_table(store.version_file(version)).num_rows  # a listed version is complete
        assert rows == store.lineage(version)["rows"]
        seen.add(version)
    for w in writers:
        w.join()
    assert not errors
    assert store.versions() == list(range(1, 14))  # 1 + 2 x 6 publishes, each its own version number
    assert [store.lineage(v)["parent"] for v in store.versions()] == [None, *range(1, 13)]
    assert len(seen) > 1
