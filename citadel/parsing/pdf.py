"""PDF parser (pypdf): one section per page, so every chunk can cite its page. A page with no text
layer that shows an image (a scan) is read by OCR when the caller passes OcrSettings (citadel.parsing.ocr)."""

from __future__ import annotations

import logging
from io import BytesIO
from pathlib import PurePath

from pypdf import PdfReader
from pypdf import PasswordType
from pypdf.errors import DependencyError

from citadel import regex
from citadel.errors import ParseError
from citadel.parsing.ocr import OcrSettings, ocr_pages, ocr_paragraphs
from citadel.types import Block, ParsedDocument, Section

log = logging.getLogger(__name__)

# Extracted lines ending a sentence and clearly shorter than the page's full line width end a
# paragraph: pypdf gives no blank lines between paragraphs, only the ragged last line shows it.
PARAGRAPH_END_PUNCTUATION = (".", "!", "?", ":", "”", '"')
SHORT_LINE_RATIO = 0.75
# A metadata title needs some letters to be a title: filings often carry an accession number
# ("0000764478-23-000041") or a placeholder there.
MIN_TITLE_LETTERS = 4
PLACEHOLDER_TITLES = frozenset({"untitled", "document", "title", "microsoft word", "pdf"})
FILE_NAME_TITLE = regex.compile(
    "parsing.pdf.file_name_title", r"\.(docx?|pdf|pptx?|xlsx?|rtf|odt|indd)$", regex.IGNORECASE
)


def parse_pdf(data: bytes, source: str, ocr: OcrSettings | None = None) -> ParsedDocument:
    """`ocr`: read the pages without a text layer (ParseError ocr_timeout / ocr_failed when that fails);
    None: leave them empty."""
    reader = _open_reader(data, source)
    title = meaningful_title(reader) or PurePath(source).stem
    sections = [
        Section(heading_path=(title,), page=number, blocks=_page_blocks(page, source, number))
        for number, page in enumerate(reader.pages, start=1)
    ]
    textless = [section for section in sections if not section.blocks]
    if textless and ocr is not None:
        _read_scanned_pages(data, source, textless, ocr)
    if not any(section.blocks for section in sections):
        needs = "OCR found no text on its pages" if ocr is not None else "a scanned PDF needs OCR (ingest.ocr)"
        raise ParseError(f"{source}: no text layer (no page has extractable text; {needs})", code="no_text_layer")
    return ParsedDocument(title=title, sections=sections, source=source, format="pdf")


def _read_scanned_pages(data: bytes, source: str, sections: list[Section], ocr: OcrSettings) -> None:
    """Fill each textless page's section with its OCR text; the section keeps its page number, so
    chunks of a scanned page cite it like any other."""
    texts = ocr_pages(data, [section.page for section in sections], ocr, source)
    for section in sections:
        paragraphs = ocr_paragraphs(texts.get(section.page, ""))
        section.blocks = [Block(kind="text", text=paragraph) for paragraph in paragraphs]


def _open_reader(data: bytes, source: str) -> PdfReader:
    # pypdf raises many exception types on malformed input (PdfReadError, but also ValueError,
    # KeyError, ...), so any failure while opening untrusted bytes is reported as unreadable.
    try:
        reader = PdfReader(BytesIO(data))
        if reader.is_encrypted:
            _decrypt_with_empty_password(reader, source)
        len(reader.pages)  # forces the page tree to load, where broken files fail
    except ParseError:
        raise
    except DependencyError as exc:
        raise ParseError(
            f"{source} is encrypted and decrypting it needs the `cryptography` package: {exc}",
            code="pdf_encrypted",
        ) from exc
    except Exception as exc:
        raise ParseError(
            f"{source} is not a readable PDF ({type(exc).__name__}: {exc})", code="pdf_unreadable"
        ) from exc
    return reader


def _decrypt_with_empty_password(reader: PdfReader, source: str) -> None:
    """Many published PDFs are encrypted only to set permissions, with an empty user password."""
    if reader.decrypt("") == PasswordType.NOT_DECRYPTED:
        raise ParseError(f"{source} is encrypted with a password; cannot read it", code="pdf_encrypted")


def meaningful_title(reader: PdfReader) -> str:
    """The metadata title if it reads like one, else ""."""
    try:
        raw = reader.metadata.title if reader.metadata else None
    except Exception:  # a broken info dictionary only costs us the title
        return ""
    title = " ".join(str(raw or "").split())
    letters = sum(c.isalpha() for c in title)
    if letters < MIN_TITLE_LETTERS or title.lower() in PLACEHOLDER_TITLES:
        return ""
    if FILE_NAME_TITLE.search(title):
        return ""
    return title


def _page_blocks(page, source: str, number: int) -> list[Block]:
    try:
        text = page.extract_text() or ""
    except Exception as exc:  # one broken page should not lose the rest of the document
        log.warning("%s: text extraction failed on page %d: %s", source, number, exc)
        return []
    return [Block(kind="text", text=paragraph) for paragraph in page_paragraphs(text)]


def page_paragraphs(text: str) -> list[str]:
    """Group a page's extracted lines into paragraphs (whitespace-only lines are layout noise)."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    full_width = max(len(line) for line in lines)
    paragraphs: list[str] = []
    current: list[str] = []
    for line in lines:
        current.append(line)
        if line.endswith(PARAGRAPH_END_PUNCTUATION) and len(line) < SHORT_LINE_RATIO * full_width:
            paragraphs.append("\n".join(current))
            current = []
    if current:
        paragraphs.append("\n".join(current))
    return paragraphs
