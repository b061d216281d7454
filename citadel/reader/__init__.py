"""The reader (DESIGN.md §6): does this text state the answer to this question?

One room for the project's own trained cross-encoder and the other backends of that role: the
`Reader` protocol (base.py), a deterministic fake, the trained backend over the packaged MiniLM
(trained.py, network.py; the artefact in artefact/), an `openai_compatible` judge (judge.py), its
training (training.py, `citadel train reader`), and what the answer path does with its scores:
rerank (rerank.py) and choosing the sentences an answer quotes.
"""
