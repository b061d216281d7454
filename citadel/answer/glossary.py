"""Acronyms of a tenant's own corpus, mined from its definitions, so either spelling finds the other.

Employees ask with the acronym ("how much PTO do I get?") where the handbook spells it out ("paid
time off"), or the other way round; the gate's lexical coverage then misses the section that
answers. Handbooks define their acronyms in two shapes, "Long Form Words (LFW)"
and "LFW (Long Form Words)", so the definitions are mined from the published segment itself, per
tenant: no global list can know a tenant's "COR" or "VLTP", and a global list would be wrong for a
tenant whose "CO" is not a Contracting Officer.

A candidate is accepted only when the acronym's letters are the initials of the long form's words
(see `initials_cost`), so "the meeting (TBD)" or "(see below)" is never a definition. Everything that
reads text is linear: two RE2 patterns find the parentheses, and each candidate reads a bounded window
that ends at the previous delimiter, so windows of consecutive candidates do not overlap.

The glossary is used twice: `expand` appends the other spelling to the question (retrieval meets
the document's words), and `augment` adds the equivalents to a term set (coverage counts either).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from citadel import regex
from citadel.segments.partition import Partition, SegmentCache, sampled_texts
from citadel.text import STOPWORDS, content_terms

# "Long Form Words (LFW)": an acronym-like token alone in parentheses.
ACRONYM_IN_PARENTHESES = regex.compile("answer.glossary.acronym_in_parentheses", r"\(([A-Za-z0-9]{2,9})\)")
# "LFW (Long Form Words)": an acronym-like token, then a short parenthetical (`_words_inside` reads
# it up to its first delimiter or blank line).
ACRONYM_THEN_PARENTHESES = regex.compile(
    "answer.glossary.acronym_then_parentheses", r"\b([A-Za-z0-9]{2,9})[ \t]?\(([^()]{3,120})\)"
)
# Whole words of a question or passage, to find the acronyms it uses.
TOKEN = regex.compile("answer.glossary.token", r"[A-Za-z0-9]+")

MIN_ACRONYM, MAX_ACRONYM = 2, 8
PLURAL = "s"
# Words a long form may skip without contributing a letter ("Statement of Work (SOW)" may use "of").
SMALL_WORDS = frozenset({"of", "and", "the", "for", "to", "in", "on", "at", "by", "with", "or", "a", "an", "&"})
# Leading words of a parenthetical long form that are not part of it ("(the Contracting Officer)").
ARTICLES = frozenset({"the", "a", "an"})
# What ends a long form: it never spans a sentence, a clause, brackets or a paragraph (a single line
# break is a hard wrap of Markdown source: "Office\nof Science and Technology Policy (OSTP)").
DELIMITERS = ".,;:!?()[]{}|\"“”<>="
PARAGRAPH = "\n\n"
# Markdown emphasis around a long form ("**Temporary Duty Travel** (TDY)") is not part of it.
EMPHASIS = "*_`"
# One pass over a window: each delimiter becomes CUT and emphasis goes, so one rfind finds the cut.
CUT = "\x00"
CUT_MARKS = str.maketrans({**dict.fromkeys(DELIMITERS, CUT), **dict.fromkeys(EMPHASIS)})
# Characters that join the parts of one word, each part giving an initial ("multi-factor").
JOINERS = str.maketrans({"-": " ", "/": " ", "–": " "})
# Characters trimmed from the edges of a long form, and possessive endings removed from it.
EDGE_CHARACTERS = "-/–'’\"“” "
POSSESSIVES = ("'s", "’s")
# Characters before "(" a long form may be read from; bounds the work per candidate.
WINDOW_CHARS = 240
# A long form has at least this many words: one word with two letters is a guess ("Colorado (CO)").
MIN_LONG_FORM_WORDS = 2
# An unused trailing word ("Temporary Duty Travel (TDY)") is allowed from this acronym length on.
MIN_ACRONYM_FOR_UNUSED_WORD = 3
# Parts a long form may have: one per letter, small words between, and an unused last one.
MAX_PARTS = 2 * MAX_ACRONYM + 2
# Punctuation around a whole word in running text ("(CAP),", "**cap**").
WORD_EDGE_PUNCTUATION = ".,;:!?()[]{}\"'“”‘’*_`"
MAX_ADDITIONS = 8
MAX_ENTRIES = 5000
# Glossaries over more rows than this use an evenly strided sample (like the gate's IDF), keeping
# the first query on a huge tenant cheap; a definition is repeated, so a sample still finds most.
GLOSSARY_SAMPLE_ROWS = 200_000
GLOSSARY_CACHE_SEGMENTS = 16

# (unused trailing words, words giving two letters): lower is a better match.
Cost = tuple[int, int]
PLAIN: Cost = (0, 0)


@dataclass(frozen=True)
class _Entry:
    """One acronym with what `expand` and `augment` need, precomputed once per glossary."""

    acronym: str                  # lower case, the key
    long_form: str                # as written
    acronym_term: str | None      # the acronym's content term ("tdy"), None for a stopword ("it")
    long_terms: tuple[str, ...]   # the long form's content terms, in order


def _entry(acronym: str, long_form: str) -> _Entry:
    terms = content_terms(acronym)
    return _Entry(acronym, long_form, terms[0] if len(terms) == 1 else None, tuple(content_terms(long_form)))


@dataclass(frozen=True)
class Glossary:
    """A tenant's acronyms: lower-case acronym -> its long form as the corpus writes it.

    `case_sensitive` holds the acronyms that are also ordinary words ("it", or "cap" where the corpus
    writes "cap" in lower case): a question uses them only when written in capitals, and a passage's
    lower-case word is not read as the acronym.
    """

    long_forms: Mapping[str, str]
    case_sensitive: frozenset[str] = frozenset()
    _entries: tuple[_Entry, ...] = field(init=False, repr=False, compare=False)
    _by_acronym: Mapping[str, _Entry] = field(init=False, repr=False, compare=False)
    _by_first_term: Mapping[str, tuple[_Entry, ...]] = field(init=False, repr=False, compare=False)
    _by_acronym_term: Mapping[str, tuple[_Entry, ...]] = field(init=False, repr=False, compare=False)
    _by_rarest_term: Mapping[str, tuple[_Entry, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        entries = tuple(_entry(acronym, long_form) for acronym, long_form in self.long_forms.items())
        object.__setattr__(self, "_entries", entries)
        object.__setattr__(self, "_by_acronym", MappingProxyType({entry.acronym: entry for entry in entries}))
        object.__setattr__(self, "_by_first_term", _group(entries, lambda e: e.long_terms[:1]))
        object.__setattr__(self, "_by_acronym_term", _group(
            entries, lambda e: (e.acronym_term,) if e.acronym_term and e.acronym not in self.case_sensitive else ()))
        object.__setattr__(self, "_by_rarest_term", _group(entries, _rarest_term_of(entries)))

    def __bool__(self) -> bool:
        return bool(self.long_forms)

    def expand(self, question: str) -> str:
        """The question with, for each acronym it uses (whole word, any case), its long form appended
        once in parentheses, and for each long form it spells out (its content terms in order, as
        consecutive words, case-insensitive), the acronym appended: "How much PTO do I get?" ->
        "How much PTO do I get? (paid time off)". Unchanged when nothing applies. Bounded: at most
        MAX_ADDITIONS additions, long forms first, each in the order the question uses it."""
        if not self._entries:
            return question
        used = self._acronyms_used(question)
        spelled = self._long_forms_spelled(question)
        additions = [entry.long_form for entry in used if entry not in spelled]
        additions += [entry.acronym.upper() for entry in spelled if entry not in used]
        additions = list(dict.fromkeys(additions))[:MAX_ADDITIONS]
        return question + "".join(f" ({addition})" for addition in additions)

    def _acronyms_used(self, question: str) -> list[_Entry]:
        """Entries whose acronym the question writes as a whole word, in the question's order."""
        keys = (self._acronym_key(match.group(0)) for match in TOKEN.finditer(question))
        return list(dict.fromkeys(self._by_acronym[key] for key in keys if key is not None))

    def _acronym_key(self, word: str) -> str | None:
        """The glossary key `word` writes ("PTO", "pto", "PTOs"), or None; an acronym that is also an
        ordinary word counts only in capitals."""
        singular = word[:-1] if word.endswith(PLURAL) and len(word) > MIN_ACRONYM and word[:-1].isupper() else None
        for candidate in (word, singular):
            key = None if candidate is None else candidate.lower()
            if key in self.long_forms and (key not in self.case_sensitive or candidate.isupper()):
                return key
        return None

    def _long_forms_spelled(self, question: str) -> list[_Entry]:
        """Entries whose long form's content terms occur as consecutive terms of the question, in the
        question's order: "paid time off" and "Paid Time-Off" spell it, "time off that is paid" does not."""
        terms = content_terms(question)
        found: list[_Entry] = []
        for start, term in enumerate(terms):
            for entry in self._by_first_term.get(term, ()):
                if tuple(terms[start:start + len(entry.long_terms)]) == entry.long_terms:
                    found.append(entry)
        return list(dict.fromkeys(found))

    def augment(self, terms: set[str]) -> set[str]:
        """A passage's (or question's) content-term set plus equivalents: when it holds an acronym's
        term, the long form's content terms are added; when it holds ALL of a long form's content
        terms, the acronym's term is added. So coverage counts either spelling. The input is not
        changed."""
        if not self._entries:
            return set(terms)
        augmented = set(terms)
        for term in terms:
            for entry in self._by_acronym_term.get(term, ()):
                augmented.update(entry.long_terms)
            for entry in self._by_rarest_term.get(term, ()):
                if entry.acronym_term and terms.issuperset(entry.long_terms):
                    augmented.add(entry.acronym_term)
        return augmented


