"""Generation: the Generator protocol (base.py) and its backends (backends.py): extractive quotes,
the packaged SmolLM2, and any OpenAI-compatible server (DESIGN.md §6)."""
