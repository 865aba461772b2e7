"""A finished study run keeps its final checkpoint only (`finished_runs_keep: final`): what is removed, and what
never is."""

from rlep.tasks.study import keep_final_checkpoint


def _run_with_checkpoints(root, steps):
    for step in steps:
        (root / "checkpoints" / f"step-{step}").mkdir(parents=True)
        (root / "checkpoints" / f"step-{step}" / "trainer_state.pt").write_bytes(b"x")
    return root


def _left(root):
    return sorted(p.name for p in (root / "checkpoints").iterdir())


def test_the_checkpoints_before_the_final_one_are_removed(tmp_path):
    run = _run_with_checkpoints(tmp_path / "arm" / "seed-0", (35, 40))
    keep_final_checkpoint({"key": "arm/seed-0", "final_checkpoint": str(run / "checkpoints" / "step-40")})
    assert _left(run) == ["step-40"]


def test_a_part_whose_run_went_on_keeps_what_came_after_it(tmp_path):
    # A living-pool arm's first part ended at step 10; the arm's run has since reached 20 and 25.
    run = _run_with_checkpoints(tmp_path / "living" / "seed-0", (5, 10, 20, 25))
    keep_final_checkpoint({"final_checkpoint": str(run / "checkpoints" / "step-10")})
    assert _left(run) == ["step-10", "step-20", "step-25"]
    # Its end removed already: nothing else goes.
    keep_final_checkpoint({"final_checkpoint": str(run / "checkpoints" / "step-15")})
    assert _left(run) == ["step-10", "step-20", "step-25"]


def test_records_without_a_checkpoint_remove_nothing(tmp_path):
    run = _run_with_checkpoints(tmp_path / "arm" / "seed-0", (1, 2))
    for record in ({"key": "collect/seed-0", "pool_source": str(run / "checkpoints" / "step-2")}, {"final_eval": "x"}):
        keep_final_checkpoint(record)
    assert _left(run) == ["step-1", "step-2"]
