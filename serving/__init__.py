"""serving package (see DESIGN.md §2)."""
