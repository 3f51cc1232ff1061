"""The GPT-style language model of ``causeway train lm``, from Python.

The model's per-device functions (training step, evaluation, loss) are built
in C++ and compiled here for a ``{"data": D, "model": M}`` mesh; a training
loop drives them like any compiled function (see
``examples/python/train_lm.py``). :func:`train_lm` runs the whole C++
trainer instead.

A config is a dict with the keys of ``causeway train lm``'s model flags:
``vocab``, ``context``, ``layers``, ``heads``, ``embed``, ``bias``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from . import _causeway as _C

ParamSpec = _C.models.ParamSpec
TextDataset = _C.models.TextDataset
gpt_params = _C.models.gpt_params
init_gpt_params = _C.models.init_gpt_params
train_step_function = _C.models.train_step_function
eval_function = _C.models.eval_function
loss_function = _C.models.loss_function
train_flops_per_step = _C.models.train_flops_per_step
learning_rate = _C.models.learning_rate
train_lm = _C.models.train_lm
Checkpoint = _C.models.Checkpoint
write_checkpoint = _C.models.write_checkpoint

DEFAULT_CONFIG: Dict[str, Any] = {"context": 64, "layers": 4, "heads": 4, "embed": 128,
                                  "bias": True}


class GPT:
    """The model compiled for a mesh: parameters and AdamW moments as sharded
    arrays, and ``step`` / ``evaluate`` that dispatch asynchronously.

    ``step(tokens, targets, iteration, lr)`` runs one AdamW step on a batch of
    int32[batch, context] windows and returns the loss and gradient norm as
    arrays (read them when needed; steps queue up behind each other)."""

    def __init__(self, config: Dict[str, Any], mesh, batch: int, *, seed: int = 1,
                 adamw: Optional[Dict[str, float]] = None, kernels: str = "fused"):
        import causeway as cw
        self.config = dict(config)
        self.mesh = mesh
        shape = mesh.shape
        data, model = shape.get("data", 1), shape.get("model", 1)
        if set(shape) - {"data", "model"}:
            raise cw.InvalidArgumentError("the GPT mesh has axes 'data' and 'model' only",
                                          "INVALID_ARGUMENT")
        if batch % data:
            raise cw.InvalidArgumentError(f"batch {batch} does not split over data={data}",
                                          "INVALID_ARGUMENT")
        self.batch = batch
        self.specs: List[ParamSpec] = gpt_params(self.config)
        local = batch // data
        step_fn = train_step_function(self.config, data, model, local, adamw or {}, kernels)
        eval_fn = eval_function(self.config, data, model, local, kernels)
        shard = [cw.NamedSharding(mesh, cw.P(*[None if not d else d[0] for d in s.spec]))
                 for s in self.specs]
        batch_sharding = cw.NamedSharding(mesh, cw.P("data"))
        scalar = cw.NamedSharding(mesh, cw.P())
        self._batch = batch_sharding
        self._scalar = scalar
        self._step = cw.compile(step_fn, in_shardings=shard * 3 + [batch_sharding] * 2 + [scalar],
                                out_shardings=shard * 3 + [scalar, scalar])
        self._eval = cw.compile(eval_fn, in_shardings=shard + [batch_sharding] * 2,
                                out_shardings=[scalar])
        init = init_gpt_params(self.config, seed)
        self.params = [cw.device_put(p, s) for p, s in zip(init, shard)]
        self.m = [cw.device_put(np.zeros_like(p), s) for p, s in zip(init, shard)]
        self.v = [cw.device_put(np.zeros_like(p), s) for p, s in zip(init, shard)]

    def step(self, tokens: np.ndarray, targets: np.ndarray, iteration: int, lr: float):
        import causeway as cw
        hyper = np.array([iteration + 1, lr], np.float32)
        out = self._step(*self.params, *self.m, *self.v, cw.device_put(tokens, self._batch),
                         cw.device_put(targets, self._batch), cw.device_put(hyper, self._scalar))
        n = len(self.specs)
        self.params, self.m, self.v = list(out[:n]), list(out[n:2 * n]), list(out[2 * n:3 * n])
        return out[3 * n], out[3 * n + 1]

    def evaluate(self, tokens: np.ndarray, targets: np.ndarray):
        """The mean loss on a batch, as an array."""
        import causeway as cw
        return self._eval(*self.params, cw.device_put(tokens, self._batch),
                          cw.device_put(targets, self._batch))

    def state_numpy(self) -> Dict[str, np.ndarray]:
        """The parameters, fetched, by name."""
        return {s.name: np.asarray(p) for s, p in zip(self.specs, self.params)}

    def save(self, path: str, data: TextDataset, iteration: int, *,
             optimizer: bool = True) -> str:
        """Writes a checkpoint of the parameters (and the AdamW moments unless
        ``optimizer`` is false) that ``causeway train lm --resume``,
        ``causeway sample`` and :func:`load_checkpoint` read. ``data`` gives
        the vocabulary; ``iteration`` is the number of steps taken. Returns
        the file written (``path/model.safetensors``, replaced atomically)."""
        params = [np.asarray(p) for p in self.params]
        m = [np.asarray(p) for p in self.m] if optimizer else []
        v = [np.asarray(p) for p in self.v] if optimizer else []
        config = {k: val for k, val in self.config.items() if k != "vocab"}
        return _C.models.write_checkpoint(path, config, data, iteration, params, m, v)

    @classmethod
    def from_checkpoint(cls, checkpoint: Any, mesh, batch: int, **kwargs) -> "GPT":
        """The model of a checkpoint (a :class:`Checkpoint` or its path),
        compiled for ``mesh``, with its parameters and AdamW moments (zeros if
        the checkpoint holds none). Continue with ``step(..., iteration=
        checkpoint.iteration + k, ...)``."""
        import causeway as cw
        ckpt = load_checkpoint(checkpoint) if isinstance(checkpoint, str) else checkpoint
        gpt = cls(ckpt.config, mesh, batch, **kwargs)
        shardings = [p.sharding for p in gpt.params]
        params = ckpt.params
        gpt.params = [cw.device_put(a, s) for a, s in zip(params, shardings)]
        m, v = ckpt.adam_m, ckpt.adam_v
        if m:
            gpt.m = [cw.device_put(a, s) for a, s in zip(m, shardings)]
            gpt.v = [cw.device_put(a, s) for a, s in zip(v, shardings)]
        return gpt


def load_checkpoint(path: str) -> Checkpoint:
    """Reads a GPT checkpoint written by ``causeway train lm --checkpoint`` or
    :meth:`GPT.save`: a folder of sharded step folders (its newest step is
    read), one step folder, or a file checkpoint's folder or its
    ``model.safetensors`` file."""
    return _C.models.read_checkpoint(path)


def sample(checkpoint: Any, prompt: str = "", tokens: int = 500, temperature: float = 0.8,
           top_k: int = 0, seed: int = 1, client=None) -> str:
    """Text from a trained model, as ``causeway sample`` makes it: ``prompt``
    followed by ``tokens`` new tokens, on one device of ``client`` (default:
    the current one). ``checkpoint`` is a :class:`Checkpoint` or its path."""
    import causeway as cw
    ckpt = load_checkpoint(checkpoint) if isinstance(checkpoint, str) else checkpoint
    client = client or cw.default_client()
    text = _C.models.sample(client, ckpt, prompt, tokens, temperature, top_k, seed)
    return text.decode("utf-8", errors="replace")
