"""Exact small replicas of the problem files users bring, built the way each source project builds them.

Each writer goes through `datasets` as the project's own code does (`Dataset.from_list(...)`,
`.map(fn, with_indices=True)`, `.to_parquet(...)`), so the Parquet types are the real ones: struct columns,
a list-of-struct `prompt`, an int64 `extra_info.index` (verl's scripts) or a string one (DAPO-Math-17k), the
columns `map` keeps (MATH's `level`, `type`) and drops (popped `problem`, `solution`). The rows are short
problems in each data set's own style; the golds are written out by hand so a test does not derive its
expectation with the code under test.

Sources read for the layouts: volcengine/verl examples/data_preprocess/gsm8k.py and math_dataset.py (the
verl rows); the dataset cards of openai/gsm8k (subsets `main`, `socratic`; `question`, `answer` ending in
`#### N`), DigitalLearningGmbH/MATH-lighteval (`problem`, `level` as "Level N", `type`, `solution`),
BytedTsinghua-SIA/DAPO-Math-17k (verl layout, `data_source` math_dapo, ability MATH, style
rule-lighteval/MATH_v2, a uuid string `extra_info.index`), AI-MO/NuminaMath-1.5 (`answer` may be `proof`
or `notfound`) and agentica-org/DeepScaleR-Preview-Dataset (`problem`, `answer`, `solution`; a JSON list).
"""

from __future__ import annotations

import json
from pathlib import Path

import datasets

GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
MATH_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."
DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'

# openai/gsm8k rows (question, answer) with the gold verl's gsm8k.py extracts (commas removed).
GSM8K_ROWS = [
    (
        "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
        "How many clips did Natalia sell altogether in April and May?",
        "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips altogether.\n#### "
        "72",
        "72",
    ),
    (
        "A shop sells 16 boxes of pens at $100 each. How much money does it take in?",
        "It takes in 16*100 = <<16*100=1600>>1,600 dollars.\n#### 1,600",
        "1600",
    ),
    (
        "The temperature was 5 degrees and fell by 12 degrees. What is it now?",
        "It is 5-12 = <<5-12=-7>>-7 degrees.\n#### -7",
        "-7",
    ),
]

# MATH-lighteval rows and the gold verl's math_dataset.py extracts (the last box).
MATH_ROWS = [
    {
        "problem": "What is the value of $\\sqrt{36 \\times \\sqrt{16}}$?",
        "level": "Level 1",
        "type": "Prealgebra",
        "solution": "Calculating from the inside out, $\\sqrt{36 \\times \\sqrt{16}} = \\sqrt{36 \\times 4} = "
        "\\sqrt{144} = \\boxed{12}$.",
        "gold": "12",
    },
    {
        "problem": "Find the sum of all $x$ with $x^2 = 9$ and the larger root.",
        "level": "Level 3",
        "type": "Algebra",
        "solution": "The roots are $\\boxed{-3}$ and $\\boxed{3}$, so the sum is $0$ and the larger root is "
        "$\\boxed{3}$.",
        "gold": "3",
    },
    {
        "problem": "Simplify $\\frac{6}{8}$.",
        "level": "Level ?",
        "type": "Geometry",
        "solution": "Dividing by 2 gives $\\boxed{\\frac{3}{4}}$.",
        "gold": "\\frac{3}{4}",
    },
]

DAPO_ROWS = [
    (
        "In triangle $ABC$, $AB = 13$, $BC = 14$, $CA = 15$. Find its area.",
        "84",
        "9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079",
    ),
    ("Find the remainder when $2^{100}$ is divided by $7$.", "2", "b426d104-244d-4831-a2c4-cd756b61700a"),
]

# NuminaMath-1.5 rows: `answer` is `proof` for proofs and `notfound` where none was extracted.
NUMINA_ROWS = [
    {
        "problem": "Compute $7 \\cdot 8$.",
        "solution": "$7 \\cdot 8 = \\boxed{56}$",
        "answer": "56",
        "problem_type": "Algebra",
        "question_type": "math-word-problem",
        "problem_is_valid": "Yes",
        "solution_is_valid": "Yes",
        "source": "olympiads",
        "synthetic": False,
    },
    {
        "problem": "Prove that $\\sqrt{2}$ is irrational.",
        "solution": "Suppose $\\sqrt{2} = p/q$ ...",
        "answer": "proof",
        "problem_type": "Number Theory",
        "question_type": "proof",
        "problem_is_valid": "Yes",
        "solution_is_valid": "Yes",
        "source": "olympiads",
        "synthetic": False,
    },
    {
        "problem": "Find all $n$ such that ...",
        "solution": "Only small cases work.",
        "answer": "notfound",
        "problem_type": "Number Theory",
        "question_type": "math-word-problem",
        "problem_is_valid": "Yes",
        "solution_is_valid": "Yes",
        "source": "aops_forum",
        "synthetic": False,
    },
    {
        "problem": "What is $2^{10}$?",
        "solution": "$2^{10} = \\boxed{1024}$",
        "answer": "1024",
        "problem_type": "Algebra",
        "question_type": "math-word-problem",
        "problem_is_valid": "Yes",
        "solution_is_valid": "Yes",
        "source": "cn_k12",
        "synthetic": False,
    },
]

