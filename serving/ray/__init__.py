"""Ray Serve glue (DESIGN.md §2, §5): the app builder and its deployments (app.py, the only place
`serve.deployment` is applied and the Serve config's import_path), proxies that call other deployments
(remote.py), request routing (routing.py), loopback pinning (loopback.py), replica status (status.py),
and running it locally (local.py, launcher.py for `citadel up`/`down`)."""
