"""Run layouts: the names of a run's files and the `step-N` rule live in one place."""

from pathlib import Path

from conftest import judged_row

from rlep.data.run_layout import (
    POOL_FILE,
    CollectRunLayout,
    EvalRunLayout,
    PipelineLayout,
    PoolVersionLayout,
    StudyLayout,
    TrainRunLayout,
    checkpoint_step,
)


def test_checkpoint_step_reads_only_step_directories():
    assert checkpoint_step("runs/x/checkpoints/step-40") == 40
    assert checkpoint_step(Path("step-0")) == 0
    assert checkpoint_step("runs/x/checkpoints/.step-40.123.tmp") is None
    assert checkpoint_step("tiny") is None
    assert checkpoint_step("step-4a") is None


def test_train_layout_names(tmp_path):
    layout = TrainRunLayout(tmp_path)
    assert layout.metrics == tmp_path / "metrics.parquet"
    assert layout.eval == EvalRunLayout(tmp_path).eval == tmp_path / "eval.parquet"
    assert layout.checkpoint(7) == tmp_path / "checkpoints" / "step-7"
    assert layout.fresh_part(7) == tmp_path / "fresh" / "part-00007.parquet"
    assert layout.final_eval.samples == tmp_path / "final_eval" / "eval_samples.parquet"
    for step in (12, 3):
        layout.fresh_part(step).parent.mkdir(exist_ok=True)
        layout.fresh_part(step).touch()
    assert layout.fresh_parts() == [(3, layout.fresh_part(3)), (12, layout.fresh_part(12))]


def test_step_checkpoints_sorted_by_step_not_by_name(tmp_path):
    layout = TrainRunLayout(tmp_path)
    assert layout.step_checkpoints() == []
    for name in ("step-10", "step-9", ".step-11.42.tmp", "notes"):
        (layout.checkpoints / name).mkdir(parents=True)
    assert layout.step_checkpoints() == [(9, layout.checkpoint(9)), (10, layout.checkpoint(10))]


def test_every_reader_and_writer_of_a_collection_run_and_a_pool_version_asks_the_layout(tmp_path):
    from rlep.data.pool import PoolStore, build_pool
    from rlep.data.problem import Problem
    from rlep.data.store import ExperienceStore

    store = ExperienceStore(tmp_path / "run", run_id="run").prepare()
    layout = CollectRunLayout(tmp_path / "run")
    assert (store.trajectories_dir, store.shard_path(3), store.pool_path, store.manifest_path) == (
        layout.trajectories,
        layout.shard(3),
        layout.pool,
        layout.manifest,
    )
    assert layout.shard(3) == tmp_path / "run" / "trajectories" / "part-00003.parquet"
    problem = Problem(id="p", problem="2+2", answer="4", data_source="d", level=1)
    store.write_shard(
        0,
        [
            judged_row(
                problem,
                "\\boxed{4}",
                prompt="Q: 2+2",
                response_token_ids=[1],
                behaviour_logprobs=[-0.5],
                run_id="run",
                model="tiny",
                sampling={"n": 1},
            )
        ],
    )
    build_pool(store, min_correct=1)
    store.write_manifest(parameters={}, model="tiny")
    assert layout.pool.is_file() and layout.manifest.is_file() and layout.shard(0).is_file()
    version = PoolVersionLayout(PoolStore(tmp_path / "store").publish(layout.pool, {"run_dir": "run"}))
    assert version.pool.is_file() and version.lineage.is_file()
    assert (version.pool.name, version.lineage.name) == (POOL_FILE, "lineage.json")


def test_pipeline_and_study_directories(tmp_path):
    from rlep.tasks.pipeline import plan
    from rlep.tasks.settings.pipeline import PipelineConfig

    pipeline = PipelineLayout(tmp_path)
    config = PipelineConfig(out=tmp_path)
    assert config.collect.out == pipeline.collect.root == tmp_path / "collect"
    arms = {r.arm: r.config for r in plan(config) if r.kind == "train"}
    assert {name: c.out for name, c in arms.items()} == {
        "rlep": pipeline.arm("rlep"),
        "baseline": pipeline.arm("baseline"),
    }
    assert arms["rlep"].replay.pool == pipeline.collect.pool == tmp_path / "collect" / POOL_FILE
    assert pipeline.evaluation("base").eval == tmp_path / "eval" / "base" / "eval.parquet"
    assert (pipeline.report.name, pipeline.report_json.name, pipeline.heldout_plot.name) == (
        "report.md",
        "report.json",
        "heldout_accuracy.png",
    )
    study = StudyLayout(tmp_path)
    assert study.run("rlep", 2) == tmp_path / "runs" / "rlep" / "seed-2"
    assert study.explore(2) == tmp_path / "explore" / "seed-2"
    assert study.collect(2).pool == tmp_path / "collect" / "seed-2" / POOL_FILE


def _layout_file_names() -> set[str]:
    """The name of every file a layout object owns (properties and methods without arguments but a step/seed)."""
    root = Path("R")
    layouts = [
        EvalRunLayout(root),
        TrainRunLayout(root),
        CollectRunLayout(root),
        PoolVersionLayout(root),
        PipelineLayout(root),
        StudyLayout(root),
    ]
    names = set()
    for layout in layouts:
        for attr in dir(type(layout)):
            if isinstance(getattr(type(layout), attr), property):
                value = getattr(layout, attr)
                if isinstance(value, Path):
                    names.add(value.name)
    study = StudyLayout(root)
    names |= {study.table(n).name for n in ("study", "summary")} | {study.plot("step").name}
    return {name for name in names if "." in name}  # files; bare directory words ("fresh") mean other things too


def test_run_file_names_are_spelled_only_in_the_layouts():
    """No module but data/run_layout.py spells a run file's name in code (docstrings and comments may name it)."""
    import ast

    names = _layout_file_names()
    assert {"train_config.json", "launch_config.json", "resolved_settings.json", "collect_settings.json"} <= names
    project = Path(__file__).resolve().parents[2]
    found = []
    for folder in ("flows", "tasks", "data", "verifiers"):
        for path in (project / folder).rglob("*.py"):
            if path.name == "run_layout.py":
                continue
            tree = ast.parse(path.read_text())
            docstrings = {
                id(node.body[0].value)
                for node in ast.walk(tree)
                if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                and node.body
                and isinstance(node.body[0], ast.Expr)
                and isinstance(node.body[0].value, ast.Constant)
            }
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                    if node.value in names:
                        found.append(f"{path.relative_to(project)}:{node.lineno} {node.value}")
    assert not found, found
