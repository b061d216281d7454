"""The OpenAI-compatible family (DESIGN.md §12): `POST /v1/chat/completions` (a cited answer as an
assistant message, or OpenAI's server-sent chunks) and `GET /v1/models` (the answer paths), for a
verified caller; errors in OpenAI's shape so its SDKs raise their own exception types."""
