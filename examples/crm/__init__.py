"""A small CRM: an example of the external systems Citadel's tools reach (DESIGN.md §10).

It is not part of the core: `citadel/` never imports it. It runs as its own HTTP server on loopback
(`python -m examples.crm`) with its own SQLite database, and acts only on behalf of a verified user.
"""
