"""Which path a run takes (DESIGN.md §10): the single-shot answer or the agentic loop.

Most questions take the single-shot path. The agentic path takes what one retrieval cannot do: a
question in several parts, and any request for an action — a registered tool's own intent in the
user's message ("Propose a 5% discount for 24 months for acme.") or the router's generic wording of
one ("Book a hotel in London."), since only a run can call the tool and park it for approval. When
unsure, the agentic path: it still answers a plain question, only more slowly.

Refusals stay on the single-shot path: the answer service words the router's fixed reply.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from citadel.guardrails.base import RouteDecision

SINGLE_SHOT, AGENTIC = "single_shot", "agentic"
REFUSED = "refused"  # for reports only: a run takes such a message on the single-shot path


def run_path(decision: RouteDecision, requested_actions: Callable[[], Sequence[object]]) -> str:
    """SINGLE_SHOT or AGENTIC for a run whose message the router decided. `requested_actions` lists
    the tools' intents found in the user's message; it is called only when the router alone would
    answer single-shot (it may read the conversation for the case's subject)."""
    if decision.refused:
        return SINGLE_SHOT
    if decision.path == "multi_step":
        return AGENTIC
    return AGENTIC if requested_actions() else SINGLE_SHOT


def reported_path(decision: RouteDecision, requested_actions: Callable[[], Sequence[object]]) -> str:
    """As `run_path`, with a refusal named REFUSED (the router eval's table keeps it apart)."""
    return REFUSED if decision.refused else run_path(decision, requested_actions)
