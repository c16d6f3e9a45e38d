"""``tracekit.ranks.executors``' local pool: small files go to the workers in chunks, the
results come back in the order of the paths, and the ranks of a chunk whose process dies are
retried one by one (the one that kills its process again is ``Failed``, the others analysed)."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.ranks import executors
from tracekit.ranks.inputs import Failed


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.one_of(st.none(), st.integers(0, 3 * executors.CHUNK_BYTES)), max_size=300),
       st.integers(1, 8))
def test_chunks_cover_every_path_once_in_order(sizes, workers):
    got = executors.chunks(sizes, workers)
    assert [i for c in got for i in c] == list(range(len(sizes)))
    for c in got:
        assert 1 <= len(c) <= executors.MAX_CHUNK
        if len(c) > 1:  # several files together only when all are small and known
            assert all(sizes[i] is not None for i in c)
            assert sum(sizes[i] for i in c) <= executors.CHUNK_BYTES
    # every worker gets several chunks where there are enough paths
    assert len(got) >= min(len(sizes), workers * executors.CHUNKS_PER_WORKER)


def test_a_thousand_tiny_files_go_in_chunks_of_sixteen_then_fewer():
    """Chunks of sixteen, then smaller towards the end (at most half of a worker's share of
    what is left), so that neither worker waits long for the other's last chunk."""
    got = [len(c) for c in executors.chunks([4000] * 1000, 2)]
    assert got == [16] * 59 + [14, 10, 8, 6, 4, 3, 2, 2] + [1] * 7
    assert sum(got) == 1000


@dataclass(frozen=True)
class _Task:
    killer: str

    def __call__(self, path: str) -> str:
        if path == self.killer:
            os.kill(os.getpid(), signal.SIGKILL)
        return path.upper()


def test_a_worker_killed_mid_chunk_costs_only_its_rank(tmp_path):
    paths = []
    for i in range(40):
        p = tmp_path / f"r{i}.json"
        p.write_text("{}")
        paths.append(str(p))
    got = executors.run(_Task(killer=paths[17]), paths, workers=2)
    assert len(got) == 40
    for p, r in zip(paths, got):
        if p == paths[17]:
            assert isinstance(r, Failed) and "died, twice" in r.message
        else:
            assert r == p.upper()
