"""citadel.ingest: getting documents into published segments (DESIGN.md §2).

It owns what ingestion reads (sources.py: files, inline documents, ACL specs, trusted fields), the
jobs built from paths, manifests and dead letters (jobs.py), the steps both engines share (steps.py),
the job report (report.py), the engine protocol (engine.py), the local engine (local.py), re-embedding
after a model change (reembed.py), synthetic corpora (synth.py), uploads as durable jobs run under
leases (runner.py), their raw files under immutable versioned keys (uploads.py) in an object store
(objects.py), and withdrawal (withdrawal.py). Its crash point for drills
(`BEFORE_PUBLISH`) lives with the other fault hooks in citadel/resilience/crash_points.py. The Ray
Data engine lives in indexing/.
"""
