"""Deploy-time pieces shared by the edges: the loopback-only local Ray launcher (DESIGN.md §2, §8)."""
