"""Options, configuration errors, and the import boundary of the package."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlep.tasks.settings.verifier import VerifierConfig
from rlep.verifiers import verify, verify_batch


def test_options_reach_the_config():
    response = "I computed 7 in the end"
    assert verify(response, "7").correct
    verdict = verify(response, "7", fallback_last_number=False)
    assert (verdict.correct, verdict.reason) == (False, "no-answer")


def test_config_object_and_overrides_combine():
    config = VerifierConfig(fallback_last_number=False)
    assert verify("so 7", "7", config=config).reason == "no-answer"
    assert verify("so 7", "7", config=config, fallback_last_number=True).correct


def test_unknown_option_names_the_option():
    with pytest.raises(TypeError, match="'timeout'.*known options"):
        verify("\\boxed{1}", "1", timeout=3)


@pytest.mark.parametrize(
    "options",
    [
        {"timeout_seconds": 0},
        {"timeout_seconds": -1},
        {"workers": 0},
        {"memory_limit_mb": 10},
        {"chunk_size": 0},
    ],
)
def test_out_of_bounds_option_is_rejected(options):
    with pytest.raises(ValueError, match=next(iter(options))):
        verify("\\boxed{1}", "1", **options)


def test_every_config_field_is_documented_and_config_is_strict():
    for name, field in VerifierConfig.model_fields.items():
        assert field.description, name
    with pytest.raises(ValueError):
        VerifierConfig(unknown=1)


def test_mismatched_lengths_are_an_error():
    with pytest.raises(ValueError, match="2 responses but 1"):
        verify_batch(["1", "2"], ["1"])


def test_empty_batch():
    assert verify_batch([], []) == []


@pytest.mark.parametrize(
    ("response", "max_response_chars", "reason"),
    [("\\boxed{1}", 5, "too-long"), ("\\boxed{1}", 9, "equal")],
)
def test_response_length_limit(response, max_response_chars, reason):
    assert verify(response, "1", max_response_chars=max_response_chars).reason == reason


def test_importing_and_using_verifiers_loads_no_torch_vllm_prefect_or_sympy():
    # In a fresh interpreter: this test process may have imported anything.
    code = (
        "import sys, verifiers\n"
        "assert verifiers.verify('\\\\boxed{1}', '1').correct\n"
        "print(sorted(m for m in ('torch', 'vllm', 'prefect', 'sympy', 'math_verify') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
