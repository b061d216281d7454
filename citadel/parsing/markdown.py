"""Markdown parser: front matter title, heading tree, whole tables and code blocks, readable text.

Line-based on purpose: handbooks mix GitHub Markdown, Jekyll/Liquid/Eleventy template tags and raw
HTML, and what retrieval needs is only where each paragraph, table and code block sits in the
heading tree, not a full CommonMark rendering.
"""

from __future__ import annotations

import html
import re
import textwrap

import yaml

from citadel.errors import ParseError
from citadel.parsing.text import decode_utf8, located_sections, no_headings_error
from citadel.types import Block, BlockKind, ParsedDocument, Section

# --- document-level markup removed before block parsing -------------------------------------------
FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)^(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL | re.MULTILINE)
# A Liquid comment hides its whole body, so it goes before the generic tag pattern.
TEMPLATE_COMMENT = re.compile(r"{%-?\s*comment\s*-?%}.*?{%-?\s*endcomment\s*-?%}", re.DOTALL)
TEMPLATE_TAG = re.compile(r"{%.*?%}", re.DOTALL)
TEMPLATE_EXPRESSION = re.compile(r"{{.*?}}", re.DOTALL)
HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)

# --- block structure ------------------------------------------------------------------------------
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
ATX_CLOSING_HASHES = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
THEMATIC_BREAK = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
# Fences may be indented (inside list items); a backtick fence's info string has no backticks.
FENCE_OPEN = re.compile(r"^[ \t]*(`{3,}|~{3,})(.*)$")
TABLE_SEPARATOR_ROW = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)+\|?\s*$|^\s*\|\s*:?-+:?\s*\|\s*$")
SEPARATOR_CELL = re.compile(r"(:?)-+(:?)")
HTML_TABLE_OPEN = re.compile(r"^\s*<table\b", re.IGNORECASE)
HTML_TABLE_CLOSE = re.compile(r"</table\s*>", re.IGNORECASE)
HTML_ROW = re.compile(r"<tr\b[^>]*>(.*?)(?:</tr\s*>|(?=<tr\b)|\Z)", re.DOTALL | re.IGNORECASE)
HTML_CELL = re.compile(r"<t[dh]\b[^>]*>(.*?)(?:</t[dh]\s*>|(?=<t[dh]\b)|\Z)", re.DOTALL | re.IGNORECASE)
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")
BLOCKQUOTE_MARKER = re.compile(r"^[ \t]*>[ \t]?", re.MULTILINE)

# --- inline markup --------------------------------------------------------------------------------
IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)|!\[[^\]]*\]\[[^\]]*\]")
INLINE_LINK = re.compile(r"\[((?:\\.|[^\]\\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+[\"'(][^)]*)?\)")
REFERENCE_LINK = re.compile(r"\[([^\]]+)\]\[[^\]]*\]")
AUTOLINK = re.compile(r"<((?:https?|ftp)://[^>\s]+|[^>\s@]+@[^>\s@]+)>")
LINE_BREAK_TAG = re.compile(r"<br\s*/?>", re.IGNORECASE)
HTML_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>")
STRONG = re.compile(r"(\*\*|__)(.+?)\1")
EMPHASIS = re.compile(r"(?<![\w*])([*_])(?!\s)(.+?)(?<!\s)\1(?![\w*])")
INLINE_CODE = re.compile(r"`+([^`]*)`+")
HEADING_ATTRIBUTES = re.compile(r"\s*\{[:#][^}]*\}\s*$")
BACKSLASH_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|<>])")


def parse_markdown(data: bytes, source: str) -> ParsedDocument:
    text = decode_utf8(data, source)
    front_matter, body = read_front_matter(text)
    front_matter_title = front_matter_title_of(front_matter)
    builder = _SectionBuilder()
    _read_blocks(strip_template_markup(body).split("\n"), builder)
    sections = builder.finish()
    title = front_matter_title or builder.first_h1
    if not title and builder.heading_count == 0:
        raise no_headings_error(source)
    located = located_sections(sections, title)
    if not located:
        raise ParseError(
            f"{source} has no text left after removing front matter, comments and template tags",
            code="no_content",
        )
    return ParsedDocument(title=title, sections=located, source=source, format="markdown", metadata=front_matter)


