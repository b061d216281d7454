"""The serving services (DESIGN.md §2): plain classes, one per endpoint family — query (retrieve,
answer), admin (uploads, jobs, withdrawals, ACLs), drills (fault injection) — plus who is calling
(access), the answer cache view and the process's metrics and resilience. No Ray, no FastAPI: the
HTTP layer (serving/http/) calls them on worker threads, and whether the stages they use run in this
process or in other deployments is decided by what serving/services/compose.py was given."""
