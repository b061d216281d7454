"""Run drills from the catalog against a deployment over HTTP: the traffic and the fault side by side,
then the verdict, `report.json` and `timeline.png` in a folder per drill.

`python -m loadtests.drills.run --settings FILE (--scenario NAME ... | --all) --out DIR` is what
`citadel drill run` runs (the CLI imports no loadtests). The settings are loadtests.population's
LoadSettings (the calling service's token and signing key, the admin token). Bounded: a scenario's
load lasts at most scenario.MAX_DRILL_S; loopback only unless `--remote`; a stage fault is cleared
even when the drill fails half-way, so no fault outlives its drill.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from pathlib import Path

import httpx

from loadtests.client import HTTP_TIMEOUT_S
from loadtests.drills.control import clear_fault, deployed_stages, metric_value
from loadtests.drills.inject import DrillNotApplicable, FaultLog, check_applicable, direct_fault, settle_uploads
from loadtests.drills.plot import write_timeline
from loadtests.drills.scenario import DrillScenario, catalog, find_scenario
from loadtests.drills.traffic import PATHS, Traffic, request_headers, run_traffic
from loadtests.drills.verdict import checks, fault_bounds, summary, timeline
from loadtests.population import LoadSettings, Population
from loadtests.run_load import is_loopback_url

RETRIES_METRIC = "citadel_retriever_retries_total"
HEALTHY_IN_A_ROW = 5  # a drill starts only on a healthy deployment: this many 2xx in a row
HEALTHY_WAIT_S = 120.0  # a breaker's cooldown and staged return after the previous drill fit in this
HEALTHY_POLL_S = 0.2


def _server_retries(url: str, metrics_token: str | None) -> float | None:
    if not metrics_token:
        return None
    try:
        return metric_value(url, metrics_token, RETRIES_METRIC)
    except httpx.HTTPError:
        return None


def _stages(settings: LoadSettings, scenario: DrillScenario) -> set[str] | None:
    """The stages the deployment can fault, for a stage drill with an admin token (None: not asked,
    or the deployment did not answer; the fault itself then says what is wrong)."""
    if scenario.fault.kind != "stage" or not settings.admin_token:
        return None
    try:
        return deployed_stages(settings.url, settings.admin_token)
    except (httpx.HTTPError, ValueError):
        return None


def _topology(url: str) -> dict:
    try:
        return {"name": httpx.get(f"{url}/healthz", timeout=HTTP_TIMEOUT_S).json().get("topology")}
    except (httpx.HTTPError, ValueError, AttributeError):
        return {}


def wait_until_healthy(settings: LoadSettings) -> float | None:
    """Before the load: retrieval requests until HEALTHY_IN_A_ROW succeed in a row (a breaker the
    previous drill opened returns in stages, and only with traffic); the seconds it took, None if it
    never did within HEALTHY_WAIT_S."""
    identity = Population(settings.workload, settings.seed).draw()
    started, in_a_row = time.monotonic(), 0
    with httpx.Client(base_url=settings.url, timeout=HTTP_TIMEOUT_S) as client:
        while time.monotonic() - started < HEALTHY_WAIT_S:
            try:
                response = client.post(PATHS["retrieve"], json={"query": identity.questions[0], "top_k": 1},
                                       headers=request_headers(settings, identity))
                in_a_row = in_a_row + 1 if response.status_code < 300 else 0
            except httpx.HTTPError:
                in_a_row = 0
            if in_a_row >= HEALTHY_IN_A_ROW:
                return round(time.monotonic() - started, 1)
            time.sleep(HEALTHY_POLL_S)
    return None


def run_drill(scenario: DrillScenario, settings: LoadSettings, out_dir: Path, metrics_token: str | None = None,
              node_killer: list[str] | None = None, log=print) -> dict:
    """One drill: its report (also `out_dir/report.json`; the timeline in `out_dir/timeline.png`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    # shape "drill": back-to-back workers and a fault, not locust's thinking users, so the capacity
    # model predicts it at its measured rate (open loop) and calibration does not fit on it
    base = {"drill": scenario.name, "description": scenario.description, "url": settings.url,
            "users": scenario.load.concurrency, "shape": "drill", "run_time_s": scenario.load.total_s}
    try:
        check_applicable(scenario, settings.admin_token, node_killer, _stages(settings, scenario))
    except DrillNotApplicable as reason:
        return _write(out_dir, {**base, "verdict": "skipped", "reason": str(reason), "checks": []})
    base["topology"] = _topology(settings.url)
    base["healthy_after_s"] = wait_until_healthy(settings)
    if base["healthy_after_s"] is None:
        return _write(out_dir, {**base, "verdict": "fail", "checks": [],
                                "reason": f"the deployment was not healthy within {HEALTHY_WAIT_S:.0f} s before the fault"})
    retries_before = _server_retries(settings.url, metrics_token)
    traffic, faults = Traffic(), FaultLog()
    director = threading.Thread(target=_direct, name="drill-fault", daemon=True,
                                args=(settings, scenario, traffic, faults, node_killer, log))
    started = time.monotonic()
    director.start()
    asyncio.run(run_traffic(settings, scenario.load, traffic, scenario.seed))
    director.join(timeout=scenario.load.total_s + 120)
    if scenario.fault.kind == "dead_letters":
        settle_uploads(settings.url, settings.admin_token, faults)
    retries_after = _server_retries(settings.url, metrics_token)
    retry_share = (round((retries_after - retries_before) / max(1, len(traffic.outcomes)), 4)
                   if retries_before is not None and retries_after is not None else None)
    rows = timeline(traffic.outcomes, scenario, faults)
    found = checks(traffic.outcomes, rows, scenario, faults, retry_share)
    verdict = "pass" if traffic.outcomes and found and all(c["passed"] for c in found) else "fail"
    fault_start, fault_end = fault_bounds(scenario, faults)
    plot = write_timeline(rows, fault_start, fault_end, f"drill {scenario.name}: {verdict}", out_dir / "timeline.png")
    report = {**base, "verdict": verdict, "checks": found, **summary(traffic.outcomes, scenario.load.total_s),
              "fault": {"kind": scenario.fault.kind, "start_s": round(fault_start, 2), "end_s": round(fault_end, 2),
                        "events": faults.events, "uploads": faults.uploads},
              "server_retry_share": retry_share, "wall_s": round(time.monotonic() - started, 1),
              "timeline": rows, "timeline_png": str(plot)}
    return _write(out_dir, report)


def _direct(settings: LoadSettings, scenario: DrillScenario, traffic: Traffic, faults: FaultLog,
            node_killer: list[str] | None, log) -> None:
    try:
        direct_fault(settings.url, settings.admin_token, scenario, traffic.since, faults, node_killer)
    except Exception as error:  # noqa: BLE001 - the drill must still report, and clear what it set
        faults.note(traffic.since(), "fault side failed", error=f"{type(error).__name__}: {error}"[:300])
        log({"drill": scenario.name, "fault side failed": str(error)[:300]})
    finally:
        if scenario.fault.kind == "stage":
            try:
                clear_fault(settings.url, settings.admin_token, scenario.fault.stage)
            except httpx.HTTPError:
                faults.note(traffic.since(), "fault could not be cleared: clear it by hand",
                            stage=scenario.fault.stage)


def _write(out_dir: Path, report: dict) -> dict:
    (out_dir / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def run_many(names: list[str], settings: LoadSettings, out_dir: Path, metrics_token: str | None,
             node_killer: list[str] | None, log=print) -> dict:
    """Each named drill in turn, each into `out_dir/<name>`; the table of verdicts (`out_dir/drills.json`)."""
    rows = []
    for name in names:
        scenario = find_scenario(name)
        log({"drill": scenario.name, "event": "start", "seconds": scenario.load.total_s})
        report = run_drill(scenario, settings, out_dir / scenario.name, metrics_token, node_killer, log)
        rows.append({"drill": scenario.name, "verdict": report["verdict"], "reason": report.get("reason"),
                     "requests": report.get("total", {}).get("requests"),
                     "checks": [{k: c[k] for k in ("check", "passed", "measured", "limit")} for c in report["checks"]],
                     "report": str(out_dir / scenario.name / "report.json"),
                     "timeline_png": report.get("timeline_png")})
        log({"drill": scenario.name, "verdict": report["verdict"]})
    table = {"drills": rows, "passed": all(r["verdict"] in ("pass", "skipped") for r in rows)}
    (out_dir / "drills.json").write_text(json.dumps(table, indent=1) + "\n")
    return table


def catalog_order() -> list[str]:
    """The catalog by name, node kills last: a dead node stays dead, and the drills after it would
    run on a smaller cluster."""
    return sorted(catalog(), key=lambda name: (find_scenario(name).fault.kind == "node_kill", name))


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when every drill passed or was skipped, 1 when one failed, 2 when the run is refused."""
    parser = argparse.ArgumentParser(prog="python -m loadtests.drills.run", description=main.__doc__)
    parser.add_argument("--settings", type=Path, required=True, help="LoadSettings as JSON")
    parser.add_argument("--scenario", action="append", default=[], help="a catalog name or a scenario file")
    parser.add_argument("--all", action="store_true", help="every scenario of the catalog")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--metrics-token-file", type=Path)
    parser.add_argument("--node-kill-command", help="JSON argv prefix; the node's name is appended")
    parser.add_argument("--remote", action="store_true", help="allow a URL that is not loopback")
    args = parser.parse_args(argv)
    settings = LoadSettings.from_json(args.settings.read_text())
    names = catalog_order() if args.all else args.scenario
    if not names:
        print("refused: name a scenario or pass --all", file=sys.stderr)
        return 2
    if not args.remote and not is_loopback_url(settings.url):
        print(f"refused: {settings.url} is not a loopback address; pass --remote to drill another host",
              file=sys.stderr)
        return 2
    try:
        [find_scenario(name) for name in names]
    except ValueError as error:
        print(f"refused: {error}", file=sys.stderr)
        return 2
    metrics_token = args.metrics_token_file.read_text().strip() if args.metrics_token_file else None
    killer = json.loads(args.node_kill_command) if args.node_kill_command else None
    table = run_many(names, settings, args.out, metrics_token, killer, log=lambda row: print(json.dumps(row),
                                                                                            file=sys.stderr))
    print(json.dumps(table, indent=1))
    return 0 if table["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
