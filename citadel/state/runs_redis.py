"""Redis runs (DESIGN.md §7, §10): the run store when Redis is configured, shared by every replica.

Keys (all under `key_prefix`, ids percent-quoted by citadel/state/redis_client.py):
- `run:<id>`          hash: the run record, plus `order` (its creation number, for `orphans`) and
                      `token` (the creating call's, see below).
- `run:<id>:events`   stream: one entry per event, its id `<seq>-0`, so the entry id order is the
                      replay order and `XRANGE`/`XREAD` after `<n>-0` are "every event after seq n".
- `run:<id>:steps`    hash: step id → result JSON, written with HSETNX (the first record wins).
- `run:<id>:lease`    hash {owner, exp}: exp on the injected clock; PEXPIRE only reclaims memory.
- `run:<id>:cancel`   string: present once a cancel was requested.
- `runs:unfinished`   sorted set of unfinished run ids by creation number; `runs:created` the counter.
- `runs:by_created`   sorted set of every run id by creation time (the retention purge's candidates).
- `runs:owner:<tenant>:<user>`  set of the user's run ids (deleting a user's data).

The seq is computed inside one Lua script from the stream's last entry and written with that explicit
id: the stream is the only counter, a script runs atomically, and XADD refuses an id at or below the
last, so seq is gapless and never shared. `wait` blocks in `XREAD BLOCK`, in slices shorter than the
client's socket timeout. Leases are compare-and-set scripts. Redis errors become StateUnavailable.
The client retries a command once when its connection fails (redis_client.connect), so create and append
carry a per-call token that makes such a retry return the first outcome instead of repeating it.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Iterator

import redis

from citadel.state.base import StateUnavailable
from citadel.state.redis_client import key_part, reachable, ttl_ms
from citadel.state.runs import (MAX_EVENTS_PER_READ, MAX_ORPHANS, NOT_ADOPTABLE, Clock, EventType, Run, RunEvent, RunStatus,
                                bounded_limit, bounded_wait, encode_record, lease_ttl)

log = logging.getLogger(__name__)

# One XREAD BLOCK waits at most this long, and at most half the client's socket timeout, so a blocked
# read never looks like a dead server; `wait` loops over slices up to its deadline.
BLOCK_SLICE_S = 0.25
# Lease keys outlive their expiry on the injected clock by this much: Redis reclaims them, the clock decides.
LEASE_RECLAIM_GRACE_S = 60.0
# Unfinished run ids checked per round trip in `orphans`.
ORPHAN_BATCH = 200

# KEYS: run hash, unfinished set, creation counter, all runs by creation time, the owner's runs.
# ARGV: run id, '1' if finished, this call's token, created_at, field/value pairs. A run that exists is
# refused (0) unless this very call made it: the client retries a command whose reply was lost, and that
# retry must not turn a success into "exists".
_CREATE_LUA = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('HGET', KEYS[1], 'token') == ARGV[3] then return 1 end
  return 0
end
local order = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[1], 'order', order, 'token', ARGV[3], unpack(ARGV, 5))
if ARGV[2] == '0' then redis.call('ZADD', KEYS[2], order, ARGV[1]) end
redis.call('ZADD', KEYS[4], ARGV[4], ARGV[1])
redis.call('SADD', KEYS[5], ARGV[1])
return 1
"""

# KEYS: run hash, unfinished set. ARGV: run id, finished flag ('' when status unchanged, '1', '0'),
# field/value pairs. Returns the updated record (HGETALL), or an empty list for an unknown run.
_UPDATE_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
if ARGV[2] == '1' then
  redis.call('ZREM', KEYS[2], ARGV[1])
elseif ARGV[2] == '0' then
  redis.call('ZADD', KEYS[2], redis.call('HGET', KEYS[1], 'order'), ARGV[1])
end
return redis.call('HGETALL', KEYS[1])
"""

# KEYS: run hash, event stream. ARGV: type, data JSON, at, this call's token. Returns the new seq, or -1
# for an unknown run. When the last entry carries this call's token, the call is the client's retry of an
# append whose reply was lost: its seq is returned instead of appending the event twice.
_APPEND_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
local seq = 1
if #last > 0 then
  seq = tonumber(string.match(last[1][1], '^(%d+)'))
  local fields = last[1][2]
  for i = 1, #fields, 2 do
    if fields[i] == 'token' and fields[i + 1] == ARGV[4] then return seq end
  end
  seq = seq + 1
end
redis.call('XADD', KEYS[2], string.format('%d-0', seq), 'type', ARGV[1], 'data', ARGV[2], 'at', ARGV[3],
           'token', ARGV[4])
return seq
"""

