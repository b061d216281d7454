"""`citadel capacity ...`: plan a workload, simulate a failure scenario, calibrate this machine.

A `typer.Typer()` named `app`; the citadel CLI mounts it as `capacity`. Human output is rich
tables; `--json` prints exactly one JSON object on stdout (non-finite numbers become null).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(help="Size RAM, SSD, GPUs, replicas and tokens; simulate retries, hedging and failures.",
                  no_args_is_help=True)
console = Console()

DEFAULT_RATES_PATH = Path("var/capacity-rates.yaml")
DEFAULT_MODEL_PATH = Path("var/capacity-model.yaml")
P95_TOLERANCE_PCT = 25.0  # predicted p95 within 25% of measured after calibration


def _finite(value: Any) -> Any:
    """Replace inf/nan (not valid JSON) with None, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _print_json(data: dict) -> None:
    typer.echo(json.dumps(_finite(data), separators=(",", ":")))


def _tb(value: float) -> str:
    if value >= 1e12:
        return f"{value / 1e12:.2f} TB"
    if value >= 1e9:
        return f"{value / 1e9:.1f} GB"
    return f"{value / 1e6:.1f} MB"


def _num(value: float | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:,.{digits}f}"


def _ms(value: float | None) -> str:
    return _num(value, 1 if value is not None and math.isfinite(value) and value < 100 else 0)


# ---------------------------------------------------------------- plan


