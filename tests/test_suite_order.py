"""The order the workers take the test files in: the longest first, as conftest sorts them and xdist keeps them."""

from pathlib import Path

import pytest
from file_seconds import QUICK_TEST_SECONDS, SLOW_TEST_SECONDS, estimate, load, seconds_by_file

ROOT = Path(__file__).resolve().parent.parent


def test_xdist_keeps_the_order_conftest_sorts(request):
    # Its default deals the files with the most tests first, which puts the long end-to-end files last.
    assert request.config.getoption("loadscopereorder") is False


def test_files_are_sorted_longest_first_and_keep_their_own_order(monkeypatch):
    import conftest

    class Item:
        def __init__(self, path: str, name: str, slow: bool = False):
            self.path, self.name, self.slow = ROOT / path, name, slow

        def get_closest_marker(self, name):
            return name == "slow" and self.slow or None

    monkeypatch.setattr("file_seconds.load", lambda: {"tests/measured.py": 45.0})
    items = [
        Item("tests/quick.py", "1"),
        Item("tests/quick.py", "2"),
        Item("tests/one_slow.py", "1", slow=True),
        Item("tests/one_slow.py", "2"),
        Item("tests/measured.py", "1"),
        Item("tests/two_slow.py", "1", slow=True),
        Item("tests/two_slow.py", "2", slow=True),
    ]
    conftest.pytest_collection_modifyitems(None, type("Config", (), {"rootpath": ROOT}), items)
    assert [(item.path.name, item.name) for item in items] == [
        ("two_slow.py", "1"),  # 60 s estimated
        ("two_slow.py", "2"),
        ("measured.py", "1"),  # 45 s measured
        ("one_slow.py", "1"),  # 30.1 s estimated
        ("one_slow.py", "2"),
        ("quick.py", "1"),
        ("quick.py", "2"),
    ]


def test_a_measured_file_is_placed_by_its_seconds_and_another_by_its_tests():
    measured = {"tests/long.py": 95.0, "tests/quick.py": 0.5}
    assert estimate("tests/long.py", 3, 0, measured) == 95.0
    assert estimate("tests/quick.py", 40, 2, measured) == 0.5  # measured beats the estimate
    assert estimate("tests/new.py", 5, 2, measured) == 2 * SLOW_TEST_SECONDS + 3 * QUICK_TEST_SECONDS


def test_a_durations_log_is_summed_by_file():
    log = [
        "============================= slowest durations ==============================",
        "121.50s call     tests/flows/test_x.py::test_one[a-b]",
        "3.25s setup    tests/flows/test_x.py::test_one[a-b]",
        "0.01s teardown tests/flows/test_x.py::test_two",
        "2.00s call     tests/data/test_y.py::TestZ::test_w",
        "(1 durations < 0.005s hidden.  Use -vv to show these durations.)",
        "1616 passed in 975.20s (0:16:15)",
    ]
    assert seconds_by_file(log) == pytest.approx({"tests/flows/test_x.py": 124.76, "tests/data/test_y.py": 2.0})


def test_every_measured_file_exists():
    # a path that names no file (a typo, a file moved) would leave its file to the estimate without a word
    missing = [path for path in load() if not (ROOT / path).is_file()]
    assert not missing, f"tests/file_seconds.json names files that do not exist: {missing}"
