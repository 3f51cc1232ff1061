"""ONNX models as causeway functions (docs/ONNX.md).

    model = causeway.onnx.load("resnet18.onnx",
                               in_shardings=NamedSharding(mesh, P("data")),
                               out_shardings=NamedSharding(mesh, P("data")))
    (logits,) = model(images)          # numpy arrays or causeway Arrays

The model is imported once per shape of its arguments (a symbolic batch is
fixed by them), at the shape each device sees, compiled like any other
function, and called; results are causeway Arrays, one per graph output.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _causeway as _C
from ._errors import InvalidArgumentError, UnimplementedError


def available() -> bool:
    """Whether this build has the ONNX importer (libonnx-dev)."""
    return hasattr(_C, "onnx_import")


class OnnxModel:
    """An imported ONNX model, called with one value per graph input that is
    not a constant, in the model's order (:attr:`input_names`)."""

    def __init__(self, path: str, in_shardings: Any, out_shardings: Any,
                 constants: Dict[str, Any]):
        if not available():
            raise UnimplementedError("this build has no ONNX importer (libonnx-dev)",
                                     "UNIMPLEMENTED")
        self.path = path
        self._in = in_shardings
        self._out = out_shardings
        self._constants = [(k, np.asarray(v, dtype=np.int32)) for k, v in constants.items()]
        declared = _C.onnx_inputs(path)
        unknown = set(constants) - {name for name, *_ in declared}
        if unknown:
            raise InvalidArgumentError(f"constants name no input of the model: {sorted(unknown)}",
                                       "INVALID_ARGUMENT")
        # (name, declared shape with -1 for symbolic dims, dtype, ONNX type)
        self._inputs = [d for d in declared if d[0] not in constants]
        self.output_names: List[str] = []
        self._cache: Dict[tuple, Any] = {}

    @property
    def input_names(self) -> List[str]:
        return [name for name, *_ in self._inputs]

    def _sharding(self, i: int):
        if isinstance(self._in, (list, tuple)):
            return self._in[i] if i < len(self._in) else None
        return self._in

    def __call__(self, *args):
        from . import compile as _compile  # the package's, imported late (cycle)
        if len(args) != len(self._inputs):
            raise InvalidArgumentError(
                f"{len(args)} arguments for a model with inputs {self.input_names}",
                "INVALID_ARGUMENT")
        shapes: List[Tuple[str, Tuple[int, ...], str]] = []
        parts = 1  # of the batch each device runs on (dimension 0 split)
        for i, (arg, (name, _, dtype, _)) in enumerate(zip(args, self._inputs)):
            shape = tuple(arg.shape) if hasattr(arg, "shape") else np.shape(arg)
            s = self._sharding(i)
            shard = tuple(s.shard_shape(shape)) if s is not None else shape
            if shard and shard[0] and shape[0] != shard[0]:
                parts = shape[0] // shard[0]
            shapes.append((name, shard, dtype))
        key = tuple(shapes)
        compiled = self._cache.get(key)
        if compiled is None:
            fn, params, outputs, _ = _C.onnx_import(self.path, list(shapes), self._constants,
                                                    parts)
            self.output_names = [name for name, _ in outputs]
            ins = None if self._in is None else [self._sharding(i) for i in range(len(params))]
            outs = self._out
            if outs is not None and not isinstance(outs, (list, tuple)) and len(outputs) > 1:
                outs = [outs] * len(outputs)
            compiled = self._cache[key] = _compile(fn, in_shardings=ins, out_shardings=outs)
        result = compiled(*args)
        return result if isinstance(result, tuple) else (result,)


def load(path: str, *, in_shardings: Any = None, out_shardings: Any = None,
         constants: Optional[Dict[str, Any]] = None) -> OnnxModel:
    """Loads the ONNX model at ``path`` as a callable: ``model(*inputs)``
    returns a tuple of Arrays, one per graph output. ``in_shardings`` and
    ``out_shardings`` place them as :func:`causeway.compile`'s do (one
    NamedSharding for all, or one per input / output); ``constants`` fixes
    integer inputs an op needs when the model is compiled (a Reshape's
    shape), by name."""
    return OnnxModel(path, in_shardings, out_shardings, constants or {})
