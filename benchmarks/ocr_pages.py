"""OCR pages per second on this machine: real SEC filing pages (../shared/data/pdfs) rendered to
image-only PDFs (as a scanner would make them), then read through citadel.parsing.ocr.ocr_pages exactly
as ingestion reads them (a child process per document, Tesseract per page). Reports, per setting,
pages/s and how many of the text layer's words the OCR text holds (word recall, a rough quality check).

    python benchmarks/ocr_pages.py [--pages 6] [--scan-dpi 200] [--dpi 150,200,300] [--parallel 2] [--json]

Runs: one document of all the pages at each OCR resolution (one child, its start-up paid once); the
pages as single-page documents, `--parallel` at once (what Ray Data's parse workers do: one Tesseract
thread each, CHILD_ENVIRONMENT, so documents rather than threads use the cores); and the one-document
run again with Tesseract's own OpenMP threads (the child started directly, without OMP_THREAD_LIMIT).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PDFS = REPO.parent / "shared" / "data" / "pdfs"
# (filing, 1-based page): prose, a financial table and a dense 10-K page, so the figure is not one kind's.
PAGES = [("ULTABEAUTY_2023Q4_EARNINGS.pdf", 2), ("ULTABEAUTY_2023Q4_EARNINGS.pdf", 3),
         ("AMCOR_2023Q4_EARNINGS.pdf", 12), ("ADOBE_2022_10K.pdf", 54), ("MICROSOFT_2023_10K.pdf", 60),
         ("NETFLIX_2015_10K.pdf", 40), ("BESTBUY_2024Q2_10Q.pdf", 17), ("AMCOR_2023Q4_EARNINGS.pdf", 1)]
WORD = re.compile(r"[A-Za-z]{3,}")


def scanned_pages(count: int, scan_dpi: int) -> list[tuple[bytes, str]]:
    """One single-page scan per listed page, with the page's text layer (the reference)."""
    from pypdf import PdfReader

    from citadel.parsing.ocr import scanned_copy

    scans = []
    for filing, page in PAGES[:count]:
        data = (PDFS / filing).read_bytes()
        reference = PdfReader(PDFS / filing).pages[page - 1].extract_text() or ""
        scans.append((scanned_copy(data, [page], scan_dpi), reference))
    return scans


def one_document(scans: list[tuple[bytes, str]]) -> bytes:
    """The single-page scans as one image-only PDF."""
    from io import BytesIO

    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for data, _ in scans:
        writer.add_page(PdfReader(BytesIO(data)).pages[0])
    out = BytesIO()
    writer.write(out)
    return out.getvalue()


def word_recall(reference: str, text: str) -> float:
    wanted = [w.lower() for w in WORD.findall(reference)]
    found = {w.lower() for w in WORD.findall(text)}
    return sum(w in found for w in wanted) / max(len(wanted), 1)


def settings(dpi: int):
    from citadel.config import OcrConfig
    from citadel.parsing import OcrSettings

    return OcrSettings.from_config(OcrConfig(dpi=dpi))


def run_one_document(scans: list[tuple[bytes, str]], dpi: int, openmp: bool = False) -> dict:
    from citadel.parsing.ocr import CHILD_SCRIPT, ocr_pages

    data, pages = one_document(scans), list(range(1, len(scans) + 1))
    started = time.perf_counter()
    if openmp:  # the same child, started without OMP_THREAD_LIMIT
        request = json.dumps({"pages": pages, "settings": dataclasses.asdict(settings(dpi)), "source": "bench.pdf"})
        env = {k: v for k, v in os.environ.items() if k != "OMP_THREAD_LIMIT"}
        out = subprocess.run([sys.executable, "-P", str(CHILD_SCRIPT), request], input=data, env=env,
                             capture_output=True, check=True).stdout
        texts = {int(k): v for k, v in json.loads(out)["texts"].items()}
    else:
        texts = ocr_pages(data, pages, settings(dpi), "bench.pdf")
    seconds = time.perf_counter() - started
    recalls = [word_recall(reference, texts.get(number, "")) for number, (_, reference) in enumerate(scans, 1)]
    return _row(dpi, "1 of all pages" + (", OpenMP threads" if openmp else ""), len(scans), seconds, recalls)


def run_parallel(scans: list[tuple[bytes, str]], dpi: int, parallel: int) -> dict:
    from citadel.parsing.ocr import ocr_pages

    def read(scan: tuple[bytes, str]) -> float:
        data, reference = scan
        return word_recall(reference, ocr_pages(data, [1], settings(dpi), "bench.pdf").get(1, ""))

    started = time.perf_counter()
    with ThreadPoolExecutor(parallel) as pool:
        recalls = list(pool.map(read, scans))
    return _row(dpi, f"{len(scans)} of 1 page, {parallel} at once", len(scans), time.perf_counter() - started,
                recalls)


def _row(dpi: int, documents: str, pages: int, seconds: float, recalls: list[float]) -> dict:
    return {"dpi": dpi, "documents": documents, "pages": pages, "seconds": round(seconds, 2),
            "pages_per_s": round(pages / seconds, 2), "word_recall": round(sum(recalls) / len(recalls), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=6, help=f"pages to read (at most {len(PAGES)})")
    parser.add_argument("--scan-dpi", type=int, default=200, help="resolution of the simulated scan")
    parser.add_argument("--dpi", default="150,200,300", help="OCR rendering resolutions, one run each")
    parser.add_argument("--parallel", type=int, default=2, help="documents at once in the parallel run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))  # run from a checkout without installing
    if not PDFS.exists():
        raise SystemExit(f"shared data not found at {PDFS} (see ../shared/data/SOURCES.md)")
    scans = scanned_pages(min(args.pages, len(PAGES)), args.scan_dpi)
    dpis = [int(d) for d in args.dpi.split(",")]
    default_dpi = 200 if 200 in dpis else dpis[0]
    results = [run_one_document(scans, dpi) for dpi in dpis]
    results.append(run_parallel(scans, default_dpi, args.parallel))
    results.append(run_one_document(scans, default_dpi, openmp=True))
    report = {"cpus": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2), "runs": results}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{os.cpu_count()} CPUs, load average {report['load_average_1m']} at the end")
    print("| OCR dpi | documents | pages | seconds | pages/s | word recall |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['dpi']} | {r['documents']} | {r['pages']} | {r['seconds']} | {r['pages_per_s']} | "
              f"{r['word_recall']} |")


if __name__ == "__main__":
    main()