def read_front_matter(text: str) -> tuple[dict, str]:
    """(YAML front matter as a dict or {}, body). Unparseable YAML counts as no front matter
    data, but its block is still cut so that its lines do not read as a setext heading."""
    match = FRONT_MATTER.match(text)
    if not match:
        return {}, text
    body = text[match.end() :]
    try:
        data = yaml.safe_load(match.group(1))
    except yaml.YAMLError:
        return {}, body
    if not isinstance(data, dict):  # prose between two thematic breaks, not front matter
        return {}, text
    return data, body


def front_matter_title_of(front_matter: dict) -> str:
    title = front_matter.get("title")
    if title is None or isinstance(title, (dict, list)):
        return ""
    return plain_heading(str(title))


def split_front_matter(text: str) -> tuple[str, str]:
    """(title from YAML front matter or "", body)."""
    front_matter, body = read_front_matter(text)
    return front_matter_title_of(front_matter), body


def strip_template_markup(text: str) -> str:
    """Remove Liquid/Jinja/Eleventy `{% %}` tags and `{{ }}` expressions (also multi-line ones)
    and HTML comments: they are build instructions, not content."""
    for pattern in (HTML_COMMENT, TEMPLATE_COMMENT, TEMPLATE_TAG, TEMPLATE_EXPRESSION):
        text = pattern.sub("", text)
    return text


def clean_inline(text: str) -> str:
    """Readable text: images dropped, links as `text (url)`, HTML tags and entities resolved."""
    return html.unescape(_strip_inline_markup(text))


def _strip_inline_markup(text: str) -> str:
    text = IMAGE.sub("", text)
    text = INLINE_LINK.sub(lambda m: _render_link(m.group(1), m.group(2)), text)
    text = REFERENCE_LINK.sub(r"\1", text)
    text = AUTOLINK.sub(r"\1", text)
    text = LINE_BREAK_TAG.sub(" ", text)
    return HTML_TAG.sub("", text)


def plain_heading(text: str) -> str:
    """Heading text without closing #s, attributes, link/emphasis/code markup or escapes."""
    text = ATX_CLOSING_HASHES.sub("", text)
    text = HEADING_ATTRIBUTES.sub("", text)
    text = IMAGE.sub("", text)
    text = INLINE_LINK.sub(r"\1", text)
    text = REFERENCE_LINK.sub(r"\1", text)
    text = HTML_TAG.sub("", text)
    text = INLINE_CODE.sub(r"\1", text)
    text = STRONG.sub(r"\2", text)
    text = EMPHASIS.sub(r"\2", text)
    text = BACKSLASH_ESCAPE.sub(r"\1", text)
    return " ".join(html.unescape(text).split())


def _render_link(label: str, url: str) -> str:
    label = " ".join(label.split())
    if not label:
        return ""  # an empty label is what is left of an image link (a badge): nothing to read
    if not url or url.startswith("#") or url.removeprefix("mailto:") == label:
        return label  # in-page anchors and emptied template links add nothing to the text
    return f"{label} ({url})"


class _SectionBuilder:
    """Accumulates blocks under the current heading path while lines are read."""

    def __init__(self) -> None:
        self.sections: list[Section] = []
        self.heading_stack: list[tuple[int, str]] = []
        self.current = Section(heading_path=(), page=None)
        self.paragraph: list[str] = []
        self.first_h1 = ""
        self.heading_count = 0

    def add_paragraph_line(self, line: str) -> None:
        self.paragraph.append(line)

    def flush_paragraph(self) -> None:
        raw = "\n".join(self.paragraph)
        self.paragraph.clear()
        # Tags go before quote markers: a multi-line tag can end with a lone ">" line.
        text = html.unescape(BLOCKQUOTE_MARKER.sub("", _strip_inline_markup(raw))).strip()
        if text:
            self.current.blocks.append(Block(kind="text", text=text))

    def add_block(self, kind: BlockKind, text: str) -> None:
        self.flush_paragraph()
        if text.strip():
            self.current.blocks.append(Block(kind=kind, text=text))

    def can_take_setext_underline(self) -> bool:
        return bool(self.paragraph) and not LIST_ITEM.match(self.paragraph[0])

    def setext_heading(self, underline: str) -> None:
        text = " ".join(line.strip() for line in self.paragraph)
        self.paragraph.clear()
        self.start_heading(1 if underline.strip().startswith("=") else 2, text)

    def start_heading(self, level: int, raw_text: str) -> None:
        self.flush_paragraph()
        text = plain_heading(raw_text)
        if not text:
            return  # an empty heading names nothing; keep the current path
        self.heading_count += 1
        if level == 1 and not self.first_h1:
            self.first_h1 = text
        self.sections.append(self.current)
        while self.heading_stack and self.heading_stack[-1][0] >= level:
            self.heading_stack.pop()
        self.heading_stack.append((level, text))
        self.current = Section(heading_path=tuple(t for _, t in self.heading_stack), page=None)

    def finish(self) -> list[Section]:
        self.flush_paragraph()
        self.sections.append(self.current)
        return self.sections


