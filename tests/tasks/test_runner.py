"""A Ray worker's share of the cores: whole CPUs as threads, and torch, OpenMP and vLLM held to them."""

import os

import torch

from rlep.tasks.runner import limit_threads, worker_threads


def test_a_worker_runs_on_its_whole_cpus_and_at_least_one_thread():
    assert [worker_threads(c) for c in (0.25, 1.0, 1.5, 2.0, 3.9)] == [1, 1, 1, 2, 3]


def test_limit_threads_holds_torch_openmp_and_vllm_to_the_share(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    threads = torch.get_num_threads()
    try:
        limit_threads(1)
        assert torch.get_num_threads() == 1 and os.environ["OMP_NUM_THREADS"] == "1"
        # vLLM would otherwise bind its threads to every core, whatever OMP_NUM_THREADS says.
        assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
        monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")  # a binding the user chose is kept
        limit_threads(1)
        assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "0"
    finally:
        torch.set_num_threads(threads)


def test_module_env_puts_the_project_first_on_the_path(monkeypatch):
    from pathlib import Path

    from rlep.tasks.runner import module_env

    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = module_env(VLLM_ENABLE_V1_MULTIPROCESSING="0")
    root = str(Path(__file__).resolve().parents[2])
    assert env["PYTHONPATH"].split(os.pathsep) == [root, "/elsewhere"] and env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
