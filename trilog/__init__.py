"""trilog: Kafka's commit-log design in Python on Trio."""

from trilog.errors import ApiError, ProtocolError, TrilogError

__version__ = "0.1.0"

__all__ = ["ApiError", "ProtocolError", "TrilogError", "__version__"]
