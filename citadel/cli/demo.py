"""`citadel demo` (what `make demo` runs): ingest the fictional tenants in examples/ and show
citations, a superseded version excluded, a Finance-only document invisible to Sales, and tenant
isolation, all through the same code paths as `citadel ingest` and `citadel retrieve`."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from rich.console import Console
from rich.panel import Panel

from citadel.cli.runtime import Runtime
from citadel.config import load_config
from citadel.ingestion import AclSpec, SourceFile, discover
from citadel.types import Principal

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEMO_HOME = Path("var/demo")
console = Console()

PDF_PAGES = [
    ("Remote Work Guide", "Acme staff may work remotely up to three days per week with their manager's agreement. "
     "Core collaboration hours are 10:00 to 15:00 in the team's home time zone."),
    ("Home office equipment", "Acme reimburses home office equipment up to 450 USD every two years. "
     "Monitors, chairs and headsets qualify; furniture other than chairs does not."),
    ("Working abroad", "Working from another country needs approval from People Operations at least 30 days "
     "in advance and is limited to 20 working days per calendar year."),
]


def generate_pdf(path: Path) -> Path:
    """The demo's PDF is generated at build time (a real text layer, three pages)."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_title("Acme Remote Work Guide")
    for heading, body in PDF_PAGES:
        pdf.add_page()
        pdf.set_font("Helvetica", "B", 16)
        pdf.multi_cell(0, 10, heading, new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("Helvetica", size=12)
        pdf.multi_cell(0, 7, body, new_x="LMARGIN", new_y="NEXT")
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(path))
    return path


def _show(runtime: Runtime, title: str, principal: Principal, question: str) -> list:
    result = runtime.retriever.retrieve(principal, question, top_k=3)
    lines = [f"[bold]{principal.user_id}[/bold] ({principal.tenant_id}; groups {sorted(principal.groups)}) asks: "
             f"[italic]{question}[/italic]  plan={result.plan}"]
    for rank, p in enumerate(result.passages, start=1):
        page = f", page {p.page}" if p.page else ""
        lines.append(f"[{rank}] {p.title} v{p.version} — {p.heading}{page}\n    {p.text[:160].strip()}")
    if not result.passages:
        lines.append("(no passages: nothing readable matches)")
    console.print(Panel("\n".join(lines), title=title))
    return result.passages


def _expect(condition: bool, failure: str) -> None:
    """The demo checks what it shows: a violated guarantee stops it with a non-zero exit."""
    if not condition:
        raise SystemExit(f"demo failed: {failure}")


def _answer(runtime: Runtime, title: str, principal: Principal, question: str):
    response = runtime.answer_service.ask(principal, question)
    lines = [f"[bold]{principal.user_id}[/bold] asks: [italic]{question}[/italic]", "", response.answer]
    for number, citation in enumerate(response.citations, start=1):
        page = f", page {citation['page']}" if citation["page"] else ""
        lines.append(f"  [{number}] {citation['title']} v{citation['version']} — {citation['heading']}{page}")
    if response.refused:
        lines.append(f"(refused: {response.reason})")
    console.print(Panel("\n".join(lines), title=title))
    return response


def _ingest(runtime: Runtime, tenant: str, files: list[SourceFile], acl: AclSpec) -> None:
    report = runtime.ingestor().ingest(tenant, files, acl, actor="demo").to_dict()
    console.print(f"ingested {tenant}: {report['published']} documents, {report['chunks']} chunks, "
                  f"tier {report['tier']}, failures {report['failed']}")


def run_demo() -> None:
    started = time.perf_counter()
    shutil.rmtree(DEMO_HOME, ignore_errors=True)
    config = load_config()
    config.home = DEMO_HOME
    runtime = Runtime(config=config)
    acme_acl = AclSpec.from_file(EXAMPLES / "acme" / "acl.yaml")
    acme_files = [f for f in discover([EXAMPLES / "acme"]) if "travel-policy-v3" not in f.source]
    pdf = generate_pdf(Path("examples/generated/acme/remote-work-guide.pdf"))
    acme_files += discover([pdf])
    _ingest(runtime, "acme", acme_files, acme_acl)
    _ingest(runtime, "northwind", discover([EXAMPLES / "northwind"]),
            AclSpec.from_file(EXAMPLES / "northwind" / "acl.yaml"))

    staff = Principal("acme", "alice", frozenset({"staff"}))
    _show(runtime, "1. A passage set with its citations (v2 is published)", staff, "What is the hotel limit per night?")
    _ingest(runtime, "acme", discover([EXAMPLES / "acme" / "travel-policy-v3.md"]), acme_acl)
    passages = _show(runtime, "2. v3 published: the superseded v2 is excluded", staff,
                     "What is the hotel limit per night?")
    _expect(all(p.version == 3 for p in passages if p.document_id == "travel-policy"), "superseded version leaked")
    _show(runtime, "3. A page citation from the generated PDF", staff, "How much is reimbursed for home office equipment?")

    sales = Principal("northwind", "sam", frozenset({"sales"}))
    finance = Principal("northwind", "fiona", frozenset({"finance"}))
    _show(runtime, "4. Northwind: the 2026 policy, not the superseded 2025 one", sales,
          "What standard discount can sales offer?")
    hidden = _show(runtime, "5. Finance-only margin model is invisible to Sales", sales,
                   "What is the target gross margin on hardware bundles?")
    _expect(all(p.document_id != "margin-model" for p in hidden), "finance-only document leaked")
    _show(runtime, "6. ... and visible to Finance", finance, "What is the target gross margin on hardware bundles?")
    cross = _show(runtime, "7. Scoped to Acme: Northwind's documents cannot be seen", staff,
                  "Northwind standard discount 12% annual contracts regional sales director")
    _expect(all(not p.chunk_id.startswith("northwind:") for p in cross), "cross-tenant leak")
    _answer(runtime, "8. A cited answer", staff, "What is the hotel limit per night in London?")
    refusal = _answer(runtime, "9. The documents are silent: an honest refusal", staff,
                      "What is the parental leave policy for contractors in Brazil?")
    _expect(refusal.refused, "expected a refusal for a question the documents do not answer")
    console.print(f"[green]demo finished in {time.perf_counter() - started:.1f} s[/green] (data in {DEMO_HOME})")


if __name__ == "__main__":
    run_demo()
