"""Keep every Serve replica's listening socket on 127.0.0.1 (DESIGN.md §8).

Ray Serve 2.60 starts an inter-deployment gRPC server in every replica bound to `[::]:0`, all
interfaces, whatever the node address (measured here: five `*:<port>` listeners in the split
topology). Nothing configures it, so a replica constructor calls `pin_replica_grpc_to_loopback()`
before Serve starts that server (it does so right after the constructor returns): the bind address
is rewritten to 127.0.0.1. Peers reach a replica at its node address, which is 127.0.0.1 here.
"""

from __future__ import annotations

import logging

from citadel.config import CitadelConfig

LOOPBACK = "127.0.0.1"
ALL_INTERFACES = ("[::]", "0.0.0.0", "")
log = logging.getLogger(__name__)
_pinned = False


def _loopback_address(address: str) -> str:
    host, _, port = address.rpartition(":")
    return f"{LOOPBACK}:{port}" if host in ALL_INTERFACES else address


def pin_replica_grpc_to_loopback(config: CitadelConfig) -> bool:
    """Rewrite the replica gRPC bind address when the app is configured for loopback. Idempotent;
    returns whether the rewrite is in place (False when Ray's internals moved: logged loudly)."""
    global _pinned
    if config.serving.host != LOOPBACK:
        return False
    if _pinned:
        return True
    try:
        from ray.serve._private import replica
    except ImportError:  # pragma: no cover - Ray layout changed
        log.error("cannot pin Serve replica gRPC to loopback: ray.serve._private.replica not found")
        return False
    original = getattr(replica, "add_port_to_grpc_server", None)
    if original is None:
        log.error("cannot pin Serve replica gRPC to loopback: add_port_to_grpc_server not found")
        return False

    def loopback_only(server, address):
        return original(server, _loopback_address(address))

    replica.add_port_to_grpc_server = loopback_only
    _pinned = True
    return True
