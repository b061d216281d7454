"""OCR of scanned PDFs on real pages: two pages of a shared SEC filing rendered to images and saved
back as a PDF with no text layer. The first ingest's page budget is too small for Tesseract, so the
document lands in the dead-letter queue as ocr_timeout; `citadel ingest --retry-dead-letters` (its
code path, in-process) replays it with the budget times ingest.ocr.retry_multiplier, and the replay
publishes chunks that keep their page numbers and answer a question with the right page. An upload
of one scanned page (a queued job, citadel/ingest/runner.py) dead-letters the same way under its raw
key, and the replay reads that key back from the object store and publishes the version the upload
reserved."""

from __future__ import annotations

import shutil
import time

import pytest

from citadel.cli.ingest_cmd import IngestRequest, run_ingest
from citadel.config import OcrConfig, load_config
from citadel.errors import ParseError
from citadel.ingest.engine import TenantSources
from citadel.ingest.runner import UploadSpec, queue_upload
from citadel.ingest.sources import AclSpec, SourceFile, TrustedFields, discover
from citadel.ingest.steps import VersionSnapshot
from citadel.ingest.uploads import read_raw, version_prefix
from citadel.parsing import OcrSettings, parse_bytes
from citadel.parsing.ocr import CHILD_GRACE_S, ocr_paragraphs, scanned_copy
from citadel.types import Principal
from citadel.wiring import Wiring
from tests.conftest import shared_data
from indexing.records import records_from_jobs
from indexing.stages import ParseChunkStage
from tests.required import missing

FILING = "ULTABEAUTY_2023Q4_EARNINGS.pdf"
# Pages 2 and 3 of the filing (1-based) become pages 1 and 2 of the scan: page 1 holds the SG&A
# commentary, page 2 the balance-sheet commentary (merchandise inventories, 47 new stores).
FILING_PAGES = [2, 3]
SCAN_DPI = 100  # enough for Tesseract on this body text, and half the OCR time of 150
READER = Principal("t", "analyst", frozenset({"finance"}))
LIMIT = 10_000_000


def _require_tesseract() -> None:
    if shutil.which("tesseract") is None:
        missing("TESSERACT", "Tesseract is not installed (Debian: apt-get install tesseract-ocr)",
                "the OCR tests on scanned pages are skipped")


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    _require_tesseract()
    data = shared_data("pdfs", FILING).read_bytes()
    path = tmp_path_factory.mktemp("scans") / "ulta-scan.pdf"
    path.write_bytes(scanned_copy(data, FILING_PAGES, SCAN_DPI))
    return path


@pytest.fixture(scope="module")
def replayed(scan, tmp_path_factory):
    """The scan ingested with a 50 ms page budget (dead-lettered), then replayed with 1000 times that."""
    config = load_config(environ={
        "CITADEL_HOME": str(tmp_path_factory.mktemp("home")), "CITADEL_EMBEDDING__BACKEND": "hash",
        "CITADEL_ANSWER__CONFIRM": "false", "CITADEL_INGEST__OCR__PAGE_TIMEOUT_S": "0.05",
        "CITADEL_INGEST__OCR__RETRY_MULTIPLIER": "1000", "CITADEL_INGEST__OCR__DPI": str(SCAN_DPI)})
    runtime = Wiring(config=config)
    first = runtime.ingestor().ingest("t", discover([scan]), AclSpec.from_groups(["finance"]))
    letters = runtime.catalog.dead_letters("t")
    replay = run_ingest(runtime, IngestRequest(paths=[], tenant="t", groups=None, acl_file=None, manifest=None,
                                               retry_dead_letters=True, local=True))
    yield runtime, first, letters, replay
    runtime.close()


def test_an_ocr_timeout_is_dead_lettered_with_its_reason(replayed):
    _, first, letters, _ = replayed
    outcome = first.files[0]
    assert (outcome.status, outcome.code) == ("failed", "ocr_timeout")
    assert outcome.reason == f"{outcome.source} page 1: OCR ran past its 0.05 s page budget"
    assert [(letter["code"], letter["meta"]["groups"]) for letter in letters] == [("ocr_timeout", ["finance"])]


def test_the_replay_gets_the_longer_budget_and_publishes(replayed):
    runtime, _, _, replay = replayed
    assert [(r["published"], r["failed"]) for r in replay] == [(1, 0)]
    assert runtime.catalog.dead_letters("t") == []  # the letter is marked retried


