"""Document parsing: bytes + a source name -> a ParsedDocument of located sections.

The format comes from the source's extension. Input is refused (InputRejected) before any parsing
when it is empty, too large or of an unsupported type; parsing failures raise ParseError. Both carry
a machine-readable `code` and a message that names the source and the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path, PurePath

from citadel.errors import InputRejected
from citadel.parsing.markdown import parse_markdown
from citadel.parsing.ocr import OcrSettings
from citadel.parsing.pdf import parse_pdf
from citadel.parsing.text import parse_text
from citadel.types import ParsedDocument

Parser = Callable[[bytes, str], ParsedDocument]

# Extension (lower case, with the dot; "" for none) -> parser.
PARSERS_BY_EXTENSION: dict[str, Parser] = {
    ".md": parse_markdown,
    ".markdown": parse_markdown,
    ".pdf": parse_pdf,
    ".txt": parse_text,
    ".text": parse_text,
    "": parse_text,
}

__all__ = ["PARSERS_BY_EXTENSION", "OcrSettings", "parse_bytes", "parse_file", "supported_extensions"]


def supported_extensions() -> list[str]:
    return sorted(ext for ext in PARSERS_BY_EXTENSION if ext)


def parse_bytes(data: bytes, source: str, *, max_bytes: int, ocr: OcrSettings | None = None) -> ParsedDocument:
    """Parse `data`, dispatching on the extension of `source` (a file name or source key). `ocr`: how a
    PDF's scanned pages are read (None: they stay empty)."""
    parser = _parser_for(source)
    _check_size(len(data), source, max_bytes)
    if not data.strip():
        raise InputRejected(f"{source} is empty (0 bytes or only whitespace); nothing to index")
    if parser is parse_pdf:  # the one format with pages that may be images
        return parse_pdf(data, source, ocr)
    return parser(data, source)


def parse_file(path: str | Path, *, max_bytes: int, ocr: OcrSettings | None = None) -> ParsedDocument:
    """Parse a file; its size is checked before it is read, so a huge file is never loaded."""
    path = Path(path)
    _parser_for(str(path))
    _check_size(path.stat().st_size, str(path), max_bytes)
    return parse_bytes(path.read_bytes(), str(path), max_bytes=max_bytes, ocr=ocr)


def _parser_for(source: str) -> Parser:
    extension = PurePath(source).suffix.lower()
    parser = PARSERS_BY_EXTENSION.get(extension)
    if parser is None:
        raise InputRejected(
            f"{source}: unsupported file type {extension!r}; supported: "
            f"{', '.join(supported_extensions())} or no extension (plain text)"
        )
    return parser


def _check_size(size: int, source: str, max_bytes: int) -> None:
    if size > max_bytes:
        raise InputRejected(f"{source} is {size:,} bytes, over the limit of {max_bytes:,} bytes")
