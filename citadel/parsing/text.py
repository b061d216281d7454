"""Plain-text parser: heuristic headings, blank-line paragraphs.

Also holds the small helpers the Markdown parser shares (strict UTF-8 decoding, paragraph splitting,
the no-headings error), so the two text formats fail the same way.
"""

from __future__ import annotations

from pathlib import PurePath

from citadel import regex
from citadel.errors import ParseError
from citadel.types import Block, ParsedDocument, Section

# A heading line is short: longer lines are almost always prose that happens to have no period.
MAX_HEADING_CHARS = 80
# Lines ending like this continue or introduce something, so they are not headings.
NON_HEADING_ENDINGS = (".", ",", ";", ":")
# Minor words that stay lower case inside a Title Case heading ("Terms of Use").
TITLE_CASE_MINOR_WORDS = frozenset(
    "a an and as at but by for from in into nor of on or over per the to vs via with".split()
)
# "1. Scope", "2.3 Rules", "4.1.2) Retention": the number of components gives the depth.
NUMBERED_HEADING = regex.compile("parsing.text.numbered_heading", r"^(\d+(?:\.\d+)*)[.)]?\s+\S")
# A setext-style underline under a heading line.
BLANK_LINE = regex.compile("parsing.text.blank_line", r"\n[ \t\f\v]*\n")
# A word starts with a letter (Python's [^\W\d_]: a word character that is no digit and no "_").
WORD = regex.compile("parsing.text.word", r"[\p{L}\p{Nl}\p{No}][\w'’-]*")
UNDERLINE = regex.compile("parsing.text.underline", r"^\s*(=+|-+)\s*$")
# Heading depths. Underlined with === or ALL CAPS reads as a document-level heading; numbered
# headings nest below it ("1." is level 2, "1.1" level 3); other Title Case lines sit at level 2.
TOP_LEVEL = 1
SUB_LEVEL = 2
NUMBERED_BASE_LEVEL = 1
MIN_CAPS_LETTERS = 2


def decode_utf8(data: bytes, source: str) -> str:
    """Strict UTF-8 decoding: a wrong encoding is reported, never silently replaced."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParseError(
            f"{source} is not valid UTF-8: byte 0x{data[exc.start]:02x} at byte offset {exc.start} "
            f"({exc.reason}); re-save the file as UTF-8",
            code="invalid_utf8",
        ) from exc
    # A byte-order mark and Windows/old-Mac line endings carry no content.
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def split_paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs (a whitespace-only line counts as blank), trimmed."""
    paragraphs = BLANK_LINE.split(text)
    return [p.strip("\n").rstrip() for p in paragraphs if p.strip()]


def located_sections(sections: list[Section], title: str) -> list[Section]:
    """Drop empty sections; text before the first heading is located under the title."""
    located = []
    for section in sections:
        if not section.blocks:
            continue
        if not section.heading_path and title:
            section.heading_path = (title,)
        located.append(section)
    return located


def title_from_source(source: str) -> str:
    """The title of a document that states none: its file name without the extension, the same
    fallback chunking uses, so a page with no heading is cited by its file name."""
    return PurePath(source).stem or source


def parse_text(data: bytes, source: str) -> ParsedDocument:
    """Parse plain text: headings by the heuristics below, everything else paragraphs."""
    lines = decode_utf8(data, source).split("\n")
    sections: list[Section] = []
    heading_stack: list[tuple[int, str]] = []
    current = Section(heading_path=(), page=None)
    paragraph: list[str] = []
    title = ""

    def flush_paragraph() -> None:
        text = "\n".join(paragraph).strip()
        if text:
            current.blocks.append(Block(kind="text", text=text))
        paragraph.clear()

    index = 0
    while index < len(lines):
        heading = _heading_at(lines, index)
        if heading is None:
            # A blank line or a lone ===/--- rule separates paragraphs.
            if lines[index].strip() and not UNDERLINE.match(lines[index]):
                paragraph.append(lines[index].rstrip())
            else:
                flush_paragraph()
            index += 1
            continue
        level, heading_text, consumed = heading
        flush_paragraph()
        sections.append(current)
        while heading_stack and heading_stack[-1][0] >= level:
            heading_stack.pop()
        heading_stack.append((level, heading_text))
        title = title or heading_text
        current = Section(heading_path=tuple(text for _, text in heading_stack), page=None)
        index += consumed
    flush_paragraph()
    sections.append(current)

    title = title or title_from_source(source)  # no heading-like line: the file name titles it
    if not any(section.blocks for section in sections):
        raise ParseError(f"{source} has no text to index", code="no_content")
    return ParsedDocument(
        title=title, sections=located_sections(sections, title), source=source, format="text"
    )


def _heading_at(lines: list[str], index: int) -> tuple[int, str, int] | None:
    """(level, text, lines consumed) if a heading starts at `index`, else None."""
    line = lines[index].strip()
    if not line or UNDERLINE.match(line):
        return None
    previous_blank = index == 0 or not lines[index - 1].strip()
    next_line = lines[index + 1] if index + 1 < len(lines) else ""
    underline = UNDERLINE.match(next_line)
    if previous_blank and underline and len(line) < MAX_HEADING_CHARS:
        level = TOP_LEVEL if underline.group(1).startswith("=") else SUB_LEVEL
        return level, line, 2
    if previous_blank and not next_line.strip() and index + 1 < len(lines):
        level = _standalone_heading_level(line)
        if level is not None:
            return level, line, 1
    return None


def _standalone_heading_level(line: str) -> int | None:
    """Level of a short line standing alone between blank lines, if it reads as a heading."""
    if len(line) >= MAX_HEADING_CHARS or line.endswith(NON_HEADING_ENDINGS):
        return None
    numbered = NUMBERED_HEADING.match(line)
    if numbered:
        return NUMBERED_BASE_LEVEL + len(numbered.group(1).split("."))
    if _is_all_caps(line):
        return TOP_LEVEL
    if _is_title_case(line):
        return SUB_LEVEL
    return None


def _is_all_caps(line: str) -> bool:
    letters = [c for c in line if c.isalpha()]
    return len(letters) >= MIN_CAPS_LETTERS and all(c.isupper() for c in letters)


def _is_title_case(line: str) -> bool:
    words = [w for w in WORD.findall(line)]
    if not words or not words[0][0].isupper():
        return False
    return all(w[0].isupper() or w.lower() in TITLE_CASE_MINOR_WORDS for w in words[1:])
