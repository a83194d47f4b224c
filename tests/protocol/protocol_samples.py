"""Sample messages for every API and version, built from the schema itself (a test helper)."""

import random

from trilog.protocol import (
    API_VERSIONS,
    BOOLEAN,
    BYTES,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    RECORDS,
    REQUEST_CLASSES,
    RESPONSE_CLASSES,
    STRING,
    Array,
    Struct,
)

_INT_RANGES = {INT8: 7, INT16: 15, INT32: 31, INT64: 63}


def _value(rng, t, nullable, nulls):
    """A value of type ``t``; ``nulls`` makes every nullable value None."""
    if nullable and nulls:
        return None
    if isinstance(t, Struct):
        return _struct_sample(rng, t, _value.version, nulls)
    if isinstance(t, Array):
        return [_value(rng, t.item, False, nulls) for _ in range(rng.randint(1, 3))]
    if t in _INT_RANGES:
        bits = _INT_RANGES[t]
        return rng.choice([-(2**bits), 2**bits - 1, rng.randint(-(2**bits), 2**bits - 1)])
    if t is BOOLEAN:
        return rng.choice([True, False])
    if t is FLOAT64:
        return rng.choice([0.0, 1048576.0, 12.5, -1.0])
    if t is STRING:
        return rng.choice(["", "t\u00e9st", "topic-" + str(rng.randint(0, 999))])
    if t in (BYTES, RECORDS):
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 12)))
    raise AssertionError(f"no sample for {t}")


def _struct_sample(rng, struct, version, nulls):
    fields = {}
    for f in struct.fields:
        if f.in_version(version):
            t = (
                f.type.item
                if isinstance(f.type, Array) and isinstance(f.type.item, Struct)
                else None
            )
            if t is not None:
                if f.nullable_in(version) and nulls:
                    fields[f.name] = None
                else:
                    fields[f.name] = [
                        _struct_sample(rng, t, version, nulls) for _ in range(rng.randint(1, 2))
                    ]
            else:
                fields[f.name] = _value(rng, f.type, f.nullable_in(version), nulls)
    return struct.cls(**fields)


def sample(cls, version, *, nulls=False, seed=0):
    """A ``cls`` instance with random values in every field of ``version`` (others default)."""
    rng = random.Random(f"{cls.__name__}/{version}/{nulls}/{seed}")
    _value.version = version
    return _struct_sample(rng, cls._struct, version, nulls)


def all_cases():
    """(class, version) for every supported request and response version."""
    cases = []
    for key, (lo, hi) in API_VERSIONS.items():
        for cls in (REQUEST_CLASSES[key], RESPONSE_CLASSES[key]):
            cases.extend((cls, v) for v in range(lo, hi + 1))
    return cases


CASES = all_cases()
CASE_IDS = [f"{cls.__name__}-v{v}" for cls, v in CASES]
