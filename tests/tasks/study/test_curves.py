"""Whether each run kept improving (tasks/study/curves.py): best against last held-out accuracy, entropy per step."""

import math

import pandas as pd

from rlep.data.run_layout import StudyLayout, TrainRunLayout
from rlep.tasks.study.curves import evaluation_noise, run_curves, stability, stability_markdown


def _write_run(root, arm, seed, entropies, problems=500):
    layout = TrainRunLayout(StudyLayout(root).run(arm, seed))
    layout.root.mkdir(parents=True)
    steps = range(1, len(entropies) + 1)
    pd.DataFrame({"step": steps, "entropy": entropies, "reward_mean": [0.1] * len(entropies)}).to_parquet(
        layout.metrics
    )
    pd.DataFrame({"step": [0], "data_source": ["all"], "n_problems": [problems]}).to_parquet(layout.eval)


def test_a_run_that_falls_back_is_told_from_one_that_holds(tmp_path):
    _write_run(tmp_path, "grpo", 0, [0.9, 0.5, 0.2])
    _write_run(tmp_path, "grpo", 1, [0.9, 0.8, 0.7])
    curves = run_curves(tmp_path, ["grpo", "other"], [0, 1])  # `other` has no run yet: no rows
    assert curves[["seed", "step"]].values.tolist() == [[0, 1], [0, 2], [0, 3], [1, 1], [1, 2], [1, 3]]
    study = pd.DataFrame(
        {
            "arm": "grpo",
            "seed": [0, 0, 0, 1, 1, 1],
            "step": [0, 2, 3] * 2,
            "accuracy": [
                0.2,
                0.5,
                0.3,
                0.2,
                0.4,
                0.42,
            ],  # seed 0 falls 0.2 after step 2; 1 ends at its best
        }
    )
    table = stability(study, curves).set_index("seed")
    assert table.loc[0, ["best_step", "last_step"]].tolist() == [2, 3]
    assert math.isclose(table.loc[0, "fallback"], 0.2) and table.loc[1, "fallback"] == 0
    assert table.loc[0, ["entropy_first", "entropy_last"]].tolist() == [0.9, 0.2]
    noise = evaluation_noise(tmp_path, ["grpo"], [0, 1])
    assert math.isclose(noise, (0.5 / 500) ** 0.5)  # 0.032: the sd of a difference of two evaluations on 500
    text = stability_markdown(stability(study, curves), noise)
    assert "| grpo | 0 | 0.500 (2) | 0.300 (3) | 0.200 | 0.900 -> 0.200 |" in text
    assert "(0.032) of their best: grpo 1 of 2." in text


def test_no_run_with_metrics_gives_empty_curves_and_no_noise(tmp_path):
    assert run_curves(tmp_path, ["grpo"], [0]).empty
    assert math.isnan(evaluation_noise(tmp_path, ["grpo"], [0]))


def test_rows_in_any_order_give_the_same_reading(tmp_path):
    # Metrics written out of step order, evaluations listed per data source before the whole set's row.
    layout = TrainRunLayout(StudyLayout(tmp_path).run("grpo", 0))
    layout.root.mkdir(parents=True)
    pd.DataFrame({"step": [3, 1, 2], "entropy": [0.2, 0.9, 0.5], "reward_mean": 0.1}).to_parquet(layout.metrics)
    pd.DataFrame({"step": [0, 0], "data_source": ["add", "all"], "n_problems": [200, 800]}).to_parquet(layout.eval)
    curves = run_curves(tmp_path, ["grpo"], [0])
    assert curves.step.tolist() == [1, 2, 3] and curves.entropy.tolist() == [0.9, 0.5, 0.2]
    noise = evaluation_noise(tmp_path, ["grpo"], [0])
    assert math.isclose(noise, (0.5 / 800) ** 0.5)  # the whole set's 800 problems, not one source's 200
    study = pd.DataFrame({"arm": "grpo", "seed": 0, "step": [3, 0, 2], "accuracy": [0.48, 0.2, 0.5]})
    table = stability(study, curves.iloc[::-1]).set_index("seed")
    assert table.loc[0, ["best_step", "last_step"]].tolist() == [2, 3]
    assert table.loc[0, ["entropy_first", "entropy_last"]].tolist() == [0.9, 0.2]
    assert "(0.025) of their best: grpo 1 of 1." in stability_markdown(table.reset_index(), noise)  # 0.02 below
