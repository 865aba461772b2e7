import json
import re
from datetime import datetime, timezone
from fractions import Fraction

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import judged_row, write_rows
from rich.console import Console

from rlep.data.inspect import k_values, render, summarize
from rlep.data.pool import build_pool
from rlep.data.problem import Problem
from rlep.data.store import ExperienceStore
from rlep.verifiers.fastpath import exact_value
from rlep.verifiers.normalize import normalize_answer

WHEN = datetime(2025, 7, 1, tzinfo=timezone.utc)
# problem id, data source, correctness of each sample (n = 4, 4, 4, 8; c = 1, 4, 0, 2)
PLAN = [
    ("a0", "A", [True, False, False, False]),
    ("a1", "A", [True, True, True, True]),
    ("b0", "B", [False, False, False, False]),
    ("b1", "B", [False, True, False, True, False, False, False, False]),
]


def _rows():
    """20 rows; row i answers with i+1 characters, rows 0-9 carry 2(i+1) token ids, rows 10-19 none."""
    rows, i = [], 0
    for problem_id, source, flags in PLAN:
        problem = Problem(id=problem_id, problem=f"problem {problem_id}", answer="1", data_source=source)
        for sample, ok in enumerate(flags):
            tokens = list(range(2 * (i + 1))) if i < 10 else []
            rows.append(
                judged_row(
                    problem,
                    "x" * (i + 1),
                    ok,
                    prompt=f"Q: problem {problem_id}\nA: ",
                    response_token_ids=tokens,
                    behaviour_logprobs=[-1.0] * len(tokens),
                    finish_reason="length" if i % 5 == 4 else "stop",
                    extracted_answer="1" if ok else None,
                    verdict_reason="equal" if ok else "no-answer",
                    run_id="run-x",
                    model="tiny",
                    sampling={"n": len(flags)},
                    sample_index=sample,
                    created_at=WHEN,
                )
            )
            i += 1
    return rows


@pytest.fixture
def run_dir(tmp_path):
    store = ExperienceStore(tmp_path / "run-x", run_id="run-x").prepare()
    rows = _rows()
    store.write_shard(0, rows[:8])
    store.write_shard(1, rows[8:])
    stats = build_pool(store, min_correct=2)
    store.write_manifest(
        parameters={}, model="tiny", timings={"generate": 2.0, "verify": 1.0, "write": 1.0}, pool_stats=stats.to_dict()
    )
    return store.root


def test_run_directory_summary(run_dir):
    summary = summarize(run_dir, sample_rows=3, text_chars=5)
    assert json.loads(json.dumps(summary)) == summary  # plain JSON
    assert (summary["kind"], summary["files"], summary["problems"], summary["samples"], summary["correct"]) == (
        "run",
        2,
        4,
        20,
        7,
    )
    a, b, every = summary["accuracy"]
    # pass@k = 1 - C(n-c, k) / C(n, k) per problem, averaged; b1 has n=8, so k stops at the smallest n, 4.
    assert a == pytest.approx(
        {
            "data_source": "A",
            "problems": 2,
            "samples": 8,
            "mean@n": 0.625,
            "pass@1": 0.625,
            "pass@2": (0.5 + 1) / 2,
            "pass@4": 1.0,
        }
    )
    assert b == pytest.approx(
        {
            "data_source": "B",
            "problems": 2,
            "samples": 12,
            "mean@n": 0.125,
            "pass@1": 0.125,
            "pass@2": (0 + 13 / 28) / 2,
            "pass@4": (0 + 11 / 14) / 2,
        }
    )
    assert every == pytest.approx(
        {
            "data_source": "all",
            "problems": 4,
            "samples": 20,
            "mean@n": 0.375,
            "pass@1": 0.375,
            "pass@2": (0.5 + 1 + 13 / 28) / 4,
            "pass@4": (2 + 11 / 14) / 4,
        }
    )
    assert summary["lengths"] == {
        "tokens": {"mean": 11.0, "p50": 11.0, "p90": pytest.approx(18.2), "max": 20},  # rows 0-9 only
        "chars": {"mean": 10.5, "p50": 10.5, "p90": pytest.approx(18.1), "max": 20},
    }
    assert summary["finish_reasons"] == {"stop": 16, "length": 4}
    assert summary["pool"] == {"rows": 6, "problems": 2, "problem_share": 0.5, "min_correct": 2}
    run = summary["run"]
    assert (run["run_id"], run["model"], run["total_seconds"]) == ("run-x", "tiny", 4.0)
    assert run["phase_shares"] == {"generate": 0.5, "verify": 0.25, "write": 0.25}
    assert run["throughput"] == {
        "problems/s": 1.0,
        "samples/s": 5.0,
        "generated tokens/s": 110 / 2.0,
        "verified answers/s": 20.0,
    }
    # the first correct row, the first wrong one, then the next row; text cut to 5 characters
    assert [(r["problem_id"], r["correct"], r["response"], r["prompt"]) for r in summary["sample_rows"]] == [
        ("a0", True, "x", "Q: p…"),
        ("a0", False, "xx", "Q: p…"),
        ("a0", False, "xxx", "Q: p…"),
    ]


