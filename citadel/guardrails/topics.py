"""Requests for a person, clearly off-topic requests, and questions that need several retrievals.

Off-topic detection is deliberately conservative: it only names requests no company document could
answer (a poem, a joke, the weather, a sports score, a recipe, small talk). Anything that mentions
work matters (policies, benefits, travel, security, contracts, legal terms, money...) passes, and
anything not matched here goes on to retrieval, where the confidence gate refuses what the
documents do not cover.
"""

from __future__ import annotations

from citadel import regex
from citadel.guardrails.text import compile_all, first_match, normalise, with_check

_PERSON = (
    r"(human|person|people|agent|representative|rep|operator|someone|somebody|staff member|support team"
    r"|customer service|customer support|help ?desk)"
)
# Escalation may also name a manager ("escalate this to a supervisor"); asking whether to talk to
# one's manager is a policy question, so plain "talk to" does not count it.
_ESCALATION_PERSON = _PERSON[:-1] + "|manager|supervisor)"
# Adjectives that keep "agent" meaning a person at the help desk (not "a travel agent").
_LIVE = (
    r"((a|an|some|the|your|one of your)\s+)?"
    r"((real|live|actual|human|support|customer service|customer support|service)\s+)?"
)

HUMAN_REQUEST_PATTERNS = compile_all("guardrails.topics.human_request", {
    "talk_to_person": rf"\b(talk|speak|chat)\s+(to|with)\s+{_LIVE}{_PERSON}\b",
    "connect_me": (
        r"\b(connect|transfer|put|escalate|route|forward|pass)\s+(me|this|my (question|request|case|ticket))\s+"
        rf"(through\s+|over\s+)?(to|with)\s+{_LIVE}{_ESCALATION_PERSON}\b"
    ),
    "want_a_person": (
        r"\b(i (want|need|would like|'d like)|can i (get|have)|get me|give me|let me (talk|speak) (to|with))\s+"
        rf"{_LIVE}"
        r"(human|real person|person|representative|human agent|live agent|operator|someone real)\b"
    ),
    "live_person": (
        r"^\W*(a |an )?(real|live|actual) (human|person|agent)( please)?\W*$"
        r"|\b(real|live) (human|person|agent),? please\b|\bhuman (agent|support|representative|operator)\b"
    ),
    "not_a_bot": (
        r"\b(stop|no more|enough)\b[^.?!]{0,20}\b(bot|robot|automated|machine)\b"
        r"|\b(i don't|don't) want (to talk to )?(a|an|the) (bot|robot|machine|ai)\b"
    ),
})

# Words that make a question a work question: when one appears, the off-topic rules stand aside.
WORK_CONTEXT = regex.compile(
    "guardrails.topics.work_context",
    r"\b(polic(y|ies)|procedures?|handbook|guidelines?|rules?|benefits?|leave|vacation|pto|holiday|travel|trip"
    r"|per diem|hotel|lodging|flight|expense|reimburs\w*|receipt|payroll|salary|pay|bonus|insurance|401k|retirement"
    r"|security|incident|password|laptop|equipment|device|vpn|access|account|contract|agreement|terms|legal|law"
    r"|compliance|privacy|finance|budget|invoice|purchase|procurement|vendor|customer|client|employee|staff|team"
    r"|manager|onboarding|offboarding|hiring|interview|performance|review|training|office|remote|work|meeting|company"
    r"|business|github|sourcegraph|18f|civicactions|repository|license|copyright|trademark|dmca|abuse|spam|report)\b"
)

OFF_TOPIC_PATTERNS = compile_all("guardrails.topics.off_topic", {
    "creative_writing": (
        r"^\W*(please\s+|can you\s+|could you\s+|would you\s+)?(write|compose|create|generate|make up|give me"
        r"|tell me)\s+(me\s+)?(a|an|some|another)?\s*((short|funny|little|silly|love|rhyming|sad|cute"
        r"|bedtime)\s+)*(poem|haiku|limerick|song|lyrics|rap|sonnet|story|fairy tale|riddle|joke)s?\b"
    ),
    "joke": (
        r"\b(tell|give) (me |us )?(a |another |some )?(\w+ )?jokes?\b|\bmake me laugh\b|\bknow any (good )?jokes\b"
    ),
    "weather": (
        r"\b(what('s| is| will be)|how('s| is)|what will) the weather\b|\bweather (be|going to be) like\b"
        r"|\bweather (forecast|today|tomorrow|this week(end)?|like)\b|\bwill it (rain|snow) (today|tomorrow|this)\b"
    ),
    "sports": (
        r"\b(who won|score of|final score|scores? (of|from|in) (the|last|yesterday))\b[^.?!]{0,40}\b(game|match"
        r"|super bowl|world cup|world series|final|championship|nba|nfl|mlb|nhl|premier league)\b"
        r"|\b(super bowl|world cup|world series|premier league|champions league|nba finals)\b[^.?!]{0,30}\b(score|won"
        r"|winner|result)"
    ),
    # "how do I cook up a plan" is not cooking: `accept` rejects "cook up" (RE2 has no look-ahead).
    "recipe": with_check(
        r"\brecipes?\b|\bhow (do|can|should) (i|you|we) (?P<verb>cook|bake|grill|fry|roast)\b",
        lambda candidate: candidate.group("verb") != "cook" or candidate.after(3, "verb") != " up",
    ),
    "entertainment": (
        r"\b(recommend|suggest)\b[^.?!]{0,20}\b(a |some )?(good )?(movie|film|tv show|series|novel|song|album"
        r"|video game|restaurant)s?\b|\bwhat (movies|films) (are|is) playing\b"
    ),
    "small_talk": (
        r"^\W*(hi|hello|hey|yo|howdy|good (morning|afternoon|evening)|how are you( doing| today)?|what's up"
        r"|how's it going|thanks?( you)?( so much)?)\W*(there|chatbot|bot)?\W*$"
    ),
    "about_the_assistant": (
        r"\b(are you (alive|sentient|conscious|single|married|in love)|do you (love|have feelings|dream)|what('s"
        r"| is) your (favorite|favourite)|how old are you|(what is|what's) the meaning of life)\b"
    ),
    "fortune": r"\b(horoscope|zodiac sign|lottery numbers|tarot reading)\b",
})


