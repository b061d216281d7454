"""serving.ray (see DESIGN.md §2)."""
