"""The `citadel` command line: the composition root. It may import any package, lazily."""
