"""The query family (DESIGN.md §4): `POST /v1/retrieve` (passages) and `POST /v1/answer` (a cited
answer, or an honest refusal) for a verified caller."""
