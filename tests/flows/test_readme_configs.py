"""The GPU configuration sketch in docs/gpu.md stays a valid pipeline configuration."""

from pathlib import Path

from rlep.flows.options import build_config
from rlep.tasks.settings.pipeline import PipelineConfig

GPU_DOC = Path(__file__).resolve().parents[2] / "docs" / "gpu.md"


def test_gpu_sketch_is_a_valid_pipeline_config(tmp_path):
    text = GPU_DOC.read_text(encoding="utf-8")
    block = text[text.index("# my_gpu.yaml (sketch)") :]
    path = tmp_path / "my_gpu.yaml"
    path.write_text(block[: block.index("```")])
    config = build_config(PipelineConfig, path)
    assert config.train.model == config.collect.model == "Qwen/Qwen2.5-Math-1.5B"
    # every stage reads the real data, none falls back to the tiny-math default task
    sources = [config.collect.problems, config.train.problems, config.train.eval_problems, config.evaluate.problems]
    assert all(s.source.startswith("hf:") for s in sources)
    assert config.train.engine.dtype == "bfloat16" and config.train.micro_batch_size == 4
