"""Generation: the Generator protocol (base.py) and its model backends (backends.py): the packaged
SmolLM2 and any OpenAI-compatible server (DESIGN.md §6). It imports the prompt types from
citadel/prompting/, never the answer room; the extractive generator is the answer's own
(citadel/answer/extractive.py)."""
