"""The wheels a lent GPU machine lacks for `rlep bench gpu`, pinned as the project's locks pin them.

The machines' image (docs: /work/.library/device/KINDS.md of the workplace; Python 3.12, torch 2.11+cu130,
transformers 5.17, numpy, pyarrow, safetensors, sympy, pyyaml, rich, psutil, matplotlib, ...) has no pydantic,
no math-verify and no internet, so these travel with the call as wheels (`make gpu-wheels`, into
build/gpu-wheels) and are installed there with `pip install --no-deps --target` (tasks/bench/gpu_run.sh).
Each version is the one constraints/gpu.txt pins (else constraints/cpu.txt).

Run: `python -m rlep.tasks.bench.gpu_wheels pins` (the requirement lines `make gpu-wheels` downloads),
     `python -m rlep.tasks.bench.gpu_wheels check build/gpu-wheels` (all there, one version each, total size).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCKS = (ROOT / "constraints" / "gpu.txt", ROOT / "constraints" / "cpu.txt")
# What travels, and why: the configuration models and the verifier's parser. Everything else the check imports
# is on the machine (the list a run of part (c) records in its report under `imported_packages`).
CARRIED = {
    "pydantic": "every configuration model (TrainConfig, BackendConfig, EngineConfig, ...)",
    "pydantic-core": "pydantic's compiled core (the only wheel tied to the Python version)",
    "annotated-types": "pydantic's dependency",
    "typing-inspection": "pydantic's dependency",
    "typing-extensions": "pydantic 2.14 needs >= 4.16; the machine's version is not known",
    "math-verify": "the verifier's answer parser and comparison (verifier workers)",
    "latex2sympy2-extended": "math-verify's LaTeX parser",
    "antlr4-python3-runtime": "latex2sympy2-extended's parser runtime (<= 4.13.2)",
}
# The device tool carries at most 64 MiB per call, the working tree included; the wheels are ~3 MiB.
LIMIT_BYTES = 48 * 2**20


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(locks: tuple[Path, ...] = LOCKS) -> dict[str, str]:
    """Name -> version for every carried package, from the first lock that pins it."""
    found: dict[str, str] = {}
    for lock in locks:
        for line in lock.read_text().splitlines():
            name, sep, version = line.split("#")[0].strip().partition("==")
            name = normalise(name)
            if sep and name in CARRIED and name not in found:
                found[name] = version.split(";")[0].strip()
    missing = sorted(set(CARRIED) - set(found))
    if missing:
        raise ValueError(f"no pin for {', '.join(missing)} in {', '.join(str(p) for p in locks)}")
    return found


def check(directory: Path) -> tuple[list[Path], int]:
    """The wheels in `directory` and their total size; raises if one is missing, doubled or the total too big."""
    wheels = sorted(Path(directory).glob("*.whl"))
    names = [normalise(w.name.split("-")[0]) for w in wheels]
    doubled = sorted({n for n in names if names.count(n) > 1})
    missing = sorted(set(CARRIED) - set(names))
    total = sum(w.stat().st_size for w in wheels)
    if missing or doubled or total > LIMIT_BYTES:
        raise ValueError(
            f"{directory}: missing {missing or 'none'}, more than one version of {doubled or 'none'}, "
            f"{total / 2**20:.1f} MiB (limit {LIMIT_BYTES / 2**20:.0f} MiB); run `make gpu-wheels`"
        )
    return wheels, total


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["pins"]:
        print(" ".join(f"{name}=={version}" for name, version in pins().items()))
        return 0
    if args[:1] == ["check"] and len(args) == 2:
        wheels, total = check(Path(args[1]))
        for wheel in wheels:
            print(f"  {wheel.stat().st_size / 2**20:6.2f} MiB  {wheel.name}")
        print(f"{len(wheels)} wheels, {total / 2**20:.2f} MiB in all (limit {LIMIT_BYTES / 2**20:.0f} MiB): {args[1]}")
        return 0
    print("usage: python -m rlep.tasks.bench.gpu_wheels pins | check DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
