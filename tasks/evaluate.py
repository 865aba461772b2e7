"""Evaluation: K answers per held-out problem, verified, summarised as avg@K, pass@k and maj@K per data source.

`evaluate_with_engine` is what training calls on its live engine every `eval_every` steps; `evaluate`
loads the model and problems from an `EvalConfig` (what `rlep eval` and `flows.evaluate` run).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlep.data.fs import write_parquet_atomic
from rlep.data.metrics import ALL_SOURCES, majority_correct, pass_at_k
from rlep.data.problem import DEFAULT_PROMPT_TEMPLATE, Problem, render_prompt
from rlep.data.prompt_length import fitting_problems
from rlep.data.prompting import chat_tokenizer
from rlep.data.run_layout import EvalRunLayout
from rlep.data.sources import load_problems
from rlep.tasks.engines import GenerationEngine, context_limit, make_engine
from rlep.tasks.models import resolve_model
from rlep.tasks.settings.engine import SamplingConfig
from rlep.tasks.settings.evaluate import EvalConfig
from rlep.tasks.settings.verifier import VerifierConfig
from rlep.verifiers import verify_batch


@dataclass
class EvalResult:
    """Per-data-source rows (plus an `all` row) and the per-answer records behind them."""

    rows: list[dict]
    samples: list[dict] = field(repr=False)
    seconds: float

    def overall(self) -> dict:
        return next(r for r in self.rows if r["data_source"] == ALL_SOURCES)


def evaluate_with_engine(
    engine: GenerationEngine,
    problems: list[Problem],
    sampling: SamplingConfig,
    verifier: VerifierConfig | None = None,
    prompt_template: str = DEFAULT_PROMPT_TEMPLATE,
    step: int = 0,
    progress: bool = False,
    chat: Any = None,
) -> EvalResult:
    """Sample `sampling.n` answers per problem with `engine`, verify them, and summarise. Prompts are
    `render_prompt(problem, prompt_template, chat)`; `chat` is the tokenizer of `data.prompting.chat_tokenizer`."""
    start = time.perf_counter()
    prompts = [render_prompt(p, prompt_template, chat) for p in problems]
    completions = engine.generate(prompts, sampling, progress=progress)
    responses = [c.text for group in completions for c in group]
    golds = [p.answer for p, group in zip(problems, completions) for _ in group]
    verdicts = verify_batch(responses, golds, config=verifier)
    samples, by_source = [], defaultdict(list)
    cursor = 0
    for problem, group in zip(problems, completions):
        group_verdicts = verdicts[cursor : cursor + len(group)]
        cursor += len(group)
        for completion, verdict in zip(group, group_verdicts):
            samples.append(
                {
                    "step": step,
                    "problem_id": problem.id,
                    "data_source": problem.data_source,
                    "response": completion.text,
                    "extracted_answer": verdict.extracted,
                    "gold_answer": problem.answer,
                    "correct": verdict.correct,
                    "verdict_reason": verdict.reason,
                }
            )
        by_source[problem.data_source].append(group_verdicts)
    k = sampling.n
    rows = [_summary(step, source, groups, k) for source, groups in sorted(by_source.items())]
    rows.append(_summary(step, ALL_SOURCES, [g for groups in by_source.values() for g in groups], k))
    return EvalResult(rows=rows, samples=samples, seconds=time.perf_counter() - start)


def _summary(step: int, source: str, groups: list, k: int) -> dict:
    n_problems = len(groups)
    correct_counts = [sum(v.correct for v in g) for g in groups]
    return {
        "step": step,
        "data_source": source,
        "k": k,
        "n_problems": n_problems,
        "avg_at_k": sum(c / k for c in correct_counts) / n_problems,
        "pass_at_k": sum(pass_at_k(k, c, k) for c in correct_counts) / n_problems,
        "maj_at_k": sum(majority_correct([v.extracted for v in g], [v.correct for v in g]) for g in groups)
        / n_problems,
    }


def write_eval(result: EvalResult, out: Path) -> dict[str, Path]:
    """Write the summary rows to OUT/eval.parquet and the answers to OUT/eval_samples.parquet (replacing them)."""
    layout = EvalRunLayout(Path(out))
    return {
        "eval": write_parquet_atomic(layout.eval, result.rows),
        "samples": write_parquet_atomic(layout.samples, result.samples),
    }


def evaluate(config: EvalConfig, progress: bool = True) -> EvalResult:
    """Load `config.model` and its problems, evaluate, and write the tables when `config.out` is set."""
    problems = load_problems(config.problems)
    model = resolve_model(config.model, progress=progress)
    chat = chat_tokenizer(model, config.chat_template)  # before the engine starts: `on` without a template fails fast
    problems = _fitting(problems, model, chat, config)
    engine = make_engine(model, config.engine)
    try:
        result = evaluate_with_engine(
            engine, problems, config.request(), config.verifier, config.prompt_template, progress=progress, chat=chat
        )
    finally:
        engine.close()
    if config.out is not None:
        write_eval(result, config.out)
    return result


def _fitting(problems: list[Problem], model: str, chat: Any, config: EvalConfig) -> list[Problem]:
    """The problems whose prompts leave max_tokens of room in the context; the rest refused or left out."""
    from transformers import AutoTokenizer

    tokenizer = chat if chat is not None else AutoTokenizer.from_pretrained(str(model))
    prompts = [render_prompt(p, config.prompt_template, chat) for p in problems]
    return fitting_problems(
        problems,
        prompts,
        tokenizer,
        max_model_len=config.engine.max_model_len,
        max_new_tokens=config.sampling.max_tokens,
        overlong=config.prompt_length.overlong_prompts,
        model_limit=context_limit(model, config.engine),
    )
