from math import comb

import pytest

from rlep.data.metrics import majority_correct, pass_at_k


@pytest.mark.parametrize("n, c, k", [(8, 0, 1), (8, 1, 1), (8, 3, 2), (10, 5, 5), (4, 4, 4), (16, 2, 8)])
def test_pass_at_k_matches_the_combinatorial_definition(n, c, k):
    expected = 1 - comb(n - c, k) / comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_edges():
    assert pass_at_k(8, 2, 1) == pytest.approx(2 / 8)  # pass@1 is the mean
    assert pass_at_k(8, 2, 7) == 1.0  # fewer wrong samples than draws
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)


def test_majority_vote():
    assert majority_correct(["3", "3", "4"], [True, True, False])
    assert not majority_correct(["4", "3", "4"], [False, True, False])
    assert majority_correct([None, None, "3"], [False, False, True])  # no answer, no vote
    assert not majority_correct([None, None], [False, False])
    assert majority_correct(["3", "4"], [True, False])  # tie: first seen wins
