"""The runs' multi-part set: two-part questions through a run, judged part by part.

Pairs two answerable items of one tenant from the paraphrase set's **test** split
(tests/regression/paraphrase) whose expected documents differ, in a fixed order (file order, each item
paired with the next one it can pair with, tenants in turn), and asks "<q1> Also, <q2>" through a run:
the same orchestrator the runs API drives, synchronously, over an in-memory run store.

Per part (item): "asserted" when the answer's assertion (the text before its first "don't confirm"
note) cites the item's expected section and no part of the item is named missing; "not_confirmed"
when a part of the item is named missing and the expected section is among the answer's citations;
else "missed". A pair passes when both parts do. "unrelated": an answered run whose assertion cites a
section that is neither item's expected section.

Used by `benchmarks/runs_two_part.py` (the full 24 pairs) and the release gate (citadel/eval/gate.py).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any, Sequence

from citadel import regex
from citadel.agent.parts import UNCONFIRMED
from citadel.eval.rag import PARAPHRASE_SET, RagItem, is_evidence, load_set

TENANTS = ("18f", "civicactions", "sourcegraph", "github")
MAX_ANSWER_CHARS = 600  # of each answer, in the report
MARKER = regex.compile("eval.runs_parts.marker", r"\[(\d+)\]")


def pairs(count: int) -> list[tuple[RagItem, RagItem]]:
    """Up to `count` pairs of test-split answerable items of one tenant with disjoint expected
    documents: per tenant in file order, each item with the next unpaired one it can pair with;
    then the tenants' pairs taken in turn."""
    items = [i for i in load_set(PARAPHRASE_SET, split="test") if i.answerable]
    per_tenant = []
    for tenant in TENANTS:
        rows, used, found = [i for i in items if i.tenant == tenant], set(), []
        for a, first in enumerate(rows):
            if a in used:
                continue
            b = next((b for b in range(a + 1, len(rows)) if b not in used
                      and not set(first.expected_documents) & set(rows[b].expected_documents)), None)
            if b is not None:
                used.update((a, b))
                found.append((first, rows[b]))
        per_tenant.append(found)
    chosen = [p for turn in range(max(map(len, per_tenant), default=0)) for found in per_tenant
              if turn < len(found) for p in [found[turn]]]
    return chosen[:count]


def joined(first: RagItem, second: RagItem) -> str:
    """"<q1> Also, <q2>", q2's first word lower-cased unless it is "I" ("I'm") or a name in capitals."""
    q2 = second.question.strip()
    word = q2.split()[0]
    keep = word == "I" or word.startswith("I'") or (len(word) > 1 and word[1].isupper())
    return f"{first.question.rstrip()} Also, {q2 if keep else q2[0].lower() + q2[1:]}"


def run_pair(wiring, store, first: RagItem, second: RagItem) -> dict[str, Any]:
    """One run to its end over `store` (a MemoryRunStore), judged part by part."""
    from citadel.state.runs import EventType, Run

    run_id = uuid.uuid4().hex
    store.create(Run(run_id, first.tenant, first.user, "two-part", joined(first, second), groups=first.groups))
    orchestrator = wiring.make_orchestrator(store, memory=None, approvals=None)  # write nothing else to the home
    started = time.perf_counter()
    run = orchestrator.drive(run_id, "eval")
    seconds = time.perf_counter() - started
    finals = [e.data for e in store.events(run_id, 0, 10_000) if e.type == EventType.FINAL]
    if not finals:
        return {"ids": [first.id, second.id], "error": f"no final event (status {run.status})", "ok": False}
    final = finals[0]
    answer, citations, missing = final["answer"], final["citations"], final.get("missing") or []
    cut = answer.find(UNCONFIRMED)
    asserted_text = answer if cut < 0 else answer[:cut]
    asserted = [citations[n - 1] for n in map(int, MARKER.findall(asserted_text)) if 0 < n <= len(citations)]
    answered = final["outcome"] == "answered"
    parts = [judge(item, answered, asserted, citations, missing) for item in (first, second)]
    unrelated = [] if not answered else sorted({f"{c['document_id']} > {c['heading']}" for c in asserted
                                               if not is_evidence(c, first) and not is_evidence(c, second)})
    return {"ids": [first.id, second.id], "tenant": first.tenant, "path": final["path"],
            "outcome": final["outcome"], "stop": final["stop_reason"], "parts": parts,
            "ok": all(p != "missed" for p in parts), "unrelated": unrelated, "missing": missing,
            "cited": [f"{c['document_id']} > {c['heading']}" for c in citations],
            "expected": [f"{i.expected_documents[0]} > {i.expected_heading}" for i in (first, second)],
            "answer": answer[:MAX_ANSWER_CHARS], "seconds": round(seconds, 2)}


def judge(item: RagItem, answered: bool, asserted: list[dict], citations: list[dict], missing: list[str]) -> str:
    """asserted / not_confirmed / missed for one item (see the module docstring)."""
    question = " ".join(item.question.lower().split())
    named = any(" ".join(part.lower().split()) in question for part in missing)
    if named:
        return "not_confirmed" if any(is_evidence(c, item) for c in citations) else "missed"
    return "asserted" if answered and any(is_evidence(c, item) for c in asserted) else "missed"


def run(wiring, chosen: Sequence[tuple[RagItem, RagItem]]) -> list[dict[str, Any]]:
    """Every pair through its own run over one in-memory store."""
    from citadel.state.runs import MemoryRunStore

    store = MemoryRunStore(time.time)
    return [run_pair(wiring, store, a, b) for a, b in chosen]


def summary(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The share of pairs with both parts answered or honestly not confirmed, and how parts ended."""
    return {"pairs": len(results),
            "both_parts_ok": round(sum(r["ok"] for r in results) / max(1, len(results)), 3),
            "parts": dict(Counter(p for r in results for p in r.get("parts", []))),
            "outcomes": dict(Counter(r.get("outcome") for r in results)),
            "answered_from_unrelated": sum(bool(r.get("unrelated")) for r in results)}
