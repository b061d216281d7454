"""The OCR child process (citadel.parsing.ocr.ocr_pages runs this file by its path): renders a PDF's
listed pages with pypdfium2 and reads them with Tesseract through pytesseract, within the page and
document budgets.

It imports nothing of citadel's (the package's imports would double its start-up time, paid once per
scanned document). In: argv[1] a JSON request {"pages", "settings", "source"}, stdin the PDF. Out: one
JSON object on stdout, {"texts": {page: text}} or {"error": {"code", "message"}} with the code
ocr_timeout or ocr_failed.
"""

from __future__ import annotations

import json
import math
import sys
import time

import pypdfium2 as pdfium
import pytesseract

POINTS_PER_INCH = 72
# pytesseract reports a killed Tesseract with a RuntimeError carrying this message (its timeout_manager).
TESSERACT_TIMEOUT_MESSAGE = "Tesseract process timeout"
OCR_TIMEOUT = "ocr_timeout"
OCR_FAILED = "ocr_failed"


class OcrFailure(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def read_pages(data: bytes, pages: list[int], settings: dict, source: str) -> dict[int, str]:
    """Tesseract's text of each listed page (1-based)."""
    deadline = time.monotonic() + settings["document_timeout_s"]
    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as error:
        raise OcrFailure(OCR_FAILED, f"{source}: the PDF cannot be rendered for OCR ({error})") from error
    texts: dict[int, str] = {}
    try:
        for number in pages:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise OcrFailure(OCR_TIMEOUT, f"{source}: OCR ran past the document's "
                                 f"{settings['document_timeout_s']:g} s budget before page {number} "
                                 f"({len(texts)} of {len(pages)} pages read)")
            image = render(document, number, settings, source)
            if settings["page_timeout_s"] <= remaining:
                timeout_s, budget = settings["page_timeout_s"], f"its {settings['page_timeout_s']:g} s page budget"
            else:
                timeout_s, budget = remaining, f"the document's {settings['document_timeout_s']:g} s budget"
            texts[number] = read_image(image, settings, timeout_s, f"{source} page {number}", budget)
    finally:
        document.close()
    return texts


def render(document, number: int, settings: dict, source: str):
    """The page as a grayscale PIL image at the configured resolution (lower when it would exceed the
    pixel bound)."""
    page = document[number - 1]
    try:
        width, height = page.get_size()
        return page.render(scale=render_scale(width, height, settings), grayscale=True).to_pil()
    except pdfium.PdfiumError as error:
        raise OcrFailure(OCR_FAILED, f"{source} page {number}: cannot be rendered for OCR ({error})") from error
    finally:
        page.close()


def render_scale(width_pt: float, height_pt: float, settings: dict) -> float:
    """Pixels per point: the configured DPI, reduced so the page stays within `max_page_pixels`."""
    scale = settings["dpi"] / POINTS_PER_INCH
    return min(scale, math.sqrt(settings["max_page_pixels"] / max(width_pt * height_pt, 1.0)))


def read_image(image, settings: dict, timeout_s: float, where: str, budget: str) -> str:
    """Tesseract's text of one page image; pytesseract kills Tesseract after `timeout_s` (`budget` says
    which budget that is, for the reason)."""
    try:
        return pytesseract.image_to_string(image, lang=settings["language"], timeout=max(timeout_s, 0.001))
    except pytesseract.TesseractNotFoundError as error:
        raise OcrFailure(OCR_FAILED, f"{where}: needs OCR, and Tesseract is not installed "
                                     "(Debian: tesseract-ocr)") from error
    except pytesseract.TesseractError as error:
        raise OcrFailure(OCR_FAILED, f"{where}: Tesseract failed ({str(error.message).strip()[:200]})") from error
    except RuntimeError as error:
        if str(error) != TESSERACT_TIMEOUT_MESSAGE:
            raise OcrFailure(OCR_FAILED, f"{where}: OCR failed ({error})") from error
        raise OcrFailure(OCR_TIMEOUT, f"{where}: OCR ran past {budget}") from error


def main() -> int:
    request = json.loads(sys.argv[1])
    try:
        reply: dict = {"texts": read_pages(sys.stdin.buffer.read(), request["pages"], request["settings"],
                                           request["source"])}
    except OcrFailure as failure:
        reply = {"error": {"code": failure.code, "message": str(failure)}}
    sys.stdout.write(json.dumps(reply))
    return 0


if __name__ == "__main__":
    sys.exit(main())
