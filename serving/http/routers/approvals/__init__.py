"""The approvals family (DESIGN.md §10): the approvals and review tasks the caller's groups may decide,
and the decision (once; 409 after). The reviewer's page over the same service is serving/http/routers/review."""
