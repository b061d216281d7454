"""Grounded answers: confidence gate, parent-section expansion, generation, validation, conflicts."""

from citadel.answer.expand import ExpansionBudget, SectionExpander, Source
from citadel.answer.gate import ConfidenceGate, GateDecision, GateThresholds, term_idf
from citadel.answer.generators import (ExtractiveGenerator, Generator, GeneratorError, LocalLLMGenerator,
                                       OpenAICompatibleGenerator, make_generator)
from citadel.answer.prompt import PROMPT_VERSION, build_messages
from citadel.answer.service import AnswerResponse, AnswerService, AnswerSettings, build_answer_service
from citadel.answer.validator import AnswerValidator, ValidatedAnswer

__all__ = [
    "AnswerResponse", "AnswerService", "AnswerSettings", "AnswerValidator", "ConfidenceGate", "ExpansionBudget",
    "ExtractiveGenerator", "GateDecision", "GateThresholds", "Generator", "GeneratorError", "LocalLLMGenerator",
    "OpenAICompatibleGenerator", "PROMPT_VERSION", "SectionExpander", "Source", "ValidatedAnswer",
    "build_answer_service", "build_messages", "make_generator", "term_idf",
]
