"""OCR of PDF pages that have no text layer (a scan): pdfium renders the page, Tesseract reads it.

Rendering is pypdfium2 (PDFium, Chrome's PDF engine, shipped in its PyPI wheel: no system package, and
it renders to memory). Reading is Tesseract (Debian's tesseract-ocr) through pytesseract.

Both run in a child process per document (citadel/parsing/ocr_child.py), never in the ingest worker:
the parent kills the child's whole process group when the document's time is up, so a hung render or
OCR never hangs ingestion, and PDFium (not thread-safe) never renders two documents at once. Inside
the child pytesseract runs `tesseract` per page and kills it when the page's time is up. Every page is
bounded by `page_timeout_s`, and all of a document's OCR, rendering included, by `document_timeout_s`. A timeout
raises ParseError `ocr_timeout`, any other failure (Tesseract missing, a language not installed, a page
pdfium cannot render) `ocr_failed`. Either dead-letters the whole document: publishing it without the
pages that could not be read would lose them silently. A replay of the letter (`citadel ingest
--retry-dead-letters`) gets the budgets times `retry_multiplier`.

Only a page that shows an image is read (found in the caller's process: counting a page's objects
renders nothing): a page with neither text nor image is blank, and OCR on it would only cost time, and
fail where Tesseract is not installed. A text PDF with blank pages never starts a child.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from io import BytesIO
from pathlib import Path

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from citadel.config import OcrConfig
from citadel.errors import ParseError

POINTS_PER_INCH = 72
# Nested form objects searched for an image: scanners put the page image at the top level or one form down.
IMAGE_SEARCH_DEPTH = 3
# PDFium is not thread-safe: what runs of it in the caller's process (finding the pages that show an
# image; `scanned_copy`) holds this lock.
_PDFIUM = threading.Lock()
# The child that reads one document, run by its path (it imports nothing of citadel's).
CHILD_SCRIPT = Path(__file__).with_name("ocr_child.py")
# The parent kills the child this long after the document's budget: the child reports its own timeout
# (naming the page) unless it hangs, and needs a moment to start (imports) and to stop Tesseract.
CHILD_GRACE_S = 10.0
# Tesseract's OpenMP threads spin while they wait: on a busy 2-core machine pages took more than twice as
# long with them as with one thread (benchmarks/ocr_pages.py). Parallelism comes from documents in parallel.
CHILD_ENVIRONMENT = {"OMP_THREAD_LIMIT": "1"}


@dataclass(frozen=True)
class OcrSettings:
    """What one document's OCR may spend and how it reads (built from OcrConfig)."""

    page_timeout_s: float
    document_timeout_s: float
    dpi: int
    language: str
    max_page_pixels: int

    @classmethod
    def from_config(cls, config: OcrConfig, *, replay: bool = False) -> "OcrSettings | None":
        """The settings of a first attempt, or of a dead letter's replay (longer budgets); None: OCR is off."""
        if not config.enabled:
            return None
        scale = config.retry_multiplier if replay else 1.0
        return cls(config.page_timeout_s * scale, config.document_timeout_s * scale, config.dpi,
                   config.language, config.max_page_pixels)


def ocr_pages(data: bytes, page_numbers: Sequence[int], settings: OcrSettings, source: str) -> dict[int, str]:
    """Tesseract's text of each listed page (1-based) that shows an image, read in a child process; a
    page without an image is left out. Raises ParseError `ocr_timeout` or `ocr_failed`."""
    scanned = pages_showing_images(data, page_numbers, source)
    if not scanned:
        return {}
    request = json.dumps({"pages": scanned, "settings": asdict(settings), "source": source})
    # -P: the script's folder (this room) stays off the child's import path.
    child = subprocess.Popen([sys.executable, "-P", str(CHILD_SCRIPT), request], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                             env={**os.environ, **CHILD_ENVIRONMENT})
    try:
        out, err = child.communicate(data, timeout=settings.document_timeout_s + CHILD_GRACE_S)
    except subprocess.TimeoutExpired:
        _kill_group(child)
        raise ParseError(f"{source}: OCR ran past the document's {settings.document_timeout_s:g} s budget and "
                         "was stopped", code="ocr_timeout") from None
    return _child_result(out, err, child.returncode, source)


def pages_showing_images(data: bytes, page_numbers: Sequence[int], source: str) -> list[int]:
    """The listed pages (1-based) that show an image: only those can hold a scan. Counting a page's
    objects parses it without rendering, so this stays in the caller's process."""
    with _PDFIUM:
        try:
            document = pdfium.PdfDocument(data)
        except pdfium.PdfiumError as error:
            raise ParseError(f"{source}: the PDF cannot be opened for OCR ({error})", code="ocr_failed") from error
        try:
            return [number for number in page_numbers if _shows_an_image(document[number - 1])]
        finally:
            document.close()


def _shows_an_image(page: pdfium.PdfPage) -> bool:
    try:
        return any(True for _ in page.get_objects(filter=(pdfium_c.FPDF_PAGEOBJ_IMAGE,), max_depth=IMAGE_SEARCH_DEPTH))
    finally:
        page.close()


def _kill_group(child: subprocess.Popen) -> None:
    """The child and the Tesseract it runs (its own session, so its own process group)."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.communicate()


def _child_result(out: bytes, err: bytes, returncode: int, source: str) -> dict[int, str]:
    try:
        reply = json.loads(out)
    except ValueError:
        detail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {returncode}"]
        raise ParseError(f"{source}: OCR stopped unexpectedly ({detail[0][:200]})", code="ocr_failed") from None
    if "error" in reply:
        raise ParseError(reply["error"]["message"], code=reply["error"]["code"])
    return {int(number): text for number, text in reply["texts"].items()}


def ocr_paragraphs(text: str) -> list[str]:
    """Tesseract separates text blocks by blank lines; each block is a paragraph, its lines kept."""
    paragraphs = []
    current: list[str] = []
    for line in text.replace("\f", "\n").splitlines():
        if line.strip():
            current.append(line.strip())
        elif current:
            paragraphs.append("\n".join(current))
            current = []
    if current:
        paragraphs.append("\n".join(current))
    return paragraphs


def scanned_copy(data: bytes, page_numbers: Sequence[int], dpi: int) -> bytes:
    """An image-only PDF of the listed pages (1-based), as a scanner makes one: no text layer. For tests,
    benchmarks and the demo, which need scanned pages of real documents."""
    with _PDFIUM:
        document = pdfium.PdfDocument(data)
        try:
            images = [document[number - 1].render(scale=dpi / POINTS_PER_INCH, grayscale=True).to_pil()
                      for number in page_numbers]
        finally:
            document.close()
    out = BytesIO()
    images[0].save(out, "PDF", save_all=True, append_images=images[1:], resolution=float(dpi))
    return out.getvalue()
