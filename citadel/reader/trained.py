"""The trained reader backend: the artefact (artefact/) over the packaged MiniLM, torch or ONNX int8.

Loaded once per replica at construction, so a missing, corrupt or mismatched artefact is a startup
error naming the file, never a failure on the first question. `runtime="onnx"` exports the loaded
network once to ONNX, quantises its weights to int8 (onnxruntime's dynamic quantisation) and caches
the file by the artefact's checksum; `runtime="torch"` scores with the fp32 network.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import warnings
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

from citadel.reader.base import ReaderError, bounded
from citadel.reader.network import Artefact, load_network, read_artefact, sha256_of

RUNTIMES = ("torch", "onnx")
DEFAULT_BATCH_SIZE = 32
ONNX_CACHE = Path(tempfile.gettempdir()) / "citadel-reader-onnx"


def _sigmoid(logits: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(logits, -30.0, 30.0)))


class TrainedReader:
    def __init__(self, artefact_dir: Path | str | None = None, runtime: str = "torch",
                 max_length: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE, threads: int | None = None):
        if runtime not in RUNTIMES:
            raise ReaderError(f"reader runtime must be one of {RUNTIMES}, got {runtime!r}", code="reader_config")
        self.artefact: Artefact = read_artefact(Path(artefact_dir) if artefact_dir else None)
        self.runtime = runtime
        self.max_length = int(max_length or self.artefact.max_length)
        self.batch_size = batch_size
        self.model_id = f"citadel-reader:{self.artefact.version}:{runtime}"
        self._network = load_network(self.artefact)
        self._lock = threading.Lock()
        self._session = self._onnx_session(threads) if runtime == "onnx" else None
        if threads and runtime == "torch":
            import torch

            torch.set_num_threads(threads)

    # ------------------------------------------------------------------ scoring
    def score(self, question: str, texts: Sequence[str]) -> list[float]:
        question, texts = bounded(question, texts)
        if not texts:
            return []
        # Batches of similar lengths pad less (a batch is as long as its longest pair); scores return
        # in the callers' order.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        scores = [0.0] * len(texts)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            logits = self._logits([question] * len(chunk), [texts[i] for i in chunk])
            for index, value in zip(chunk, _sigmoid(logits)):
                scores[index] = float(value)
        return scores

    def _logits(self, questions: list[str], texts: list[str]) -> np.ndarray:
        # One forward pass at a time per replica: a fast tokenizer is not safe to share across threads,
        # and two passes would only split the same cores.
        with self._lock:
            inputs = self._network.encode(questions, texts, self.max_length)
            if self._session is not None:
                feed = {name: inputs[name].numpy().astype(np.int64)
                        for name in ("input_ids", "attention_mask", "token_type_ids")}
                return np.asarray(self._session.run(["logits"], feed)[0], dtype=np.float32).reshape(-1)
            import torch

            with torch.inference_mode():
                return self._network.logits(dict(inputs)).float().numpy().reshape(-1)

    # ------------------------------------------------------------------ ONNX int8
    def _onnx_session(self, threads: int | None):
        try:
            import onnxruntime as ort
        except ImportError as error:
            raise ReaderError("reader runtime onnx needs the onnxruntime package", code="reader_config") from error
        path = self._quantised_file()
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def _quantised_file(self) -> Path:
        key = hashlib.sha256(f"{sha256_of(self.artefact.weights)}|{self.artefact.manifest['base_sha256']}".encode())
        directory = ONNX_CACHE / key.hexdigest()[:16]
        target = directory / "reader.int8.onnx"
        if target.is_file():
            return target
        directory.mkdir(parents=True, exist_ok=True)
        fp32 = directory / f"reader.fp32.{os.getpid()}.{threading.get_ident()}.onnx"
        partial = directory / f"reader.int8.{os.getpid()}.{threading.get_ident()}.partial"
        # The exporter and the quantiser warn about tracing details that do not apply to a fixed
        # encoder; an operator's start-up log should not be full of them.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            root = logging.getLogger()
            level = root.level
            root.setLevel(logging.ERROR)
            try:
                self._export(fp32)
                from onnxruntime.quantization import QuantType, quantize_dynamic

                quantize_dynamic(str(fp32), str(partial), weight_type=QuantType.QInt8)
            finally:
                root.setLevel(level)
        partial.replace(target)  # atomic: a concurrent replica reads a whole file or none
        fp32.unlink(missing_ok=True)
        return target

    def _export(self, path: Path) -> None:
        import torch

        network = self._network

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.encoder, self.head = network.encoder, network.head

            def forward(self, input_ids, attention_mask, token_type_ids):
                hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                                      token_type_ids=token_type_ids).last_hidden_state[:, 0]
                return self.head(hidden).squeeze(-1)

        sample = network.encode(["a question"], ["a text"], self.max_length)
        args = tuple(sample[name] for name in ("input_ids", "attention_mask", "token_type_ids"))
        axes = {name: {0: "batch", 1: "tokens"} for name in ("input_ids", "attention_mask", "token_type_ids")}
        with torch.inference_mode():
            torch.onnx.export(Wrapped().eval(), args, str(path), input_names=["input_ids", "attention_mask", "token_type_ids"],
                              output_names=["logits"], dynamic_axes={**axes, "logits": {0: "batch"}}, opset_version=17,
                              dynamo=False)
