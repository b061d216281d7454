"""indexing package (see DESIGN.md §2)."""
