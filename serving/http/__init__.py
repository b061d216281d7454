"""The HTTP edge (DESIGN.md §2, §9): FastAPI routes (api.py), the protocol models (models.py), the one
error shape (errors.py), admission before any body is read (admission.py) and the metrics credential
(metrics.py). It opens each request's deadline and calls serving/services on worker threads. No Ray."""
