"""Grounded answers (DESIGN.md §2): confidence gate, parent-section expansion, prompt assembly,
validation, conflicts and the single-shot answer service. Generators live in citadel/generation/."""
