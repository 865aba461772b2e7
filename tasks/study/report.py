"""A study's outputs: study.parquet, final.parquet, summary.parquet, claims.parquet, endpoints.parquet,
answer_check.parquet, stability.parquet and curves.parquet (`tasks.study.curves`), control.parquet (each chance
control against its baseline before it re-seeds, `tasks.study.control`), four plots of accuracy with interval
bands and one of entropy, report.md."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from rlep.data.fs import atomic_path, write_parquet_atomic, write_text_atomic
from rlep.data.run_layout import ENTROPY_PLOT, STUDY_PLOTS, StudyLayout
from rlep.tasks.settings.study import StudyConfig
from rlep.tasks.study.answer_check import CHECK_COLUMNS, answer_check_markdown
from rlep.tasks.study.claims import provenance_markdown
from rlep.tasks.study.control import control_check, control_markdown
from rlep.tasks.study.curves import evaluation_noise, plot_entropy, run_curves, stability, stability_markdown
from rlep.tasks.study.stats import endpoints, evaluate_claims, summarize


def write_study_outputs(
    config: StudyConfig,
    study: pd.DataFrame,
    final: pd.DataFrame,
    command: str | None = None,
    checks: pd.DataFrame | None = None,
    interim: tuple[list[str], int] | None = None,
) -> dict[str, Path]:
    """Write every output file of the study under `config.out`; returns their paths by name. `checks`: the
    reward-hack check of the runs' answers (`answer_check.accepted_answers`). `interim`: (the training runs
    finished, how many the plan has) when some are not: the claims are then not tested, and claims.parquet is
    not written (a stale one is removed)."""
    import pyarrow as pa

    layout = StudyLayout(config.out)
    layout.root.mkdir(parents=True, exist_ok=True)
    if interim is None:  # claims are tested on every run of the plan or not at all
        finished, total = finished_runs(config, study)
        interim = None if len(finished) == total else (finished, total)
    summary = summarize(study, config.baseline_arm)
    table = (
        evaluate_claims(study, config.claims, config.baseline_arm, differ_only_in_replay(config))
        if interim is None
        else None
    )
    ends = endpoints(study, final, config.baseline_arm)
    checks = pd.DataFrame(columns=CHECK_COLUMNS) if checks is None else checks
    arms = sorted(config.arms)
    curves = run_curves(config.out, arms, config.seeds)
    stable = stability(study, curves)
    control = control_check(config)
    frames = {
        "study": study,
        "final": final,
        "summary": summary,
        "claims": table,
        "endpoints": ends,
        "answer_check": checks,
        "stability": stable,
        "curves": curves,
        "control": control,
    }
    if table is None:  # an interim report: no claim is tested on part of the runs
        layout.table("claims").unlink(missing_ok=True)
        del frames["claims"]
    paths = {name: layout.table(name) for name in frames}
    for name, frame in frames.items():
        write_parquet_atomic(paths[name], pa.Table.from_pandas(frame, preserve_index=False))
    for x, name in STUDY_PLOTS.items():
        paths[name] = _plot(summary, x, layout.plot(x))
    paths["entropy_plot"] = plot_entropy(curves, layout.entropy_plot)
    paths["report"] = layout.report
    held = stability_markdown(stable, evaluation_noise(config.out, arms, config.seeds))
    text = report_markdown(
        config, summary, table, ends, command, checks, interim, held, control_markdown(config, control)
    )
    write_text_atomic(paths["report"], text)
    return paths


def differ_only_in_replay(config: StudyConfig):
    """(arm, against, step) -> whether the two arms are the same runs, seed by seed, through evaluation step `step`
    unless one of them replays a row: their resolved training settings are the same but for `replay` and
    `perturb` (the chance control), and neither re-seeds its sampling by then (`perturb.reseed_at` > `step`: the
    weights evaluated at `step` come from steps 1..step)."""
    resolved = {arm: config.arm_settings(arm) for arm in config.arms}
    settings = {arm: {k: v for k, v in s.items() if k not in ("replay", "perturb")} for arm, s in resolved.items()}
    reseeds = {arm: (s.get("perturb") or {}).get("reseed_at", math.inf) for arm, s in resolved.items()}
    return lambda arm, against, step: settings[arm] == settings[against] and step < min(reseeds[arm], reseeds[against])


def finished_runs(config: StudyConfig, study: pd.DataFrame) -> tuple[list[str], int]:
    """(the keys of the plan's arm runs, arm x seed, whose evaluations in `study` reach the arm's last step, how
    many arm runs the plan has)."""
    last = study.groupby(["arm", "seed"]).step.max()
    finished = []
    for arm in config.arms:
        steps = int(config.arm_settings(arm)["steps"])
        finished += [f"{arm}/seed-{seed}" for seed in config.seeds if last.get((arm, seed), -1) >= steps]
    return finished, len(config.arms) * len(config.seeds)


def _interval(value: float, low: float, high: float, fmt: str = "{:.3f}") -> str:
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    text = fmt.format(value)
    return text if math.isnan(low) else f"{text} [{fmt.format(low)}, {fmt.format(high)}]"


def claims_markdown(table: pd.DataFrame) -> str:
    """The claims fixed in the configuration, measured: paired difference with its 95% t interval, the verdict
    the interval supports, and every seed's value."""
    if table.empty:
        return "No claims were named in the study's configuration (`claims:`), so none is tested.\n"
    lines = [
        "| claim | arm vs against | metric | seeds paired | arm | against | difference [95% CI] | verdict | sd of "
        "differences | detectable (80%) | test, p | Holm p | Holm verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in table.itertuples(index=False):
        if row.kind == "accuracy_diff":
            metric, fmt, dfmt = f"accuracy at step {int(row.step)}", "{:.3f}", "{:+.3f}"
        elif row.kind == "accuracy_at_equal_charge":
            metric, fmt, dfmt = (
                f"accuracy at the tokens charged to {row.against} by step {int(row.step)}",
                "{:.3f}",
                "{:+.3f}",
            )
        elif row.kind == "steps_to_target":
            metric, fmt, dfmt = f"steps to {row.target:.3f}", "{:.1f}", "{:+.1f}"
        else:
            metric, fmt, dfmt = f"charged tokens to {row.target:.3f}", "{:,.0f}", "{:+,.0f}"
        reached = (
            ""
            if row.kind in ("accuracy_diff", "accuracy_at_equal_charge")
            else f" (reached: {row.arm_reached:.0f} / {row.against_reached:.0f} seeds)"
        )
        unpaired = f" (left out, {row.unpaired})" if row.unpaired else ""
        lines.append(
            f"| {row.claim} | {row.arm} vs {row.against} | {metric}{reached} | {row.n_paired}{unpaired} | "
            f"{_interval(row.arm_mean, math.nan, math.nan, fmt)} | "
            f"{_interval(row.against_mean, math.nan, math.nan, fmt)} | "
            f"{_interval(row.diff_mean, row.diff_ci_low, row.diff_ci_high, dfmt)} | {row.verdict} | "
            f"{_number(row.diff_sd, fmt)} | {_number(row.sdd_80, fmt)} | "
            f"{row.test}, {_number(row.p_value, '{:.3f}')} | "
            f"{_number(row.holm_p, '{:.3f}')} | {row.holm_verdict} |"
        )
    lines += ["", "Per seed:", ""]
    lines += [
        f"- {row.claim}: {row.arm} {row.arm_per_seed}; {row.against} {row.against_per_seed}; "
        f"difference counted {row.diff_per_seed}"
        for row in table.itertuples(index=False)
    ]
    lines += [
        "",
        "sd of differences: of the paired differences over the seeds; detectable (80%): the smallest true mean "
        "difference a two-sided 5% paired t test finds with 80% probability at that sd, (t_0.975 + t_0.8, n - 1 "
        "degrees of freedom) x sd / sqrt(n): a smaller effect reads as `no difference shown` more often than not. "
        "Holm: the p-values adjusted over this study's testable claims together (an untestable claim is left out).",
    ]
    if (table.kind == "accuracy_at_equal_charge").any():
        lines += [
            "",
            "At equal charge: per seed, the budget is the tokens charged to the against arm by the claim's step; "
            "the arm is read at its latest evaluation charged at most that much (its step and tokens are in the "
            "per-seed line), so an arm charged for the runs it depends on is read earlier in its own run.",
        ]
    if table.kind.isin(["steps_to_target", "charged_tokens_to_target"]).any():
        lines += [
            "",
            "Steps and tokens to a target: the arm and against columns average the seeds that reached it; the "
            "test is a paired exact sign test in which a seed that never reached the target ranks last (ties, "
            "both never or equal, left out), so no value is made up for it. The difference column is "
            "descriptive: a run that never reached the target counts in it censored at its end (at least one "
            "step more, or its total charged tokens), as the difference nearest 0 its seeds allow.",
        ]
    return "\n".join(lines) + "\n"


def _number(value: float, fmt: str) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else fmt.format(value)


def endpoints_markdown(ends: pd.DataFrame) -> str:
    """Descriptive end-of-run figures per arm, with the cost of the run and of the runs it depends on."""
    k = int(ends.k.max()) if len(ends) else 0
    lines = [
        f"| arm | seeds | last step | accuracy | diff vs baseline | pass@{k} | updates | tokens generated | tokens "
        f"charged | "
        "seconds | seconds charged |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in ends.itertuples(index=False):
        lines.append(
            f"| {row.arm} | {row.n_seeds} | {row.final_step} | "
            f"{_interval(row.final_mean, row.final_ci_low, row.final_ci_high)} | "
            f"{_interval(row.diff_mean, row.diff_ci_low, row.diff_ci_high, '{:+.3f}')} | "
            f"{_interval(row.pass_at_k, row.pass_ci_low, row.pass_ci_high)} | {row.optimizer_updates:,.0f} | "
            f"{row.tokens_generated:,.0f} | {row.tokens_charged:,.0f} | {row.wall_seconds:,.0f} | "
            f"{row.seconds_charged:,.0f} |"
        )
    return "\n".join(lines) + "\n"


def report_markdown(
    config: StudyConfig,
    summary: pd.DataFrame,
    table: pd.DataFrame,
    ends: pd.DataFrame,
    command: str | None = None,
    checks: pd.DataFrame | None = None,
    interim: tuple[list[str], int] | None = None,
    held: str | None = None,
    control: str | None = None,
) -> str:
    """`held`: the runs' stability section (`tasks.study.curves.stability_markdown`), when given; `control`: the
    chance controls' section (`tasks.study.control.control_markdown`), when the study has one."""
    lines = [
        "# rlep study" + (f" (interim: {len(interim[0])} of {interim[1]} training runs finished)" if interim else ""),
        "",
    ]
    if interim:
        lines += [
            f"Finished: {', '.join(interim[0])}. The others are not run by this report (`--report-only`); the "
            "study resumes with the same command without it. The claims are tested once every run has finished, "
            "never on part of the seeds; the tables below describe the finished runs only.",
            "",
        ]
    lines += [
        f"Arms {', '.join(sorted(config.arms))}; seeds {config.seeds}; reference arm `{config.baseline_arm}`. "
        "Held-out accuracy is the training runs' evaluation (avg@k on the eval problems). Intervals: 95% Student t "
        f"over the {'finished' if interim else len(config.seeds)} seeds (n - 1 degrees of freedom); differences are "
        "paired by seed. Cost: "
        "`tokens charged` and `seconds charged` add to an arm's own generated tokens and training seconds the full "
        "cost of the runs it depends on (RLEP: its exploration run and its collection), even when one exploration "
        "serves several arms or is the baseline's own run.",
        "",
    ]
    if command:
        lines += ["Regenerate with:", "", f"    {command}", ""]
    lines += ["## Claims (fixed with the plan before the run)", "", provenance_markdown(config), ""]
    if table is not None:
        lines += [claims_markdown(table), ""]
    else:
        missing = interim[1] - len(interim[0])
        lines += [
            f"Not tested yet: {len(interim[0])} of {interim[1]} training runs have finished ({missing} missing); "
            "the claims are tested only when every run of the plan has.",
            "",
        ]
    if control is not None:
        lines += ["## The chance control before its re-seed step", "", control, ""]
    lines += ["## End of the runs (descriptive)", "", endpoints_markdown(ends), ""]
    if checks is not None:
        heading = "## Reward-hack check: accepted answers that are not the gold's number"
        lines += [heading, "", answer_check_markdown(checks), ""]
    lines += ["## Held-out accuracy per evaluation step (mean [95% t interval]; paired difference to the baseline)", ""]
    lines += [
        "| arm | step | seeds | accuracy | diff vs baseline | per seed | tokens charged | training seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in summary.itertuples(index=False):
        lines.append(
            f"| {row.arm} | {row.step} | {row.n_seeds} | {_interval(row.mean, row.ci_low, row.ci_high)} | "
            f"{_interval(row.diff_mean, row.diff_ci_low, row.diff_ci_high, '{:+.3f}')} | {row.per_seed} | "
            f"{row.tokens_charged:,.0f} | {row.wall_seconds:.1f} |"
        )
    lines += ["", *(f"![{name}]({name})" for name in STUDY_PLOTS.values()), ""]
    if held is not None:
        lines += [
            "## Did each run keep improving? (descriptive: best and last held-out accuracy, policy entropy)",
            "",
            held,
            "",
            f"![{ENTROPY_PLOT}]({ENTROPY_PLOT})",
            "",
        ]
    return "\n".join(lines)


def _plot(summary: pd.DataFrame, x: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {
        "step": "training step",
        "tokens_generated": "tokens generated by the run",
        "tokens_charged": "tokens generated, charged (dependencies included)",
        "wall_seconds": "training seconds",
    }
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    for arm, group in summary.groupby("arm"):
        group = group.sort_values("step")
        ax.plot(group[x], group["mean"], marker="o", markersize=3, label=f"{arm} (n={int(group.n_seeds.max())})")
        if group.ci_low.notna().any():
            ax.fill_between(group[x], group.ci_low, group.ci_high, alpha=0.2)
    ax.set_xlabel(labels[x])
    ax.set_ylabel("held-out accuracy (mean, 95% t interval)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp)
    plt.close(fig)
    return path
