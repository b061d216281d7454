"""The router: step 2 of the query path (DESIGN.md §4).

Before any retrieval or model call it decides whether a question is answered at all. Refusals get a
fixed reply and a machine-readable reason; the only model involved is the tiny TF-IDF injection
classifier. Questions that pass are tagged "simple" (one retrieval, one answer) or "multi_step"
(several questions in one, or a request for an action: DESIGN.md §10).

Order matters:
1. empty question;
2. sensitive data (card numbers, secrets) first, so a pasted password goes no further than here;
3. prompt injection before the length limit, so a long jailbreak is named as one;
4. too long; 5. request for a person; 6. off-topic.
"""

from __future__ import annotations

from citadel.catalog.base import SENSITIVE_DATA_REASON
from citadel.guardrails import pii, topics
from citadel.guardrails.base import RouteDecision
from citadel.guardrails.injection import InjectionDetector

# Longest question accepted, in characters: far above any real question, and it bounds the cost of
# every later stage (embedding, BM25, prompt).
DEFAULT_MAX_QUESTION_CHARS = 2_000

# The reason of every clarifying question: the router's for an empty question, the answer path's
# (citadel/answer/clarify.py) for one naming no fact or matching only weakly.
NEEDS_CLARIFICATION = "needs_clarification"
EMPTY_QUESTION = NEEDS_CLARIFICATION
QUESTION_TOO_LONG = "question_too_long"
# One spelling with the answer log, whose migration withholds old rows refused for this reason.
SENSITIVE_DATA = SENSITIVE_DATA_REASON
PROMPT_INJECTION = "prompt_injection"
HUMAN_REQUESTED = "human_requested"
OFF_TOPIC = "off_topic"

# The fixed replies. They never echo the question (it may hold a secret or an attack).
DEFAULT_REPLIES: dict[str, str] = {
    EMPTY_QUESTION: ("What would you like to know? Tell me the situation, or the policy you are asking about, "
                     "or ask to be put in touch with a person who can help."),
    QUESTION_TOO_LONG: "That question is too long. Please shorten it to the essential question and ask again.",
    SENSITIVE_DATA: (
        "Your message appears to contain a card number, password or other secret, so it was not processed or "
        "stored. Please remove it and ask again; if you shared a real credential, change it now."
    ),
    PROMPT_INJECTION: (
        "This request looks like an attempt to change how the assistant works, so it was not processed. "
        "Please ask a question about your organisation's documents."
    ),
    HUMAN_REQUESTED: (
        "This assistant cannot connect you to a person. Please contact your help desk or the team that owns "
        "the topic; the documents can usually tell you who that is."
    ),
    OFF_TOPIC: "I can only answer questions about your organisation's documents. Please ask about those.",
}


class Router:
    """The production router: the rules above, in that order (a QuestionRouter)."""

    def __init__(
        self,
        injection_detector: InjectionDetector | None = None,
        max_question_chars: int = DEFAULT_MAX_QUESTION_CHARS,
        replies: dict[str, str] | None = None,
        detect_off_topic: bool = True,
    ) -> None:
        self.injection_detector = injection_detector or InjectionDetector()
        self.max_question_chars = max_question_chars
        self.replies = {**DEFAULT_REPLIES, **(replies or {})}
        self.detect_off_topic = detect_off_topic

    def route(self, question: str) -> RouteDecision:
        if not question or not question.strip():
            return self._refuse(EMPTY_QUESTION)
        sensitive = pii.sensitive_data_kind(question)
        if sensitive:
            return self._refuse(SENSITIVE_DATA, sensitive)
        verdict = self.injection_detector.check(question)
        if verdict.flagged:
            return self._refuse(PROMPT_INJECTION, verdict.rule)
        if len(question) > self.max_question_chars:
            return self._refuse(QUESTION_TOO_LONG)
        person = topics.human_request(question)
        if person:
            return self._refuse(HUMAN_REQUESTED, person)
        unrelated = topics.off_topic(question) if self.detect_off_topic else None
        if unrelated:
            return self._refuse(OFF_TOPIC, unrelated)
        return self._answer_path(question)

    @staticmethod
    def _answer_path(question: str) -> RouteDecision:
        """multi_step for several questions in one or a request for an action (named in `detail`):
        one retrieval answers neither (DESIGN.md §10)."""
        if topics.is_multi_step(question):
            return RouteDecision.answer("multi_step")
        action = topics.action_request(question)
        if action:
            return RouteDecision.answer("multi_step", detail=action)
        return RouteDecision.answer("simple")

    def _refuse(self, reason: str, detail: str | None = None) -> RouteDecision:
        return RouteDecision.refuse(reason, self.replies[reason], detail)


class AllowAllRouter:
    """A QuestionRouter that lets every question through on the simple path: the fake for tests
    that are not about routing, and what the answer service uses when it is given no router."""

    def route(self, question: str) -> RouteDecision:
        return RouteDecision.answer("simple")
