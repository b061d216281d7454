"""The admin family (DESIGN.md §3, §7, §11), admin credentials only, each action within the admin's
tenants: uploads that start ingestion jobs, job status, withdrawals and ACL changes (each once per
idempotency key), kept prompts (platform admins), the tool and model pause switch, and the queue of
candidate test items (candidates.py)."""