def test_trajectories_directory_and_single_files(run_dir):
    shards = summarize(run_dir / "trajectories")
    assert (shards["kind"], shards["samples"], shards["pool"], shards["run"]) == ("trajectories", 20, None, None)
    assert shards["accuracy"] == summarize(run_dir)["accuracy"]
    pool = summarize(run_dir / "pool.parquet")
    assert (pool["kind"], pool["problems"], pool["samples"], pool["correct"]) == ("file", 2, 6, 6)
    assert [r["data_source"] for r in pool["accuracy"]] == ["A", "B", "all"]
    assert set(pool["accuracy"][-1]) == {"data_source", "problems", "samples", "mean@n", "pass@1", "pass@2"}


def test_render_shows_every_section(run_dir):
    console = Console(record=True, width=160, color_system=None)
    console.print(render(summarize(run_dir)))
    text = console.export_text()
    for expected in [
        "run:",
        "pass@4",
        "0.625",
        "6 rows, 2 problems (50.0% of problems), min_correct=2",
        "generate",
        "50.0%",
        "generated tokens/s: 55.00",
        "sample rows",
    ]:
        assert expected in text


def test_model_output_is_shown_literally_not_as_markup(tmp_path):
    store = ExperienceStore(tmp_path / "run").prepare()
    row = _rows()[0]
    store.write_shard(0, [{**row, "response": "[bold]\\[x^2\\][/bold]", "data_source": "[red]src"}])
    console = Console(record=True, width=160, color_system=None)
    console.print(render(summarize(store.root)))
    text = console.export_text()
    assert "[bold]\\[x^2\\][/bold]" in text and "[red]src" in text


def test_empty_run_directory(tmp_path):
    ExperienceStore(tmp_path / "run").prepare()
    summary = summarize(tmp_path / "run")
    assert (summary["samples"], summary["accuracy"], summary["lengths"]["chars"], summary["sample_rows"]) == (
        0,
        [],
        None,
        [],
    )
    Console(record=True).print(render(summary))