def test_ocr_text_keeps_its_page_numbers_in_the_chunks(replayed):
    runtime = replayed[0]
    table = runtime.partitions.get("t").table
    by_page: dict[int, str] = {}
    for page, text in zip(table.column("page").to_pylist(), table.column("text").to_pylist()):
        by_page[page] = by_page.get(page, "") + text
    assert set(by_page) == {1, 2}
    assert "Selling, general and administrative" in by_page[1]
    assert "Merchandise inventories" in by_page[2] and "47 new stores" in by_page[2]
    assert "Merchandise inventories" not in by_page[1]


def test_a_question_about_a_scanned_page_cites_that_page(replayed):
    runtime = replayed[0]
    passages = runtime.retriever.retrieve(READER, "merchandise inventories increase 47 new stores").passages
    assert passages and (passages[0].page, passages[0].document_id) == (2, "ulta-scan")
    assert "47 new stores" in passages[0].text


UPLOAD = "ulta-upload"


def _replay_request() -> IngestRequest:
    return IngestRequest(paths=[], tenant="t", groups=None, acl_file=None, manifest=None, retry_dead_letters=True,
                         local=True)


@pytest.fixture(scope="module")
def uploaded(tmp_path_factory):
    """One scanned page uploaded as a queued job (50 ms page budget: dead-lettered by the runner),
    then `citadel ingest --retry-dead-letters` (its code path) with 1000 times the budget."""
    _require_tesseract()
    scan = scanned_copy(shared_data("pdfs", FILING).read_bytes(), FILING_PAGES[1:], SCAN_DPI)
    config = load_config(environ={
        "CITADEL_HOME": str(tmp_path_factory.mktemp("upload-home")), "CITADEL_EMBEDDING__BACKEND": "hash",
        "CITADEL_INGEST__OCR__PAGE_TIMEOUT_S": "0.05", "CITADEL_INGEST__OCR__RETRY_MULTIPLIER": "1000",
        "CITADEL_INGEST__OCR__DPI": str(SCAN_DPI)})
    runtime = Wiring(config=config)
    runtime.catalog.ensure_tenant("t")
    spec = UploadSpec("ulta.pdf", ("finance",), TrustedFields(), len(scan), "admin")
    queued = queue_upload(runtime.catalog, runtime.objects, "uploader", 30.0, time.time(), "t", UPLOAD, scan, spec)
    runner = runtime.job_runner()
    assert runner.run_once() == queued.job_id
    job = runtime.catalog.get_job(queued.job_id)
    letters = runtime.catalog.dead_letters("t")
    replay = run_ingest(runtime, _replay_request())
    yield runtime, queued, job, letters, replay
    runtime.close()


def test_an_uploads_ocr_timeout_is_dead_lettered_under_its_raw_key(uploaded):
    runtime, queued, job, letters, _ = uploaded
    [outcome] = job["report"]["files"]
    raw = read_raw(runtime.objects, "t", UPLOAD, queued.version)
    assert (outcome["status"], outcome["code"], outcome["source"]) == ("failed", "ocr_timeout", raw.key)
    assert raw.key.startswith(version_prefix("t", UPLOAD, queued.version))
    assert [(letter["source"], letter["code"], letter["meta"]["groups"]) for letter in letters] == [
        (raw.key, "ocr_timeout", ["finance"])]


def test_the_replay_reads_the_raw_key_and_publishes_the_reserved_version(uploaded):
    runtime, queued, _, _, replay = uploaded
    assert [(r["published"], r["failed"]) for r in replay] == [(1, 0)]
    [published] = replay[0]["files"]
    assert (published["status"], published["version"]) == ("published", queued.version)
    record = runtime.catalog.get_document("t", UPLOAD)
    assert (record.published_version, record.status) == (queued.version, "published")
    chunk_ids = runtime.catalog.manifest("t", UPLOAD, queued.version)
    assert chunk_ids and all(c.startswith(f"t:{UPLOAD}:v{queued.version}:") for c in chunk_ids)
    assert runtime.catalog.dead_letters("t") == []  # marked retried
    # A second replay finds nothing to do; the raw route's file is the published version's.
    assert run_ingest(runtime, _replay_request()) is None
    assert read_raw(runtime.objects, "t", UPLOAD, record.published_version).content[:4] == b"%PDF"


