"""Ingest each of the four shared handbooks as its own tenant with the in-process engine (real MiniLM
embedder, composed by citadel.wiring), one child process per tenant so each has its own peak RSS, and
report chunks, seconds and peak RSS.

    python benchmarks/ingest_handbooks.py [--home var/handbooks] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPORA = REPO.parent / "shared" / "data" / "corpora"
TENANTS = {
    "18f": "18f-handbook",
    "civicactions": "civicactions-handbook",
    "sourcegraph": "sourcegraph-handbook",
    "github": "github-site-policy",
}


def ingest_one(tenant: str, directory: Path, home: Path) -> dict:
    env = {**os.environ, "CITADEL_HOME": str(home)}
    command = [sys.executable, str(Path(__file__).resolve()), "--one", tenant, str(directory)]
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    if status != 0:
        raise SystemExit(f"ingest of {tenant} failed with status {status}")
    report = json.loads(output)
    return {
        "tenant": tenant,
        "documents": report["documents"],
        "failed": report["failed"],
        "chunks": report["chunks"],
        "seconds": round(seconds, 1),
        "stage_seconds": report["seconds"],
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # ru_maxrss is in KiB on Linux
        "tier": report["tier"],
    }


def ingest_in_this_process(tenant: str, directory: Path) -> None:
    """The child's work: every file under `directory`, readable by everyone, as one local job; the
    job report as JSON on stdout."""
    sys.path.insert(0, str(REPO))  # run from a checkout without installing
    from citadel.ingest.sources import AclSpec, discover
    from citadel.wiring import Wiring

    wiring = Wiring()
    report = wiring.ingestor().ingest(tenant, discover([directory]), AclSpec.from_groups(["*"]))
    wiring.catalog.close()
    print(json.dumps(report.to_dict()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", default="var/handbooks")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--one", nargs=2, metavar=("TENANT", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        ingest_in_this_process(args.one[0], Path(args.one[1]))
        return
    if not CORPORA.exists():
        raise SystemExit(f"shared handbooks not found at {CORPORA}")
    home = Path(args.home)
    shutil.rmtree(home, ignore_errors=True)
    rows = [ingest_one(tenant, CORPORA / name, home) for tenant, name in TENANTS.items()]
    if args.json:
        print(json.dumps({"rows": rows}, indent=1))
        return
    print("| tenant | documents | failed | chunks | seconds | peak RSS (MB) | tier |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['tenant']} | {r['documents']} | {r['failed']} | {r['chunks']} | {r['seconds']} | "
              f"{r['peak_rss_mb']} | {r['tier']} |")


if __name__ == "__main__":
    main()
