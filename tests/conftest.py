"""Shared fixtures: offline settings, a fast fixture model (built once, cached), one vLLM engine per session."""

from __future__ import annotations

import os

import pytest

# Nothing in the tests may reach the network, and vLLM must keep its engine in this process.
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"


@pytest.fixture(scope="session")
def fixture_model() -> str:
    """Path of the fixture-size tiny model (mechanics only; accuracy is irrelevant)."""
    from data.tiny_model import TinyModelConfig, build_tiny_model

    return str(build_tiny_model(config=TinyModelConfig.fixture(), progress=False))


@pytest.fixture(scope="session")
def vllm_engine(fixture_model):
    """One in-process vLLM engine for the whole session (start-up costs seconds). Tests that change its
    weights must restore them (see `restore_weights`)."""
    from tasks.engines import EngineConfig, make_engine

    engine = make_engine(fixture_model, EngineConfig(backend="vllm", max_num_seqs=64))
    yield engine
    engine.close()
