"""Markdown parser: front matter title, heading tree, whole tables and code blocks, readable text.

Line-based on purpose: handbooks mix GitHub Markdown, Jekyll/Liquid/Eleventy template tags and raw
HTML, and what retrieval needs is only where each paragraph, table and code block sits in the
heading tree, not a full CommonMark rendering.
"""

from __future__ import annotations

import html
import textwrap

import yaml

from citadel import regex
from citadel.errors import ParseError
from citadel.parsing.text import decode_utf8, located_sections, title_from_source
from citadel.types import Block, BlockKind, ParsedDocument, Section

# --- document-level markup removed before block parsing -------------------------------------------
FRONT_MATTER = regex.compile(
    "parsing.markdown.front_matter", r"\A---[ \t]*\n(.*?)^(?:---|\.\.\.)[ \t]*(?:\n|\Z)", regex.DOTALL | regex.MULTILINE
)
# A Liquid comment hides its whole body, so it goes before the generic tag pattern.
TEMPLATE_COMMENT = regex.compile(
    "parsing.markdown.template_comment", r"{%-?\s*comment\s*-?%}.*?{%-?\s*endcomment\s*-?%}", regex.DOTALL
)
TEMPLATE_TAG = regex.compile("parsing.markdown.template_tag", r"{%.*?%}", regex.DOTALL)
TEMPLATE_EXPRESSION = regex.compile("parsing.markdown.template_expression", r"{{.*?}}", regex.DOTALL)
HTML_COMMENT = regex.compile("parsing.markdown.html_comment", r"<!--.*?-->", regex.DOTALL)

# --- block structure ------------------------------------------------------------------------------
ATX_HEADING = regex.compile("parsing.markdown.atx_heading", r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
ATX_CLOSING_HASHES = regex.compile("parsing.markdown.atx_closing_hashes", r"(?:^|[ \t]+)#+[ \t]*$")
SETEXT_UNDERLINE = regex.compile("parsing.markdown.setext_underline", r"^ {0,3}(=+|-+)[ \t]*$")
# Three or more of one of "-", "*", "_" (one alternative per character: RE2 has no back-references).
THEMATIC_BREAK = regex.compile(
    "parsing.markdown.thematic_break", r"^ {0,3}(?:-(?:[ \t]*-){2,}|\*(?:[ \t]*\*){2,}|_(?:[ \t]*_){2,})[ \t]*$"
)
# Fences may be indented (inside list items); a backtick fence's info string has no backticks.
FENCE_OPEN = regex.compile("parsing.markdown.fence_open", r"^[ \t]*(`{3,}|~{3,})(.*)$")
TABLE_SEPARATOR_ROW = regex.compile(
    "parsing.markdown.table_separator_row", r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)+\|?\s*$|^\s*\|\s*:?-+:?\s*\|\s*$"
)
SEPARATOR_CELL = regex.compile("parsing.markdown.separator_cell", r"(:?)-+(:?)")
HTML_TABLE_OPEN = regex.compile("parsing.markdown.html_table_open", r"^\s*<table\b", regex.IGNORECASE)
HTML_TABLE_CLOSE = regex.compile("parsing.markdown.html_table_close", r"</table\s*>", regex.IGNORECASE)
# A row (cell) runs from its opening tag to its closing tag, the next opening tag or the end, as HTML
# allows unclosed ones (`_html_parts`: RE2 has no look-ahead).
HTML_ROW_OPEN = regex.compile("parsing.markdown.html_row_open", r"<tr\b[^>]*>", regex.IGNORECASE)
HTML_ROW_CLOSE = regex.compile("parsing.markdown.html_row_close", r"</tr\s*>", regex.IGNORECASE)
HTML_CELL_OPEN = regex.compile("parsing.markdown.html_cell_open", r"<t[dh]\b[^>]*>", regex.IGNORECASE)
HTML_CELL_CLOSE = regex.compile("parsing.markdown.html_cell_close", r"</t[dh]\s*>", regex.IGNORECASE)
LIST_ITEM = regex.compile("parsing.markdown.list_item", r"^\s*(?:[-*+]|\d+[.)])\s")
BLOCKQUOTE_MARKER = regex.compile("parsing.markdown.blockquote_marker", r"^[ \t]*>[ \t]?", regex.MULTILINE)