def _group(entries: Iterable[_Entry], key_of) -> Mapping[str, tuple[_Entry, ...]]:
    """Entries by one chosen term (`key_of` gives a tuple with that term, or an empty tuple)."""
    groups: dict[str, list[_Entry]] = {}
    for entry in entries:
        for term in key_of(entry):
            groups.setdefault(term, []).append(entry)
    return MappingProxyType({term: tuple(group) for term, group in groups.items()})


def _rarest_term_of(entries: tuple[_Entry, ...]):
    """A key function giving each long form's term that fewest long forms share: `augment` looks a
    long form up only when the passage holds that term, so common words ("program") stay cheap."""
    shared = Counter(term for entry in entries for term in set(entry.long_terms))
    return lambda entry: (min(entry.long_terms, key=lambda term: (shared[term], term)),) if entry.long_terms else ()


EMPTY_GLOSSARY = Glossary({})


# --- mining -------------------------------------------------------------------------------------


def acronym_key(token: str) -> str | None:
    """The lower-case key of an acronym-like token, or None: 2-8 characters of letters and digits,
    mostly capitals (at least two, more capitals than small letters: "TDY", "DoD", "GDPR"), a trailing
    small "s" read as a plural ("SOWs" -> "sow")."""
    if len(token) > 2 and token.endswith(PLURAL) and token[-2].isupper():
        token = token[:-1]
    if not MIN_ACRONYM <= len(token) <= MAX_ACRONYM or not token.isalnum() or not token.isascii():
        return None
    capitals = sum(char.isupper() for char in token)
    small = sum(char.islower() for char in token)
    return token.lower() if capitals >= 2 and capitals > small else None


