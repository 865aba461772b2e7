"""Where a pool's problems came from: the problem file its collection runs read.

A pool row keeps a problem's identity as (data_source, problem_id), the id of a verl row being its
`extra_info.index` as text; the row's other fields (`ability`, `reward_model.style`, the index's own type,
any other column) stay in the file the collection read. That file is found through the files beside the
pool: a collection run's manifest.json records the run's settings, the problem source among them
(`parameters.problems.source`), and a pool version's lineage.json names the runs that contributed to it
(`run_dir`). An export reads the source's own rows from there (data.rlep_format).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rlep.data.run_layout import CollectRunLayout, PoolVersionLayout
from rlep.data.source_rows import HF_PREFIX

TINY_MATH = "tiny-math"  # the built-in generator: its problems have no file of their own


@dataclass(frozen=True)
class PoolOrigin:
    """The problem file behind a pool: `file` when every run read the same local file, else None and `note`
    (why it is unknown; None too for a pool of generated problems, which have no other fields to keep)."""

    file: Path | None
    note: str | None = None


def pool_origin(pool_file: Path | str) -> PoolOrigin:
    """The problem file the runs behind `pool_file` (a run's or a pool version's pool.parquet) read."""
    folder = Path(pool_file).parent
    run, version = CollectRunLayout(folder), PoolVersionLayout(folder)
    if run.manifest.is_file():
        runs = [folder]
    elif version.lineage.is_file():
        contributions = json.loads(version.lineage.read_text(encoding="utf-8")).get("contributions", [])
        runs = [Path(c["run_dir"]) for c in contributions if c.get("run_dir")]
    else:
        return PoolOrigin(None, f"{pool_file}: no manifest.json or lineage.json beside it names its problems")
    sources = set()
    for folder in runs:
        manifest = CollectRunLayout(folder).manifest
        try:
            problems = json.loads(manifest.read_text(encoding="utf-8"))["parameters"]["problems"]
        except (OSError, ValueError, KeyError, TypeError):
            return PoolOrigin(None, f"{manifest}: no readable manifest naming the run's problems")
        sources.add(str(problems.get("source", TINY_MATH)))
    if not sources or sources == {TINY_MATH}:
        return PoolOrigin(None)
    if len(sources) > 1:
        return PoolOrigin(None, f"its runs read several problem sources ({', '.join(sorted(sources))})")
    (source,) = sources
    if source.startswith(HF_PREFIX):
        return PoolOrigin(None, f"its problems came from the Hugging Face dataset {source[len(HF_PREFIX) :]}")
    if not Path(source).is_file():
        where = "" if Path(source).is_absolute() else f" (a relative path, read from here: {Path.cwd()})"
        return PoolOrigin(None, f"its problem file {source} is not there{where}")
    return PoolOrigin(Path(source))