def _read_blocks(lines: list[str], builder: _SectionBuilder) -> None:
    index = 0
    while index < len(lines):
        index = _read_one(lines, index, builder)


def _read_one(lines: list[str], index: int, builder: _SectionBuilder) -> int:
    """Consume the construct starting at `index`; return the index after it."""
    line = lines[index]
    fence = _fence_opening(line)
    if fence:
        end = _fence_end(lines, index, fence)
        builder.add_block("code", textwrap.dedent("\n".join(lines[index:end])).strip("\n"))
        return end
    if HTML_TABLE_OPEN.match(line):
        end = _html_table_end(lines, index)
        if end is not None:
            builder.add_block("table", html_table_to_pipe_table("\n".join(lines[index:end])))
            return end
    if _pipe_table_starts(lines, index):
        end = _pipe_table_end(lines, index)
        builder.add_block("table", normalize_pipe_table(lines[index:end]))
        return end
    heading = ATX_HEADING.match(line)
    if heading:
        builder.start_heading(len(heading.group(1)), heading.group(2) or "")
    elif SETEXT_UNDERLINE.match(line) and builder.can_take_setext_underline():
        builder.setext_heading(line)
    elif not line.strip() or THEMATIC_BREAK.match(line):
        builder.flush_paragraph()
    else:
        builder.add_paragraph_line(line)
    return index + 1


def _fence_opening(line: str) -> str | None:
    match = FENCE_OPEN.match(line)
    if not match:
        return None
    fence, info = match.groups()
    if fence.startswith("`") and "`" in info:
        return None  # ```inline``` code on one line, not a fence
    return fence


def _fence_end(lines: list[str], start: int, fence: str) -> int:
    """Index after the closing fence; an unclosed fence runs to the end of the document."""
    closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
    for index in range(start + 1, len(lines)):
        if closing.match(lines[index]):
            return index + 1
    return len(lines)


def _pipe_table_starts(lines: list[str], index: int) -> bool:
    line = lines[index]
    if line.lstrip().startswith("|"):
        return True
    next_line = lines[index + 1] if index + 1 < len(lines) else ""
    return "|" in line and bool(TABLE_SEPARATOR_ROW.match(next_line))


def _pipe_table_end(lines: list[str], start: int) -> int:
    index = start
    while index < len(lines) and lines[index].strip() and "|" in lines[index]:
        index += 1
    return index


def normalize_pipe_table(rows: list[str]) -> str:
    """Readable rows with padding collapsed and separator dashes shortened: the alignment
    padding of hand-formatted tables is whitespace and dashes that would cost tokens."""
    normalized = []
    for row in rows:
        if TABLE_SEPARATOR_ROW.match(row):
            normalized.append(SEPARATOR_CELL.sub(r"\1---\2", " ".join(row.split())))
        else:
            normalized.append(" ".join(clean_inline(row).split()))
    return "\n".join(normalized)


def _html_table_end(lines: list[str], start: int) -> int | None:
    for index in range(start, len(lines)):
        if HTML_TABLE_CLOSE.search(lines[index]):
            return index + 1
    return None


def html_table_to_pipe_table(markup: str) -> str:
    """An HTML <table> as a pipe table (first row as header) so both table forms read alike."""
    rows = [
        cells
        for row_markup in HTML_ROW.findall(markup)
        if (cells := [_html_cell_text(cell) for cell in HTML_CELL.findall(row_markup)])
    ]
    if not rows:
        return " ".join(clean_inline(markup).split())
    header_separator = ["---"] * len(rows[0])
    return "\n".join("| " + " | ".join(cells) + " |" for cells in [rows[0], header_separator, *rows[1:]])


def _html_cell_text(cell_markup: str) -> str:
    return " ".join(clean_inline(cell_markup).split()).replace("|", "\\|")