def human_request(question: str) -> str | None:
    """The rule naming a request for a person, or None."""
    return first_match(HUMAN_REQUEST_PATTERNS, normalise(question))


def off_topic(question: str) -> str | None:
    """The rule naming a clearly off-topic request, or None. Work questions always pass."""
    text = normalise(question)
    if WORK_CONTEXT.search(text):
        return None
    return first_match(OFF_TOPIC_PATTERNS, text)


# Several questions in one: each needs its own retrieval before one answer can be written. When it is
# unclear (DESIGN.md §10), the agentic path is the safe side: a question that states a situation and
# then asks (two sentences), or asks whether a rule applies to a case (eligibility), needs facts from
# more than one place, which one retrieval rarely brings together.
_QUESTION_MARK = regex.compile("guardrails.topics.question_mark", r"\?")
MULTI_STEP_PATTERNS = compile_all("guardrails.topics.multi_step", {
    "situation_then_question": r"[a-z0-9]{3}[.!]\s+[a-z][^.!?]{0,300}\?",  # {3}: not after "e.g."
    "eligibility": r"\b(eligible|eligibility|qualif(y|ies|ied|ying)|entitled|does [^?]{1,60} apply to)\b",
    "comparison": (
        r"\b(compare|comparison|contrast|differences? between|differ(s|ent)? from|how does [^?]{1,60} differ|versus"
        r"|vs\.?|pros and cons)\b"
    ),
    "conjoined": (
        r"\b(and also|as well as|and then|in addition|additionally|and what about|and how|and when|and where|and who"
        r"|and why|and what|and which|and whether|both [^?]{1,40} and)\b"
    ),
})
MIN_QUESTION_MARKS_FOR_MULTI_STEP = 2


def is_multi_step(question: str) -> bool:
    text = normalise(question)
    if len(_QUESTION_MARK.findall(text)) >= MIN_QUESTION_MARKS_FOR_MULTI_STEP:
        return True
    return first_match(MULTI_STEP_PATTERNS, text) is not None


# A request for an action ("Propose a 5% discount for 24 months for acme.", "Can you book a hotel in
# London?") is answered by a run that can call the tool and park it for approval, never by one
# retrieval: the agentic path (DESIGN.md §10). The rules read the user's words only. A question about
# how to act ("How do I submit an expense report?", "Can I book business class?") is not a request:
# every rule needs the verb where a request puts it — first in a sentence, after a polite or "you"
# opener ("please", "can you", "I'd like you to"), or after "and then"/"if so". Where the wording is
# unclear ("I want to cancel my flight"), it counts as a request: the agentic path is the safe side.
_ACTION_VERB = (
    r"(propose|create|open|raise|file|submit|send|e-?mail|book|reserve|schedule|cancel|refund|approve|reject"
    r"|update|change|add|log|record|apply|issue|request|register|assign|close|delete|remove|renew|extend|order"
    r"|reimburse|pay|transfer|notify|remind|set up)"
)
# Where a request starts: the message or a sentence, then any polite words or a request to "you".
_REQUEST_START = (
    r"(^|[.!?;:]\s+|,\s*(and\s+)?(then\s+)?|\band then\s+|\bif (so|yes)\s+)"
    r"((please|kindly|also|now|then|ok|okay|so)\s+)*"
    r"((can|could|would|will) you\s+(please\s+)?|i('d| would) like you to\s+|i (want|need) you to\s+"
    r"|go ahead and\s+|let's\s+|help me\s+|i (want|need|would like|'d like) to\s+)?"
)
# What follows the verb: its object (a determiner, a number, a possessive, "me"), so "order of
# approvals" or "update:" is not a request.
_ACTION_OBJECT = (
    r"\s+(a|an|the|my|our|their|his|her|its|this|that|these|those|it|them|me|us|some|another|new|\d"
    r"|[a-z][a-z0-9&-]*'s\b|[a-z][a-z0-9&-]*\s+(for|to|on|with|at)\s)"
)
ACTION_REQUEST_PATTERNS = compile_all("guardrails.topics.action_request", {
    "requested_action": rf"{_REQUEST_START}{_ACTION_VERB}{_ACTION_OBJECT}",
    # "… and send a reminder to the owner." in a message that asks nothing ("?"): the second verb is a request.
    "conjoined_action": rf"^[^?\n]*\band\s+(please\s+)?{_ACTION_VERB}{_ACTION_OBJECT}[^?\n]*$",
})


def action_request(question: str) -> str | None:
    """The rule naming a request for an action in the user's message, or None."""
    return first_match(ACTION_REQUEST_PATTERNS, normalise(question))
