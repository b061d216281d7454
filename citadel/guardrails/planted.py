"""Indirect prompt injection: instructions aimed at an AI, planted inside retrieved documents.

A retrieved passage is data; a sentence in it that tells "the assistant" to ignore its instructions,
rewrite its answer, add a link or send the user's data somewhere is an attack on the generator. Such
passages are flagged and dropped before the prompt is built.

Documents address their *reader* as "you" ("you are now enrolled", "include the receipt in your
message"), so the rules here are narrower than the ones for user questions, where "you" is always
the assistant. The false-positive budget is measured on the four shared handbooks (at most 0.5% of
paragraphs flagged) by `benchmarks/eval_injection.py`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from citadel import regex
from citadel.guardrails import injection
from citadel.guardrails.text import compile_all, first_match, normalise, with_needles

# Rules for user questions that are just as specific inside a document (an override, a chat
# template token, an encoded payload...). The others are replaced by the narrower variants below.
SHARED_RULES = (
    "instruction_override", "ignore_the_above", "ignore_what_you_were_told", "ignore_and_say",
    "regardless_of_instructions", "new_instructions", "override_multilingual", "prompt_extraction",
    "repeat_text_above", "jailbreak_name", "chat_template_token", "claimed_authority", "special_mode",
    "secret_request", "secret_request_multilingual", "user_data_probe", "obfuscated_request",
    "encoded_sequence", "code_insertion", "many_shot_transcript", "dictated_answer",
    "hidden_comment_instruction", "bribe_or_threat", "data_dump", "framed_personal_data",
    "prompt_template_slot", "letter_substitution", "counterfactual_value",
)

# Weighted jailbreak cues (see injection.CUE_WEIGHTS) that flag a passage: at 3, 3 of the 15,590
# handbook paragraphs score this high (none reach 4).
DEFAULT_PLANTED_CUE_THRESHOLD = 3

# Literal words that must appear before an `_AI` pattern is worth running (a cheap pre-check).
_AI_NEEDLES = ("ai", "a.i.", "assistant", "llm", "language model", "chatbot", "chat bot", "bot", "model", "gpt",
               "copilot", "agent", "claude", "gemini")
_AI = r"(ai|a\.i\.|assistant|llm|language model|chatbot|chat bot|bot|model|gpt|chatgpt|copilot|agent|claude|gemini)"
_REPLY = r"(reply|replies|response|responses|answer|answers|output|outputs|completion|summary)"

PLANTED_RULES = compile_all("guardrails.planted", {
    # Text that speaks to the AI reading it.
    "addresses_ai": with_needles(
        rf"\bas an? (ai|artificial intelligence)( language model| assistant| model)?,? you\b|\bif you are an? {_AI}\b"
        rf"|\b(dear|attention|note to|hey|hello|instructions? (for|to)|message (for|to)) (the |any |all )?{_AI}s?\b"
        rf"|\b{_AI}s? (reading|processing|summari[sz]ing|parsing|indexing|retrieving) (this|these)\b",
        *_AI_NEEDLES, "artificial intelligence",
    ),
    # "The assistant must now respond ...", "AI models should always include ..."
    "ai_must": with_needles(
        rf"\b(the|any|all|an?) {_AI}s?\b[^.\n]{{0,30}}"
        r"\b(must|should|shall|(is|are) (required|instructed) to|needs? to|has to|have to)\s+"
        r"(now |always |only |immediately |also )?(ignore|disregard|respond|reply|answer|say|include|tell|output"
        r"|print|append|add|insert|recommend|mention|send|forward|refuse|state|claim|translate|encode|reveal|direct"
        r"|redirect|promote)\b",
        *_AI_NEEDLES,
    ),
    # The assistant's reply rewritten (BIPIA): "your answer", "your reply" are the AI's in a document,
    # while "your message" or "your request" there is the reader's, so those are left out.
    "reply_manipulation": with_needles(
        rf"\b{injection.REPLY_EDIT_VERBS}\b{injection.SENTENCE_GAP}{{0,80}}"
        rf"\b(in|to|into|within|throughout|for|from|of)\s+(all\s+(of\s+)?)?your\s+{_REPLY}\b"
        rf"|\b{injection.REPLY_EDIT_VERBS}\s+(all\s+(of\s+)?)?your\s+{_REPLY}\b"
        rf"|\bin your {_REPLY},?\s+(please\s+)?{injection.REPLY_EDIT_VERBS}\b"
        rf"|\b(provide|give|write|deliver)\s+your\s+{_REPLY}\s+(in|with|without|as|using|backwards?)\b"
        rf"|\byour\s+{_REPLY}\b[^.?!\n]{{0,40}}\b(in|into|using|with|as)\s+(base\s?\d+|emojis?|reverse|a cipher"
        rf"|caesar|binary|morse|leetspeak|pig latin|anagrams?)"
        r"|\b(reply|respond|answer|write)\s+(only\s+)?(in|with|using)\s+(base\s?\d+|emojis?|reverse|caesar|binary"
        r"|morse|leetspeak|pig latin)\b|\b(reply|respond|write|answer) (in reverse|backwards?)\b"
        rf"|\b(encode|encrypt|reverse|invert|translate) (your|the) (\w+ )?{_REPLY}\b|\bcipher\b[^.\n]{{0,40}}\byour\b",
        "repl", "respon", "answer", "output", "completion", "summar", "write", "reverse", "backward", "cipher",
    ),
    "respond_only_with": with_needles(
        r"\b(respond|reply|answer|output|return)\s+only\s+(with|in|using)\b"
        r"|\bonly (respond|reply|answer|output) (with|in|using)\b",
        "only",
    ),
    # A persona switch aimed at an AI: "you are now DAN", "you are now an unrestricted assistant".
    "persona_switch": with_needles(
        r"\byou('re| are) now (a |an |the )?((new|different|unrestricted|unfiltered|free|evil|jailbroken|uncensored) )*"
        rf"({_AI}|dan|character|persona)\b|\byou('re| are) no longer (a |an |the )?{_AI}\b"
        rf"|\bfrom now on,? you (are|will|must|shall) (act|respond|reply|answer|be|pretend|ignore)\b"
        r"|\byour new (name|role|persona|identity|instructions?|task) (is|are)\b"
        r"|\bpretend (to be|you are) an? \w+ (ai|assistant|bot|model)\b"
        # None of the 15,590 handbook paragraphs says this to its reader.
        r"|\byou('re| are) now (a|an|the|called|named|known as)\s+\S|\byou('re| are) now [\"']\w"
        r"|\bfrom now on,? you only\b"
        r"|\byou('re| are) (going|about) to (act|pretend|play|simulate|emulate|roleplay)\b"
        rf"|\b(act|behave) (as|like) (an?|the) (\w+ ){{0,2}}({_AI}|character)\b",
        "you're", "you are", "from now on", "your new", "pretend", "act as", "act like", "behave as", "behave like",
    ),
    # Sending the user's data somewhere.
    "exfiltration": with_needles(
        r"\b(send|forward|e-?mail|post|upload|transmit|leak|exfiltrate|share|submit)\b[^.\n]{0,40}\b(the user'?s?"
        r"|their|the customer'?s?|the employee'?s?|users'|personal|private|the conversation|the chat"
        r"|this conversation|session)\b[^.\n]{0,30}\b(data|information|details|credentials|passwords?|e-?mails?"
        r"|history|messages|cookies|tokens?|contacts)\b[^.\n]{0,40}\bto\b[^.\n]{0,40}(https?://|www\.|@"
        r"|\b[\w-]+\.(com|net|org|io|xyz|ru)\b)",
        "http", "www.", "@", ".com", ".net", ".org", ".io", ".xyz", ".ru",
    ),
    # Talking the user into something behind the system's back.
    "deceive_user": with_needles(
        r"\b(do not|don't|never) (tell|inform|reveal (this )?to|mention (this |it )?to|let) the user\b"
        r"|\b(tell|inform|instruct|convince|persuade|urge) the user "
        r"(to (click|visit|go to|download|install|enter|provide|send|share|reset)|that (their|his|her) account)\b",
        "the user",
    ),
    # Chat-role markers at the start of a line ("system: you are...").
    "role_marker": r"^\s*(system|assistant|ai)\s*:\s*(you|ignore|from now|respond|reply|always|never|new)\b",
    # A first-person request to whoever reads the text ("can you tell me...", "help me..."): in a
    # handbook that is a quoted conversation at most, which is rare (12 of 15,590 paragraphs).
    "request_to_reader": with_needles(
        r"\b(can|could|would|will) you (please )?(tell|give|show|help|provide|write|explain|recommend|suggest|list"
        r"|summari[sz]e|analy[sz]e|translate|classify|determine|describe|create|draft|generate|decode|sort|share"
        r"|confirm|print)\b|\b(help|show|tell|give) me\b|\bi (want|need|would like|'d like) you to\b",
        "can you", "could you", "would you", "will you", "help me", "show me", "tell me", "give me", "you to",
    ),
    "new_task": r"\b(your|the) (new|real|actual|updated|true) (task|instructions?|objective|goal|purpose) (is|are)\b",
    # A user setting up a chatbot ("I will give you a topic", "your task is to", "you will now act"):
    # a handbook talks to its reader about work, not about the conversation itself.
    "prompt_to_chatbot": with_needles(
        r"\bi (will|'ll) (give|provide|ask|send|tell) you\b|\byour (task|job|goal|role|mission) (is|will be) to\b"
        r"|\byou will (now )?(act|play|pretend|simulate|emulate|reply|output)\b",
        "i will", "i'll", "your task", "your job", "your goal", "your role", "your mission", "you will",
    ),
})


# Upper-case jailbreak names ("DAN", "STAN"), "You are now Tyler" and "where does Jane Smith live" (no
# handbook paragraph says any of these).
_CASE_SENSITIVE = {
    name: injection.CASE_SENSITIVE_RULES[name] for name in ("jailbreak_name", "persona_switch", "user_data_probe")
} | compile_all("guardrails.planted.case_sensitive", {
    # A persona named by an acronym or an upper-case name: "You are NRW, which stands for ...",
    # "Transform into CODEMASTER, an AI coding expert". Only in documents: a question may set up a
    # harmless character this way.
    "named_persona": (
        r"\b(?i:you are|you're|transform into|become|act as|i am) [\"']?[A-Z][A-Z0-9-]{2,}[\"']?,? (?i:which stands for"
        r"|an? ([\w-]+ ){0,2}(ai|chatbot|bot|language model|artificial intelligence)\b)"
    ),
}, flags=regex.MULTILINE)
# Plus the rules that are only cues in a question: role-play framing has no place in a handbook.
_SHARED = {name: injection.STRONG_RULES[name] for name in SHARED_RULES} | injection.ROLE_PLAY_RULES


def flag_planted_instructions(text: str, cue_threshold: int = DEFAULT_PLANTED_CUE_THRESHOLD) -> str | None:
    """A reason ("planted_instruction:<rule>") when `text` holds instructions aimed at an AI, else None."""
    raw = text[: injection.MAX_ANALYSED_CHARS]
    normalised = normalise(raw)
    rule = (
        first_match(_SHARED, normalised)
        or first_match(PLANTED_RULES, normalised)
        or first_match(_CASE_SENSITIVE, raw)
    )
    if rule is None and injection.encoded_payload(raw):
        rule = "encoded_payload"
    if rule is None and injection.shifted_cipher(raw):
        rule = "shifted_cipher"
    if rule is None and injection.token_flood(normalised):
        rule = "token_flood"
    if rule is None and injection.cue_score(injection.jailbreak_cues(raw)) >= cue_threshold:
        rule = "jailbreak_cues"
    return f"planted_instruction:{rule}" if rule else None


class HasText(Protocol):
    text: str


P = TypeVar("P", bound=HasText)


@dataclass(frozen=True)
class DroppedPassage:
    """A passage removed before the prompt, with the reason (for the response's audit trail)."""

    passage: object
    reason: str


def filter_passages(passages: Iterable[P]) -> tuple[list[P], list[DroppedPassage]]:
    """Split passages into those safe to put in a prompt and those dropped, each with its reason."""
    kept: list[P] = []
    dropped: list[DroppedPassage] = []
    for passage in passages:
        reason = flag_planted_instructions(passage.text)
        if reason:
            dropped.append(DroppedPassage(passage, reason))
        else:
            kept.append(passage)
    return kept, dropped


def flag_all(texts: Sequence[str]) -> list[str | None]:
    """`flag_planted_instructions` over many texts (for evaluation)."""
    return [flag_planted_instructions(text) for text in texts]


def passage_has_planted_instructions(passage) -> bool:
    """The answer pipeline's passage filter: drop a retrieved passage that carries instructions."""
    return flag_planted_instructions(passage.text) is not None


class PlantedScreen:
    """`passage_has_planted_instructions` with each chunk's verdict remembered (LRU). A chunk id names
    one document version, whose text never changes, so a verdict stays true; the text's hash is part
    of the key anyway, so a reused id with other text is screened afresh."""

    def __init__(self, capacity: int, screen: Callable[[object], bool] = passage_has_planted_instructions):
        self._capacity = capacity
        self._screen = screen
        self._verdicts: OrderedDict[tuple[str, int], bool] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, passage) -> bool:
        key = (passage.chunk_id, hash(passage.text))
        with self._lock:
            if key in self._verdicts:
                self._verdicts.move_to_end(key)
                return self._verdicts[key]
        verdict = self._screen(passage)
        if self._capacity:
            with self._lock:
                self._verdicts[key] = verdict
                while len(self._verdicts) > self._capacity:
                    self._verdicts.popitem(last=False)
        return verdict


