"""serving.http (see DESIGN.md §2)."""
