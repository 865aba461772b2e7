"""`precision: auto`: bfloat16 compute only where the update's device does it natively, float32 elsewhere.

bf16 autocast is not a free speed-up: a CPU without AVX512-BF16 or AMX emulates it, and there a matmul ran
4x slower than in float32 and a SmolLM2 update 3x slower (FIELD_NOTES, "Checked 2026-11-26"); a GPU before
Ampere (compute capability 8) emulates it too. So `auto` decides by what the device says it can do:

- CUDA: `torch.cuda.is_bf16_supported(including_emulation=False)` for the update's GPU;
- CPU: the `avx512_bf16` / `amx_bf16` flags of /proc/cpuinfo (`bf16` in an Arm CPU's `Features`), or, where
  there is no /proc/cpuinfo, the same facts from torch's own cpuinfo reader;
- anything else, or a CPU whose features cannot be read: float32, which is always correct.

No timing probe: on cores shared with the engine a short benchmark is noise (FIELD_NOTES), and the flags
are the cause of the speed difference anyway. The choice is made once, when the backend is built, and the
run records it beside its settings (`record_precision`), never in them: the user's `auto` stays `auto`, so
a resumed or finished run's settings still compare equal (tasks/execute.py).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch

from rlep.data.fs import write_text_atomic
from rlep.data.run_layout import TrainRunLayout

Precision = Literal["fp32", "bf16"]
CPUINFO = Path("/proc/cpuinfo")
# x86: AVX512-BF16 (Cooper Lake, Zen 4 and later), AMX-BF16 (Sapphire Rapids and later); Arm: FEAT_BF16.
CPU_BF16_FLAGS = {"flags": ("avx512_bf16", "amx_bf16"), "Features": ("bf16",)}
# What the run writes beside train_config.json: how each start of the run resolved its `auto` settings.

log = logging.getLogger("rlep.train")


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision one start of a run trains in: the `setting` asked for, the `precision` used and why."""

    setting: str  # auto | fp32 | bf16, as configured
    precision: Precision
    reason: str
    device: str

    def line(self) -> str:
        return f"precision {self.setting} -> {self.precision} on {self.device}: {self.reason}"


def read_cpuinfo() -> str | None:
    """The text of /proc/cpuinfo, or None where there is none (macOS, Windows, some containers)."""
    try:
        return CPUINFO.read_text()
    except OSError:
        return None


def cpu_bf16(cpuinfo: str | None) -> tuple[bool | None, str]:
    """(native bf16, why) for this CPU from the text of /proc/cpuinfo; native None when it cannot be told."""
    if cpuinfo is not None:
        for line in cpuinfo.splitlines():
            key, _, value = line.partition(":")
            wanted = CPU_BF16_FLAGS.get(key.strip())
            if wanted is None:
                continue
            found = [flag for flag in wanted if flag in value.split()]
            if found:
                return True, f"the CPU has {' and '.join(found)}"
            return False, f"the CPU lacks {' and '.join(wanted)} (bf16 would be emulated, several times slower)"
    torch_cpu = torch.cpu
    readers = [getattr(torch_cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if all(callable(reader) for reader in readers):
        if any(reader() for reader in readers):
            return True, "torch reports AVX512-BF16 or AMX on this CPU"
        return False, "torch reports neither AVX512-BF16 nor AMX on this CPU (bf16 would be emulated)"
    return None, "the CPU's features could not be read"


def cuda_bf16(device: torch.device) -> tuple[bool, str]:
    """(native bf16, why) for the GPU `device`; emulated bf16 (before compute capability 8) does not count."""
    with torch.cuda.device(device):
        name = torch.cuda.get_device_name()
        try:
            native = torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # torch before 2.3 has no `including_emulation` and does not count emulation
            native = torch.cuda.is_bf16_supported()
    return native, f"{name} {'computes' if native else 'does not compute'} bf16 natively"


def resolve_precision(setting: str, device: str | torch.device) -> PrecisionChoice:
    """The precision to train in on `device` for the configured `setting` (auto | fp32 | bf16)."""
    device = torch.device(device)
    if setting != "auto":
        return PrecisionChoice(setting, setting, "set in the settings", str(device))  # type: ignore[arg-type]
    if device.type == "cuda":
        native, reason = cuda_bf16(device)
    elif device.type == "cpu":
        native, reason = cpu_bf16(read_cpuinfo())
    else:
        native, reason = None, f"no native-bf16 check for {device.type} devices"
    if native is None:
        reason += "; float32 is always correct"
    return PrecisionChoice("auto", "bf16" if native else "fp32", reason, str(device))


def record_precision(out: Path | str, choice: PrecisionChoice, step: int) -> Path:
    """Log `choice` and record it in OUT/resolved_settings.json as the precision of the run from `step` on.

    One entry per start of the run: a fresh run (step 0) starts the list again, a resumed one keeps the
    entries of the steps before its checkpoint, so a run resumed on another machine shows both choices."""
    log.info(choice.line() + (f" (resumed at step {step})" if step else ""))
    path = TrainRunLayout(out).resolved_settings
    starts = []
    if step and path.is_file():
        starts = [s for s in json.loads(path.read_text()).get("precision", []) if s.get("step", 0) < step]
    if starts and starts[-1]["precision"] != choice.precision:
        log.warning(
            f"warning: this run trained in {starts[-1]['precision']} before step {step} and continues in "
            f"{choice.precision} ({choice.reason})"
        )
    starts.append({"step": step, **asdict(choice)})
    write_text_atomic(path, json.dumps({"precision": starts}, indent=2) + "\n")
    return path


def recorded_precision(out: Path | str) -> list[dict]:
    """Every start of the run in `out` with the precision it trained in (empty: none recorded)."""
    path = TrainRunLayout(out).resolved_settings
    return json.loads(path.read_text()).get("precision", []) if path.is_file() else []