DEEPSCALER_ROWS = [
    {"problem": "Let $a + b = 5$ and $ab = 6$. Find $a^2 + b^2$.", "answer": "13", "solution": "$25 - 12 = 13$."},
    {"problem": "A regular polygon has interior angles of 150 degrees. How many sides?", "answer": "", "solution": ""},
    {"problem": "Find $\\gcd(84, 126)$.", "answer": "42", "solution": "$126 - 84 = 42$ divides both."},
]


def _gsm8k_gold(answer: str) -> str:
    """The gold verl's gsm8k.py stores: the number after `#### `, commas removed (written out here)."""
    return answer.split("#### ", 1)[1].split("\n", 1)[0].replace(",", "")


def write_verl_gsm8k(path: Path, split: str, rows: list[tuple[str, str, str]] = GSM8K_ROWS) -> Path:
    """verl's examples/data_preprocess/gsm8k.py output for `split`, from raw openai/gsm8k rows."""

    def process(example: dict, idx: int) -> dict:
        question_raw = example.pop("question")
        answer_raw = example.pop("answer")
        return {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": question_raw + " " + GSM8K_INSTRUCTION}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": _gsm8k_gold(answer_raw)},
            "extra_info": {"split": split, "index": idx, "answer": answer_raw, "question": question_raw},
        }

    raw = datasets.Dataset.from_list([{"question": q, "answer": a} for q, a, _ in rows])
    raw.map(process, with_indices=True).to_parquet(str(path))
    return path


def write_verl_math(path: Path, split: str, rows: list[dict] = MATH_ROWS) -> Path:
    """verl's examples/data_preprocess/math_dataset.py output for `split`, from raw MATH-lighteval rows
    (`level` and `type` stay: the script pops only `problem` and `solution`)."""
    golds = [row["gold"] for row in rows]

    def process(example: dict, idx: int) -> dict:
        question = example.pop("problem") + " " + MATH_INSTRUCTION
        example.pop("solution")
        return {
            "data_source": "DigitalLearningGmbH/MATH-lighteval",
            "prompt": [{"role": "user", "content": question}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": golds[idx]},
            "extra_info": {"split": split, "index": idx},
        }

    raw = datasets.Dataset.from_list([{k: v for k, v in row.items() if k != "gold"} for row in rows])
    raw.map(process, with_indices=True).to_parquet(str(path))
    return path


def write_dapo_math_17k(path: Path, rows: list[tuple[str, str, str]] = DAPO_ROWS) -> Path:
    """DAPO-Math-17k as shipped: verl's layout with a uuid string index and no split."""
    records = [
        {
            "data_source": "math_dapo",
            "prompt": [{"content": DAPO_PREFIX + problem + DAPO_SUFFIX, "role": "user"}],
            "ability": "MATH",
            "reward_model": {"ground_truth": gold, "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": uuid},
        }
        for problem, gold, uuid in rows
    ]
    datasets.Dataset.from_list(records).to_parquet(str(path))
    return path


def write_math_lighteval(path: Path, rows: list[dict] = MATH_ROWS) -> Path:
    """A MATH-lighteval split as the hub serves it: problem, level, type, solution."""
    datasets.Dataset.from_list([{k: v for k, v in row.items() if k != "gold"} for row in rows]).to_parquet(str(path))
    return path


def write_numina_1_5(path: Path, rows: list[dict] = NUMINA_ROWS) -> Path:
    datasets.Dataset.from_list(rows).to_parquet(str(path))
    return path


def write_deepscaler(path: Path, rows: list[dict] = DEEPSCALER_ROWS) -> Path:
    """DeepScaleR-Preview-Dataset's deepscaler.json: one JSON list of objects."""
    path.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return path


def write_hf_gsm8k_repo(root: Path, rows: list[tuple[str, str, str]] = GSM8K_ROWS) -> Path:
    """A local copy of the openai/gsm8k hub repository: two subsets (`main`, `socratic`) declared in the
    README's `configs`, each with train and test Parquet files (columns question, answer)."""
    readme = ["---", "configs:"]
    for subset in ("main", "socratic"):
        readme += [f"- config_name: {subset}", "  data_files:"]
        for split in ("train", "test"):
            (root / subset).mkdir(parents=True, exist_ok=True)
            records = [{"question": q, "answer": a} for q, a, _ in rows]
            datasets.Dataset.from_list(records).to_parquet(str(root / subset / f"{split}-00000-of-00001.parquet"))
            readme += [f"  - split: {split}", f"    path: {subset}/{split}-*"]
    (root / "README.md").write_text("\n".join([*readme, "---", ""]), encoding="utf-8")
    return root
