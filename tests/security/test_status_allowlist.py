"""Document approval is an allowlist of statuses, not an exact-match denylist.

Before: a document was withheld only when its status was exactly one of a few words ("draft",
"archived", ...), so "Draft v2", "DRAFT - do not share" or "internal only" were published to readers.
Now approval is an allowlist of published statuses (`ingest.published_statuses`, default just
"published"; case and surrounding space ignored): any other trusted status is skipped with reason
`not_approved`, and a document whose job states no status publishes as before.

Driven through the Ingestor on a directory whose operator trusts front matter (the status comes
from front matter only then; an upload states it in the request body).
"""

from __future__ import annotations

import pytest

from citadel.ingest.sources import AclSpec, discover

BODY = "# {title}\n\n## Section\n\nThe {title} text.\n"
STATUSES = {
    "draft-v2": "Draft v2",
    "draft-loud": "DRAFT - do not share",
    "internal": "internal only",
    "archived-spaced": "archived ",
    "lower-draft": "draft",
    "published-spaced": " Published ",
    "published": "published",
}
APPROVED = {"published-spaced", "published", "no-status"}


def _front_matter_ingest(runtime, tmp_path, **config):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, status in STATUSES.items():
        (docs / f"{name}.md").write_text(f"---\nstatus: {status}\n---\n" + BODY.format(title=name))
    (docs / "no-status.md").write_text(BODY.format(title="no-status"))
    try:
        files = discover([docs], trust_front_matter=True)
    except TypeError:  # before the trust flag existed, front matter was always read
        files = discover([docs])
    return runtime.ingestor().ingest("t", files, AclSpec.from_groups(["staff"]))


def test_only_allowlisted_statuses_are_published(make_runtime, tmp_path):
    runtime = make_runtime()
    report = _front_matter_ingest(runtime, tmp_path)
    outcomes = {f.document_id: (f.status, f.code) for f in report.files}
    for name in STATUSES:
        expected = ("published", None) if name in APPROVED else ("skipped", "not_approved")
        assert outcomes[name] == expected, (name, STATUSES[name], outcomes[name])
    assert outcomes["no-status"] == ("published", None)
    published = {d.document_id for d in runtime.catalog.list_documents("t") if d.status == "published"}
    assert published == APPROVED


def test_the_allowlist_is_configuration(make_runtime, tmp_path):
    runtime = make_runtime(ingest={"published_statuses": ["published", "internal only"]})
    report = _front_matter_ingest(runtime, tmp_path)
    outcomes = {f.document_id: f.status for f in report.files}
    assert outcomes["internal"] == "published" and outcomes["draft-v2"] == "skipped"


@pytest.mark.parametrize("status", ["Draft v2", "draft", "DRAFT ", "archived"])
def test_an_uploaded_status_outside_the_allowlist_is_not_published(make_runtime, tmp_path, status):
    from citadel.ingest.sources import SourceFile

    try:
        from citadel.ingest.sources import TrustedFields
    except ImportError:  # before: no trusted fields; the file's own status was the only one
        TrustedFields = None
    path = tmp_path / "note.md"
    if TrustedFields is None:
        path.write_text(f"---\nstatus: {status}\n---\n" + BODY.format(title="note"))
        source = SourceFile(path, "note", str(path))
    else:
        path.write_text(BODY.format(title="note"))
        source = SourceFile(path, "note", str(path), TrustedFields(status=status))
    report = make_runtime().ingestor().ingest("t", [source], AclSpec.from_groups(["staff"]))
    assert [(f.status, f.code) for f in report.files] == [("skipped", "not_approved")]
