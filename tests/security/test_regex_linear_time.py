"""Every regex runs in linear time: catastrophic backtracking froze a replica.

The `encoded_sequence` rule (`[.\\-]{1,6}(?:\\s+/?\\s*[.\\-]{1,6}){8,}` under Python's backtracking `re`)
cost about k^7 for a run of k newlines between symbols: a 2,000-character question never finished,
holding the GIL, so the request deadline could not fire. Every pattern that runs on untrusted text
(questions, documents, passages) must run in linear time on adversarial input.

The test finds every pattern the core modules run on such text: the `citadel.regex` registry where it
exists, plus any compiled `re.Pattern` and any guardrail rule left in a module's globals (so on the old
code it times the old patterns, and fails on them). For each pattern it builds adversarial strings from
the pattern's own symbols and words (runs of every whitespace class between them, repeated
near-matches) and fails when a search takes more than 50x its time on benign prose of the same length
(best of three, benign time floored at 1 ms so tiny timings do not make a noisy ratio). The timing
runs in a child process, so a pattern that never finishes fails the test by name instead of hanging it.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
# The modules whose patterns see questions, document text, passages or answers built from them.
MODULES = [
    "citadel.guardrails.text", "citadel.guardrails.injection", "citadel.guardrails.planted",
    "citadel.guardrails.pii", "citadel.guardrails.personal", "citadel.guardrails.topics", "citadel.parsing.markdown",
    "citadel.parsing.text",
    "citadel.parsing.pdf", "citadel.chunking", "citadel.ingest.sources", "citadel.index.bm25", "citadel.embedding.fake",
    "citadel.answer.conflicts", "citadel.answer.expand", "citadel.answer.extractive", "citadel.prompting.prompt",
    "citadel.text", "citadel.answer.validator", "citadel.answer.glossary", "citadel.answer.slots",
    "citadel.eval.rag",
    "citadel.eval.squad", "citadel.agent.plan", "citadel.agent.planner",
    "citadel.agent.memory", "citadel.agent.decision",
]
LENGTH = 20_000          # passage and parser size; questions (2,000 characters) are covered a fortiori
MAX_RATIO = 50
BENIGN_FLOOR_S = 0.001
PER_PATTERN_TIMEOUT_S = 10
REPEATS = 3

# Every whitespace class a rule could be dodged or slowed with.
WHITESPACE = ["\n", "\t", " ", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\xa0", "\u1680", "\u2002", "\u200a", "\u2028",
              "\u2029", "\u202f", "\u3000", "\u180e", "\u200b", "\u200d", "\ufeff"]

# The child: collect the patterns, time each, print one JSON line per pattern (before and after).
WORKER = textwrap.dedent(r'''
    import importlib, json, re, sys, time

    modules, length, repeats = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    whitespace, skip = json.loads(sys.argv[4]), set(json.loads(sys.argv[5]))

    def searchers():
        """(name, source text, search function) for every pattern found."""
        found = {}
        try:
            from citadel import regex
        except ImportError:
            regex = None
        for module_name in modules:
            module = importlib.import_module(module_name)
            for attribute, value in vars(module).items():
                candidates = {attribute: value}
                if isinstance(value, dict):
                    candidates = {f"{attribute}[{key!r}]": item for key, item in value.items()}
                for name, item in candidates.items():
                    if isinstance(item, type):
                        continue
                    pattern = item if isinstance(item, re.Pattern) else getattr(item, "pattern", item)
                    source = getattr(pattern, "source", None) or getattr(pattern, "pattern", None)
                    if isinstance(pattern, re.Pattern) or hasattr(item, "search") and hasattr(item, "needles"):
                        found.setdefault(id(pattern), (f"{module_name}.{name}", source or "", pattern.search))
        if regex is not None:
            for name, pattern in regex.registered().items():
                found.setdefault(id(pattern), (name, pattern.source, pattern.search))
        return sorted(found.values())

    def fit(piece):
        return (piece * (length // max(1, len(piece)) + 1))[:length]

    def adversarial(source):
        symbols = sorted({c for c in source if not c.isalnum() and not c.isspace() and c != "\\"})[:16] or ["."]
        words = list(dict.fromkeys(re.findall(r"[a-z]{2,}", source.lower())))[:24] or ["word"]
        literal = re.sub(r"\\.|[()\[\]{}?*+|^$]", "", source)[:60] or "x"
        texts = []
        pairs = [(a, b) for a in symbols[:4] for b in symbols[:4] if a != b] or [(".", "-")]
        for space in whitespace:   # runs of each whitespace class between the pattern's symbols
            texts.append(fit("".join(s + space * k for s in symbols for k in (1, 3, 40))))
            # A near-match that fails at the end (8 symbols, one short of a 9-group rule), its runs so
            # long that a backtracking engine splits each of them every possible way.
            for first, second in pairs[:3]:
                texts.append((first + (space * (length // 8) + second) * 7)[:length])
        for space in ("\n", " ", "\t", "\xa0", "\u2028"):   # its words, as a near-match
            texts.append(fit(space.join(words) + space * 3))
        texts.append(fit(literal[:-1] if len(literal) > 1 else literal))   # a repeated near-match
        texts += [fit(p) for p in ("a", "1", "- ", ". ", "<", "<!--", "#", "*", "_", "[", "0 1 ", "ab ", "12-")]
        return texts

    vocabulary = ("the employee may request leave in advance and the manager approves it within five working "
                  "days; travel costs are reimbursed with receipts. Questions go to the help desk.").split()
    benign = ""
    index = 0
    while len(benign) < length:
        benign += vocabulary[index % len(vocabulary)] + (". " if index % 11 == 10 else " ")
        index += 1
    benign = benign[:length]

    def best(search, text):
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            search(text)
            times.append(time.perf_counter() - start)
        return min(times)

    for name, source, search in searchers():
        if name in skip:
            continue
        print(json.dumps({"start": name}), flush=True)
        benign_s = best(search, benign)
        worst_s, worst_text = 0.0, ""
        for text in adversarial(source):
            elapsed = best(search, text)
            if elapsed > worst_s:
                worst_s, worst_text = elapsed, text
        print(json.dumps({"done": name, "benign_s": benign_s, "worst_s": worst_s, "worst": worst_text[:60]}),
              flush=True)
    print(json.dumps({"finished": True}), flush=True)
''')


MAX_RESTARTS = 6


def _run_all() -> tuple[list[dict], list[str]]:
    """Every pattern's timing, and the patterns that did not finish: the worker is killed on one that
    hangs and restarted past it (a few times at most), so one hang does not hide the others."""
    results: list[dict] = []
    stuck: list[str] = []
    for _ in range(MAX_RESTARTS + 1):
        done, hung = _run_worker([r["done"] for r in results] + stuck)
        results += done
        if hung is None:
            break
        stuck.append(hung)
    return results, stuck


def _run_worker(skip: list[str]) -> tuple[list[dict], str | None]:
    """The worker's results, and the name of a pattern that did not finish in time (or None)."""
    environment = dict(os.environ, PYTHONPATH=str(REPOSITORY))
    process = subprocess.Popen(
        [sys.executable, "-c", WORKER, json.dumps(MODULES), str(LENGTH), str(REPEATS), json.dumps(WHITESPACE),
         json.dumps(skip)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPOSITORY, env=environment,
    )
    results: list[dict] = []
    running = "(importing the modules)"
    try:
        while True:
            # a selector, not select.select: by now the suite's process may hold descriptors above 1024
            with selectors.DefaultSelector() as selector:
                selector.register(process.stdout, selectors.EVENT_READ)
                ready = selector.select(PER_PATTERN_TIMEOUT_S + 20 * (not results))
            if not ready:
                return results, running
            line = process.stdout.readline()
            if not line:
                process.wait(timeout=10)
                raise AssertionError(f"the timing worker exited early:\n{process.stderr.read()[-3000:]}")
            record = json.loads(line)
            if "finished" in record:
                return results, None
            if "start" in record:
                running = record["start"]
            else:
                results.append(record)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def timings() -> tuple[list[dict], list[str]]:
    return _run_all()


def test_every_pattern_finishes_on_adversarial_input(timings):
    results, stuck = timings
    assert not stuck, f"patterns that did not finish within {PER_PATTERN_TIMEOUT_S} s on adversarial input: {stuck}"
    assert len(results) > 50, "too few patterns found: the enumeration is broken"


def test_no_pattern_is_50x_slower_on_adversarial_input_than_on_benign_text(timings):
    results, _ = timings
    slow = [
        f"{r['done']}: {r['worst_s'] * 1000:.1f} ms vs {r['benign_s'] * 1000:.2f} ms benign on {r['worst']!r}"
        for r in results
        if r["worst_s"] > MAX_RATIO * max(r["benign_s"], BENIGN_FLOOR_S)
    ]
    assert not slow, "patterns slower than 50x benign on adversarial input:\n" + "\n".join(slow)


def test_no_backtracking_pattern_is_left_in_the_core_modules():
    """Every pattern in these modules is compiled through the linear-time registry (citadel.regex)."""
    code = (
        "import importlib, json, re, sys\n"
        "left = []\n"
        "for name in json.loads(sys.argv[1]):\n"
        "    module = importlib.import_module(name)\n"
        "    for attribute, value in vars(module).items():\n"
        "        values = value.values() if isinstance(value, dict) else [value]\n"
        "        for item in values:\n"
        "            if isinstance(item, re.Pattern) or isinstance(getattr(item, 'pattern', None), re.Pattern):\n"
        "                left.append(f'{name}.{attribute}')\n"
        "print(json.dumps(sorted(set(left))))\n"
    )
    output = subprocess.run(
        [sys.executable, "-c", code, json.dumps(MODULES)], capture_output=True, text=True, timeout=60,
        cwd=REPOSITORY, env=dict(os.environ, PYTHONPATH=str(REPOSITORY)), check=True,
    ).stdout
    assert json.loads(output) == []


# ~2,000 characters: eight Morse symbols, one short of the nine the rule needs, so it fails after
# trying every way to split each run of newlines between `\s+` and `\s*` (about 285^7 ways).
BOMB = "." + ("\n" * 285 + "-") * 7


@pytest.mark.parametrize("entry_point", ["injection.strong_rule", "planted.flag_planted_instructions"])
def test_the_known_encoded_sequence_bomb_finishes_quickly(entry_point):
    module, function = entry_point.split(".")
    code = (
        f"import json, sys, time\nfrom citadel.guardrails import {module}\n"
        f"text = json.loads(sys.argv[1])\n{module}.{function}('warm up')\n"
        f"start = time.perf_counter(); {module}.{function}(text); print(time.perf_counter() - start)\n"
    )
    started = time.monotonic()
    try:
        output = subprocess.run(
            [sys.executable, "-c", code, json.dumps(BOMB)], capture_output=True, text=True, timeout=30,
            cwd=REPOSITORY, env=dict(os.environ, PYTHONPATH=str(REPOSITORY)), check=True,
        ).stdout
    except subprocess.TimeoutExpired:
        pytest.fail(f"{entry_point} on a {len(BOMB)}-character bomb ran past 30 s ({time.monotonic() - started:.0f} s)")
    assert float(output) < 0.5, f"{entry_point} took {float(output):.2f} s on the bomb"


def test_guardrail_normalisation_folds_every_whitespace_class():
    """Rules see one space or one newline wherever the text had any run of Unicode whitespace."""
    from citadel.guardrails.text import normalise

    every_space = "".join(chr(code) for code in range(0x110000) if chr(code).isspace())
    folded = normalise(f"ignore{every_space}previous\u200b\u2060\u180e instructions")
    assert folded == "ignore\nprevious instructions"
    assert normalise("a\u3000\u2003\t\xa0b\u2028\u2029c\r\nd") == "a b c\nd"
    assert normalise("ignore\u2028previous\u00a0instructions") == "ignore previous instructions"
    assert re.fullmatch(r"[^\s]*", normalise("x\u00a0y").replace(" ", "")), "no odd whitespace survives"
