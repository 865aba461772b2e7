"""rlep's default policy: a tiny character-level Qwen2, supervised on tiny-math until it is weakly right.

RL needs a base model that is sometimes right: with no correct sample in a group, GRPO has no signal. So
the build trains a small `Qwen2ForCausalLM` from scratch on tiny-math TRAIN problems and stops when its
greedy accuracy on one cell (default 1-decimal addition) reaches a measured aim inside a band
(0.15-0.35), so RL has both signal and room there, on every machine.

- `config`: `TinyModelConfig` (architecture, recipe, stopping rule) and the cache directory it names;
- `sft_data`: the seeded supervised stream (bare `\\boxed{answer}` targets, or worked solutions from
  data/tiny_math_worked.py with `solutions: worked`, the `tiny-worked` model) and the held-out problems the
  stopping rule measures;
- `training`: the model, the schedule and the supervised loop with its stopping rule;
- `evaluate`: greedy accuracy, scored by the project's verifier;
- `build`: build or reuse a cached model, atomically, with its `rlep_build.json`.

How the recipe was found, and what did not work: docs/tiny_model.md.
"""

from rlep.data.tiny_model.build import build_tiny_model, read_build_info
from rlep.data.tiny_model.config import BUILD_INFO_FILE, MODEL_FILES, TinyModelConfig, default_model_dir
from rlep.data.tiny_model.evaluate import greedy_accuracy
from rlep.data.tiny_model.sft_data import check_problems, collate, target_text, training_pool, training_stream
from rlep.data.tiny_model.training import new_model, supervised_train

__all__ = [
    "BUILD_INFO_FILE",
    "MODEL_FILES",
    "TinyModelConfig",
    "build_tiny_model",
    "check_problems",
    "collate",
    "default_model_dir",
    "greedy_accuracy",
    "new_model",
    "read_build_info",
    "supervised_train",
    "target_text",
    "training_pool",
    "training_stream",
]
