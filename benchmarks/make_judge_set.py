"""The claim set for judging the judge (DESIGN.md §11): claims from real answers, each with
the text of the source it cites, for two annotators to label supported / not_supported.

Answers come from the real pipeline (MiniLM embedder, the trained reader confirming, the extractive
generator: the CPU defaults) over the four handbook tenants (questions from the paraphrase set's dev
split and the regression set) and the Northwind example (a temporary home built here). Each answer is
split into claims (`split_claims`); a claim keeps the expanded section text its marker cites (what the
generator saw), cut to at most 2,000 characters around the claim's best-matching sentence.

So that some claims are NOT supported, part of the unique claims are turned into:
- `swapped_source`: paired with a neighbouring numbered source of the same answer (mis-attributed);
- `perturbed_figure`: one figure of the claim changed (12% -> 15%, 2 years -> 5 years), same source;
- `other_source`: paired with the top section of another document that a search for the claim finds
  (same topic, does not contain the claim's text);
the rest stay `real`. How each item was made is written to a separate file (origins.jsonl) that
annotators never see. The home given is copied first, so the run writes nothing into it.

    python benchmarks/make_judge_set.py [--home /work/measure/i26/home] [--seed 28] [--out tests/regression/judge]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from citadel.answer.validator import marker_numbers, split_claims, strip_markers  # noqa: E402
from citadel.config import load_config  # noqa: E402
from citadel.eval.rag import DEFAULT_SET, PARAPHRASE_SET, RagItem, load_set  # noqa: E402
from citadel.types import Principal  # noqa: E402
from citadel.wiring import Wiring  # noqa: E402

DEFAULT_HOME = Path("/work/measure/i26/home")
DEFAULT_OUT = ROOT / "tests" / "regression" / "judge"
NORTHWIND = ROOT / "examples" / "northwind"
HANDBOOK_TENANTS = ("18f", "civicactions", "sourcegraph", "github")
SEED = 28
MAX_SOURCE_CHARS = 2_000
MIN_CLAIM_WORDS = 5
# Unique claims wanted per tenant before origins are assigned (real share ~ 0.64).
HANDBOOK_POOL = 42
NORTHWIND_POOL = 24
# Of each tenant's pool: how many become each made-unsupported kind (the rest stay real).
MADE_SHARE = {"perturbed_figure": 0.13, "swapped_source": 0.12, "other_source": 0.11}
# Northwind's pool is small (six short documents): perturbed claims come in addition to real ones.
NORTHWIND_SHARE = {"perturbed_figure": 0.35, "swapped_source": 0.15, "other_source": 0.15}
# The validator's figure pattern (citadel/answer/validator.py FIGURE), here in `re` for match spans.
FIGURE = re.compile(r"(?:^|[^\w.])(?P<figure>[$€£]?\d[\d,]*(?:\.\d+)?%?)")
NUMBER_WORDS = ("two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "twelve")
# A number word counts as a figure only before a unit ("two quarters", "three business days"), so
# "One person may..." is never turned into "Eight person may...".
UNITS = r"(?:business\s+|calendar\s+|working\s+|full\s+)?(?:days|weeks|months|years|quarters|hours|times|people)"
NUMBER_WORD = re.compile(r"\b(" + "|".join(NUMBER_WORDS) + r")\b(?=\s+" + UNITS + r"\b)", re.IGNORECASE)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
WORD = re.compile(r"[a-z0-9]+")

NORTHWIND_SALES = Principal("northwind", "sam", frozenset({"sales"}))
NORTHWIND_FINANCE = Principal("northwind", "fiona", frozenset({"finance"}))
NORTHWIND_QUESTIONS = (
    (NORTHWIND_SALES, "What standard discount can a sales representative offer on annual contracts?"),
    (NORTHWIND_SALES, "Who must approve a discount above the standard limit?"),
    (NORTHWIND_SALES, "What multi-year discount can an eligible customer get?"),
    (NORTHWIND_SALES, "Which customers are eligible for the multi-year discount?"),
    (NORTHWIND_SALES, "What revenue does a customer need for the multi-year discount?"),
    (NORTHWIND_SALES, "How long must a customer have been with us to get a multi-year discount?"),
    (NORTHWIND_SALES, "Which agreements does the multi-year section apply to?"),
    (NORTHWIND_SALES, "Can I give a 14% discount on a three-year deal?"),
    (NORTHWIND_SALES, "What was Acme's annual revenue with Northwind last year?"),
    (NORTHWIND_SALES, "Who is the account owner for Acme Corporation?"),
    (NORTHWIND_SALES, "Who is Acme's procurement lead?"),
    (NORTHWIND_SALES, "Which region and industry is Acme Corporation in?"),
    (NORTHWIND_SALES, "When did the Acme master services agreement start?"),
    (NORTHWIND_SALES, "When does the Acme agreement renew and what notice is needed?"),
    (NORTHWIND_SALES, "What services does Northwind supply to Acme under the agreement?"),
    (NORTHWIND_SALES, "Who are the parties to the Acme master services agreement?"),
    (NORTHWIND_SALES, "When should renewal conversations start?"),
    (NORTHWIND_SALES, "What makes a lead qualified?"),
    (NORTHWIND_SALES, "Is Acme eligible for the multi-year discount?"),
    (NORTHWIND_FINANCE, "What is the target gross margin on hardware bundles?"),
    (NORTHWIND_FINANCE, "What is the margin floor below which no deal is signed?"),
    (NORTHWIND_FINANCE, "How are freight and warranty reserves modelled?"),
    (NORTHWIND_FINANCE, "What discount needs CFO approval?"),
    (NORTHWIND_FINANCE, "What is Acme's revenue in the last twelve months?"),
)


@dataclass(frozen=True)
class SourceText:
    title: str
    heading: str
    document_id: str
    text: str


@dataclass(frozen=True)
class Claim:
    tenant: str
    principal: Principal
    question: str
    text: str
    cited: SourceText
    neighbours: tuple[SourceText, ...]  # the answer's other numbered sources, nearest number first


@dataclass(frozen=True)
class Item:
    tenant: str
    question: str
    claim: str
    source: SourceText
    origin: str


# ------------------------------------------------------------------------------ text helpers
def words(text: str) -> set[str]:
    return set(WORD.findall(text.lower()))


def normalised(text: str) -> str:
    return " ".join(WORD.findall(text.lower()))


def states_verbatim(source: str, claim: str) -> bool:
    return normalised(claim) in normalised(source)


def source_window(text: str, claim: str, limit: int = MAX_SOURCE_CHARS) -> str:
    """The source text, or at most `limit` characters of it around the sentence that shares the most
    words with the claim, starting at a sentence or line start."""
    text = text.strip()
    if len(text) <= limit:
        return text
    claim_words = words(claim)
    starts = [0] + [m.end() for m in SENTENCE_END.finditer(text)]
    best = max(starts, key=lambda s: len(claim_words & words(text[s:s + 300].split("\n")[0])))
    start = max(0, best - limit // 3)
    start = next((s for s in starts if s >= start), best)
    if start > best:
        start = best
    window = text[start:start + limit]
    cut = max(window.rfind(". "), window.rfind("\n"))
    return window[:cut + 1].strip() if cut > limit // 2 else window.strip()


# ------------------------------------------------------------------------------ answering
def section_texts(wiring: Wiring, principal: Principal, response) -> dict[str, SourceText]:
    """chunk id -> the expanded section text the generator saw for the answer's passages."""
    partition = wiring.answer_service.partitions.get(principal.tenant_id)
    sources = wiring.answer_service.expander.expand(response.passages, partition)
    return {s.passage.chunk_id: as_source_text(s.passage, s.text) for s in sources}