# --- inline markup --------------------------------------------------------------------------------
IMAGE = regex.compile("parsing.markdown.image", r"!\[[^\]]*\]\([^)]*\)|!\[[^\]]*\]\[[^\]]*\]")
INLINE_LINK = regex.compile(
    "parsing.markdown.inline_link", r"\[((?:\\.|[^\]\\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+[\"'(][^)]*)?\)"
)
REFERENCE_LINK = regex.compile("parsing.markdown.reference_link", r"\[([^\]]+)\]\[[^\]]*\]")
AUTOLINK = regex.compile("parsing.markdown.autolink", r"<((?:https?|ftp)://[^>\s]+|[^>\s@]+@[^>\s@]+)>")
LINE_BREAK_TAG = regex.compile("parsing.markdown.line_break_tag", r"<br\s*/?>", regex.IGNORECASE)
HTML_TAG = regex.compile("parsing.markdown.html_tag", r"</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>")
# One alternative per marker (RE2 has no back-references); the text is group 1 or 2.
STRONG = regex.compile("parsing.markdown.strong", r"\*\*(.+?)\*\*|__(.+?)__")
# *text* or _text_: no word character or "*" on either side, no space just inside the markers. The
# characters either side are matched (or the text's edge) instead of looked around, and
# `_strip_emphasis` resumes after the closing marker, leaving the character after it to the next one.
EMPHASIS = regex.compile(
    "parsing.markdown.emphasis",
    r"(?:^|[^\w*])(?P<marked>\*(?P<star>\S(?:.*?\S)??)\*|_(?P<under>\S(?:.*?\S)??)_)(?:[^\w*]|$)",
)
INLINE_CODE = regex.compile("parsing.markdown.inline_code", r"`+([^`]*)`+")
HEADING_ATTRIBUTES = regex.compile("parsing.markdown.heading_attributes", r"\s*\{[:#][^}]*\}\s*$")
BACKSLASH_ESCAPE = regex.compile("parsing.markdown.backslash_escape", r"\\([\\`*_{}\[\]()#+\-.!|<>])")


def parse_markdown(data: bytes, source: str) -> ParsedDocument:
    text = decode_utf8(data, source)
    front_matter, body = read_front_matter(text)
    front_matter_title = front_matter_title_of(front_matter)
    builder = _SectionBuilder()
    _read_blocks(strip_template_markup(body).split("\n"), builder)
    sections = builder.finish()
    title = front_matter_title or builder.first_h1
    if not title and builder.heading_count == 0:
        # A page without a title or any heading is still a document: its file name titles it and
        # locates its text. Only a page with no text left is refused (no_content, below).
        title = title_from_source(source)
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


def _strip_emphasis(text: str) -> str:
    """`text` with each *emphasis* or _emphasis_ replaced by its content (one linear scan)."""
    pieces, done = [], 0
    for match in EMPHASIS.scan(text, resume="marked"):
        start, end = match.span("marked")
        content = match.group("star") if match.group("star") is not None else match.group("under")
        pieces += [text[done:start], content]
        done = end
    return "".join(pieces) + text[done:]


def plain_heading(text: str) -> str:
    """Heading text without closing #s, attributes, link/emphasis/code markup or escapes."""
    text = ATX_CLOSING_HASHES.sub("", text)
    text = HEADING_ATTRIBUTES.sub("", text)
    text = IMAGE.sub("", text)
    text = INLINE_LINK.sub(r"\1", text)
    text = REFERENCE_LINK.sub(r"\1", text)
    text = HTML_TAG.sub("", text)
    text = INLINE_CODE.sub(r"\1", text)
    text = STRONG.sub(lambda match: match.group(1) if match.group(1) is not None else match.group(2), text)
    text = _strip_emphasis(text)
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
    for index in range(start + 1, len(lines)):
        closing = lines[index].strip(" \t")  # at least as many fence characters, and nothing else
        if len(closing) >= len(fence) and closing == fence[0] * len(closing):
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


def _html_parts(markup: str, opening: regex.LinearPattern, closing: regex.LinearPattern) -> list[str]:
    """The content of each element: from its opening tag to the first closing tag or next opening
    tag, whichever comes first, or the end (one pass over each tag list)."""
    opens = [match.span() for match in opening.finditer(markup)]
    closes = [match.start() for match in closing.finditer(markup)]
    parts, next_close = [], 0
    for index, (_, content_start) in enumerate(opens):
        next_open = opens[index + 1][0] if index + 1 < len(opens) else len(markup)
        while next_close < len(closes) and closes[next_close] < content_start:
            next_close += 1
        close = closes[next_close] if next_close < len(closes) else len(markup)
        parts.append(markup[content_start:min(close, next_open)])
    return parts


def html_table_to_pipe_table(markup: str) -> str:
    """An HTML <table> as a pipe table (first row as header) so both table forms read alike."""
    rows = [
        cells
        for row_markup in _html_parts(markup, HTML_ROW_OPEN, HTML_ROW_CLOSE)
        if (cells := [_html_cell_text(cell) for cell in _html_parts(row_markup, HTML_CELL_OPEN, HTML_CELL_CLOSE)])
    ]
    if not rows:
        return " ".join(clean_inline(markup).split())
    header_separator = ["---"] * len(rows[0])
    return "\n".join("| " + " | ".join(cells) + " |" for cells in [rows[0], header_separator, *rows[1:]])


def _html_cell_text(cell_markup: str) -> str:
    return " ".join(clean_inline(cell_markup).split()).replace("|", "\\|")