# What the user is told, in one plain sentence, when a source was dropped before any prompt.
SCREENED_NOTICE = ("One source contains text addressed to AI assistants; it was not used and has been flagged to "
                   "its owner.")


def split_screened(passages: Iterable[P], screen: Callable[[P], bool] | None) -> tuple[list[P], list[P]]:
    """(kept, dropped) by `screen` (True: drop; `PlantedScreen`, remembered per chunk); all kept
    without one. The one split of every path: the answer service's candidates and a run's searches."""
    kept: list[P] = []
    dropped: list[P] = []
    for passage in passages:
        (dropped if screen is not None and screen(passage) else kept).append(passage)
    return kept, dropped


def with_screened_notice(answer: str) -> str:
    """The answer naming, once, that a source was dropped (a run's answer may already carry it)."""
    return answer if SCREENED_NOTICE in answer else f"{answer} {SCREENED_NOTICE}".strip()
# What stands in a tool's response for a text the screen flagged.
WITHHELD_TOOL_TEXT = "[withheld: text addressed to AI assistants]"
# How deep a tool response is walked, and how many of its texts are screened (bounded like its size).
MAX_RESPONSE_DEPTH = 8
MAX_RESPONSE_TEXTS = 2_000


def screen_tool_response(value, flag: Callable[[str], str | None] = flag_planted_instructions):
    """A tool's JSON response with every text that carries planted instructions replaced (the record
    stays usable, its other fields intact), and the reasons found. A tool's system holds text other
    people wrote (a CRM note, a ticket), so its response is read like a retrieved passage."""
    reasons: list[str] = []
    budget = [MAX_RESPONSE_TEXTS]

    def walk(item, depth: int):
        if isinstance(item, str):
            if budget[0] <= 0:
                return item
            budget[0] -= 1
            reason = flag(item) if len(item) > 3 else None
            if reason:
                reasons.append(reason)
                return WITHHELD_TOOL_TEXT
            return item
        if depth >= MAX_RESPONSE_DEPTH:
            return item
        if isinstance(item, dict):
            return {key: walk(v, depth + 1) for key, v in item.items()}
        if isinstance(item, list):
            return [walk(v, depth + 1) for v in item]
        return item

    return walk(value, 0), reasons
