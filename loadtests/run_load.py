"""Run the locustfile headless, bounded, and summarise what locust measured.

`run_load` starts `python -m locust` as a subprocess in its own process group (locust monkey-patches
its process with gevent: never import it here), with the shape, users and run time in its
environment and the credentials in a 0600 settings file that is removed afterwards. Locust writes its
CSV files (`locust_stats.csv`, `_stats_history.csv`, `_failures.csv`, `_exceptions.csv`) and its
HTML report into `out_dir`, and this module the summary beside them (`summary.json`). A hard
wall-clock limit (the run time plus a grace) kills that process group, and only it, if locust does
not exit by itself. The URL must be loopback unless
`allow_remote`.
"""

from __future__ import annotations

import csv
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from loadtests.population import SETTINGS_ENV, LoadSettings
from loadtests.shapes import MAX_RUN_S, MAX_USERS, SHAPES

LOCUSTFILE = Path(__file__).resolve().with_name("locustfile.py")
REPO = LOCUSTFILE.parents[1]
CSV_PREFIX = "locust"
HTML_REPORT = "report.html"
GRACE_S = 60.0  # locust's start, its last stats and the HTML report, beyond the run time
KILL_WAIT_S = 10.0
END_USER_CLASSES = ["RetrieveUser", "AnswerUser", "AgentRunUser"]
ADMIN_CLASS = "AdminUploadUser"
PERCENTILES = {"p50": "50%", "p95": "95%", "p99": "99%"}


class LoadRefused(ValueError):
    """A run that would break a bound: a non-loopback URL without allow_remote, too long, too many users."""


