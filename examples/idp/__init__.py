"""A small token service (identity provider) for the example deployment: it issues the access tokens
Citadel's tools present to the example CRM, by OAuth 2.0 Token Exchange (RFC 8693; DESIGN.md §10).

It is not part of the core: `citadel/` never imports it. It runs as its own HTTP server on loopback
(`python -m examples.idp`), holds its ES256 private key in the home's secrets directory and publishes
the public half as a JWKS, which the CRM verifies with Citadel's own JWKS support.
"""
