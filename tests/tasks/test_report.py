"""The report's replay-overhead arithmetic, on hand-made arm summaries."""

import pytest

from rlep.tasks.report import replay_overhead


def _arm(step, median, sequences, replay=0.0):
    return {
        "step_seconds": step,
        "step_seconds_median": median,
        "sequences_per_step": sequences,
        "phase_seconds": {"replay": replay},
    }


def test_overhead_separates_extra_sequences_from_machinery():
    # the replay arm trains 288 sequences per step (256 fresh + 32 replayed) against 256
    result = replay_overhead(_arm(1.2, 1.1, 288, replay=0.012), _arm(1.0, 1.0, 256))
    assert result["step_time"] == pytest.approx(1.2)
    assert result["step_time_median"] == pytest.approx(1.1)
    assert result["sequences"] == pytest.approx(1.125)
    assert result["per_sequence"] == pytest.approx((1.2 / 288) / (1.0 / 256))
    assert result["replay_phase_share"] == pytest.approx(0.01)
