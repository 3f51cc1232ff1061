"""Sharded asynchronous checkpoints (docs/CHECKPOINT.md).

Each host writes the shards it holds, straight from its devices; restoring
reads only the pieces each new shard overlaps, onto any mesh and sharding::

    ckpt = cw.Checkpointer("/data/run", keep=3)
    saving = ckpt.save(step, {"w": w, "b": b})   # returns at once
    ...                                          # training goes on
    params = ckpt.restore(ckpt.latest_step(), {"w": cw.NamedSharding(mesh, cw.P("data"))})
"""

from __future__ import annotations

import os
from typing import Dict, List, Mapping, Optional

from . import _causeway as _C
from ._causeway import Array, Client


class Checkpointer:
    """Checkpoints of a client's arrays under ``root`` (made if missing).

    ``keep`` committed steps are kept; at most ``max_in_flight`` saves hold
    their arrays at once (a ``save`` beyond waits for one); a save not
    committed within ``timeout`` seconds fails. With a distributed cluster,
    every worker must see ``root`` at the same path, under its
    ``--checkpoint-root``.
    """

    def __init__(self, root: str, *, client: Optional[Client] = None, keep: int = 3,
                 max_in_flight: int = 2, timeout: float = 600.0):
        from . import default_client
        self._client = client if client is not None else default_client()
        self._c = _C.Checkpointer(self._client, os.path.abspath(root), keep, max_in_flight,
                                  timeout)

    @property
    def root(self) -> str:
        return self._c.root

    def save(self, step: int, arrays: Mapping[str, Array]) -> _C.SaveFuture:
        """Begins saving ``arrays`` (name to array) as ``step`` and returns at
        once. The arrays are held until written, so they may be dropped or
        replaced at once. ``.wait()`` on the result raises why a save failed."""
        names = list(arrays)
        return self._c.save(step, names, [arrays[n] for n in names])

    def wait(self) -> None:
        """Waits for every save begun; raises the first failure since the last wait."""
        self._c.wait()

    def steps(self) -> List[int]:
        """Committed steps, oldest first."""
        return self._c.steps()

    def latest_step(self) -> Optional[int]:
        steps = self.steps()
        return steps[-1] if steps else None

    def manifest(self, step: int) -> List[dict]:
        """Each saved array's name, dtype, global shape, sharding and pieces."""
        return self._c.manifest(step)

    def restore(self, step: int, shardings: Mapping[str, "NamedSharding"]) -> Dict[str, Array]:
        """New arrays of the saved ``step``, each placed by its NamedSharding
        (any mesh, any spec). Returns at once; a corrupt or missing file
        fails the array's fetch, naming the file."""
        ranks = {a["name"]: len(a["shape"]) for a in self.manifest(step)}
        names = list(shardings)
        meshes = [shardings[n].mesh for n in names]
        specs = [shardings[n].dims(ranks.get(n, 0)) for n in names]
        arrays = self._c.restore(step, names, meshes, specs)
        return dict(zip(names, arrays))