def as_source_text(passage, text: str) -> SourceText:
    return SourceText(passage.title, passage.heading, passage.document_id, text)


def answer_claims(wiring: Wiring, principal: Principal, question: str) -> list[Claim]:
    """The claims of one answer (none when the service refused or replied not_confirmed)."""
    response = wiring.answer_service.ask(principal, question)
    if response.refused or not response.citations:
        return []
    sections = section_texts(wiring, principal, response)
    cited_order = [sections.get(c["chunk_id"]) for c in response.citations]
    ordered = list(sections.values())
    claims = []
    for piece in split_claims(response.answer):
        numbers = [n for n in marker_numbers(piece) if 0 < n <= len(cited_order)]
        text = strip_markers(piece)
        if not numbers or cited_order[numbers[0] - 1] is None or len(text.split()) < MIN_CLAIM_WORDS:
            continue
        cited = cited_order[numbers[0] - 1]
        claims.append(Claim(principal.tenant_id, principal, question, text, cited, neighbours_of(cited, ordered)))
    return claims


def neighbours_of(cited: SourceText, ordered: list[SourceText]) -> tuple[SourceText, ...]:
    """The answer's other sources, by distance of their number from the cited one."""
    at = ordered.index(cited) if cited in ordered else 0
    others = [(abs(i - at), i, s) for i, s in enumerate(ordered) if s != cited]
    return tuple(s for _, _, s in sorted(others, key=lambda t: (t[0], t[1])))


