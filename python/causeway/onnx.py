"""ONNX models as causeway functions (docs/ONNX.md).

    model = causeway.onnx.load("resnet18.onnx",
                               in_shardings=NamedSharding(mesh, P("data")),
                               out_shardings=NamedSharding(mesh, P("data")))
    (logits,) = model(images)          # numpy arrays or causeway Arrays

The model is imported once per shape of its arguments (a symbolic batch is
fixed by them), at the shape each device sees, compiled like any other
function, and called; results are causeway Arrays, one per graph output.

Fine-tuning: with ``trainable=True`` the model's weights (its floating-point
initializers) are arguments, so a gradient can be taken against them::

    model = causeway.onnx.load("resnet18.onnx", trainable=True)
    weights = model.weights            # {name: np.ndarray}, the initial values

    @causeway.compile
    def step(weights, x, target):
        def loss(w):
            (y,) = model.apply(w, x)
            return ((y - target) ** 2).mean()
        value, grads = causeway.value_and_grad(loss)(weights)
        return value, {k: weights[k] - 0.01 * grads[k] for k in weights}
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _causeway as _C
from ._causeway import Value
from ._errors import InvalidArgumentError, UnimplementedError


def available() -> bool:
    """Whether this build has the ONNX importer (libonnx-dev)."""
    return hasattr(_C, "onnx_import")


class OnnxModel:
    """An imported ONNX model, called with one value per graph input that is
    not a constant, in the model's order (:attr:`input_names`)."""

    def __init__(self, path: str, in_shardings: Any, out_shardings: Any,
                 constants: Dict[str, Any], trainable: bool = False):
        if not available():
            raise UnimplementedError("this build has no ONNX importer (libonnx-dev)",
                                     "UNIMPLEMENTED")
        self.path = path
        self._in = in_shardings
        self._out = out_shardings
        self._constants = []
        for k, v in constants.items():
            # Integers are computed as int32 (docs/ONNX.md): a value outside
            # it is refused by name, never wrapped.
            wide = np.asarray(v, dtype=np.int64)
            if wide.size and (wide.min() < np.iinfo(np.int32).min or
                              wide.max() > np.iinfo(np.int32).max):
                raise InvalidArgumentError(
                    f"constant {k!r} holds {wide.max() if wide.max() > 0 else wide.min()}, "
                    "outside int32 (integers are computed as int32)", "INVALID_ARGUMENT")
            self._constants.append((k, wide.astype(np.int32)))
        declared = _C.onnx_inputs(path)
        unknown = set(constants) - {name for name, *_ in declared}
        if unknown:
            raise InvalidArgumentError(f"constants name no input of the model: {sorted(unknown)}",
                                       "INVALID_ARGUMENT")
        # (name, declared shape with -1 for symbolic dims, dtype, ONNX type)
        self._inputs = [d for d in declared if d[0] not in constants]
        self.output_names: List[str] = []
        self._cache: Dict[tuple, Any] = {}
        self._trainable = trainable
        self._functions: Dict[tuple, Any] = {}
        self._weight_order: List[str] = []
        #: With trainable=True, the weights as the model holds them: name ->
        #: float32 array (what :meth:`apply` takes, and ``model(...)`` uses).
        self.weights: Dict[str, np.ndarray] = (
            dict(_C.onnx_weights(path)) if trainable else {})

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
            fn, params, outputs, _, weights = self._import(shapes, parts)
            ins = None if self._in is None else [self._sharding(i) for i in range(len(params))]
            if ins is not None and weights:
                ins = ins + [None] * len(weights)  # weights: replicated
            outs = self._out
            if outs is not None and not isinstance(outs, (list, tuple)) and len(outputs) > 1:
                outs = [outs] * len(outputs)
            compiled = self._cache[key] = _compile(fn, in_shardings=ins, out_shardings=outs)
        result = compiled(*args, *(self.weights[w] for w in self._weight_order))
        return result if isinstance(result, tuple) else (result,)

    def _import(self, shapes, parts: int):
        key = (tuple(shapes), parts)
        got = self._functions.get(key)
        if got is None:
            got = self._functions[key] = _C.onnx_import(self.path, list(shapes), self._constants,
                                                        parts, self._trainable)
            self.output_names = [name for name, _ in got[2]]
            self._weight_order = list(got[4])
        return got

    def apply(self, weights: Dict[str, Any], *inputs) -> Tuple[Any, ...]:
        """The model on ``inputs`` with ``weights`` (name -> value, as
        :attr:`weights`), inside a traced function (``causeway.compile``,
        ``causeway.value_and_grad``): returns its outputs as traced values,
        through which gradients flow to the weights and the inputs. The
        model is imported at the shapes the inputs have there (a device's
        shard)."""
        from . import _current_builder, _lift  # imported late (cycle)
        if not self._trainable:
            raise InvalidArgumentError("apply takes weights: load the model with trainable=True",
                                       "INVALID_ARGUMENT")
        if len(inputs) != len(self._inputs):
            raise InvalidArgumentError(
                f"{len(inputs)} inputs for a model with inputs {self.input_names}",
                "INVALID_ARGUMENT")
        b = _current_builder()
        values = [x if isinstance(x, Value) else _lift(b, x) for x in inputs]
        shapes = [(name, tuple(v.shape), dtype)
                  for v, (name, _, dtype, _) in zip(values, self._inputs)]
        fn, _, _, _, order = self._import(shapes, 1)
        missing = [w for w in order if w not in weights]
        if missing:
            raise InvalidArgumentError(f"weights lack {missing[:3]} ({len(missing)} in all)",
                                       "INVALID_ARGUMENT")
        ws = [weights[w] if isinstance(weights[w], Value) else _lift(b, weights[w])
              for w in order]
        return tuple(b.call(fn, values + ws))


def load(path: str, *, in_shardings: Any = None, out_shardings: Any = None,
         constants: Optional[Dict[str, Any]] = None, trainable: bool = False) -> OnnxModel:
    """Loads the ONNX model at ``path`` as a callable: ``model(*inputs)``
    returns a tuple of Arrays, one per graph output. ``in_shardings`` and
    ``out_shardings`` place them as :func:`causeway.compile`'s do (one
    NamedSharding for all, or one per input / output); ``constants`` fixes
    integer inputs an op needs when the model is compiled (a Reshape's
    shape), by name; ``trainable`` makes the weights arguments
    (:attr:`OnnxModel.weights`, :meth:`OnnxModel.apply`) for fine-tuning."""
    return OnnxModel(path, in_shardings, out_shardings, constants or {}, trainable)
