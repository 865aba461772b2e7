"""Evaluation on real verdicts: avg@K, pass@K and maj@K per data source and overall, on answers chosen so
that every metric has a known, non-zero value (a stub engine returns them; the verifier is the real one)."""

import pyarrow.parquet as pq
import pytest

from rlep.data.problem import Problem, render_prompt
from rlep.tasks.engines.base import Completion
from rlep.tasks.evaluate import evaluate_with_engine, write_eval
from rlep.tasks.settings.engine import SamplingConfig

# Per problem: its gold answer, its data source and the K = 4 answers the engine gives.
ANSWERS = {
    # 2 of 4 right (3/4 and 0.75 are one value), but the most frequent answer, 1, is wrong: maj 0.
    "a": ("3/4", "s/one", ["\\boxed{3/4}", "\\boxed{0.75}", "\\boxed{1}", "\\boxed{1}"]),
    # 3 of 4 right, and the majority.
    "b": ("5", "s/one", ["\\boxed{5}", "The answer is \\boxed{5}.", "\\boxed{5}", "no idea"]),
    # none right.
    "c": ("2", "s/two", ["\\boxed{3}"] * 4),
    # 1 of 4 right; three answers with one vote each: the first seen (the right one) wins maj.
    "d": ("-1", "s/two", ["\\boxed{-1}", "", "\\boxed{2}", "\\boxed{4}"]),
}
# (avg@4, pass@4, maj@4) by hand from the table above.
EXPECTED = {
    "s/one": ((2 / 4 + 3 / 4) / 2, 1.0, (0 + 1) / 2),
    "s/two": ((0 + 1 / 4) / 2, (0 + 1) / 2, (0 + 1) / 2),
    "all": ((2 / 4 + 3 / 4 + 0 + 1 / 4) / 4, 3 / 4, 2 / 4),
}


class FixedAnswers:
    """A generation engine that returns the table's answers for each prompt."""

    name = "fixed"

    def __init__(self, by_prompt):
        self.by_prompt = by_prompt

    def generate(self, prompts, sampling, progress=False):
        assert sampling.n == 4
        return [[Completion(text, [], [], "stop") for text in self.by_prompt[p]] for p in prompts]


@pytest.fixture(scope="module")
def result():
    problems = [
        Problem(id=pid, problem=f"question {pid}", answer=gold, data_source=source)
        for pid, (gold, source, _) in ANSWERS.items()
    ]
    engine = FixedAnswers({render_prompt(p): ANSWERS[p.id][2] for p in problems})
    return evaluate_with_engine(engine, problems, SamplingConfig(n=4, temperature=1.0, max_tokens=8), step=7)


def test_metrics_take_their_known_values(result):
    rows = {r["data_source"]: r for r in result.rows}
    assert list(rows) == ["s/one", "s/two", "all"]
    for source, (avg, passed, maj) in EXPECTED.items():
        row = rows[source]
        assert (row["avg_at_k"], row["pass_at_k"], row["maj_at_k"]) == pytest.approx((avg, passed, maj)), source
        assert (row["step"], row["k"], row["n_problems"]) == (7, 4, 2 if source != "all" else 4)
    assert result.overall() == rows["all"]


def test_every_answer_is_recorded_with_its_verdict(result):
    verdicts = [(s["problem_id"], s["correct"], s["verdict_reason"], s["extracted_answer"]) for s in result.samples]
    assert verdicts == [
        ("a", True, "equal", "3/4"),
        ("a", True, "equal", "0.75"),
        ("a", False, "not-equal", "1"),
        ("a", False, "not-equal", "1"),
        ("b", True, "equal", "5"),
        ("b", True, "equal", "5"),
        ("b", True, "equal", "5"),
        ("b", False, "no-answer", None),
        ("c", False, "not-equal", "3"),
        ("c", False, "not-equal", "3"),
        ("c", False, "not-equal", "3"),
        ("c", False, "not-equal", "3"),
        ("d", True, "equal", "-1"),
        ("d", False, "no-answer", None),
        ("d", False, "not-equal", "2"),
        ("d", False, "not-equal", "4"),
    ]


def test_written_tables_hold_the_same_values(result, tmp_path):
    paths = write_eval(result, tmp_path)
    assert pq.read_table(paths["eval"]).to_pylist() == result.rows
    assert pq.read_table(paths["samples"]).num_rows == 16


def test_evaluation_renders_prompts_with_the_chat_template_it_is_given(chat_model):
    from rlep.data.prompting import chat_tokenizer

    chat = chat_tokenizer(chat_model, "auto")
    problems = [
        Problem(id=pid, problem=f"question {pid}", answer=gold, data_source=source)
        for pid, (gold, source, _) in ANSWERS.items()
    ]
    by_prompt = {f"<|user|>\nquestion {p.id} =<|end|>\n<|assistant|>\n": ANSWERS[p.id][2] for p in problems}
    chatted = evaluate_with_engine(
        FixedAnswers(by_prompt),
        problems,
        SamplingConfig(n=4, temperature=1.0, max_tokens=8),
        prompt_template="{problem} =",
        step=7,
        chat=chat,
    )
    assert (
        chatted.rows
        == evaluate_with_engine(
            FixedAnswers({render_prompt(p): ANSWERS[p.id][2] for p in problems}),
            problems,
            SamplingConfig(n=4, temperature=1.0, max_tokens=8),
            step=7,
        ).rows
    )


def test_eval_refuses_chat_template_on_for_a_model_without_one_before_starting_an_engine(fixture_model, monkeypatch):
    import rlep.tasks.evaluate as evaluate_module
    from rlep.data.prompting import PromptError
    from rlep.tasks.evaluate import evaluate
    from rlep.tasks.settings.evaluate import EvalConfig

    monkeypatch.setattr(evaluate_module, "make_engine", lambda *a, **k: pytest.fail("engine started"))
    with pytest.raises(PromptError, match="has no chat template"):
        evaluate(EvalConfig(model=fixture_model, chat_template="on"), progress=False)
    with pytest.raises(ValueError, match="chat_template"):
        EvalConfig(chat_template="yes")
