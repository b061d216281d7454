"""citadel.segments: the segment format and its life cycle (DESIGN.md §2, §3).

It owns the typed manifest (manifest.py), where segments live on disk and pruning (layout.py),
writing base and delta segments atomically (build.py), loading what a pointer names as one partition
(partition.py), pre-publish verification (verify.py), and the delta-or-rebuild decision (compaction.py).
"""
