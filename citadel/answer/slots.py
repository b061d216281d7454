"""What a question asks for (its *asked slot*), and whether a sentence holds a value of that slot.

Answerability is decided from the asked slot (DESIGN §4 step 6): the kind of fact the question asks
for, about its subject. An answer is asserted only when a top-scored sentence holds a value of that
kind and names the subject; a passage that is on topic but holds no such value is "not confirmed".

    asked_slot("How long do I have to add my husband to my health plan?")
        → AskedSlot(kind="duration", subject={"add", "husband", "health", "plan"})
    holds_slot(slot, "You have 60 days after the wedding to make the change.")  → True
    holds_slot(slot, "Contact HR to change your health plan.")                  → False

Kinds, strongest first (when a question has cues of several, the first wins): percentage, amount,
duration, date, count, contact, list, yes_no, open. "How much" is resolved by the noun it asks
about: money ("how much does parking cost") is an amount, time ("how much sick time", "how much
vacation") is a duration.

The checks are deliberately shallow: patterns over words, no parsing, no model. Each kind accepts its
near neighbours where a faithful answer may take their form: a duration question is answered by a
date ("by March 15"), a date question by a duration ("within 30 days"), an amount by a percentage
("75% of the rate"), a "who" question by a name or a role ("your People Partner"). A yes/no question
is held by any statement with a polarity or condition marker, or with any value; a polar question
that asks for a value ("Is there a phone number I can call?") is also held by a negation ("none").

Every pattern runs on untrusted text, so every one is compiled through `citadel.regex` (RE2, linear
time), and every input is cut to a bounded length first.
"""

from __future__ import annotations

from dataclasses import dataclass

from citadel import regex
from citadel.text import LIST_BULLET, SENTENCE_BREAK, WORD, content_terms, stem

SLOT_KINDS = ("amount", "percentage", "duration", "date", "count", "contact", "yes_no", "list", "open")
# When a question carries cues of several kinds, the first of these wins.
PRECEDENCE = ("percentage", "amount", "duration", "date", "count", "contact", "list", "yes_no", "open")

# Inputs are cut to these lengths before any pattern runs (a question is at most 2,000 characters at
# the gateway; a sentence longer than this is a table or a run-on, and its head is what gets quoted).
MAX_QUESTION_CHARS = 2_000
MAX_SENTENCE_CHARS = 4_000
# Longest question clause `describe` repeats back ("whether you can ...").
MAX_DESCRIBED_CHARS = 160
# Words read after "how much" (or "what's the cap") to decide between money and time.
QUANTITY_WINDOW_WORDS = 10
QUANTITY_WINDOW_CHARS = 120


@dataclass(frozen=True)
class AskedSlot:
    """What the question asks for.

    kind: one of SLOT_KINDS. subject: the question's content terms (stemmed as `content_terms`
    stems them) that name what it is about, slot words removed. polar: the question has yes/no form
    ("Is there a cut-off date ...?"), so a plain negation answers it as well as a value does.
    clause: the question clause that carries the slot (bounded), for `describe`."""

    kind: str
    subject: frozenset[str] = frozenset()
    polar: bool = False
    clause: str = ""


OPEN = AskedSlot("open")

# --- shared pattern pieces ------------------------------------------------------------------------

_NUMBER_WORD = (r"(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|"
                r"sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|"
                r"hundred)")
_NUMBER_WORDS = rf"{_NUMBER_WORD}(?:[\s-]{_NUMBER_WORD})?"
_DIGITS = r"\d+(?:,\d{3})*(?:\.\d+)?"
_QUANTITY = (rf"(?:{_DIGITS}|{_NUMBER_WORDS}|an?|half(?:\s+an?)?|one\s+and\s+a\s+half|"
             r"a\s+(?:couple|few)(?:\s+of)?|several|couple\s+of)")
# "thirty (30) days", "15 or more days", "60 to 90 minutes", "10+ hours".
_RANGE_TAIL = (r"(?:\s*\(\d+\))?"
               rf"(?:\s*(?:\+|or\s+(?:more|fewer|less|longer)|(?:to|-|–|or|and)\s*(?:{_DIGITS}|{_NUMBER_WORDS})))?")
_UNIT_MODIFIER = (r"(?:(?:calendar|business|working|work|consecutive|full|additional|extra|paid|unpaid|more|"
                  r"total)\s+){0,2}")
_TIME_UNIT = (r"(?:seconds?|secs?|minutes?|mins?|hours?|hrs?|days?|nights?|weeks?|wks?|months?|years?|yrs?|"
              r"quarters?|semesters?|fortnights?|workdays?|weekdays?|pay\s+periods?|shifts?)\b")
