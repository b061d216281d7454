"""Guardrails: the question router (step 2 of DESIGN.md §4) and the filter that drops retrieved
passages carrying instructions aimed at an AI (indirect prompt injection).

Pure Python; the only model is the packaged TF-IDF injection classifier (`prompt-guardrail`).
"""

from citadel.guardrails.injection import (
    DEFAULT_CLASSIFIER_SUPPORT_THRESHOLD,
    DEFAULT_CLASSIFIER_THRESHOLD,
    DEFAULT_CUES_ALONE,
    DEFAULT_CUES_WITH_CLASSIFIER,
    InjectionDetector,
    InjectionVerdict,
    guardify_classifier,
)
from citadel.guardrails.pii import find_card_number, find_secret, luhn_valid, sensitive_data_kind
from citadel.guardrails.planted import (
    DEFAULT_PLANTED_CUE_THRESHOLD,
    DroppedPassage,
    filter_passages,
    flag_planted_instructions,
)
from citadel.guardrails.router import (
    DEFAULT_MAX_QUESTION_CHARS,
    DEFAULT_REPLIES,
    EMPTY_QUESTION,
    HUMAN_REQUESTED,
    OFF_TOPIC,
    PROMPT_INJECTION,
    QUESTION_TOO_LONG,
    SENSITIVE_DATA,
    RouteDecision,
    Router,
)
from citadel.guardrails.topics import human_request, is_multi_step, off_topic

__all__ = [
    "DEFAULT_CLASSIFIER_SUPPORT_THRESHOLD", "DEFAULT_CLASSIFIER_THRESHOLD", "DEFAULT_CUES_ALONE",
    "DEFAULT_CUES_WITH_CLASSIFIER", "DEFAULT_MAX_QUESTION_CHARS", "DEFAULT_PLANTED_CUE_THRESHOLD",
    "DEFAULT_REPLIES", "EMPTY_QUESTION", "HUMAN_REQUESTED", "OFF_TOPIC", "PROMPT_INJECTION", "QUESTION_TOO_LONG",
    "SENSITIVE_DATA", "DroppedPassage", "InjectionDetector", "InjectionVerdict", "RouteDecision", "Router",
    "filter_passages", "find_card_number", "find_secret", "flag_planted_instructions", "guardify_classifier",
    "human_request", "is_multi_step", "luhn_valid", "off_topic", "sensitive_data_kind",
]
