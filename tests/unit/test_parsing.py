"""Parsing: input guards, Markdown structure and cleanup, plain-text headings, PDF pages."""

from __future__ import annotations

import os
import textwrap

import pytest
from fpdf import FPDF
from fpdf.enums import EncryptionMethod

from citadel.errors import InputRejected, ParseError
from citadel.parsing import parse_bytes, parse_file
from citadel.parsing.markdown import clean_inline, plain_heading, strip_template_markup
from citadel.types import Block

LIMIT = 1_000_000


def md(text: str, source: str = "doc.md", max_bytes: int = LIMIT):
    return parse_bytes(textwrap.dedent(text).encode("utf-8"), source, max_bytes=max_bytes)


def all_blocks(parsed) -> list[Block]:
    return [block for section in parsed.sections for block in section.blocks]


def all_text(parsed) -> str:
    return "\n".join(block.text for block in all_blocks(parsed))


def make_pdf(pages: list[str], *, title: str | None = None, user_password: str | None = None) -> bytes:
    pdf = FPDF()
    if title:
        pdf.set_title(title)
    pdf.set_font("helvetica", size=12)
    for text in pages:
        pdf.add_page()
        if text:
            pdf.multi_cell(0, 8, text)
    if user_password is not None:
        pdf.set_encryption(
            owner_password="owner-secret",
            user_password=user_password,
            encryption_method=EncryptionMethod.AES_256,
        )
    return bytes(pdf.output())


# --- input guards ---------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["a.md", "a.txt", "a.pdf", "README"])
@pytest.mark.parametrize("data", [b"", b"  \n\t \r\n"])
def test_empty_input_is_rejected_before_parsing(source, data):
    with pytest.raises(InputRejected, match="empty") as info:
        parse_bytes(data, source, max_bytes=LIMIT)
    assert info.value.code == "input_rejected"
    assert source in str(info.value)


def test_input_over_max_bytes_is_rejected_with_size_and_limit():
    with pytest.raises(InputRejected) as info:
        parse_bytes(b"# T\n" + b"x" * 2_000, "big.md", max_bytes=1_000)
    message = str(info.value)
    assert "2,004 bytes" in message and "1,000" in message
    assert info.value.code == "input_rejected"


def test_parse_file_checks_size_before_reading(tmp_path, monkeypatch):
    path = tmp_path / "big.md"
    path.write_bytes(b"# Title\n\n" + b"word " * 500)

    def refuse_read(self):  # the file must not be loaded at all
        raise AssertionError("read_bytes called for an oversized file")

    monkeypatch.setattr(type(path), "read_bytes", refuse_read)
    with pytest.raises(InputRejected, match="over the limit"):
        parse_file(path, max_bytes=100)


def test_parse_file_parses_a_file_on_disk(tmp_path):
    path = tmp_path / "policy.md"
    path.write_text("# Policy\n\nBody text.\n", encoding="utf-8")
    parsed = parse_file(path, max_bytes=LIMIT)
    assert parsed.title == "Policy" and parsed.source == str(path)


def test_unsupported_extension_is_rejected():
    with pytest.raises(InputRejected, match=r"unsupported file type '\.docx'"):
        parse_bytes(b"PK\x03\x04", "report.docx", max_bytes=LIMIT)


@pytest.mark.parametrize("source", ["notes.md", "notes.txt"])
def test_invalid_utf8_is_a_parse_error_with_offset(source):
    data = b"# Title\n\ncaf\xe9 au lait\n"  # Latin-1 e-acute
    with pytest.raises(ParseError) as info:
        parse_bytes(data, source, max_bytes=LIMIT)
    message = str(info.value)
    assert "not valid UTF-8" in message and "byte offset 12" in message
    assert info.value.code == "invalid_utf8"


def test_random_bytes_named_pdf_are_a_parse_error():
    data = os.urandom(4096).replace(b"%PDF", b"xxxx")
    with pytest.raises(ParseError) as info:
        parse_bytes(data, "scan.pdf", max_bytes=LIMIT)
    assert "not a readable PDF" in str(info.value)
    assert info.value.code == "pdf_unreadable"


