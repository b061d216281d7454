"""Chunking: packing, never-split tables/code, sentence splitting, in-section overlap, ids."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from citadel.chunking import chunk_document, context_header, count_tokens, split_text
from citadel.parsing import parse_bytes
from citadel.types import Block, ParsedDocument, Section, content_hash


def sentences(prefix: str, n: int, words: int = 9) -> str:
    """n distinct sentences of `words` words + a period each (words+1 tokens)."""
    return " ".join(f"{prefix}{i} " + " ".join(["word"] * (words - 1)) + "." for i in range(n))


def doc(*sections: Section, title: str = "Doc", source: str = "dir/doc.md", fmt="markdown"):
    return ParsedDocument(title=title, sections=list(sections), source=source, format=fmt)


def chunk(parsed, **kwargs):
    kwargs.setdefault("tenant_id", "acme")
    kwargs.setdefault("document_id", "hr-1")
    kwargs.setdefault("version", 3)
    return chunk_document(parsed, **kwargs)


def table_text(rows: int) -> str:
    lines = ["| Name | Value |", "| --- | --- |"]
    lines += [f"| item{i} | value number {i} |" for i in range(rows)]
    return "\n".join(lines)


def test_count_tokens_counts_words_and_punctuation():
    assert count_tokens("Hello, world!") == 4
    assert count_tokens("") == 0
    assert count_tokens("  multiple   spaces\n") == 2


def test_ids_are_stable_and_ordinals_sequential():
    parsed = doc(
        Section(("A",), None, [Block("text", sentences("a", 60))]),
        Section(("B",), None, [Block("text", "Short.")]),
    )
    first, second = chunk(parsed, max_tokens=100), chunk(parsed, max_tokens=100)
    assert first == second
    assert [c.chunk_id for c in first] == [f"acme:hr-1:v3:{i:04d}" for i in range(len(first))]
    assert [c.ordinal for c in first] == list(range(len(first)))
    assert len(first) > 2


def test_chunk_fields():
    parsed = doc(Section(("Leave", "Sick"), None, [Block("text", "Rest when ill.")]), title="Handbook")
    (c,) = chunk(parsed)
    assert c.title == "Handbook"
    assert c.heading_path == ("Leave", "Sick")
    assert c.context_header == "Handbook > Leave > Sick"
    assert c.content_hash == content_hash("Rest when ill.")
    assert c.source == "dir/doc.md" and c.page is None and c.section_index == 0
    assert c.embed_text == "Handbook > Leave > Sick\nRest when ill."


def test_pdf_context_header_has_page_and_no_repeated_title():
    parsed = doc(Section(("Report",), 7, [Block("text", "Revenue grew.")]), title="Report", fmt="pdf")
    (c,) = chunk(parsed)
    assert c.context_header == "Report (page 7)" and c.page == 7
    assert context_header("Other", ("Report",), 2) == "Other > Report (page 2)"


def test_title_override_and_source_stem_fallback():
    parsed = doc(Section((), None, [Block("text", "Body.")]), title="", source="x/travel-guide.md")
    (c,) = chunk(parsed)
    assert c.title == "travel-guide" and c.heading_path == ("travel-guide",)
    (c,) = chunk(parsed, title_override="Travel Guide")
    assert c.title == "Travel Guide" and c.heading_path == ("Travel Guide",)
    assert c.has_location


def test_small_blocks_pack_into_one_chunk_and_sections_are_not_merged():
    parsed = doc(
        Section(("A",), None, [Block("text", "One."), Block("text", "Two.")]),
        Section(("B",), None, [Block("text", "Three.")]),
        Section(("C",), None, [Block("text", "Four.")]),
    )
    chunks = chunk(parsed)
    assert [c.text for c in chunks] == ["One.\n\nTwo.", "Three.", "Four."]
    assert [c.heading_path for c in chunks] == [("A",), ("B",), ("C",)]
    assert [c.section_index for c in chunks] == [0, 1, 2]


def test_table_that_fits_stays_whole_and_a_bigger_one_is_cut_between_rows_with_its_header():
    small = table_text(10)
    big = table_text(60)
    assert count_tokens(big) > 400
    parsed = doc(Section(("Rates",), None, [Block("text", sentences("a", 5)), Block("table", small),
                                            Block("table", big.replace("| Name |", "| Big |")),
                                            Block("text", sentences("b", 5))]))
    chunks = chunk(parsed)
    assert sum(c.text.count(small) for c in chunks) == 1  # whole, in one chunk
    pieces = [c for c in chunks if "| Big |" in c.text]
    assert len(pieces) > 1  # never truncated: cut between rows
    for piece in pieces:
        assert piece.text.startswith("| Big | Value |\n| --- | --- |\n| item")  # each piece reads as a table
        assert count_tokens(piece.embed_text) <= 400
    for i in range(60):  # every row exactly once
        assert sum(c.text.count(f"| item{i} |") for c in pieces) == 1


def test_code_block_is_whole_when_it_fits_else_cut_between_lines():
    code = "\n".join(f"line_{i} = compute({i})" for i in range(120))
    parsed = doc(Section(("Code",), None, [Block("code", code)]))
    (c,) = chunk(parsed, max_tokens=1200, overlap_tokens=10)
    assert c.text == code
    chunks = chunk(parsed, max_tokens=100, overlap_tokens=10)
    assert len(chunks) > 1 and all(count_tokens(c.embed_text) <= 100 for c in chunks)
    assert "\n".join(c.text for c in chunks) == code  # whole lines, in order, nothing repeated


def test_every_embedded_text_fits_the_window_header_included():
    title = "A long handbook title " * 3
    parsed = doc(Section(("Travel", "Per diem", "Exceptions"), None,
                         [Block("text", sentences("s", 80)), Block("table", table_text(40))]), title=title)
    chunks = chunk(parsed, max_tokens=120, overlap_tokens=20)
    assert all(count_tokens(c.embed_text) <= 120 for c in chunks)
    assert all(c.context_header.startswith(title.strip()) for c in chunks)


def test_an_absurdly_long_heading_path_is_shortened_not_allowed_to_fill_the_window():
    heading = " ".join(f"h{i}" for i in range(200))
    parsed = doc(Section((heading,), None, [Block("text", sentences("s", 20))]))
    chunks = chunk(parsed, max_tokens=100, overlap_tokens=10)
    assert chunks and all(count_tokens(c.context_header) <= 25 for c in chunks)
    assert all(c.context_header.endswith("…") and count_tokens(c.embed_text) <= 100 for c in chunks)


def test_a_single_unbroken_run_longer_than_the_window_is_cut_between_characters():
    blob = "x" * 5000
    long_words = lambda text: len(text) // 3  # a counter where one "word" costs many tokens
    parsed = doc(Section(("Blob",), None, [Block("text", blob)]))
    chunks = chunk(parsed, max_tokens=100, overlap_tokens=10, count=long_words)
    assert all(long_words(c.embed_text) <= 100 for c in chunks)
    assert "".join("".join(c.text.split()) for c in chunks) == blob


def test_long_text_block_splits_on_sentences_within_max_tokens():
    text = sentences("s", 100)  # 1000 tokens
    parsed = doc(Section(("Long",), None, [Block("text", text)]))
    chunks = chunk(parsed, max_tokens=120, overlap_tokens=20)
    assert len(chunks) > 8
    assert all(count_tokens(c.text) <= 120 for c in chunks)
    assert all(c.text.endswith(".") for c in chunks)  # cut at sentence ends, not mid-sentence
    for i in range(100):
        assert any(f"s{i} word" in c.text for c in chunks)


def test_sentence_free_text_falls_back_to_words():
    text = " ".join(f"w{i}" for i in range(500))
    pieces = split_text(text, 50)
    assert all(count_tokens(p) <= 50 for p in pieces)
    assert " ".join(pieces).split() == text.split()


def shared_overlap(previous: str, current: str) -> str:
    """The longest prefix of `current` (in whole sentences) that is also a suffix of `previous`."""
    current_sentences = re.split(r"(?<=\.)\s+", current)
    best = ""
    for n in range(1, len(current_sentences) + 1):
        prefix = " ".join(current_sentences[:n])
        if previous.endswith(prefix):
            best = prefix
    return best


def test_overlap_repeats_whole_sentences_inside_a_section():
    parsed = doc(Section(("Long",), None, [Block("text", sentences("s", 60))]))
    chunks = chunk(parsed, max_tokens=100, overlap_tokens=25)
    assert len(chunks) >= 3
    for previous, current in zip(chunks, chunks[1:]):
        overlap = shared_overlap(previous.text, current.text)
        assert overlap, "each continued chunk starts with the previous chunk's tail"
        assert 10 <= count_tokens(overlap) <= 25  # ~overlap_tokens, whole sentences
        assert overlap.startswith("s") and overlap.endswith(".")
        assert count_tokens(current.text) <= 100


def test_no_overlap_across_sections():
    parsed = doc(
        Section(("A",), None, [Block("text", sentences("a", 30))]),
        Section(("B",), None, [Block("text", sentences("b", 30))]),
    )
    chunks = chunk(parsed, max_tokens=100, overlap_tokens=25)
    a_chunks = [c for c in chunks if c.heading_path == ("A",)]
    b_chunks = [c for c in chunks if c.heading_path == ("B",)]
    assert len(a_chunks) > 1 and len(b_chunks) > 1
    assert shared_overlap(a_chunks[0].text, a_chunks[1].text)  # overlap inside A exists
    assert b_chunks[0].text.startswith("b0 word")
    assert not any(word.startswith("a") for c in b_chunks for word in c.text.split() if word != "word")
    assert not any(word.startswith("b") for c in a_chunks for word in c.text.split())


def test_zero_overlap_gives_disjoint_chunks():
    parsed = doc(Section(("A",), None, [Block("text", sentences("s", 40))]))
    chunks = chunk(parsed, max_tokens=100, overlap_tokens=0)
    words = [w for c in chunks for w in c.text.split()]
    assert words == sentences("s", 40).split()


def test_no_overlap_after_a_table():
    table = table_text(10)
    parsed = doc(Section(("T",), None, [Block("table", table), Block("text", sentences("after", 30))]))
    chunks = chunk(parsed, max_tokens=150, overlap_tokens=30)
    assert sum(c.text.count("| item9 |") for c in chunks) == 1  # the table is never repeated
    assert all("| Name |" not in c.text for c in chunks[1:])


def test_whitespace_blocks_produce_no_chunks():
    parsed = doc(
        Section(("Empty",), None, [Block("text", "   \n ")]),
        Section(("Full",), None, [Block("text", "Content.")]),
    )
    chunks = chunk(parsed)
    assert [c.text for c in chunks] == ["Content."]
    assert chunks[0].section_index == 1


def test_invalid_token_budget_is_refused():
    parsed = doc(Section(("A",), None, [Block("text", "x")]))
    with pytest.raises(ValueError):
        chunk(parsed, max_tokens=50, overlap_tokens=50)


def test_markdown_end_to_end_code_fence_and_table():
    source = (
        "---\ntitle: Ops Guide\n---\n# Deploy\n\nRun this:\n\n"
        "```sh\n# comment, not a heading\nmake deploy\n```\n\n"
        "## Limits\n\n| Env | Max |\n| --- | --- |\n| prod | 5 |\n"
    )
    parsed = parse_bytes(source.encode(), "ops.md", max_bytes=10_000)
    chunks = chunk(parsed)
    assert [c.heading_path for c in chunks] == [("Deploy",), ("Deploy", "Limits")]
    assert all(c.title == "Ops Guide" for c in chunks)
    assert "# comment, not a heading" in chunks[0].text
    assert chunks[1].context_header == "Ops Guide > Deploy > Limits"
    assert chunks[1].text == "| Env | Max |\n| --- | --- |\n| prod | 5 |"


# --- properties -----------------------------------------------------------------------------------

WORD = st.text(alphabet="abcdefghij", min_size=1, max_size=8)
SENTENCE = st.lists(WORD, min_size=1, max_size=30).map(lambda words: " ".join(words) + ".")
TEXT_BLOCK = st.lists(SENTENCE, min_size=1, max_size=40).map(" ".join).map(lambda t: Block("text", t))
TABLE_BLOCK = st.integers(min_value=1, max_value=80).map(lambda n: Block("table", table_text(n)))


@settings(max_examples=60, deadline=None)
@given(
    blocks=st.lists(st.one_of(TEXT_BLOCK, TABLE_BLOCK), min_size=1, max_size=6),
    max_tokens=st.integers(min_value=40, max_value=400),
    overlap=st.integers(min_value=0, max_value=39),
)
def test_chunk_invariants(blocks, max_tokens, overlap):
    blocks = [  # distinct headers and rows per table, so one table is never a prefix of another
        Block(b.kind, b.text.replace("| Name |", f"| Name{i} |").replace("| item", f"| t{i}item"))
        for i, b in enumerate(blocks)
    ]
    parsed = doc(Section(("S",), None, blocks))
    chunks = chunk(parsed, max_tokens=max_tokens, overlap_tokens=overlap)
    text_budget = max_tokens - count_tokens(context_header("Doc", ("S",), None))
    for c in chunks:
        assert count_tokens(c.embed_text) <= max_tokens  # the model reads every token of every chunk
        assert c.heading_path == ("S",)
    for block in blocks:
        if block.kind != "table":
            continue
        if count_tokens(block.text) <= text_budget:  # a table that fits is whole, in exactly one chunk
            assert sum(c.text.count(block.text) for c in chunks) == 1
        else:  # a bigger one is cut between rows: every row exactly once
            for row in block.text.split("\n")[2:]:
                assert sum(c.text.count(row + "\n") + c.text.endswith(row) for c in chunks) == 1
    # No text is lost: every source word appears, in order, in the chunk stream.
    stream = " ".join(c.text for c in chunks).split()
    position = 0
    for word in " ".join(b.text for b in blocks).split():
        position = stream.index(word, position) + 1
