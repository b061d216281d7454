"""The HTTP edge (DESIGN.md §2, §9): the app factory (api.py), one router per endpoint family with its
protocol models (routers/), what routes are given through `Depends` (deps.py: the services, the
blocking-call runner that opens each request's deadline, the verified admin or caller), the shared
protocol bits (protocol.py), the one error shape (errors.py), admission before any body is read
(admission.py) and the metrics credential (metrics.py). It calls serving/services on worker threads. No Ray."""