# KEYS: run hash, steps hash. ARGV: step id, result JSON. Returns {1, stored result} or {0} (unknown run).
_RECORD_STEP_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2])
return {1, redis.call('HGET', KEYS[2], ARGV[1])}
"""

# KEYS: lease. ARGV: owner, now, new exp, reclaim ms. Free, expired or ours: take it.
_ACQUIRE_LUA = """
local lease = redis.call('HMGET', KEYS[1], 'owner', 'exp')
if lease[1] and lease[1] ~= ARGV[1] and tonumber(lease[2]) > tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'exp', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
"""

# KEYS: lease. ARGV: owner, new exp, reclaim ms. Only the holder extends it.
_RENEW_LUA = """
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'exp', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

# KEYS: lease. ARGV: owner. Only the holder gives it up.
_RELEASE_LUA = """
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


@contextmanager
def _available() -> Iterator[None]:
    """Unreachable Redis (via redis_client's mapping) or any other Redis error → StateUnavailable."""
    try:
        with reachable():
            yield
    except redis.exceptions.RedisError as error:
        log.warning("run store command failed: %s: %s", type(error).__name__, error)
        raise StateUnavailable("the run store is unavailable; try again shortly") from None


class RedisRunStore:
    """Runs in Redis, implementing `RunStore` (see citadel/state/runs.py for the contract)."""

    def __init__(self, client: redis.Redis, key_prefix: str, clock: Clock):
        self._redis, self._now = client, clock
        self._prefix = f"{key_prefix}run:"
        self._unfinished = f"{key_prefix}runs:unfinished"
        self._created = f"{key_prefix}runs:created"
        # Indexes for deletion: every run by creation time (retention), each owner's runs (DELETE /v1/me/data).
        self._by_created = f"{key_prefix}runs:by_created"
        self._owners = f"{key_prefix}runs:owner:"
        socket_timeout = client.connection_pool.connection_kwargs.get("socket_timeout") or 2 * BLOCK_SLICE_S
        self._block_slice_s = min(BLOCK_SLICE_S, socket_timeout / 2)
        self._create = client.register_script(_CREATE_LUA)
        self._update = client.register_script(_UPDATE_LUA)
        self._append = client.register_script(_APPEND_LUA)
        self._record_step = client.register_script(_RECORD_STEP_LUA)
        self._acquire = client.register_script(_ACQUIRE_LUA)
        self._renew = client.register_script(_RENEW_LUA)
        self._release = client.register_script(_RELEASE_LUA)

    def close(self) -> None:
        self._redis.close()

    def _key(self, run_id: str, part: str = "") -> str:
        return f"{self._prefix}{key_part(run_id)}{part}"

    # ---------------------------------------------------------------------------------- run records
    def create(self, run: Run) -> Run:
        now = self._now()
        stored = replace(run, created_at=now, updated_at=now, status=RunStatus(run.status))
        finished = "1" if stored.status in NOT_ADOPTABLE else "0"  # "1": out of the adoptable set
        args = [run.run_id, finished, uuid.uuid4().hex, repr(now), *_flatten(_run_fields(stored))]
        keys = [self._key(run.run_id), self._unfinished, self._created, self._by_created,
                self._owner_key(run.tenant_id, run.user_id)]
        with _available():
            created = self._create(keys=keys, args=args)
        if not created:
            raise ValueError(f"run {run.run_id!r} exists")
        return stored

    def get(self, run_id: str) -> Run | None:
        with _available():
            fields = self._redis.hgetall(self._key(run_id))
        return _run(fields) if fields else None

    def update(self, run_id: str, *, status: RunStatus | None = None, path: str | None = None,
               stop_reason: str | None = None) -> Run:
        changes: dict[str, str] = {"updated_at": repr(self._now())}
        finished = ""
        if status is not None:
            changes["status"] = RunStatus(status).value
            finished = "1" if RunStatus(status) in NOT_ADOPTABLE else "0"
        if path is not None:
            changes["path"] = path
        if stop_reason is not None:
            changes["stop_reason"] = stop_reason
        with _available():
            flat = self._update(keys=[self._key(run_id), self._unfinished],
                                args=[run_id, finished, *_flatten(changes)])
        if not flat:
            raise KeyError(run_id)
        return _run(dict(zip(flat[::2], flat[1::2])))

    # ----------------------------------------------------------------------------------- event log
    def append(self, run_id: str, type: EventType, data: dict[str, Any]) -> RunEvent:
        event_type, data_json, at = EventType(type), encode_record(data), self._now()
        with _available():
            seq = self._append(keys=[self._key(run_id), self._key(run_id, ":events")],
                               args=[event_type.value, data_json, repr(at), uuid.uuid4().hex])
        if seq < 0:
            raise KeyError(run_id)
        return RunEvent(run_id, int(seq), event_type, json.loads(data_json), at)

    def events(self, run_id: str, after_seq: int = 0, limit: int = MAX_EVENTS_PER_READ) -> list[RunEvent]:
        count = bounded_limit(limit, MAX_EVENTS_PER_READ)
        if count == 0:
            return []
        with _available():
            entries = self._redis.xrange(self._key(run_id, ":events"), min=f"{max(0, int(after_seq)) + 1}-0",
                                         max="+", count=count)
        return [_event(run_id, entry_id, fields) for entry_id, fields in entries]

    def wait(self, run_id: str, after_seq: int, timeout_s: float) -> list[RunEvent]:
        deadline = time.monotonic() + bounded_wait(timeout_s)
        found = self.events(run_id, after_seq)
        stream, start = self._key(run_id, ":events"), f"{max(0, int(after_seq))}-0"
        while not found:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            # BLOCK 0 would mean "forever": a slice is at least 1 ms.
            block_ms = max(1, int(min(remaining, self._block_slice_s) * 1000))
            with _available():
                reply = self._redis.xread({stream: start}, count=MAX_EVENTS_PER_READ, block=block_ms)
            found = _stream_events(run_id, reply)
        return found

    # --------------------------------------------------------------------------------------- steps
    def record_step(self, run_id: str, step_id: str, result: dict[str, Any]) -> dict[str, Any]:
        result_json = encode_record(result)
        with _available():
            reply = self._record_step(keys=[self._key(run_id), self._key(run_id, ":steps")],
                                      args=[step_id, result_json])
        if not reply[0]:
            raise KeyError(run_id)
        return json.loads(reply[1])

    def steps(self, run_id: str) -> dict[str, dict[str, Any]]:
        with _available():
            stored = self._redis.hgetall(self._key(run_id, ":steps"))
        return {step_id: json.loads(result) for step_id, result in stored.items()}

    # -------------------------------------------------------------------------------------- leases
    def acquire(self, run_id: str, owner: str, ttl_s: float) -> bool:
        ttl, now = lease_ttl(ttl_s), self._now()
        args = [owner, repr(now), repr(now + ttl), ttl_ms(ttl + LEASE_RECLAIM_GRACE_S)]
        with _available():
            return bool(self._acquire(keys=[self._key(run_id, ":lease")], args=args))

    def renew(self, run_id: str, owner: str, ttl_s: float) -> bool:
        ttl = lease_ttl(ttl_s)
        args = [owner, repr(self._now() + ttl), ttl_ms(ttl + LEASE_RECLAIM_GRACE_S)]
        with _available():
            return bool(self._renew(keys=[self._key(run_id, ":lease")], args=args))

    def release(self, run_id: str, owner: str) -> None:
        with _available():
            self._release(keys=[self._key(run_id, ":lease")], args=[owner])

    def orphans(self, limit: int = 100) -> list[str]:
        """Unfinished ids in creation order whose lease is missing or expired by the injected clock.

        Not one atomic read: a lease taken while this scans may still be listed, which `acquire`
        settles (only one replica gets it)."""
        wanted, now, start, found = bounded_limit(limit, MAX_ORPHANS), self._now(), 0, []
        while len(found) < wanted:
            with _available():
                batch = self._redis.zrange(self._unfinished, start, start + ORPHAN_BATCH - 1)
                if not batch:
                    break
                with self._redis.pipeline(transaction=False) as pipe:
                    for run_id in batch:
                        pipe.hget(self._key(run_id, ":lease"), "exp")
                    expiries = pipe.execute()
            found += [run_id for run_id, exp in zip(batch, expiries) if exp is None or float(exp) <= now]
            start += ORPHAN_BATCH
        return found[:wanted]

    # ------------------------------------------------------------------------------------- cancel
    def request_cancel(self, run_id: str) -> None:
        with _available():
            self._redis.set(self._key(run_id, ":cancel"), "1")

    def cancel_requested(self, run_id: str) -> bool:
        with _available():
            return bool(self._redis.exists(self._key(run_id, ":cancel")))

    # ------------------------------------------------------------------------------------ deletion
    def _owner_key(self, tenant_id: str, user_id: str) -> str:
        return f"{self._owners}{key_part(tenant_id)}:{key_part(user_id)}"

    def delete_user(self, tenant_id: str, user_id: str) -> int:
        owner = self._owner_key(tenant_id, user_id)
        with _available():
            run_ids = sorted(self._redis.smembers(owner))
            for run_id in run_ids:
                self._delete(run_id, owner)
        return len(run_ids)

    def purge_idle(self, max_idle_s: float) -> int:
        """Runs created before the cutoff are the candidates; each goes when its last status change
        and its last event are before the cutoff too. (Runs created before these indexes existed are
        not seen: they expire only with their user's deletion.)"""
        cutoff, purged = self._now() - max_idle_s, 0
        with _available():
            for run_id in self._redis.zrangebyscore(self._by_created, "-inf", f"({cutoff!r}"):
                fields = self._redis.hmget(self._key(run_id), "updated_at", "tenant_id", "user_id")
                if fields[0] is None:  # gone already: only the index entry is left
                    self._redis.zrem(self._by_created, run_id)
                    continue
                last = self._redis.xrevrange(self._key(run_id, ":events"), count=1)
                last_event_at = float(last[0][1]["at"]) if last else 0.0
                if max(float(fields[0]), last_event_at) < cutoff:
                    self._delete(run_id, self._owner_key(fields[1], fields[2]))
                    purged += 1
        return purged

    def _delete(self, run_id: str, owner: str) -> None:
        """A run, everything recorded for it and its index entries, in one MULTI."""
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(*(self._key(run_id, part) for part in ("", ":events", ":steps", ":lease", ":cancel")))
            pipe.zrem(self._unfinished, run_id)
            pipe.zrem(self._by_created, run_id)
            pipe.srem(owner, run_id)
            pipe.execute()


def _run_fields(run: Run) -> dict[str, str]:
    """The hash of a run; a field that is None is left out (so an empty string stays distinct)."""
    fields = {
        "run_id": run.run_id, "tenant_id": run.tenant_id, "user_id": run.user_id,
        "conversation_id": run.conversation_id, "question": run.question, "groups": json.dumps(list(run.groups)),
        "status": RunStatus(run.status).value, "path": run.path, "stop_reason": run.stop_reason,
        "created_at": repr(run.created_at), "updated_at": repr(run.updated_at),
    }
    return {name: value for name, value in fields.items() if value is not None}


def _flatten(fields: dict[str, str]) -> list[str]:
    return [part for pair in fields.items() for part in pair]


def _run(fields: dict[str, str]) -> Run:
    return Run(
        run_id=fields["run_id"], tenant_id=fields["tenant_id"], user_id=fields["user_id"],
        conversation_id=fields["conversation_id"], question=fields["question"],
        groups=tuple(json.loads(fields["groups"])), status=RunStatus(fields["status"]),
        path=fields.get("path"), stop_reason=fields.get("stop_reason"),
        created_at=float(fields["created_at"]), updated_at=float(fields["updated_at"]),
    )


def _stream_events(run_id: str, reply: Any) -> list[RunEvent]:
    """XREAD's reply, a list of [stream, entries] (RESP2) or a dict of stream → entries (RESP3)."""
    streams = reply.values() if isinstance(reply, dict) else [entries for _, entries in reply or []]
    return [_event(run_id, entry_id, fields) for entries in streams for entry_id, fields in entries]


def _event(run_id: str, entry_id: str, fields: dict[str, str]) -> RunEvent:
    seq = int(entry_id.split("-", 1)[0])
    return RunEvent(run_id, seq, EventType(fields["type"]), json.loads(fields["data"]), float(fields["at"]))
