"""The quality plane (DESIGN.md §11): config bundles, the claim verifier, the release gate and the
signals without labels."""