def gather(wiring: Wiring, asks: list[tuple[Principal, str]], wanted: int) -> list[Claim]:
    """Unique claims from asking in order until `wanted` are found (or the questions run out)."""
    pool: dict[str, Claim] = {}
    for principal, question in asks:
        for claim in answer_claims(wiring, principal, question):
            pool.setdefault(normalised(claim.text), claim)
        if len(pool) >= wanted:
            break
    return list(pool.values())


def handbook_asks(tenant: str, rng: random.Random) -> list[tuple[Principal, str]]:
    """The tenant's answerable paraphrase-dev and regression questions, seeded order, dev first
    interleaved with the regression set."""
    dev = [i for i in load_set(PARAPHRASE_SET, "dev") if i.tenant == tenant and i.answerable]
    regression = [i for i in load_set(DEFAULT_SET) if i.tenant == tenant and i.answerable]
    rng.shuffle(dev)
    rng.shuffle(regression)
    interleaved = [item for pair in zip(dev, regression) for item in pair]
    longer = dev if len(dev) > len(regression) else regression
    interleaved += longer[min(len(dev), len(regression)):]
    return [(principal_of(i), i.question) for i in interleaved]


def principal_of(item: RagItem) -> Principal:
    return Principal(item.tenant, item.user, frozenset(item.groups))


# ------------------------------------------------------------------------------ made unsupported
def perturbed(claim: str, source: str, rng: random.Random) -> str | None:
    """The claim with one figure (or number word) changed to a value the source does not state."""
    spans = [(m.start("figure"), m.end("figure"), m.group("figure").rstrip(",")) for m in FIGURE.finditer(claim)]
    spans = [(start, start + len(token), token) for start, _, token in spans]
    spans += [(m.start(), m.end(), m.group(0)) for m in NUMBER_WORD.finditer(claim)]
    if not spans:
        return None
    start, end, token = rng.choice(spans)
    stated = {m.group("figure").rstrip(",").lower() for m in FIGURE.finditer(source)} | set(WORD.findall(source.lower()))
    for _ in range(20):
        changed = changed_figure(token, rng)
        if changed and changed != token and changed.lower() not in stated:
            return claim[:start] + changed + claim[end:]
    return None


def changed_figure(token: str, rng: random.Random) -> str | None:
    if token.lower() in NUMBER_WORDS:
        choice = rng.choice([w for w in NUMBER_WORDS if w != token.lower()])
        return choice.capitalize() if token[0].isupper() else choice
    match = re.fullmatch(r"([$€£]?)(\d[\d,]*)(\.\d+)?(%?)", token)
    if not match:
        return None
    prefix, whole, decimals, percent = match.groups()
    value = int(whole.replace(",", ""))
    if 1900 <= value <= 2100 and not prefix and not percent and "," not in whole:  # a year
        new = value + rng.choice([-3, -2, -1, 1, 2, 3])
    elif value < 10:
        new = rng.choice([v for v in range(1, 13) if v != value])
    else:
        new = round(value * rng.choice([0.5, 0.6, 0.75, 1.25, 1.5, 2.0]))
        new = new if new != value else value + 1
    grouped = f"{new:,}" if "," in whole else str(new)
    return f"{prefix}{grouped}{decimals or ''}{percent}"


def swapped_source(claim: Claim) -> SourceText | None:
    """The nearest other source of the same answer that does not contain the claim's text, preferring
    another section (a different heading or document)."""
    others = [s for s in claim.neighbours if not states_verbatim(s.text, claim.text)]
    elsewhere = [s for s in others if (s.document_id, s.heading) != (claim.cited.document_id, claim.cited.heading)]
    return (elsewhere or others or [None])[0]


def other_source(wiring: Wiring, claim: Claim) -> SourceText | None:
    """The top section of another document that a search for the claim itself finds."""
    result = wiring.retriever.retrieve(claim.principal, claim.text, top_k=10)
    partition = wiring.answer_service.partitions.get(claim.principal.tenant_id)
    for passage in result.passages:
        if passage.document_id == claim.cited.document_id:
            continue
        expanded = wiring.answer_service.expander.expand([passage], partition)
        text = expanded[0].text if expanded else passage.text
        if not states_verbatim(text, claim.text):
            return as_source_text(passage, text)
    return None


