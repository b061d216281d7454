"""The router interface (step 2 of DESIGN.md §4): one method, `route(question) -> RouteDecision`.

The decision is one typed value whatever router made it (the rule-based Router, a test fake, a proxy
to the router deployment), so the answer service reads its fields and never guesses at its shape.
A decision that contradicts itself (a refusal without a reply, an answer without a path) cannot be
built: the error shows up where the router is wrong, not as an empty reply to a user.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

Action = Literal["answer", "refuse"]
RoutePath = Literal["simple", "multi_step"]
ACTIONS: tuple[Action, ...] = ("answer", "refuse")
ROUTE_PATHS: tuple[RoutePath, ...] = ("simple", "multi_step")


@dataclass(frozen=True)
class RouteDecision:
    """What to do with a question.

    - answer: `path` says how ("simple": one retrieval, one answer; "multi_step": several, or an action,
      which only the agentic path can take); no reason or reply.
    - refuse: `reason` is the machine-readable code, `reply` the fixed text the user gets (it never
      echoes the question, which may hold a secret or an attack).
    `detail` names the rule that fired (for logs and metrics, never the matched text).
    """

    action: Action
    reason: str | None = None
    reply: str | None = None
    path: RoutePath | None = None
    detail: str | None = None

    def __post_init__(self) -> None:
        if self.action == "refuse":
            if not self.reason or not self.reply:
                raise ValueError("a refusal needs a reason and a reply")
            if self.path is not None:
                raise ValueError("a refusal takes no path")
        elif self.action == "answer":
            if self.path not in ROUTE_PATHS:
                raise ValueError(f"an answer needs a path, one of {ROUTE_PATHS}, not {self.path!r}")
            if self.reason is not None or self.reply is not None:
                raise ValueError("an answer has no refusal reason or reply")
        else:
            raise ValueError(f"unknown route action {self.action!r}; known: {ACTIONS}")

    @property
    def refused(self) -> bool:
        return self.action == "refuse"

    @classmethod
    def answer(cls, path: RoutePath = "simple", detail: str | None = None) -> "RouteDecision":
        return cls(action="answer", path=path, detail=detail)

    @classmethod
    def refuse(cls, reason: str, reply: str, detail: str | None = None) -> "RouteDecision":
        return cls(action="refuse", reason=reason, reply=reply, detail=detail)


@runtime_checkable
class QuestionRouter(Protocol):
    """Decides, before any retrieval or model call, whether and how a question is answered.
    Total: every string, empty or hostile, gets a decision, never an exception."""

    def route(self, question: str) -> RouteDecision: ...