def _parts(word: str) -> list[str]:
    """The parts of a written word that each give an initial ("multi-factor" -> multi, factor),
    stripped of punctuation around them ("Officer's" keeps its apostrophe inside)."""
    return [part.strip("'’\"") for part in word.translate(JOINERS).split() if part.strip("'’\"")]


def initials_cost(acronym: str, parts: list[str]) -> Cost | None:
    """How well `acronym` (lower case) spells the initials of `parts`, or None when it does not.

    Every part gives its initial, in order, except that a small word ("of", "and") may give none, one
    part may also give one later letter of itself ("OnLine University (OLU)", "Leave WithOut Pay
    (LWOP)"), and, for acronyms of three letters or more, the last part may give none ("Temporary
    DutY Travel (TDY)"). The first part always gives the first letter. The cost counts the last two
    allowances: (unused last part, part giving two letters), so the plainest reading wins.

    A search over (part, letter, whether a part gave two letters) with each state solved once: at
    most (2 * 8 + 2) * 9 * 2 states, so bounded whatever the words."""
    parts = [part.lower() for part in parts]
    if not parts or parts[0][0] != acronym[0]:
        return None
    solved: dict[tuple[int, int, bool], Cost | None] = {}

    def cheapest(at: int, letter: int, doubled: bool) -> Cost | None:
        state = (at, letter, doubled)
        if state not in solved:
            solved[state] = _cheapest_step(acronym, parts, at, letter, doubled, cheapest)
        return solved[state]

    return cheapest(0, 0, False)


