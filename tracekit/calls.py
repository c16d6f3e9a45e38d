"""The runtime calls and events that block the host on the GPU, or only ask about it, by name:
what the sync stalls (``tracekit.analyses.syncs``) count and what the dependency graph
(``tracekit.graph``) turns into host waits. Below both, so that neither reads the other for them.
"""

from __future__ import annotations

import re

BLOCKING = re.compile(
    r"^(cuda|hip)(StreamSynchronize|DeviceSynchronize|EventSynchronize|ThreadSynchronize|"
    r"Memcpy|Memcpy2D|Memcpy3D|MemcpyPeer|MemcpyToSymbol|MemcpyFromSymbol)(_v\d+)?$"
    r"|^hip(MemcpyWithStream|MemcpyDtoH|MemcpyHtoD|MemcpyDtoD)$"
    r"|^cu(StreamSynchronize|CtxSynchronize|EventSynchronize|MemcpyDtoH|MemcpyHtoD|MemcpyDtoD)"
    r"(_v\d+)?$"
)
"""Runtime/driver calls that block the host whatever their arguments."""
ASYNC_COPY = re.compile(r"^(cuda|hip)Memcpy(2D|3D|Peer)?Async(_v\d+)?$")
"""Copies that block only when the host side is pageable."""
HOST_SYNC_EVENT = re.compile(r"^(Stream Sync|Event Sync|Context Sync|Device Sync)", re.I)
"""``cuda_sync`` event names that block the host (unless the runtime call is a ``POLL``)."""
POLL = re.compile(r"^(cuda|hip)(EventQuery|StreamQuery)(_v\d+)?$|^cu(EventQuery|StreamQuery)(_v\d+)?$")
"""Runtime/driver calls that ask whether GPU work has finished and return at once: polls, never
stalls."""
ALLOCATOR_CALL = re.compile(r"^(cuda|hip)(Malloc|Free|MallocAsync|FreeAsync|MallocHost|FreeHost|"
                            r"HostAlloc|HostRegister|HostUnregister)(_v\d+)?$|^cuMem")
"""The caching allocator's own runtime calls (between its polls and the allocation they serve)."""
