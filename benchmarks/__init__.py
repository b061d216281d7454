"""In-process measurement scripts (DESIGN.md §2): evaluations, latency and ingestion benchmarks, and
the orchestrators of the serve benchmark (serve_bench.py) and the failure drills (drills.py).

They compose Citadel through citadel.wiring (or serving's public builders), never through the CLI;
the CLI's `citadel bench` and `citadel drill` commands call into them. Over-HTTP load generation is
loadtests/; Ray stays behind serving.ray, indexing and cluster — nothing here imports ray itself.
"""