def _cheapest_step(acronym: str, parts: list[str], at: int, letter: int, doubled: bool, cheapest) -> Cost | None:
    """The cheapest way parts[at:] spell acronym[letter:], one part's choices at a time."""
    if at == len(parts):
        return (0, int(doubled)) if letter == len(acronym) else None
    part = parts[at]
    if letter == len(acronym):
        unused_last = at == len(parts) - 1 and len(acronym) >= MIN_ACRONYM_FOR_UNUSED_WORD
        return (1, int(doubled)) if unused_last and part not in SMALL_WORDS else None
    options: list[Cost | None] = []
    if part in SMALL_WORDS and at > 0:
        options.append(cheapest(at + 1, letter, doubled))
    if part[0] == acronym[letter]:
        options.append(cheapest(at + 1, letter + 1, doubled))
        if not doubled and letter + 1 < len(acronym) and acronym[letter + 1] in part[1:]:
            options.append(cheapest(at + 1, letter + 2, True))
    found = [option for option in options if option is not None]
    return min(found) if found else None


def _words_before(window: str, acronym: str) -> list[str]:
    """The written words just before a "(": after the last delimiter, emphasis removed, at most as
    many as an acronym of this length can spell (see `_longest_run`)."""
    window = window.translate(CUT_MARKS)
    paragraph = window.rfind(PARAGRAPH)
    cut = max(window.rfind(CUT) + 1, paragraph + len(PARAGRAPH) if paragraph >= 0 else 0)
    return window[cut:].split()[-_longest_run(acronym):]


def _words_inside(parenthetical: str, acronym: str) -> list[str]:
    """The written words of a "(Long Form Words)" up to its first delimiter, leading articles
    removed, at most as many as an acronym of this length can spell."""
    text = parenthetical.translate(CUT_MARKS)
    cut = min((index for index in (text.find(CUT), text.find(PARAGRAPH)) if index >= 0), default=len(text))
    words = text[:cut].split()
    while words and words[0].lower() in ARTICLES:
        words = words[1:]
    return words[:_longest_run(acronym)]


def _longest_run(acronym: str) -> int:
    """Words a long form of `acronym` may have: one per letter, small words between, an unused last."""
    return min(2 * len(acronym) + 2, MAX_PARTS)


def _best_run(acronym: str, words: list[str], runs: Iterable[tuple[int, int]]) -> str | None:
    """The long form among runs words[start:end]: the lowest cost, then the first (runs come shortest
    first), of those `_may_spell` lets through."""
    parts_of = [[part.lower() for part in _parts(word)] for word in words]
    best: tuple[Cost, str] | None = None
    for start, end in runs:
        parts = [part for word_parts in parts_of[start:end] for part in word_parts]
        if not _may_spell(acronym, parts):
            continue
        cost = initials_cost(acronym, parts)
        if cost is not None and (best is None or cost < best[0]):
            best = (cost, _as_written(words[start:end]))
            if cost == PLAIN:
                break  # nothing longer can do better
    return None if best is None else best[1]


def _may_spell(acronym: str, parts: list[str]) -> bool:
    """Cheap checks before `initials_cost`: two to MAX_PARTS parts, the first neither a small word
    ("Office of General Counsel (OGC)", not "of General Counsel") nor of another initial, no more
    letter-giving words than letters (plus an unused last), and no part that is the acronym itself."""
    if not MIN_LONG_FORM_WORDS <= len(parts) <= MAX_PARTS or parts[0] in SMALL_WORDS:
        return False
    if parts[0][0] != acronym[0] or sum(part not in SMALL_WORDS for part in parts) > len(acronym) + 1:
        return False
    return acronym not in parts


def _as_written(words: list[str]) -> str:
    """The long form as the text writes it, without joiners or quotes at its edges ("/Performance
    Work Statement") or a possessive at its end ("Defense Travel Management Office's")."""
    long_form = " ".join(words).strip(EDGE_CHARACTERS)
    for possessive in POSSESSIVES:
        long_form = long_form.removesuffix(possessive)
    return long_form


