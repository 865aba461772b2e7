"""Moving experience pools between rlep and RLEP/verl: the settings of `rlep pool export` (`PoolExportConfig`;
the export is data/rlep_format.py's) and `rlep pool import` (`PoolImportConfig`; data/rlep_import.py's)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from rlep.data.run_layout import POOL_FILE, CollectRunLayout, PoolVersionLayout, TrainRunLayout
from rlep.tasks.settings.strict import SETTINGS


class PoolExportConfig(BaseModel):
    """`rlep pool export`'s settings: `export_pool`'s arguments."""

    model_config = SETTINGS

    pool: str = Field(
        description="A pool as `rlep train --pool` takes it: pool.parquet, a collection run or pool version directory, "
        "or a pool store (its latest version).",
        json_schema_extra={"cli_positional": True},
    )
    format: Literal["rlep"] = Field("rlep", description="Target layout.")
    out: str = Field(description="Output .parquet file.")
    into: str | None = Field(
        None,
        description="A verl training file to merge into: all its rows and types kept, reward_model.candidates added "
        "(empty for unsolved problems).",
    )
    data_source: str | None = Field(
        None,
        description="Scorer name (verl default_compute_score) for every row [none: the training file's; standalone: "
        "the pool's if verl knows it, else lighteval/MATH].",
    )
    prompt: Literal["raw", "rendered"] = Field(
        "raw", description="Standalone file: the raw question (verl adds the chat template) or rlep's rendered prompt."
    )
    fields: Literal["source", "rlep"] = Field(
        "source",
        description="Standalone file: a pool collected from a verl Parquet file (DAPO-Math-17k, ...) as that file's "
        "own rows (index type, ability, reward_model.style, every column kept; found through the pool's manifest), "
        "or rlep's fields (extra_info.index numbered, problem_id, level); rlep's where the file is not found.",
    )
    strict: bool = Field(
        False,
        description="Re-check every answer as verl's boxed math scorer reads it (last \\boxed{}, no last-number "
        "fallback); drop and count the rest.",
        json_schema_extra={"cli_switch": True},
    )

    @model_validator(mode="after")
    def _check(self) -> PoolExportConfig:
        if Path(self.out).suffix != ".parquet":
            raise ValueError(f"out {self.out!r}: the export is a Parquet file, name it .parquet")
        _not_an_input(self.out, pool=self.pool, pool_file=str(Path(self.pool) / POOL_FILE), into=self.into)
        return self


def _not_an_input(out: str, **inputs: str | None) -> None:
    """`out` would be written over one of the command's own inputs (it is read first, then replaced): refused."""
    for name, path in inputs.items():
        if path is not None and Path(out).resolve() == Path(path).resolve():
            raise ValueError(f"out {out!r} is the {name.replace('_', ' ')} it reads; write it elsewhere")


class PoolImportConfig(BaseModel):
    """`rlep pool import`'s settings: `import_pool`'s file, output and run id, and the training problems to match."""

    model_config = SETTINGS

    path: str = Field(
        description="RLEP/verl .parquet file with reward_model.candidates.", json_schema_extra={"cli_positional": True}
    )
    out: str = Field(
        description="Output .parquet file, or a directory to hold pool.parquet (rlep schema; usable as --pool)."
    )
    run_id: str = Field("imported", min_length=1, description="run_id of the imported rows.")
    problems: str | None = Field(
        None,
        description="The training problems (a problem source): imported problems take their ids, matched by "
        "extra_info.index, else by problem text; the match rate is printed.",
    )
    problems_config: str | None = Field(
        None, description="YAML of the --problems source's settings (columns, answer_format, ...)."
    )

    @model_validator(mode="after")
    def _check(self) -> PoolImportConfig:
        out = Path(self.out)
        if out.suffix not in ("", ".parquet") and not out.is_dir():
            raise ValueError(
                f"out {self.out!r}: the import is a Parquet file: name it .parquet, or give a directory to hold "
                f"{POOL_FILE}"
            )
        _not_an_input(self.out, file=self.path, problems=self.problems)
        _not_an_input(str(out / POOL_FILE), file=self.path)  # `out` a directory holding the file
        _not_in_a_run(out.parent if out.suffix == ".parquet" else out, self.out)
        return self


def _not_in_a_run(directory: Path, out: str) -> None:
    """An imported pool written into a run's directory or a published pool version would pass for that run's own
    (its manifest and answers left as they were, `--pool RUN` reading the import): refused."""
    marks = (
        (CollectRunLayout(directory).manifest, "a collection run's (its pool is made from its answers)"),
        (TrainRunLayout(directory).config, "a training run's"),
        (
            PoolVersionLayout(directory).lineage,
            "a published pool version's (a store's versions are made by publishing)",
        ),
    )
    for mark, what in marks:
        if mark.is_file():
            raise ValueError(
                f"out {out!r}: {directory} is {what} directory; import into a file or directory of its own"
            )