def test_paths_that_are_nothing_we_know_are_named(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("hi")
    pq.write_table(pa.table({"question": ["1+1"]}), tmp_path / "other.parquet")
    for name in ["empty", "notes.txt"]:
        with pytest.raises(ValueError, match=f"'{tmp_path / name}' is not a run directory"):
            summarize(tmp_path / name)
    with pytest.raises(ValueError, match=f"^{tmp_path / 'missing'}: no such file or directory$"):
        summarize(tmp_path / "missing")
    (tmp_path / "run").mkdir()  # a training run, which `rlep train` calls a run directory too
    (tmp_path / "run" / "train_config.json").write_text("{}")
    run = tmp_path / "run"
    with pytest.raises(ValueError, match=f"^'{run}' is a training run: `rlep inspect {run / 'fresh'}` reads"):
        summarize(run)
    with pytest.raises(ValueError, match=r"other\.parquet: not a trajectory table \(missing columns \['run_id'"):
        summarize(tmp_path / "other.parquet")


@pytest.mark.parametrize("n_min, ks", [(1, [1]), (3, [1, 2]), (4, [1, 2, 4]), (16, [1, 2, 4, 8, 16])])
def test_k_values_are_powers_of_two_up_to_the_smallest_n(n_min, ks):
    assert k_values(n_min) == ks


def test_answers_accepted_without_being_a_number_are_counted_and_shown_first(tmp_path):
    """The restated sum that RLEP once replayed into the whole policy (docs/results.md) is what this looks for:
    a correct answer to a numeric gold that is neither the gold nor a plain number. Number forms pass."""
    problem = Problem(id="add:11+24", problem="11+24=?", answer="35", data_source="tiny-math/add")
    half = Problem(id="frac:1/4+1/4", problem="1/4+1/4=?", answer="1/2", data_source="tiny-math/frac")
    symbolic = Problem(id="alg:1", problem="Simplify.", answer="x^2+1", data_source="algebra")
    percent = Problem(id="pct:1/2", problem="1/2 as a percent?", answer="50\\%", data_source="tiny-math/pct")
    rows = [
        judged_row(problem, "The answer is 35.", extracted_answer="35"),
        judged_row(problem, "\\boxed{35}", extracted_answer="\\boxed{35}"),
        judged_row(problem, "The final answer is 11 + 24", extracted_answer="11 + 24"),
        judged_row(problem, "11+24", False, extracted_answer="11+24"),  # wrong: not counted
        judged_row(half, "0.5", extracted_answer="0.5"),
        judged_row(half, "\\frac{1}{2}", extracted_answer="\\frac{1}{2}"),
        judged_row(symbolic, "1+x^2", extracted_answer="1+x^2"),  # a symbolic gold: its answers are not numbers
        judged_row(problem, "35.0", extracted_answer="35.0"),  # the gold's value written otherwise
        judged_row(problem, "70/2", extracted_answer="\\frac{70}{2}"),
        judged_row(problem, "So 36.", extracted_answer="36"),  # a wrong number the verifier let through
        judged_row(half, "-0.5", extracted_answer="-0.5"),
        judged_row(percent, "0.5", extracted_answer="0.5"),  # 50% read /100: the verifier's rule, not flagged
    ]
    path = write_rows(tmp_path / "pool.parquet", rows)
    summary = summarize(path)
    odd = summary["accepted_not_literal"]
    assert (odd["count"], odd["of_correct"]) == (1, 10)
    assert [(row["problem_id"], row["extracted_answer"]) for row in odd["examples"]] == [("add:11+24", "11 + 24")]
    console = Console(record=True, width=200)
    console.print(render(summary))
    text = console.export_text()
    assert "1 of 10 correct answers to a number" in text and "The final answer is 11 + 24" in text
    other = summary["accepted_other_value"]
    assert (other["count"], other["of_correct"]) == (2, 10)
    assert [(row["problem_id"], row["extracted_answer"]) for row in other["examples"]] == [
        ("add:11+24", "36"),
        ("frac:1/4+1/4", "-0.5"),
    ]
    assert "accepted, another number" in text and "2 of 10 correct answers to a number" in text and "So 36." in text


@pytest.mark.parametrize(
    "text, value",
    [
        ("35", Fraction(35)),
        ("+35", Fraction(35)),
        ("-0.25", Fraction(-1, 4)),
        (".5", Fraction(1, 2)),
        ("7 / 2", Fraction(7, 2)),
        ("-\\frac{7}{2}", Fraction(-7, 2)),
        ("\\dfrac{6}{4}", Fraction(3, 2)),
        ("1/0", None),  # no value: an accepted 1/0 is never the gold's
        ("11 + 24", None),
        ("x", None),
    ],
)
def test_a_plain_numbers_value_is_read_exactly(text, value):
    """What the answer check compares a plain number by: the verifier's exact reading of the normalised text."""
    assert exact_value(normalize_answer(text).text) == value


def test_an_evaluation_run_and_our_other_tables_are_named_for_what_they_are(fixture_model, tmp_path, train_here):
    """`rlep inspect` on what `rlep eval` and `rlep train` write besides trajectories: one line saying what it is and
    what inspect reads (it listed two dozen missing columns); a trajectory table so named is still read."""
    from rlep.tasks.evaluate import evaluate
    from rlep.tasks.settings.evaluate import EvalConfig

    reads = "`rlep inspect` reads trajectories: a collection run, a training run's fresh/, a pool or a pool store"
    evaluation = tmp_path / "eval"
    settings = {"source": "tiny-math", "split": "test", "limit": 2}
    config = {
        "model": fixture_model,
        "out": str(evaluation),
        "problems": settings,
        "engine": {"backend": "transformers"},
        "sampling": {"max_tokens": 4},
    }
    evaluate(EvalConfig.model_validate(config), progress=False)
    with pytest.raises(ValueError, match=f"^'{evaluation}' is an evaluation run: {evaluation / 'eval.parquet'} holds"):
        summarize(evaluation)
    for name, what in (("eval.parquet", "an evaluation's scores"), ("eval_samples.parquet", "an evaluation's answers")):
        with pytest.raises(ValueError, match=f"^{evaluation / name}: {what}.*, not trajectories; {re.escape(reads)}$"):
            summarize(evaluation / name)

    run = tmp_path / "train"
    flags = "--engine transformers --steps 1 --prompts-per-step 1 --samples-per-prompt 2 --max-tokens 4 --eval-every 1"
    train_here(f"--model {fixture_model} {flags} --problems-limit 2 --eval-problems-limit 2 --out {run}".split())
    for name, what in (("metrics.parquet", "a training run's metrics"), ("eval.parquet", "an evaluation's scores")):
        with pytest.raises(ValueError, match=f"^{run / name}: {what}"):
            summarize(run / name)
    named = tmp_path / "eval.parquet"  # a trajectory table of the user's, under one of those names
    named.write_bytes(next((run / "fresh").glob("part-*.parquet")).read_bytes())
    assert summarize(named)["samples"] == 2