_FULL_MONTH = r"(?:january|february|march|april|june|july|august|september|october|november|december)"
_SHORT_MONTH = r"(?:jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)"
_WEEKDAY = r"(?:mon|tues|wednes|thurs|fri|satur|sun)days?"
_ORDINAL = r"(?:st|nd|rd|th)"
_AUX = (r"(?:do|does|did|can|could|is|are|was|were|may|might|should|will|would|am|have|has|must|shall|"
        r"isn't|aren't|don't|doesn't|didn't|can't|won't|wouldn't|shouldn't)")
# Where a clause of a question starts: its beginning, after a comma or colon, or after a conjunction.
_CLAUSE_START = r"(?:^|[,;:]\s*|\b(?:and|but|or|so|then|also)\s+)"
# A URL's characters, and its last one (never the sentence's closing punctuation).
_URL_CHAR = r"[^\s<>\"')\]]"
_URL_END = r"[^\s<>\"')\].,;:!?]"

_I = regex.IGNORECASE

# --- values ---------------------------------------------------------------------------------------

# Each kind's values: (name, pattern, flags, capture group holding the value).
_VALUE_SPECS: dict[str, tuple[tuple[str, str, int, int], ...]] = {
    "amount": (
        ("currency_symbol", rf"(?:us|ca|au|a|c)?[$€£¥₹]\s?{_DIGITS}"
                            r"(?:\s?(?:k|m|bn|mm)\b|\s+(?:thousand|million|billion)\b)?", _I, 0),
        ("currency_code", rf"\b(?:usd|eur|gbp|cad|aud|inr|jpy|chf)\s?{_DIGITS}(?:\s?k\b|\s+(?:thousand|million)\b)?",
         _I, 0),
        ("currency_after", rf"\b{_DIGITS}(?:\s?k|\s+(?:thousand|million|billion))?\s*"
                           r"(?:usd|eur|gbp|cad|aud|dollars?|euros?|pounds?|cents?|bucks)\b", _I, 0),
        ("currency_words", rf"\b{_NUMBER_WORDS}\s+(?:(?:hundred|thousand)\s+)?(?:dollars|euros|pounds|cents)\b",
         _I, 0),
        ("named_rate", r"\bper\s+diem\b|\bmileage\s+rate\b|\bfull\s+(?:cost|amount|price)\b|\bin\s+full\b|"
                       r"\bfully\s+(?:reimbursed|covered|paid)\b|\bat\s+no\s+(?:cost|charge)\b|"
                       r"\bfree\s+of\s+charge\b", _I, 0),
    ),
    "percentage": (
        ("percent_sign", rf"{_DIGITS}\s?%", _I, 0),
        ("percent_word", rf"\b(?:{_DIGITS}|{_NUMBER_WORDS})\s*(?:percent|per\s+cent|pct)\b", _I, 0),
        ("fraction", r"\b(?:one|a)[\s-](?:half|third|quarter)\b|\bhalf\s+of\b|\bthree[\s-]quarters\b|"
                     r"\btwo[\s-]thirds\b", _I, 0),
    ),
    "duration": (
        ("span", rf"\b{_QUANTITY}{_RANGE_TAIL}[\s-]+{_UNIT_MODIFIER}{_TIME_UNIT}", _I, 0),
        ("frequency", rf"\b(?:once|twice|thrice|(?:\d+|{_NUMBER_WORD})\s+times)\s+(?:a|an|per|each|every)\s+"
                      rf"{_TIME_UNIT}|\bevery\s+(?:other\s+)?(?:(?:\d+|{_NUMBER_WORD})\s+)?{_UNIT_MODIFIER}"
                      rf"{_TIME_UNIT}|"
                      r"\b(?:hourly|daily|weekly|bi-?weekly|fortnightly|monthly|bi-?monthly|quarterly|"
                      r"semi-?annually|annually|yearly)\b|\b(?:annual|yearly|monthly|weekly|daily|quarterly)\s+basis\b",
         _I, 0),
        ("immediate", r"\b(?:immediately|promptly|right\s+away|without\s+delay|as\s+soon\s+as\s+possible|asap|"
                      r"same\s+day|next\s+business\s+day|end\s+of\s+(?:the\s+)?(?:day|week|month|year))\b", _I, 0),
    ),
    # Dates that name a day (or a holiday): a duration question accepts these too ("by March 15").
    "date": (
        ("month_day", rf"\b(?:{_FULL_MONTH}|{_SHORT_MONTH}\.?)\s+\d{{1,2}}{_ORDINAL}?(?:,?\s+\d{{4}})?\b|"
                      rf"\b\d{{1,2}}{_ORDINAL}?\s+(?:of\s+)?(?:{_FULL_MONTH}|{_SHORT_MONTH})\b(?:,?\s+\d{{4}})?",
         _I, 0),
        # "May" is a month only in these shapes (it is mostly the modal verb).
        ("may_day", rf"\bMay\s+\d{{1,2}}{_ORDINAL}?\b|\b\d{{1,2}}{_ORDINAL}?\s+(?:of\s+)?May\b|"
                    r"\b(?i:in|of|since|until|by|early|late|mid|before|after|through|from)[\s-]May\b", 0, 0),
        ("numeric_date", r"\b\d{4}-\d{1,2}-\d{1,2}\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b|\b\d{1,2}\.\d{1,2}\.\d{4}\b", 0, 0),
        ("ordinal_day", rf"\b\d{{1,2}}{_ORDINAL}\b|\b(?:first|second|third|fourth|fifth|last|final)\s+"
                        rf"(?:business\s+|working\s+|calendar\s+)?(?:day|weekday|{_WEEKDAY})\b|"
                        r"\b(?:following|next|previous|preceding|same)\s+(?:business\s+|working\s+)?"
                        rf"(?:day|weekday|{_WEEKDAY})\b", _I, 0),
        ("holiday", r"\b(?:christmas|thanksgiving|new\s+year'?s(?:\s+day|\s+eve)?|juneteenth|independence\s+day|"
                    r"labou?r\s+day|memorial\s+day|veterans'?\s+day|columbus\s+day|indigenous\s+peoples'?\s+day|"
                    r"martin\s+luther\s+king|mlk\s+day|presidents'?\s+day|boxing\s+day|easter|good\s+friday)\b",
         _I, 0),
    ),
    # Weaker date values: a month alone, a year, a weekday, a time of day.
    "date_weak": (
        ("month", rf"\b(?:{_FULL_MONTH}|{_SHORT_MONTH}\.?\s+\d{{4}})\b", _I, 0),
        ("year", r"\b(?:19|20)\d{2}\b", 0, 0),
        ("weekday", rf"\b{_WEEKDAY}\b", _I, 0),
        ("time_of_day", r"\b\d{1,2}(?::\d{2})?\s?(?:am|pm|a\.m\.|p\.m\.)|\b(?:noon|midnight)\b|\b\d{1,2}:\d{2}\b",
         _I, 0),
    ),
    "count": (
        ("number", rf"\b\d+(?:[,.]\d+)*|\b{_NUMBER_WORD}\b|\b(?:zero|none|dozens?|once|twice|thrice|single)\b",
         _I, 0),
    ),
    "contact": (
        ("email", r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+", 0, 0),
        ("url", rf"\bhttps?://{_URL_CHAR}*{_URL_END}|\bwww\.{_URL_CHAR}*{_URL_END}|"
                r"\b[a-z0-9-]+(?:\.[a-z0-9-]+)*\.(?:com|org|net|gov|io|edu|dev|co|us|uk|ai|app)\b"
                rf"(?:/(?:{_URL_CHAR}*{_URL_END})?)?", _I, 0),
        ("phone", r"(?:\+?\d{1,3}[\s.-])?(?:\(\d{2,4}\)\s?|\d{2,4}[\s.-])\d{3}[\s.-]?\d{3,4}\b", 0, 0),
        ("slack_channel", r"(?:^|[\s(\[,;:\"'])(#[a-z][\w-]*\w)", _I, 1),
        ("handle", r"(?:^|[\s(\[,;:\"'])(@[a-z][\w.-]*\w)", _I, 1),
        ("street_address", r"\b\d{1,6}\s+(?:[A-Z][A-Za-z0-9.'-]*\s+){1,4}(?:St|Street|Ave|Avenue|Rd|Road|Blvd|"
                           r"Boulevard|Dr|Drive|Ln|Lane|Way|Ct|Court|Pl|Place|Sq|Square|Pkwy|Parkway|Hwy|Highway|"
                           r"Terrace|Plaza)\b\.?|\bP\.?\s?O\.?\s+Box\s+\d+|\bSuite\s+\d+", 0, 0),
    ),
    # Who to go to: a role, a team, or a name (checked in code, see `_names`).
    "person": (
        ("role", r"\b(?:manager|supervisor|team\s+lead|department\s+head|head\s+of\s+\w+|owner|officer|"
                 r"administrator|admin|human\s+resources|people\s+(?:ops|operations|team|partner)|payroll|"
                 r"coordinator|representative|director|help\s*desk|service\s*desk|support\s+team|security\s+team|"
                 r"legal\s+team|finance\s+team|benefits\s+team|mentor|buddy|recruiter|point\s+of\s+contact|"
                 r"contact\s+person)s?\b", _I, 0),
        ("acronym_role", r"\b(?:HR|IT|CEO|CTO|CFO|COO|CISO|VP|SIRT|PeopleOps)\b", 0, 0),
    ),
    "yes_no": (
        ("marker", r"\b(?:may|must|can|cannot|could|should|shall|will|would|might|needs?\s+to|needed|have\s+to|"
                   r"has\s+to|required?|requires|requirement|allowed|allows?|permitted|permits?|permission|"
                   r"prohibited|prohibits?|forbidden|not|no|never|none|nor|only|eligible|ineligible|eligibility|"
                   r"entitled|entitles|counts?|counted|qualify|qualifies|qualified|exempt|unless|except|if|"
                   r"approved?|approval|yes|mandatory|optional|encouraged|discouraged|expected|obliged|"
                   r"obligated|regardless|whether|always)\b|n't\b|\bnon-\w", _I, 0),
    ),
}

VALUE_PATTERNS: dict[str, tuple[tuple[regex.LinearPattern, int], ...]] = {
    kind: tuple((regex.compile(f"answer.slots.value.{kind}.{name}", source, flags), group)
                for name, source, flags, group in specs)
    for kind, specs in _VALUE_SPECS.items()
}

# A run of capitalised words ("Help Desk", "Jason Heaster", "International Centre for Dispute
# Resolution"); `_names` drops a leading function word ("The Work Number" → "Work Number").
NAME_RUN = regex.compile(
    "answer.slots.value.person.name_run",
    r"\b[A-Z][A-Za-z'’.&-]*[A-Za-z](?:\s+(?:(?:of|for|and|the|&)\s+)?[A-Z][A-Za-z'’.&-]*[A-Za-z])+",
)
NOT_A_NAME = frozenset("""
the a an if when our your their my each all please this these those in on at for to any every some you we
they it its and or but note after before once ask contact email send call reach talk speak see use go
""".split())

# A negation answers a polar question ("Is there a phone number?" → "None available").
NEGATION = regex.compile(
    "answer.slots.negation",
    r"\b(?:not|no|none|never|nor|neither|cannot|unavailable)\b|n't\b", _I,
)
LIST_SEPARATOR = regex.compile("answer.slots.list_separator", r"[,;]")
LIST_CONJUNCTION = regex.compile("answer.slots.list_conjunction", r"\s(?:and|or|and/or)\s", _I)
INTRO_COLON = regex.compile("answer.slots.intro_colon", r":\s*$")

# --- cues in the question -------------------------------------------------------------------------

_CUE_SPECS: dict[str, str] = {
    "percentage": (r"\b(?:what|which)\s+(?:\w+\s+){0,2}(?:percent|percentage|share|portion|proportion|fraction|cut)\b|"
                   r"\bpercent(?:age)?s?\b|%|\bpct\b"),
    "amount": (r"\b(?:is|are)\s+there\s+(?:a|an|any)\s+(?:[\w-]+\s+){0,2}(?:money|budget|allowance|stipend|fund|"
               r"funds|reimbursement|bonus|per\s+diem)\b|\bhow\s+much\s+(?:money|cash)\b|[$€£]"),
    "duration": (r"\bhow\s+(?:long|soon|fast|quickly|early|late|often|frequently)\b|"
                 r"\bhow\s+far\s+(?:in\s+advance|ahead|out|before|back)\b|"
                 rf"\bhow\s+many\s+(?:\w+\s+){{0,2}}{_TIME_UNIT}|\bnumber\s+of\s+(?:\w+\s+){{0,2}}{_TIME_UNIT}|"
                 r"\bwithin\s+how\b|\b(?:by|until|till)\s+when\b|\bdeadline\b|\bcut-?\s?off\b|\btime\s+limit\b|"
                 r"\bnotice\b|\b(?:duration|timeframe|time\s+frame|turnaround|waiting\s+period|notice\s+period)\b|"
                 r"\blength\s+of\b"),
    "date": (rf"{_CLAUSE_START}when\s+{_AUX}\b|\b(?:since|from)\s+when\b|"
             r"\b(?:what|which)\s+(?:\w+\s+)?(?:date|dates|day|days|weekday|weekdays|month|months|year|week)\b|"
             r"\bwhat\s+time\s+(?:is|does|do|of|should|will|are|can)\b|\bdates?\b|\beffective\b"),
    "count": r"\bhow\s+many\b|\bnumber\s+of\b",
    "contact": (rf"{_CLAUSE_START}(?:who|whom)\s+(?:else\s+)?(?:do|does|should|can|could|would|will|to|has|have|"
                r"must|may|is|are|needs?|handles?|approves?|signs?|manages?|processes|reviews?|decides?)\b|"
                r"\b(?:to|with|from|by|for)\s+whom?\b|"
                r"\bcontact(?:s|ed|ing)?\b|\be-?mail\s+address|\b(?:tele)?phone\s+(?:number|line|support)|\bhotline\b|"
                r"\bby\s+(?:tele)?phone\b|\b(?:call|phone|ring|dial)\s+(?:someone|somebody|a\s+human|a\s+person)\b|"
                r"\bnumber\s+(?:i|we|you|they)\s+(?:can|could|should)\s+(?:call|ring|dial|text)\b|"
                r"\bwhere\s+(?:do|does|can|could|should|would|will|must)\s+"
                r"(?:i|we|they|you|he|she|my\s+\w+|our\s+\w+)\s+(?:\w+\s+)?"
                r"(?:send|report|submit|email|ask|go|post|reach|forward|direct|raise|file|mail|take|escalate|turn)\b|"
                r"\breach\b|\bslack\s+channel\b|\bchannel\b|"
                r"\b(?:mailing|postal|street|office|email|e-mail|web|physical)\s+address\b|\bwhat\s+address\b|"
                r"\b(?:website|url|web\s+page)\b"),
    "list": (r"^(?:what|which)\s+(?:are|were)\s+(?:the|my|our|some|all)\b|"
             r"\b(?:which|what)\s+(?:\w+\s+)?(?:types|kinds|sorts|options|steps|benefits|documents|forms|"
             r"requirements|criteria|grounds|reasons|categories|tools|items|holidays|ways|things|paperwork|perks)\b|"
             r"\blist\b"),
}
CUES = {kind: regex.compile(f"answer.slots.cue.{kind}", source, _I) for kind, source in _CUE_SPECS.items()}

# "What's my yearly learning allowance": an amount, unless a word between names another kind's head
# ("On what dates does my salary get deposited?" asks for dates).
MONEY_WHAT = regex.compile(
    "answer.slots.cue.money_what",
    r"\b(?:what|which)\s+(?P<gap>(?:[\w-]+\s+){0,4})(?:amount|cost|costs|price|prices|fee|fees|budget|allowance|"
    r"allowances|stipend|per\s+diem|reimbursement|bonus|salary|compensation|payment|contribution|value|worth|"
    r"dollar|dollars)\b",
    _I,
)
OTHER_HEADS = frozenset("""
date dates day days weekday weekdays time times hour hours week weeks month months year years number percent
percentage share email address phone channel steps types kinds options
""".split())

# A quantity asked without saying of what: the words after it decide (money → amount, time →
# duration); "cap" and "limit" default to an amount, the others to a count.
QUANTITY_CUE = regex.compile(
    "answer.slots.cue.quantity",
    r"\bhow\s+(?P<how>much|negative|big|large|high|low|small|little)\b|"
    r"\b(?:what|which)\s+(?:\w+\s+){0,3}(?P<extreme>most|maximum|max|minimum|min|least|smallest|largest|biggest|"
    r"highest|lowest|cap|limit|ceiling|threshold|rate|rates)\b|"
    r"\b(?:up\s+to|above|below|over|under|beyond)\s+what\b|"
    r"\b(?:is|are)\s+there\s+(?:a|an|any)\s+(?:\w+\s+)?(?P<polar>limit|cap|maximum|minimum|ceiling)\b",
    _I,
)
MONEY_WORDS = frozenset("""
money cash cost costs price prices pricing fee fees pay paid payment payments salary salaries wage wages bonus
bonuses stipend stipends allowance allowances budget budgets reimburse reimbursed reimburses reimbursement
reimbursements expense expenses expensed spend spending spent charge charges charged bill billed bills
dollar dollars usd eur euro euros diem fund funds funding contribution contributions contribute match
compensation compensated worth refund tuition commission discount afford owe cover covered covers claim
""".split())
TIME_WORDS = frozenset("""
time leave leaves pto ppl fmla loa dvl lwop vacation vacations sick holiday holidays absence absences
notice sabbatical bereavement parental maternity paternity furlough break breaks length long duration
""".split())
# Time units count as the time asked about unless a rate word comes first ("each month", "per day").
TIME_UNIT_WORDS = frozenset("minute minutes hour hours day days week weeks month months year years".split())
RATE_WORDS = frozenset("per each every a an this next last that same".split())
DEFAULT_AMOUNT_EXTREMES = frozenset({"cap", "limit", "ceiling", "threshold", "rate", "rates"})

AUX_CLAUSE = regex.compile("answer.slots.aux_clause", rf"{_CLAUSE_START}{_AUX}\b", _I)
WH_WORD = regex.compile(
    "answer.slots.wh_word",
    rf"\b(?:how|what|which|where|who|whom|whose|why)\b|{_CLAUSE_START}when\s+{_AUX}\b",
    _I,
)
# "Can you tell me how long ...": a request to answer, not a yes/no question.
POLITE_PREFIX = regex.compile(
    "answer.slots.polite_prefix",
    r"^(?:(?:can|could|would|will)\s+you\s+(?:please\s+)?(?:tell|show|let)\s+me\s+(?:know\s+)?|"
    r"do\s+you\s+know\s+|i\s+(?:want|would\s+like|need|'d\s+like)\s+to\s+know\s+|(?:please\s+)?tell\s+me\s+)",
    _I,
)
WHETHER_START = regex.compile("answer.slots.whether_start", r"^(?:if|whether)\b", _I)
CONTRACTION = regex.compile("answer.slots.contraction", r"\b(what|who|how|where|when|that|there|it)['’]s\b", _I)
CURLY_APOSTROPHE = regex.compile("answer.slots.curly_apostrophe", r"[’‘]")
SPACE_RUN = regex.compile("answer.slots.space_run", r"\s+")
CONTROL = regex.compile("answer.slots.control", r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")

# Words that say what kind of value is asked, not what it is about: dropped from the subject (the
# common ones always, the others when they belong to the kind asked: "phone" is a slot word of
# "what's the phone number", the subject of "how much is the phone stipend").
_COMMON_SLOT_WORDS = """
much many usual usually typical typically exactly roughly approximately actually generally normally
"""
_KIND_SLOT_WORDS = {
    "amount": "amount cost costs price fee fees rate rates dollar dollars money cash maximum minimum max min most "
              "least limit cap biggest smallest largest highest lowest",
    "percentage": "percent percentage share portion proportion fraction cut",
    "duration": "long soon fast quickly far ahead advance often frequently early late time times deadline cutoff "
                "cut minute minutes hour hours day days week weeks month months year years duration length "
                "number maximum minimum max min most least limit",
    "date": "date dates day days weekday weekdays month year time effective",
    "count": "number maximum minimum max min most least biggest smallest largest highest lowest",
    "contact": "contact email address phone telephone number call reach send channel website url",
    "list": "list types kinds sorts options steps",
}
SLOT_WORDS = {kind: frozenset(stem(word) for word in (_COMMON_SLOT_WORDS + words).split())
              for kind, words in _KIND_SLOT_WORDS.items()}
COMMON_SLOT_WORDS = frozenset(stem(word) for word in _COMMON_SLOT_WORDS.split())

DESCRIPTIONS = {
    "amount": "the amount", "percentage": "the percentage", "duration": "how long", "date": "the date",
    "count": "how many", "contact": "the contact details", "list": "the list", "open": "that",
}
YES_NO_FALLBACK = "whether that is the case"


# --- the question ---------------------------------------------------------------------------------


def _clean(text: object, limit: int) -> str:
    """`text` as a bounded string with curly apostrophes straightened and control characters gone."""
    if not isinstance(text, str):
        return ""
    text = CONTROL.sub(" ", text[:limit])
    return CURLY_APOSTROPHE.sub("'", text)


def question_sentences(question: str) -> list[str]:
    """The sentences of `question` that ask (end with "?"); the last sentence when none does."""
    text = SPACE_RUN.sub(" ", _clean(question, MAX_QUESTION_CHARS)).strip()
    if not text:
        return []
    pieces = [piece.strip() for piece in SENTENCE_BREAK.split_at(text, "cut") if piece.strip()]
    asking = [piece for piece in pieces if piece.endswith("?")]
    return asking or pieces[-1:]


def _normalised(sentence: str) -> tuple[str, bool]:
    """A question sentence as the cues read it ("what's" → "what is", a polite prefix such as "can you
    tell me" removed), and whether such a prefix was removed."""
    sentence = CONTRACTION.sub(lambda m: f"{m.group(1)} is", sentence.strip())
    rest = POLITE_PREFIX.sub("", sentence, count=1).strip()
    return rest, rest != sentence


def _polar_clause(sentence: str, polite: bool) -> str | None:
    """The yes/no clause of a question sentence ("Can I use ...?", "tell me whether I can ..."), or
    None when a wh-word ("how", "what", "who", an asking "when") opens the question first."""
    if polite and WHETHER_START.match(sentence):
        return sentence
    aux = AUX_CLAUSE.search(sentence)
    if aux is None:
        return None
    wh = WH_WORD.search(sentence)
    if wh is not None and wh.start() < aux.start():
        return None
    clause = sentence[aux.start():].lstrip(" ,;:")
    for conjunction in ("and ", "but ", "or ", "so ", "then ", "also "):
        if clause.lower().startswith(conjunction):
            clause = clause[len(conjunction):]
    return clause


def _noun_kind(text: str, default: str) -> str:
    """money → "amount", time → "duration", by the first such word in the first few words of `text`."""
    words = WORD.findall(text.lower())[:QUANTITY_WINDOW_WORDS]
    if any(symbol in text[:60] for symbol in "$€£"):
        return "amount"
    for index, word in enumerate(words):
        if word in MONEY_WORDS:
            return "amount"
        if word in TIME_WORDS or word in TIME_UNIT_WORDS and (index == 0 or words[index - 1] not in RATE_WORDS):
            return "duration"
    return default


def _quantity_kinds(sentence: str) -> tuple[set[str], bool]:
    """Kinds asked by quantity cues ("how much", "what's the cap"), and whether an unresolved "how
    much" was seen (an amount unless the question asks for something else too)."""
    kinds: set[str] = set()
    unresolved_how_much = False
    for match in QUANTITY_CUE.finditer(sentence):
        after = sentence[match.end():match.end() + QUANTITY_WINDOW_CHARS]
        if match.group("how"):
            default = "amount?" if match.group("how").lower() in ("much", "little") else "count"
        else:
            extreme = (match.group("extreme") or match.group("polar") or "").lower()
            default = "amount" if extreme in DEFAULT_AMOUNT_EXTREMES or not extreme else "count"
            after = sentence[match.start():match.end() + QUANTITY_WINDOW_CHARS]  # "what is the max vacation"
        kind = _noun_kind(after, default)
        if kind == "amount?":
            unresolved_how_much = True
        else:
            kinds.add(kind)
    return kinds, unresolved_how_much


def _subject(kind: str, sentences: list[str], question: str) -> frozenset[str]:
    """The content terms of the asking sentences (of the whole question when they have none), less
    the slot words of `kind`."""
    terms = [term for sentence in sentences for term in content_terms(sentence)]
    if not terms:
        terms = content_terms(_clean(question, MAX_QUESTION_CHARS))
    slot_words = SLOT_WORDS.get(kind, COMMON_SLOT_WORDS)
    return frozenset(term for term in terms if term not in slot_words)


def asked_slot(question: str) -> AskedSlot:
    """The slot `question` asks for: its kind (by PRECEDENCE among the cues found in its asking
    sentences) and its subject. Any input gives a slot; text with no cue gives an open one."""
    sentences = question_sentences(question)
    if not sentences:
        return OPEN
    kinds: set[str] = set()
    unresolved_how_much = False
    polar_clause: str | None = None
    for raw in sentences:
        sentence, polite = _normalised(raw)
        kinds |= {kind for kind, cue in CUES.items() if cue.search(sentence)}
        if any(not set(WORD.findall(match.group("gap").lower())) & OTHER_HEADS
               for match in MONEY_WHAT.finditer(sentence)):
            kinds.add("amount")
        quantity, unresolved = _quantity_kinds(sentence)
        kinds |= quantity
        unresolved_how_much |= unresolved
        clause = _polar_clause(sentence, polite)
        if clause is not None and polar_clause is None:
            polar_clause = clause
            kinds.add("yes_no")
    if unresolved_how_much and not kinds - {"yes_no"}:
        kinds.add("amount")
    kind = next((kind for kind in PRECEDENCE if kind in kinds), "open")
    clause = polar_clause if kind == "yes_no" else sentences[0]
    return AskedSlot(kind, _subject(kind, sentences, question), polar=polar_clause is not None,
                     clause=SPACE_RUN.sub(" ", clause or "").strip()[:MAX_QUESTION_CHARS])


# --- values in a sentence -------------------------------------------------------------------------


def _names(text: str) -> list[tuple[int, int, str]]:
    """Capitalised runs of two words or more, a leading function word dropped."""
    found = []
    for match in NAME_RUN.finditer(text):
        words = match.group(0).split()
        start = match.start()
        while words and words[0].lower() in NOT_A_NAME:
            start += len(words[0]) + 1
            words = words[1:]
        if len(words) >= 2:
            found.append((start, match.end(), " ".join(words)))
    return found


def _spans(kind: str, text: str) -> list[tuple[int, int, str]]:
    spans = []
    for pattern, group in VALUE_PATTERNS.get(kind, ()):
        for match in pattern.finditer(text):
            value = match.group(group)
            if value and value.strip():
                spans.append((match.start(group), match.end(group), value.strip()))
    if kind == "person":
        spans += _names(text)
    return spans


def _distinct(spans: list[tuple[int, int, str]]) -> list[str]:
    """Values in text order, each span dropped when it lies inside one already kept."""
    kept: list[str] = []
    furthest = -1  # spans come by start, so one ending by `furthest` lies inside a kept span
    for _start, end, value in sorted(spans, key=lambda span: (span[0], -(span[1] - span[0]))):
        if end <= furthest:
            continue
        kept.append(value)
        furthest = end
    return kept


def _found(kind: str, text: str) -> bool:
    if kind == "person" and _names(text):
        return True
    return any(pattern.search(text) is not None for pattern, _ in VALUE_PATTERNS.get(kind, ()))


def _list_items(text: str) -> list[str]:
    """The items of an enumeration: "a, b and c" → a, b, c (a leading "and"/"or" and the closing
    punctuation dropped)."""
    items = [item.strip() for item in LIST_SEPARATOR.split(text.strip().rstrip(".;:!?")) if item.strip()]
    if items:
        last = LIST_CONJUNCTION.split(f" {items[-1]}")
        items = items[:-1] + [part.strip() for part in last if part.strip()]
    return items


def _enumerates(text: str) -> bool:
    separators = len(LIST_SEPARATOR.findall(text))
    if separators >= 2:
        return True
    if separators == 1:
        return LIST_CONJUNCTION.search(text[text.index(",") if "," in text else text.index(";"):]) is not None
    return False


# The value kinds each slot kind accepts, its own first.
ACCEPTS: dict[str, tuple[str, ...]] = {
    "amount": ("amount", "percentage"),
    "percentage": ("percentage",),
    "duration": ("duration", "date"),
    "date": ("date", "date_weak", "duration"),
    "count": ("count",),
    "contact": ("contact", "person"),
}
# Any of these makes a yes/no question's sentence a statement of fact about it.
ANY_VALUE = ("amount", "percentage", "duration", "date", "date_weak", "count")


def slot_values(kind: str, sentence: str) -> list[str]:
    """The values of `kind` found in `sentence`, in order (for tests and explanations): amounts,
    percentages, durations, dates (weak ones too), counts, contact details (with names and roles),
    yes/no markers, list items. An open or unknown kind has none."""
    text = _clean(sentence, MAX_SENTENCE_CHARS)
    if not text.strip():
        return []
    if kind == "list":
        return _list_items(text) if _enumerates(text) else []
    own = {"date": ("date", "date_weak"), "contact": ("contact", "person")}.get(kind, (kind,))
    return _distinct([span for value_kind in own for span in _spans(value_kind, text)])


def holds_slot(slot: AskedSlot, sentence: str, *, list_item: bool = False) -> bool:
    """Whether `sentence` holds a value of the kind `slot` asks for (see ACCEPTS for the neighbours a
    kind accepts). Whether it is about the slot's subject is `subject_share`'s question. An open slot
    is held by any non-empty sentence; `list_item` says the sentence is an item of a list."""
    text = _clean(sentence, MAX_SENTENCE_CHARS)
    if not text.strip():
        return False
    kind = slot.kind
    if kind == "open":
        return True
    if kind == "list":
        return list_item or _enumerates(text) or INTRO_COLON.search(text) is not None \
            or LIST_BULLET.match(text) is not None
    if kind == "yes_no":  # an item of a list of rules states one ("Forwarding of business email.")
        return list_item or _found("yes_no", text) or any(_found(value_kind, text) for value_kind in ANY_VALUE)
    if slot.polar and NEGATION.search(text) is not None:
        return True
    return any(_found(value_kind, text) for value_kind in ACCEPTS.get(kind, ()))


def subject_share(slot: AskedSlot, text: str) -> float:
    """The share of the slot's subject terms that occur in `text` (1.0 when the subject is empty)."""
    if not slot.subject:
        return 1.0
    terms = set(content_terms(_clean(text, MAX_SENTENCE_CHARS)))
    return len(slot.subject & terms) / len(slot.subject)


# --- describing the slot --------------------------------------------------------------------------

_SWAP = {"i": "you", "me": "you", "my": "your", "mine": "yours", "myself": "yourself", "i'm": "you're",
         "i've": "you've", "i'll": "you'll", "i'd": "you'd"}
_PRONOUNS = frozenset({"i", "we", "they", "he", "she", "it"})
_MODALS = frozenset({"can", "could", "should", "may", "might", "will", "would", "must", "shall"})


def _second_person(words: list[str]) -> list[str]:
    out: list[str] = []
    for word in words:
        lower = word.lower()
        if lower == "am" and out and out[-1] == "you":
            out.append("are")
        else:
            out.append(_SWAP.get(lower, word))
    return out


def _whether(clause: str) -> str:
    """"Can I use the leave yet?" → "whether you can use the leave yet" (a few common shapes only)."""
    words = clause.strip().rstrip("?").split()
    if len(words) < 3:
        return YES_NO_FALLBACK
    aux, first, rest = words[0].lower(), words[1].lower(), words[2:]
    if aux in ("if", "whether"):
        reordered = words[1:]
    elif aux in _MODALS and first in _PRONOUNS:
        reordered = [words[1], aux] + rest
    elif aux == "am" and first == "i":
        reordered = ["I", "am"] + rest
    elif aux in ("is", "are", "was", "were") and first in _PRONOUNS | {"there", "this", "that"}:
        reordered = [words[1], aux] + rest
    elif aux in ("is", "are") and len(words) <= 6 and words[-1].lower().endswith(("ed", "en")):
        reordered = words[1:-1] + [aux, words[-1]]  # "Is parking reimbursed?" → "parking is reimbursed"
    elif aux == "do" and first in ("i", "we", "they"):
        reordered = [words[1]] + rest
    elif aux in ("have", "has") and first in _PRONOUNS:
        reordered = [words[1], aux] + rest
    else:
        return YES_NO_FALLBACK
    described = "whether " + " ".join(_second_person(reordered))
    return described if len(described) <= MAX_DESCRIBED_CHARS else YES_NO_FALLBACK


def describe(slot: AskedSlot) -> str:
    """A short phrase for what was asked, to finish "The documents I can see don't state ...":
    "the amount", "how long", "the date", "how many", "the contact details", "whether you can ...",
    "the list", "that"."""
    if slot.kind == "yes_no":
        return _whether(_clean(slot.clause, MAX_QUESTION_CHARS)) if slot.clause else YES_NO_FALLBACK
    return DESCRIPTIONS.get(slot.kind, "that")