def test_a_replay_carries_its_longer_budget_through_the_ray_data_records(scan, tmp_path):
    """Ray Data's parse workers rebuild each source from its record: the replay flag travels as a column."""
    config = load_config(environ={"CITADEL_HOME": str(tmp_path), "CITADEL_EMBEDDING__BACKEND": "hash",
                                  "CITADEL_INGEST__OCR__PAGE_TIMEOUT_S": "0.001",
                                  "CITADEL_INGEST__OCR__RETRY_MULTIPLIER": "2"})
    reasons = []
    for replay in (False, True):
        source = SourceFile(scan, "ulta-scan", str(scan), replay=replay)
        records, acl = records_from_jobs([TenantSources("t", (source,), AclSpec.from_groups(["finance"]))])
        rows = ParseChunkStage(config, VersionSnapshot({}), acl)(records).to_pylist()
        reasons.append({(row["code"], row["reason"]) for row in rows})
    assert reasons == [{("ocr_timeout", f"{scan} page 1: OCR ran past its {budget} s page budget")}
                       for budget in ("0.001", "0.002")]


def test_a_document_budget_too_small_is_an_ocr_timeout(scan):
    settings = OcrSettings.from_config(OcrConfig(document_timeout_s=0.001))
    with pytest.raises(ParseError) as error:
        parse_bytes(scan.read_bytes(), "scan.pdf", max_bytes=LIMIT, ocr=settings)
    assert error.value.code == "ocr_timeout" and "the document's 0.001 s budget" in str(error.value)


def test_a_child_still_running_past_its_grace_is_killed(scan):
    """The parent's own deadline (budget + grace), for a child that hangs: here the budget ends 0.1 s
    after the child starts, before it can even report."""
    settings = OcrSettings(page_timeout_s=60, document_timeout_s=0.1 - CHILD_GRACE_S, dpi=SCAN_DPI, language="eng",
                           max_page_pixels=10_000_000)
    with pytest.raises(ParseError) as error:
        parse_bytes(scan.read_bytes(), "scan.pdf", max_bytes=LIMIT, ocr=settings)
    assert error.value.code == "ocr_timeout" and str(error.value).endswith("budget and was stopped")


def test_a_missing_language_is_an_ocr_failure(scan):
    settings = OcrSettings.from_config(OcrConfig(language="zzz"))
    with pytest.raises(ParseError) as error:
        parse_bytes(scan.read_bytes(), "scan.pdf", max_bytes=LIMIT, ocr=settings)
    assert error.value.code == "ocr_failed" and "page 1" in str(error.value)


def test_blank_pages_of_a_text_pdf_are_not_read(tmp_path):
    """A page with neither text nor an image is blank: no OCR child starts, so a tiny budget is no timeout."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("helvetica", size=12)
    for text in ("Page one.", "", "Page three."):
        pdf.add_page()
        if text:
            pdf.multi_cell(0, 8, text)
    settings = OcrSettings.from_config(OcrConfig(page_timeout_s=0.001, document_timeout_s=0.001))
    parsed = parse_bytes(bytes(pdf.output()), "gap.pdf", max_bytes=LIMIT, ocr=settings)
    assert [(s.page, [b.text for b in s.blocks]) for s in parsed.sections] == [
        (1, ["Page one."]), (2, []), (3, ["Page three."])]


def test_ocr_paragraphs_split_on_tesseract_block_breaks():
    text = "Net sales rose.\nThey rose 10%.\n\n\nInventories grew.\n\f"
    assert ocr_paragraphs(text) == ["Net sales rose.\nThey rose 10%.", "Inventories grew."]


def test_ocr_off_leaves_a_scan_refused_as_having_no_text_layer(scan):
    assert OcrSettings.from_config(OcrConfig(enabled=False)) is None
    with pytest.raises(ParseError) as error:
        parse_bytes(scan.read_bytes(), "scan.pdf", max_bytes=LIMIT, ocr=None)
    assert error.value.code == "no_text_layer"


def test_a_replay_multiplies_both_budgets():
    config = OcrConfig(page_timeout_s=2, document_timeout_s=30, retry_multiplier=3)
    first, replay = OcrSettings.from_config(config), OcrSettings.from_config(config, replay=True)
    assert (first.page_timeout_s, first.document_timeout_s) == (2, 30)
    assert (replay.page_timeout_s, replay.document_timeout_s) == (6, 90)