def _definition_before(text: str, match, window_start: int) -> tuple[str, str] | None:
    """("tdy", "Temporary Duty Travel") from "... Temporary Duty Travel (TDY)", or None; the long
    form is the shortest run of the words just before the parenthesis that spells the acronym. The
    window starts no earlier than `window_start` (the end of the previous candidate)."""
    acronym = acronym_key(match.group(1))
    if acronym is None:
        return None
    start = match.start()
    window = text[max(window_start, start - WINDOW_CHARS):start]
    if not window or window[-1] in DELIMITERS:
        return None  # "(AB)(AB)": no words just before
    words = _words_before(window, acronym)
    long_form = _best_run(acronym, words, ((first, len(words)) for first in range(len(words) - 1, -1, -1)))
    return None if long_form is None else (acronym, long_form)


def _definition_after(match) -> tuple[str, str] | None:
    """("tdy", "Temporary Duty") from "TDY (Temporary Duty)", or None; the long form is the shortest
    run of the parenthetical's first words that spells the acronym."""
    acronym = acronym_key(match.group(1))
    if acronym is None:
        return None
    words = _words_inside(match.group(2), acronym)
    long_form = _best_run(acronym, words, ((0, end) for end in range(1, len(words) + 1)))
    return None if long_form is None else (acronym, long_form)


def definitions(text: str) -> Iterable[tuple[str, str]]:
    """Every (acronym key, long form) that `text` defines, in either shape. Each candidate reads at
    most WINDOW_CHARS before it, and never before the previous candidate's ")", so the work is linear
    in the text even when candidates are packed ("(AB)(AB)(AB)...")."""
    window_start = 0
    for match in ACRONYM_IN_PARENTHESES.finditer(text):
        found = _definition_before(text, match, window_start)
        window_start = match.end()
        if found is not None:
            yield found
    for match in ACRONYM_THEN_PARENTHESES.finditer(text):
        found = _definition_after(match)
        if found is not None:
            yield found


def mine_glossary(texts: Iterable[str], max_entries: int = MAX_ENTRIES) -> Glossary:
    """The glossary the texts define. An acronym with several long forms keeps its most frequent
    (long forms compared case-insensitively; ties: the first seen, written as first seen); the most
    frequently defined acronyms are kept when there are more than `max_entries`."""
    texts = list(texts)
    counts: dict[str, Counter[str]] = {}
    written: dict[str, str] = {}
    for text in texts:
        for acronym, long_form in definitions(text):
            normalised = " ".join(long_form.lower().split())
            counts.setdefault(acronym, Counter())[normalised] += 1
            written.setdefault(normalised, long_form)
    # max() and sorted() keep the first of equals: ties go to the first seen.
    chosen = {acronym: max(forms, key=forms.__getitem__) for acronym, forms in counts.items()}
    kept = sorted(chosen, key=lambda acronym: -counts[acronym].total())[:max_entries]
    long_forms = {acronym: written[chosen[acronym]] for acronym in kept}
    return Glossary(long_forms, frozenset(ordinary_words(long_forms, texts)))


def ordinary_words(acronyms: Iterable[str], texts: Iterable[str]) -> set[str]:
    """The acronyms that are also ordinary words of the corpus: stopwords ("it", "us"), and those the
    texts write in small letters at least as often as in capitals ("cap" beside "CAP"). Only whole
    words between spaces count (punctuation around them aside): "opm" in "www.opm.gov" is a host
    name, not the word."""
    acronyms = set(acronyms)
    lower, upper = Counter(), Counter()
    for text in texts:
        for word in text.split():
            word = word.strip(WORD_EDGE_PUNCTUATION)
            key = word.lower()
            if key in acronyms:
                (lower if word.islower() else upper)[key] += 1
    return {key for key in acronyms if key in STOPWORDS or lower[key] >= max(1, upper[key])}


_glossary_cache: SegmentCache[Glossary] = SegmentCache(GLOSSARY_CACHE_SEGMENTS)


def glossary_of(partition: Partition) -> Glossary:
    """The partition's glossary, cached by segment id (segments are immutable, so a publish brings a
    new id and a new glossary)."""
    return _glossary_cache.get(partition.segment_id, lambda: _sampled_glossary(partition))


def _sampled_glossary(partition: Partition) -> Glossary:
    return mine_glossary(text for text in sampled_texts(partition, GLOSSARY_SAMPLE_ROWS) if text)