def test_truncated_pdf_is_a_parse_error():
    data = make_pdf(["Some text on a page."])
    with pytest.raises(ParseError, match="not a readable PDF"):
        parse_bytes(data[: len(data) // 3], "cut.pdf", max_bytes=LIMIT)


# --- Markdown -------------------------------------------------------------------------------------


def test_markdown_without_headings_or_title_is_titled_by_its_file_name():
    parsed = parse_bytes(b"Just a paragraph.\n\nAnother one.\n", "docs/how-to-submit.md", max_bytes=LIMIT)
    assert parsed.title == "how-to-submit"
    assert [s.heading_path for s in parsed.sections] == [("how-to-submit",)]
    assert [b.text for b in parsed.sections[0].blocks] == ["Just a paragraph.", "Another one."]


def test_markdown_with_only_front_matter_has_no_content():
    with pytest.raises(ParseError) as info:
        parse_bytes(b"---\ntitle: Moved\nredirect_to: /elsewhere/\n---\n", "moved.md", max_bytes=LIMIT)
    assert info.value.code == "no_content"


def test_markdown_title_alone_is_enough_location():
    parsed = md(
        """\
        ---
        title: Leave Policy
        ---
        Only a paragraph, no heading.
        """
    )
    assert parsed.title == "Leave Policy"
    assert [s.heading_path for s in parsed.sections] == [("Leave Policy",)]


def test_front_matter_title_wins_over_first_h1():
    parsed = md(
        """\
        ---
        title: "Travel: the **official** guide"
        keywords: [a, b]
        ---
        # Something else

        Text.
        """
    )
    assert parsed.title == "Travel: the official guide"
    assert parsed.sections[0].heading_path == ("Something else",)


def test_bad_yaml_front_matter_is_treated_as_absent():
    parsed = md(
        """\
        ---
        title: [unclosed
        : : :
        ---
        Intro text.

        # Real Title

        Body.
        """
    )
    assert parsed.title == "Real Title"
    assert "unclosed" not in all_text(parsed)
    assert parsed.sections[0].heading_path == ("Real Title",)  # intro goes under the title


def test_no_front_matter_and_no_h1_gives_empty_title_but_headings_locate():
    parsed = md("## Only an H2\n\nBody.\n")
    assert parsed.title == ""
    assert parsed.sections[0].heading_path == ("Only an H2",)


def test_template_shortcodes_and_comments_are_removed():
    parsed = md(
        """\
        # Title

        See [Docusign templates]({% page "/tools/docusign" %}) and {{ site.baseurl }}/x.
        {% include "step-indicator.html" steps: a
           current_step: 2 %}
        {% comment %}
        internal note that must not be indexed
        {% endcomment %}
        <!-- an html
        comment -->
        Visible text.
        """
    )
    text = all_text(parsed)
    for leftover in ("{%", "%}", "{{", "}}", "<!--", "internal note", "an html", "step-indicator"):
        assert leftover not in text
    assert "See Docusign templates and /x." in text
    assert "Visible text." in text


def test_strip_template_markup_handles_multiline_tags():
    assert strip_template_markup("a {%\n alert\n %}b{{\n x }}c") == "a bc"


def test_links_are_readable_and_images_dropped():
    assert clean_inline("Read [the guide](https://x.gov/g) now") == "Read the guide (https://x.gov/g) now"
    assert clean_inline("![logo](logo.png)Logo") == "Logo"
    assert clean_inline("[![badge](b.svg)](https://ci)") == ""
    assert clean_inline("[top](#top) and <https://a.b/c>") == "top and https://a.b/c"
    assert clean_inline("a<br/>b &amp; <strong>c</strong>") == "a b & c"


def test_heading_tree_paths():
    parsed = md(
        """\
        # Handbook

        Intro.

        ## Leave ##

        Leave text.

        ### Sick *leave* with [link](https://x)

        Sick text.

        ## Travel

        Travel text.

        Setext Heading
        --------------

        Setext text.
        """
    )
    paths = [s.heading_path for s in parsed.sections]
    assert paths == [
        ("Handbook",),
        ("Handbook", "Leave"),
        ("Handbook", "Leave", "Sick leave with link"),
        ("Handbook", "Travel"),
        ("Handbook", "Setext Heading"),
    ]
    assert parsed.title == "Handbook"


def test_plain_heading_strips_markup():
    assert plain_heading("**Bold** `code` [x](y) _it_ \\#1 ###") == "Bold code x it #1"
    assert plain_heading("Section {#anchor}") == "Section"


def test_code_fence_hash_lines_are_not_headings():
    parsed = md(
        """\
        # Setup

        ```sh
        # install the tools
        ## not a heading either
        npm install
        ```

        ~~~
        # still code
        ~~~

        After the code.
        """
    )
    assert [s.heading_path for s in parsed.sections] == [("Setup",)]
    kinds = [b.kind for b in parsed.sections[0].blocks]
    assert kinds == ["code", "code", "text"]
    assert "# install the tools\n## not a heading either" in parsed.sections[0].blocks[0].text


def test_unclosed_fence_runs_to_end_of_document():
    parsed = md("# T\n\n```\n# inside\n\n## inside too\n")
    assert len(parsed.sections) == 1 and [b.kind for b in parsed.sections[0].blocks] == ["code"]


def test_pipe_table_is_one_block():
    parsed = md(
        """\
        # Rates

        Before the table.
        | Year | Hours | Notes |
        | ---- | ----- | :---: |
        | 2015 | 599   | [link](https://a) |

        | 2016 | 963   | second group without blank line inside |
        | 2017 | 1620  | x |

        Name | Value
        ---- | -----
        a    | 1
        """
    )
    blocks = parsed.sections[0].blocks
    assert [b.kind for b in blocks] == ["text", "table", "table", "table"]
    assert blocks[1].text == (
        "| Year | Hours | Notes |\n| --- | --- | :---: |\n| 2015 | 599 | link (https://a) |"
    )
    assert blocks[3].text.splitlines()[0] == "Name | Value"
    assert len(blocks[3].text.splitlines()) == 3


def test_html_table_becomes_one_pipe_table_block():
    parsed = md(
        """\
        # Versions

        <table>
          <tr>
           <td><strong>Version</strong>
           </td>
           <td>Date</td>
          </tr>

          <tr><td>1.0</td><td>2022-03-20</td></tr>
        </table>
        """
    )
    (block,) = parsed.sections[0].blocks
    assert block == Block(kind="table", text="| Version | Date |\n| --- | --- |\n| 1.0 | 2022-03-20 |")


def test_markdown_with_only_front_matter_has_no_content():
    with pytest.raises(ParseError) as info:
        md("---\ntitle: Redirect\nredirect_to: https://x\n---\n")
    assert info.value.code == "no_content"


def test_crlf_and_bom_are_normalised():
    parsed = parse_bytes("\ufeff# T\r\n\r\nBody\r\n".encode(), "w.md", max_bytes=LIMIT)
    assert parsed.title == "T" and all_text(parsed) == "Body"


# --- plain text -----------------------------------------------------------------------------------


def test_text_headings_are_detected():
    text = textwrap.dedent(
        """\
        Employee Handbook
        =================

        Welcome paragraph that is long enough.

        1. Scope

        This policy applies to everyone.

        1.1 Exceptions

        None, really.

        GENERAL RULES

        Be kind.

        Working From Home

        Allowed on Fridays.

        This short line ends with a period.

        Still under working from home.
        """
    )
    parsed = parse_bytes(text.encode(), "handbook.txt", max_bytes=LIMIT)
    paths = [s.heading_path for s in parsed.sections]
    assert parsed.title == "Employee Handbook"
    assert paths == [
        ("Employee Handbook",),
        ("Employee Handbook", "1. Scope"),
        ("Employee Handbook", "1. Scope", "1.1 Exceptions"),
        ("GENERAL RULES",),
        ("GENERAL RULES", "Working From Home"),
    ]
    assert parsed.sections[-1].blocks[-1].text == "Still under working from home."
    assert parsed.format == "text"


def test_text_without_headings_is_titled_by_its_file_name():
    parsed = parse_bytes(b"just some words, lower case, no heading at all.\n\nmore words here.\n", "n.txt",
                         max_bytes=LIMIT)
    assert parsed.title == "n" and [s.heading_path for s in parsed.sections] == [("n",)]
    assert len(parsed.sections[0].blocks) == 2


def test_file_without_extension_is_plain_text():
    parsed = parse_bytes(b"NOTICE\n\nSome text.\n", "NOTICE", max_bytes=LIMIT)
    assert parsed.format == "text" and parsed.title == "NOTICE"


# --- PDF ------------------------------------------------------------------------------------------


def test_pdf_one_section_per_page_with_metadata_title():
    data = make_pdf(["First page text. It has two sentences.", "Second page text."], title="Annual Report")
    parsed = parse_bytes(data, "reports/ar.pdf", max_bytes=LIMIT)
    assert parsed.format == "pdf" and parsed.title == "Annual Report"
    assert [(s.page, s.heading_path) for s in parsed.sections] == [
        (1, ("Annual Report",)),
        (2, ("Annual Report",)),
    ]
    assert "Second page text." in parsed.sections[1].blocks[0].text


@pytest.mark.parametrize("title", [None, "0000764478-23-000041", "Untitled", "report.docx"])
def test_pdf_without_meaningful_title_uses_file_stem(title):
    parsed = parse_bytes(make_pdf(["Text."], title=title), "dir/BESTBUY_10Q.pdf", max_bytes=LIMIT)
    assert parsed.title == "BESTBUY_10Q"


def test_pdf_with_empty_user_password_is_decrypted():
    parsed = parse_bytes(make_pdf(["Secret-free text."], user_password=""), "e.pdf", max_bytes=LIMIT)
    assert "Secret-free text." in all_text(parsed)


def test_pdf_with_real_password_is_a_parse_error():
    with pytest.raises(ParseError) as info:
        parse_bytes(make_pdf(["Hidden."], user_password="s3cret"), "locked.pdf", max_bytes=LIMIT)
    assert info.value.code == "pdf_encrypted" and "password" in str(info.value)


def test_pdf_without_text_layer_is_a_parse_error():
    with pytest.raises(ParseError, match="no text layer") as info:
        parse_bytes(make_pdf(["", ""]), "scan.pdf", max_bytes=LIMIT)
    assert info.value.code == "no_text_layer"


def test_pdf_keeps_empty_pages_numbered():
    parsed = parse_bytes(make_pdf(["Page one.", "", "Page three."]), "gap.pdf", max_bytes=LIMIT)
    assert [s.page for s in parsed.sections] == [1, 2, 3]
    assert parsed.sections[1].blocks == []


def test_prose_between_thematic_breaks_is_not_front_matter():
    parsed = md("---\nJust prose here\n---\n\nMore text.\n")
    assert parsed.sections[0].heading_path == ("Just prose here",)  # a setext heading, kept
    assert all_text(parsed) == "More text."