def assign_origins(wiring: Wiring, pool: list[Claim], rng: random.Random, shares: dict[str, float] = MADE_SHARE,
                   perturb_extra: bool = False) -> list[Item]:
    """Turn shares of the pool into made-unsupported items; the rest stay real. Each pool claim is
    used once, so no claim text appears twice. `perturb_extra` (a small pool): a perturbed claim is
    made in addition to its real one, not instead of it (its text differs anyway)."""
    pool = list(pool)
    rng.shuffle(pool)
    quotas = {origin: round(share * len(pool)) for origin, share in shares.items()}
    items: list[Item] = []
    remaining: list[Claim] = []
    for claim in pool:  # figures first: only claims with a figure can be perturbed
        changed = perturbed(claim.text, claim.cited.text, rng) if quotas["perturbed_figure"] else None
        if changed:
            quotas["perturbed_figure"] -= 1
            items.append(make_item(claim, changed, claim.cited, "perturbed_figure"))
        if perturb_extra or not changed:
            remaining.append(claim)
    real: list[Claim] = []
    for claim in remaining:
        made = None
        if quotas["swapped_source"] and (source := swapped_source(claim)):
            quotas["swapped_source"] -= 1
            made = make_item(claim, claim.text, source, "swapped_source")
        elif quotas["other_source"] and (source := other_source(wiring, claim)):
            quotas["other_source"] -= 1
            made = make_item(claim, claim.text, source, "other_source")
        if made:
            items.append(made)
        else:
            real.append(claim)
    items += [make_item(c, c.text, c.cited, "real") for c in real]
    return items


def make_item(claim: Claim, text: str, source: SourceText, origin: str) -> Item:
    window = replace(source, text=source_window(source.text, text))
    return Item(claim.tenant, claim.question, text, window, origin)


# ------------------------------------------------------------------------------ homes
def wiring_for(home: Path) -> Wiring:
    return Wiring(load_config(environ={"CITADEL_HOME": str(home), "CITADEL_EMBEDDING__BACKEND": "minilm",
                                       "CITADEL_TOOLS__HONEYPOT_RATE": "0"}))


def northwind_home(root: Path) -> Path:
    from citadel.ingest.sources import AclSpec, discover

    home = root / "northwind-home"
    builder = wiring_for(home)
    builder.ingestor().ingest("northwind", discover([NORTHWIND], trust_front_matter=True),
                              AclSpec.from_file(NORTHWIND / "acl.yaml"), actor="make_judge_set")
    builder.catalog.close()
    return home


# ------------------------------------------------------------------------------ output
def write_set(items: list[Item], out: Path, rng: random.Random) -> None:
    """Shuffled (so origins do not cluster), numbered, written as the annotators' file and the hidden
    origins file."""
    items = unique(items)
    rng.shuffle(items)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "claims.jsonl").open("w", encoding="utf-8") as claims, \
            (out / "origins.jsonl").open("w", encoding="utf-8") as origins:
        for number, item in enumerate(items, start=1):
            claim_id = f"jc{number:03d}"
            claims.write(json.dumps({"id": claim_id, "tenant": item.tenant, "question": item.question,
                                     "claim": item.claim, "source_title": item.source.title,
                                     "source_heading": item.source.heading,
                                     "source_text": item.source.text}, ensure_ascii=False) + "\n")
            origins.write(json.dumps({"id": claim_id, "origin": item.origin}) + "\n")


def unique(items: list[Item]) -> list[Item]:
    """One item per (claim, source) pair and per claim text within an origin."""
    seen: set[tuple[str, str]] = set()
    kept = []
    for item in items:
        key = (normalised(item.claim), item.origin if item.origin != "real" else normalised(item.source.text)[:200])
        if key not in seen:
            seen.add(key)
            kept.append(item)
    return kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, default=DEFAULT_HOME, help="a home with the four handbook tenants")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--pool", type=int, default=HANDBOOK_POOL, help="unique claims wanted per handbook tenant")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    items: list[Item] = []
    with tempfile.TemporaryDirectory(prefix="judge-set-") as scratch:
        copy = Path(scratch) / "handbooks-home"
        shutil.copytree(args.home, copy)
        wiring = wiring_for(copy)
        for tenant in HANDBOOK_TENANTS:
            pool = gather(wiring, handbook_asks(tenant, rng), args.pool)
            items += assign_origins(wiring, pool, rng)
            print(f"{tenant}: {len(pool)} unique claims", file=sys.stderr)
        northwind = wiring_for(northwind_home(Path(scratch)))
        pool = gather(northwind, list(NORTHWIND_QUESTIONS), NORTHWIND_POOL)
        items += assign_origins(northwind, pool, rng, NORTHWIND_SHARE, perturb_extra=True)
        print(f"northwind: {len(pool)} unique claims", file=sys.stderr)
    write_set(items, args.out, rng)
    counts: dict[str, dict[str, int]] = {}
    for item in unique(items):
        counts.setdefault(item.tenant, {}).setdefault(item.origin, 0)
        counts[item.tenant][item.origin] += 1
    print(json.dumps({"seed": args.seed, "claims": len(unique(items)), "by_tenant_origin": counts}, indent=1))


if __name__ == "__main__":
    main()