@app.command()
def plan(
    workload: Path = typer.Option(..., "--workload", "-w", exists=True, dir_okay=False, help="Workload YAML."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write PNG plots into this directory."),
    rates: Optional[Path] = typer.Option(None, "--rates", exists=True, dir_okay=False,
                                         help="Rates measured by `calibrate`, replacing defaults."),
) -> None:
    """Size a workload: RAM/SSD per tier, GPUs, replicas, tokens, cost, error budget, retry storm, and
    the people behind approvals and reviews."""
    from capacity.reviewers import people_report
    from capacity.sizing import build_plan
    from capacity.workload import load_rates, load_workload, with_rates

    spec = load_workload(workload)
    if rates is not None:
        spec = with_rates(spec, load_rates(rates))
    result = build_plan(spec) | {"people": people_report(spec)}
    if plot is not None:
        from capacity.plots import write_plots

        result["plots"] = [str(p) for p in write_plots(spec, plot)]
    if as_json:
        _print_json(result)
        return
    _render_plan(result)


def _render_plan(p: dict) -> None:
    console.print(f"[bold]Capacity plan: {p['workload']}[/bold] ({p['chunks']:,.0f} chunks)")
    tiers = Table(title="Index tiers")
    for column in ("tier", "tenants", "chunks", "bytes/chunk", "RAM", "RAM if all chunks here"):
        tiers.add_column(column, justify="right")
    per_chunk = {"hnsw": p["bytes_per_chunk"]["hnsw"], "diskann": p["bytes_per_chunk"]["diskann_ram"],
                 "exact": p["bytes_per_chunk"]["exact"]}
    for tier in ("hnsw", "diskann", "exact"):
        tiers.add_row(tier, _num(p["tiers"][tier]["tenants"]), _num(p["tiers"][tier]["chunks"]),
                      _num(per_chunk[tier]), _tb(p["ram_bytes"][tier]), _tb(p["ram_bytes_if_single_tier"][tier]))
    tiers.add_row("headroom", "", "", "", _tb(p["ram_bytes"]["headroom"]), "")
    tiers.add_row("[bold]total[/bold]", "", "", "", f"[bold]{_tb(p['ram_bytes']['total'])}[/bold]", "")
    tiers.add_row("SSD", "", "", "", _tb(p["ssd_bytes"]), "")
    console.print(tiers)

    t, g, r, gen = p["traffic"], p["gpus"], p["replicas"], p["generator"]
    load = Table(title="Load and compute at the peak hour", show_header=False)
    load.add_column("what")
    load.add_column("value", justify="right")
    for label, value in (
        ("questions/s (avg / peak)", f"{t['questions_per_s_avg']:.1f} / {t['questions_per_s_peak']:.1f}"),
        ("searches/s at peak", _num(t["searches_per_s_peak"], 1)),
        ("rerank pairs/s at peak", _num(t["rerank_pairs_per_s_peak"])),
        ("GPUs to re-embed the corpus in time", str(g["ingest"])),
        ("GPUs for query embed + rerank", f"{g['query']} ({g['query_busy_gpus']:.2f} busy)"),
        ("retriever shards x replicas", f"{r['shards']} x {r['per_shard']} = {r['total']}"),
        ("busiest shard searches/s, utilisation",
         f"{r['per_shard_searches_per_s']:.0f}/s, {r['utilisation_at_peak']:.0%}"),
        ("generator tokens/min vs quota",
         f"{gen['tokens_per_minute_peak']:,.0f} / {gen['quota_tokens_per_minute']:,.0f}"),
    ):
        load.add_row(label, value)
    console.print(load)

    c = p["cost_usd"]
    cost = Table(title="Cost (USD)", show_header=False)
    cost.add_column("what")
    cost.add_column("value", justify="right")
    for label, value in (
        ("LLM input/day, no prompt cache", c["llm_input_per_day_uncached"]),
        ("LLM input/day, cached prefix", c["llm_input_per_day_cached"]),
        ("LLM output/day", c["llm_output_per_day"]),
        ("query GPUs + RAM/day", c["query_gpus_per_day"] + c["ram_per_day"]),
    ):
        cost.add_row(label, f"${value:,.0f}")
    cost.add_row("per question (cached / uncached)",
                 f"${c['per_question_cached']:.4f} / ${c['per_question_uncached']:.4f}")
    console.print(cost)

    e = p["error_budget"]
    alerts = Table(title=f"Error budget: {e['target']:.3%} -> {e['failed_answers_per_month']:,.0f} failed answers / "
                         f"{e['period_days']:.0f} days")
    for column in ("severity", "long window", "short window", "burn rate", "failure rate", "budget used"):
        alerts.add_column(column, justify="right")
    for row in e["alerts"]:
        alerts.add_row(row["severity"], f"{row['long_window_h']:g} h", f"{row['short_window_h'] * 60:g} min",
                       f"{row['burn_rate']:.1f}x", f"{row['failure_rate_threshold']:.2%}", f"{row['budget_share']:.0%}")
    console.print(alerts)

    s = p["retry_storm"]
    storm = Table(title=f"{s['failure_share']:.0%} of replicas dead, {s['base_qps']:.0f} searches/s offered")
    storm.add_column("policy")
    storm.add_column("searches/s at replicas", justify="right")
    for label, key in (
        (f"retries at every layer ({'x'.join(map(str, s['attempts_per_layer']))} attempts)", "every_layer_qps"),
        ("same, deadlines propagated, fast failures", "deadline_propagated_qps"),
        ("one retry layer with a budget", "one_layer_budget_qps"),
        ("hedging at p95 (slow replica)", "hedged_slow_replica_qps"),
        ("hedging at p95 (dead replica, budget-capped)", "hedged_dead_replica_qps"),
    ):
        storm.add_row(label, _num(s[key]))
    console.print(storm)

    x = p["exhaustion"]
    runs_out = Table(title="As load grows, what runs out first")
    runs_out.add_column("resource")
    runs_out.add_column("fits up to x today's load", justify="right")
    for name, multiplier in sorted(x["headroom_multiplier"].items(), key=lambda kv: kv[1]):
        runs_out.add_row(name, f"{multiplier:.2f}x" if multiplier < 1000 else "never (>1000x)")
    console.print(runs_out)
    _render_people(p["people"])
    for path in p.get("plots", []):
        console.print(f"wrote {path}")


def _times(multiplier: float) -> str:
    return f"{multiplier:.2f}x" if multiplier < 1000 else "never (>1000x)"


def _render_people(people: dict) -> None:
    # Borderless, one space between columns: fits 80 columns when piped, as `simulate`'s table.
    teams = Table(title="People: approvals and review tasks per team", box=None, padding=(0, 1),
                  collapse_padding=True, pad_edge=False)
    teams.add_column("team", no_wrap=True)
    for column in ("approvals/d", "reviews/d", "people", "per h", "busy", "wait", "unbounded"):
        teams.add_column(column, justify="right", no_wrap=True)
    for name, team in sorted(people["teams"].items(), key=lambda kv: kv[1]["saturation_multiplier"]):
        teams.add_row(name, _num(team["approvals_per_day"]), _num(team["review_tasks_per_day"]),
                      str(team["reviewers"]), _num(team["decisions_per_working_hour"], 1),
                      f"{team['utilisation']:.0%}" if math.isfinite(team["utilisation"]) else "-",
                      _num(team["mean_queue_wait_minutes"], 1),
                      _times(team["saturation_multiplier"]))
    console.print(teams)
    console.print("per h: decisions offered per working hour; busy: utilisation today;\n"
                  "wait: mean minutes queued within working hours (Erlang C);\n"
                  "unbounded: x today's load at which busy reaches 100%")
    machines = Table(title="Beside the machines: 100% busy at x today's load", box=None, padding=(0, 1),
                     collapse_padding=True, pad_edge=False)
    machines.add_column("resource", no_wrap=True)
    for column in ("kind", "as sized today", "grown to the limits"):
        machines.add_column(column, justify="right", no_wrap=True)
    for name, machine in sorted(people["machines"].items(), key=lambda kv: kv[1]["at_limits"]):
        machines.add_row(name, machine["kind"], _times(machine["as_sized"]), _times(machine["at_limits"]))
    console.print(machines)
    first, team, machine = people["first_to_fall"], people["first_team"], people["first_machine"]
    if first is not None:
        console.print(f"First to fall behind: {first['name']} ({first['kind']}) at {_times(first['at_load_multiplier'])}.")
    if team is not None and machine is not None:
        order = "before" if people["team_before_machines"] else "after"
        console.print(f"First team: {team['name']} at {_times(team['at_load_multiplier'])},\n"
                      f"{order} the first machine grown to the limits: {machine['name']} at "
                      f"{_times(machine['at_load_multiplier'])}.")
    then = people["machines_when_first_team_saturates"]
    if then is not None:
        short = [name for name, need in then["needs"].items() if not need["fits"]]
        console.print(f"At {_times(then['load_multiplier'])} the plan needs {then['retriever_replicas']} retriever "
                      f"replicas; beyond the limits then: {', '.join(short) or 'nothing'}.")


# ---------------------------------------------------------------- simulate


@app.command()
def simulate(
    scenario: Path = typer.Option(..., "--scenario", "-s", exists=True, dir_okay=False, help="Scenario YAML."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
    policy: Optional[str] = typer.Option(None, "--policy", help="Headline policy (default: the first)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Override the scenario's seed."),
) -> None:
    """Simulate a failure scenario under each of its policies (seeded, discrete-event)."""
    from capacity.simulate import load_scenario
    from capacity.simulate import simulate as run_simulation

    spec = load_scenario(scenario)
    if seed is not None:
        spec = spec.model_copy(update={"seed": seed})
    try:
        result = run_simulation(spec, policy)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--policy") from error
    if as_json:
        _print_json(result)
        return
    # A borderless table with one space between columns fits 80 columns when piped.
    table = Table(title=f"{result['scenario']} (seed {result['seed']}): searches/s offered to replicas, "
                        "latency of answered requests (ms)",
                  box=None, padding=(0, 1), collapse_padding=True, pad_edge=False)
    table.add_column("policy", no_wrap=True)
    for column in ("peak/s", "mean/s", "closed/s", "p50", "p95", "p99", "fail", "degr"):
        table.add_column(column, justify="right", no_wrap=True)
    for run in result["policies"]:
        table.add_row(run["policy"], _num(run["peak_load_qps"]), _num(run["mean_load_qps_during_fault"]),
                      _num(run["closed_form_load_qps"]), _ms(run["p50_ms"]), _ms(run["p95_ms"]),
                      _ms(run["p99_ms"]), f"{run['failed_share']:.0%}", f"{run['degraded_share']:.0%}")
    console.print(table)
    console.print("peak: highest 5-s mean; mean: once the fault settles; closed: closed-form load;\n"
                  "fail/degr: share of requests failed / answered by the fallback")
    if result.get("closed_form_mean_wait_ms") is not None:
        console.print(f"mean queue wait: simulated {result['mean_wait_ms']:.2f} ms, "
                      f"Erlang C {result['closed_form_mean_wait_ms']:.2f} ms")


# ---------------------------------------------------------------- calibrate


@app.command()
def calibrate(
    out: Path = typer.Option(DEFAULT_RATES_PATH, "--out", "-o", help="Where to write the rates (.yaml or .json)."),
    skip: list[str] = typer.Option([], "--skip", help="Benchmarks to skip: embed, exact, hnsw, bm25."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON object too."),
    quick: bool = typer.Option(False, "--quick", help="Tiny benchmarks: a smoke test, not a measurement."),
    benchmarks: Path = typer.Option(Path("benchmarks/out"), "--benchmarks",
                                    help="Outputs of benchmarks/ to reuse when present (HNSW at 100k-1M)."),
    runs: list[Path] = typer.Option([], "--runs", exists=True,
                                    help="Measured load runs / drills: a summary.json or report.json, or a "
                                         "directory searched for them. Fits the service model instead of "
                                         "running the micro-benchmarks."),
    model_out: Path = typer.Option(DEFAULT_MODEL_PATH, "--model-out", help="Where `--runs` writes the model."),
    holdout: list[str] = typer.Option([], "--holdout",
                                      help="With --runs: runs whose path contains this are predicted, not fitted."),
    rates: Optional[Path] = typer.Option(None, "--rates", dir_okay=False,
                                         help="With --runs: the rates behind the model before calibration "
                                              f"(default: {DEFAULT_RATES_PATH} when it exists)."),
) -> None:
    """Measure embed/rerank, exact, HNSW and BM25 rates here; `plan --rates FILE` uses them.

    With --runs: fit the service model to measured runs and show predicted against measured p95 and
    requests/s, before (the planner's rates) and after calibration."""
    if runs:
        _calibrate_from_runs(runs, model_out, holdout, rates or DEFAULT_RATES_PATH, as_json)
        return
    from capacity.calibrate import BENCHMARKS, QUICK_SIZES, CalibrationSizes, run_calibration, write_rates

    unknown = sorted(set(skip) - set(BENCHMARKS))
    if unknown:
        raise typer.BadParameter(f"unknown benchmark(s) {unknown}; known: {sorted(BENCHMARKS)}",
                                 param_hint="--skip")
    sizes = QUICK_SIZES if quick else CalibrationSizes()
    result = run_calibration(skip=tuple(skip), sizes=sizes, benchmarks_dir=benchmarks)
    path = write_rates(result, out)
    if as_json:
        _print_json(result | {"written_to": str(path)})
        return
    table = Table(title=f"Measured on {result['machine']['cpu_cores']} cores")
    table.add_column("rate")
    table.add_column("value", justify="right")
    for name, value in result["rates"].items():
        table.add_row(name, _num(value, 3))
    for name, reason in result["skipped"].items():
        table.add_row(f"{name} (skipped)", reason)
    console.print(table)
    console.print(f"wrote {path}")


def _calibrate_from_runs(paths: list[Path], model_out: Path, holdout: list[str], rates_path: Path,
                         as_json: bool) -> None:
    from dataclasses import asdict

    from capacity.measured import compare, default_model, fit_model, load_runs, read_rates, write_model

    runs, skipped = load_runs(paths)
    if not runs:
        reasons = "; ".join(f"{p}: {why}" for p, why in skipped.items()) or "no summary.json or report.json found"
        raise typer.BadParameter(f"no usable run: {reasons}", param_hint="--runs")
    runs.sort(key=lambda run: (run.users or 0, run.source))  # the table reads as load levels, lightest first
    held_out = [run for run in runs if any(part in run.source for part in holdout)]
    fit_on = [run for run in runs if run not in held_out and run.closed_loop]
    not_fitted = {run.source: f"shape {run.shape!r} varies its users (or none given): predicted open-loop at "
                              "the measured rate" for run in runs if not run.closed_loop and run not in held_out}
    before = default_model(read_rates(rates_path))
    try:
        after = fit_model(fit_on, start=before)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--runs") from error
    fitted_on = [run.source for run in fit_on]
    path = write_model(after, model_out, fitted_on=fitted_on)
    rows = compare(runs, before, after, fitted_on=fitted_on)
    within = [row for row in rows if _within(row["after"]["p95_error_pct"])]
    result = {"model": asdict(after), "before_model": asdict(before), "written_to": str(path),
              "fitted_on": fitted_on, "held_out": [run.source for run in held_out], "not_fitted": not_fitted,
              "skipped": skipped,
              "rows": rows, "p95_tolerance_pct": P95_TOLERANCE_PCT, "runs_within_tolerance_after": len(within),
              "load_levels_within_tolerance_after": len({row["users"] for row in within})}
    if as_json:
        _print_json(result)
        return
    _render_calibration(result)


def _within(error_pct: float | None) -> bool:
    return error_pct is not None and abs(error_pct) <= P95_TOLERANCE_PCT


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.0f}%"


def _render_calibration(result: dict) -> None:
    common = _common_prefix([row["run"] for row in result["rows"]])
    table = Table(title="Predicted against measured: p95 (ms) and requests/s, before and after calibration",
                  box=None, padding=(0, 1), collapse_padding=True, pad_edge=False)
    table.add_column("run", no_wrap=True)
    for column in ("users", "fit", "p95", "rps", "before p95", "err", "rps", "err",
                   "after p95", "err", "rps", "err"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in result["rows"]:
        measured, before, after = row["measured"], row["before"], row["after"]
        table.add_row(row["run"][len(common):] or row["run"], _num(row["users"]),
                      "yes" if row["fitted"] else "no",
                      _ms(measured["p95_ms"]), _num(measured["throughput_rps"], 1),
                      _ms(before["p95_ms"]), _pct(before["p95_error_pct"]),
                      _num(before["throughput_rps"], 1), _pct(before["throughput_error_pct"]),
                      _ms(after["p95_ms"]), _pct(after["p95_error_pct"]),
                      _num(after["throughput_rps"], 1), _pct(after["throughput_error_pct"]))
    console.print(table)
    model = result["model"]
    console.print(f"model: {model['servers']} servers, retrieve {model['retrieve_ms']:.1f} ms, "
                  f"answer {model['answer_ms']:.1f} ms, other {model['other_ms']:.1f} ms, "
                  f"cv {model['cv']:.2f}, overhead {model['overhead_ms']:.1f} ms")
    console.print(f"p95 within ±{P95_TOLERANCE_PCT:.0f}% after calibration: {result['runs_within_tolerance_after']} "
                  f"of {len(result['rows'])} runs, {result['load_levels_within_tolerance_after']} load level(s); "
                  "fit: yes = calibrated on that run, no = held out or a varying shape")
    for source, reason in result["not_fitted"].items():
        console.print(f"not fitted on {source}: {reason}")
    for source, reason in result["skipped"].items():
        console.print(f"skipped {source}: {reason}")
    console.print(f"wrote {result['written_to']}")


def _common_prefix(sources: list[str]) -> str:
    """The directory part all run paths share, so the table shows what differs."""
    if len(sources) < 2:
        return ""
    prefix = os.path.commonprefix(sources)
    return prefix[: prefix.rfind("/") + 1]


if __name__ == "__main__":
    app()