def is_loopback_url(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    if parts.hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        return False


def check_run(url: str, shape: str, run_time_s: float, users: int, allow_remote: bool) -> None:
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
        raise LoadRefused(f"{url!r} is not an http(s) URL")
    if not allow_remote and not is_loopback_url(url):
        raise LoadRefused(f"{url} is not a loopback address; pass allow_remote (`--remote`) to load another host")
    if shape not in SHAPES:
        raise LoadRefused(f"unknown shape {shape!r}: one of {', '.join(SHAPES)}")
    if not 0 < run_time_s <= MAX_RUN_S:
        raise LoadRefused(f"the run time must be in (0, {MAX_RUN_S}] seconds")
    if not 1 <= users <= MAX_USERS:
        raise LoadRefused(f"users must be in [1, {MAX_USERS}]")


def run_load(settings: LoadSettings, shape: str, run_time_s: float, users: int, out_dir: Path,
             allow_remote: bool = False, classes: list[str] | None = None, wall_limit_s: float | None = None) -> dict:
    """Run one bounded headless locust run against `settings.url`; the summary of its stats. Locust's
    group is ended after `wall_limit_s` (default: the run time plus GRACE_S) if still running."""
    check_run(settings.url, shape, run_time_s, users, allow_remote)
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    if classes is None:
        classes = END_USER_CLASSES + ([ADMIN_CLASS] if settings.admin_token else [])
    secrets_dir = Path(tempfile.mkdtemp(prefix="citadel-load-"))
    try:
        settings_file = secrets_dir / "settings.json"
        settings_file.touch(mode=0o600)
        settings_file.write_text(settings.to_json())
        env = {**os.environ, SETTINGS_ENV: str(settings_file), "CITADEL_LOAD_SHAPE": shape,
               "CITADEL_LOAD_RUN_S": str(run_time_s), "CITADEL_LOAD_USERS": str(users),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--host", settings.url,
                   "--run-time", f"{max(1, round(run_time_s))}s", "--csv", str(out_dir / CSV_PREFIX),
                   "--html", str(out_dir / HTML_REPORT), "--only-summary", "--stop-timeout", "0",
                   "--exit-code-on-error", "0", "--logfile", str(out_dir / "locust.log"), "--loglevel", "INFO",
                   *classes]
        started = time.monotonic()
        with open(out_dir / "locust.out", "wb") as log:
            process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        timed_out = False
        try:
            process.wait(timeout=run_time_s + GRACE_S if wall_limit_s is None else wall_limit_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _end_group(process)
        wall_s = time.monotonic() - started
    finally:
        shutil.rmtree(secrets_dir, ignore_errors=True)
    summary = summarise(out_dir / f"{CSV_PREFIX}_stats.csv")
    summary["levels"] = levels(out_dir / f"{CSV_PREFIX}_stats_history.csv")
    summary.update({"url": settings.url, "shape": shape, "run_time_s": run_time_s, "users": users,
                    "out_dir": str(out_dir), "html": str(out_dir / HTML_REPORT),
                    "csv": str(out_dir / f"{CSV_PREFIX}_stats.csv"), "pid": process.pid,
                    "exit_code": process.returncode,
                    "timed_out": timed_out, "wall_s": round(wall_s, 1)})
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def _end_group(process: subprocess.Popen) -> None:
    """Stop locust's process group (its pgid is its pid: it leads its own session): TERM, then KILL
    whatever is left. Only this group is ever signalled."""
    group = process.pid
    if process.poll() is None:
        _signal_group(group, signal.SIGTERM)
        try:
            process.wait(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(group, signal.SIGKILL)  # children that outlived the leader, if any
    if process.poll() is None:
        process.wait(timeout=KILL_WAIT_S)


def _signal_group(group: int, sig: int) -> None:
    try:
        os.killpg(group, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _number(value: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def summarise(stats_csv: Path) -> dict:
    """Per endpoint (locust's `Type Name`) and over all: requests, failures, requests/s and the p50 /
    p95 / p99 latency in ms, from locust's `_stats.csv`. Empty when locust wrote none."""
    endpoints: dict[str, dict] = {}
    total: dict = {}
    if stats_csv.exists():
        with open(stats_csv, newline="") as handle:
            for row in csv.DictReader(handle):
                entry = {"requests": int(_number(row["Request Count"])), "failures": int(_number(row["Failure Count"])),
                         "rps": round(_number(row["Requests/s"]), 3),
                         **{name: _number(row[column]) for name, column in PERCENTILES.items()}}
                if row["Name"] == "Aggregated":
                    total = entry
                else:
                    endpoints[f"{row['Type']} {row['Name']}"] = entry
    return {"endpoints": endpoints, "total": total}


def levels(history_csv: Path) -> list[dict]:
    """Throughput at each user count the run held (a step shape's steps), from locust's per-second
    history of the aggregate: seconds held, successful and failed (503 shed included) responses per
    second. A level's first second is left out (users still arriving)."""
    spans: list[tuple[int, list[tuple[float, int, int]]]] = []
    if not history_csv.exists():
        return []
    with open(history_csv, newline="") as handle:
        for row in csv.DictReader(handle):
            if row["Name"] != "Aggregated":
                continue
            users = int(_number(row["User Count"]))
            point = (_number(row["Timestamp"]), int(_number(row["Total Request Count"])),
                     int(_number(row["Total Failure Count"])))
            if not spans or spans[-1][0] != users:
                spans.append((users, []))
            spans[-1][1].append(point)
    return [_level(users, points) for users, points in spans if users and len(points) >= 3]


def _level(users: int, points: list[tuple[float, int, int]]) -> dict:
    (t0, requests0, failures0), (t1, requests1, failures1) = points[1], points[-1]
    seconds = max(t1 - t0, 1e-9)
    failures = failures1 - failures0
    return {"users": users, "seconds": round(seconds), "ok_rps": round((requests1 - requests0 - failures) / seconds, 2),
            "failed_rps": round(failures / seconds, 2)}


def main(argv: list[str] | None = None) -> int:
    """`python -m loadtests.run_load --settings FILE ...` (what `citadel load` runs, so that the CLI imports
    no loadtests and no locust): prints the summary as JSON (also in OUT/summary.json). Exit 2
    when the run is refused, 1 when it timed out or measured nothing."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m loadtests.run_load", description=main.__doc__)
    parser.add_argument("--settings", type=Path, required=True, help="LoadSettings as JSON (url, tokens, key)")
    parser.add_argument("--shape", default="diurnal", choices=sorted(SHAPES))
    parser.add_argument("--run-time-s", type=float, required=True)
    parser.add_argument("--users", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--remote", action="store_true", help="allow a URL that is not loopback")
    args = parser.parse_args(argv)
    # Terminated (by `citadel load` on Ctrl-C or its own limit): unwind, so locust's group is ended too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    settings = LoadSettings.from_json(args.settings.read_text())
    try:
        summary = run_load(settings, args.shape, args.run_time_s, args.users, args.out, allow_remote=args.remote)
    except LoadRefused as error:
        print(f"refused: {error}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=1))
    return 1 if summary["timed_out"] or not summary["total"] else 0


if __name__ == "__main__":
    sys.exit(main())
