"""`rlep bench generate`: both engines' figures in one file, prompts rendered as training renders them, and a
peak memory that sees the engine's child processes."""

import json
import subprocess
import sys

from rlep.tasks.bench.generate import GenerateBenchConfig, peak_memory, run_generate_bench


def test_peak_memory_counts_a_child_process():
    with peak_memory(every=0.02) as peak:
        before = peak()
        child = "b = bytearray(300 * 2**20); import time; time.sleep(0.5)"  # 300 MiB held by a child for 0.5 s
        subprocess.run([sys.executable, "-c", child], check=True)
    assert peak() - before > 250


def test_the_generate_bench_renders_the_chat_template_and_writes_its_figures(chat_model, tmp_path, monkeypatch):
    import rlep.tasks.engines.hf_engine as hf_engine

    seen = []
    generate = hf_engine.TransformersEngine.generate

    def recording(self, prompts, sampling):
        seen.extend(prompts)
        return generate(self, prompts, sampling)

    monkeypatch.setattr(hf_engine.TransformersEngine, "generate", recording)
    config = GenerateBenchConfig(
        model=chat_model, prompts=4, samples=2, max_tokens=4, repeats=1, engines=["transformers"], out=tmp_path
    )
    result = run_generate_bench(config)
    assert seen and all(p.startswith("<|user|>\n") and p.endswith("<|assistant|>\n") for p in seen)
    report = json.loads(open(result["path"]).read())
    figures = report["results"]["transformers"]
    assert figures["generated_tokens"] > 0 and figures["tokens_per_second"] > 0
    assert figures["peak_rss_mib"] > 50  # at least the python process with torch loaded
    assert result["summary"]["transformers"] == round(figures["tokens_per_second"], 1)
