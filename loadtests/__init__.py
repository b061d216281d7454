"""Load tests over HTTP (DESIGN.md §2): the load client primitives (client.py), the serve benchmark
driver (serve_bench.py) and the failure-drill scenarios (drills/).

Everything here speaks to a running Citadel through its public HTTP API only, and imports no project
package (not citadel, serving, indexing, capacity, cluster or benchmarks): identity, clusters and
configuration are the caller's business, handed in as a URL, tokens and a `headers_for` function.
That keeps these drivers usable against any deployment, local or remote.
"""
