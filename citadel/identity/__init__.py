"""Who is calling (DESIGN.md §2, §4.1). Each concern has its own module; import from it directly:

- `credentials`: service bearer credentials (stored hashed), their tenant scope, expiry, revocation.
- `keys`: the keys user contexts are signed with, by `kid`: per-service HS256 secrets and the public
  keys (JWKS) of identity providers.
- `context`: user contexts as standard JWTs (RFC 7519): signing (for tests and services) and verifying.
- `authenticator`: what the gateway calls per request, binding the three together.
- `base`: the errors, name checks and secret-file writes they share.
"""
