"""Grounded answers (DESIGN.md §2): confidence gate, parent-section expansion, the extractive generator
and the choice of generator (generators.py), validation, conflicts and the single-shot answer service.
The prompt lives below this room in citadel/prompting/; model generators in citadel/generation/."""
