"""The public surface: every name in ``__all__`` exists, and the error table is complete."""

import pytest

import trilog.errors
import trilog.protocol
from trilog.errors import ERROR_CODES, ApiError, error_for_code


@pytest.mark.parametrize("module", [trilog.protocol, trilog.errors], ids=lambda m: m.__name__)
def test_all_names_exist(module):
    assert module.__all__, module
    assert len(set(module.__all__)) == len(module.__all__)
    for name in module.__all__:
        assert hasattr(module, name), name


def test_protocol_is_pure():
    """``protocol/`` imports only the standard library, trilog.errors and itself."""
    import ast
    import pathlib
    import sys

    allowed_trilog = ("trilog.errors", "trilog.protocol")
    for path in pathlib.Path(trilog.protocol.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top == "trilog":
                    assert name.startswith(allowed_trilog), (path.name, name)
                else:
                    assert top in sys.stdlib_module_names or top == "__future__", (path.name, name)


def test_error_table_is_complete_and_consistent():
    codes = set(ERROR_CODES)
    assert {-1, *range(1, 128)} <= codes
    for code, cls in ERROR_CODES.items():
        assert issubclass(cls, ApiError)
        assert cls.code == code
        assert cls.name.isupper() and cls.description
        assert isinstance(cls.retriable, bool)
        assert getattr(trilog.errors, cls.__name__) is cls
        assert cls.__name__ in trilog.errors.__all__
        assert cls.__name__.endswith("Error") and not cls.__name__.endswith("ErrorError")


@pytest.mark.parametrize(
    ("code", "class_name", "retriable"),
    [
        (-1, "UnknownServerError", False),
        (1, "OffsetOutOfRangeError", False),
        (2, "CorruptMessageError", True),
        (3, "UnknownTopicOrPartitionError", True),
        (6, "NotLeaderOrFollowerError", True),
        (6, "NotLeaderForPartitionError", True),
        (10, "MessageTooLargeError", False),
        (13, "NetworkError", True),
        (14, "CoordinatorLoadInProgressError", True),
        (17, "InvalidTopicError", False),
        (27, "RebalanceInProgressError", False),
        (35, "UnsupportedVersionError", False),
        (56, "KafkaStorageError", True),
        (87, "InvalidRecordError", False),
        (89, "ThrottlingQuotaExceededError", True),
    ],
)
def test_known_errors(code, class_name, retriable):
    cls = getattr(trilog.errors, class_name)
    assert ERROR_CODES[code] is cls
    assert cls.retriable is retriable
    assert isinstance(error_for_code(code), cls)


def test_existing_behaviour_kept():
    err = trilog.errors.OffsetOutOfRangeError(log_start_offset=3, log_end_offset=9)
    assert (err.log_start_offset, err.log_end_offset, err.code) == (3, 9, 1)
    assert isinstance(error_for_code(12345), trilog.errors.UnknownServerError)
    with pytest.raises(trilog.errors.UnsupportedVersionError):
        trilog.errors.raise_for_code(35)
    trilog.errors.raise_for_code(0)
