"""Causeway's exceptions: one class per status code of the C++ runtime.

Every error raised by the runtime is a :class:`CausewayError` carrying the
status ``code`` (``"INVALID_ARGUMENT"``, ...) and the message, which names
the root cause (node, device, host) of a failed computation. The classes
also derive from the built-in exception a Python user would expect
(``ValueError`` for bad arguments, ``TimeoutError``, ``ConnectionError``...).
"""


class CausewayError(RuntimeError):
    """An error of the Causeway runtime; ``code`` is its status code name."""

    def __init__(self, message: str, code: str = "UNKNOWN"):
        super().__init__(message)
        self.code = code


class InvalidArgumentError(CausewayError, ValueError):
    """A malformed function, mismatched shapes, a sharding that does not fit."""


class NotFoundError(CausewayError, LookupError):
    """An unknown device, array or program."""


class ResourceExhaustedError(CausewayError, MemoryError):
    """Device memory or a quota is full."""


class DeadlineExceededError(CausewayError, TimeoutError):
    """A wait ran past its bound."""


class UnavailableError(CausewayError, ConnectionError):
    """The cluster, a host or a device cannot be reached."""


class FailedPreconditionError(CausewayError):
    """The call is not valid now (a disconnected client, a released array)."""


class PermissionDeniedError(CausewayError, PermissionError):
    """The token does not allow this call."""


class UnimplementedError(CausewayError, NotImplementedError):
    """Not supported by this kind of cluster."""


class InternalError(CausewayError):
    """A computation failed on a device (the message names where)."""


_BY_CODE = {
    "INVALID_ARGUMENT": InvalidArgumentError,
    "OUT_OF_RANGE": InvalidArgumentError,
    "NOT_FOUND": NotFoundError,
    "RESOURCE_EXHAUSTED": ResourceExhaustedError,
    "DEADLINE_EXCEEDED": DeadlineExceededError,
    "UNAVAILABLE": UnavailableError,
    "FAILED_PRECONDITION": FailedPreconditionError,
    "PERMISSION_DENIED": PermissionDeniedError,
    "UNAUTHENTICATED": PermissionDeniedError,
    "UNIMPLEMENTED": UnimplementedError,
    "INTERNAL": InternalError,
}


def error_class(code: str) -> type:
    """The exception class of a status code name (used by the extension)."""
    return _BY_CODE.get(code, CausewayError)
