"""The reader (DESIGN.md §6): does this text state the answer to this question?

One room for the project's own trained cross-encoder and the other backends of that role: the
`Reader` protocol (base.py), a deterministic fake, the trained backend over the packaged MiniLM
(trained.py, network.py; the artefact in artefact/), an `openai_compatible` judge (judge.py), its
training (training.py, `citadel train reader`). What the answer path does with its scores lives with
the answer path: reranking (citadel/rerank/reader.py) and choosing the sentences an answer quotes
(citadel/answer/quote.py).
"""
