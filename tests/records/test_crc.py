import os
import zlib

import crc32c as crc32c_package
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.util import calc_crc32c
from records_helpers import RECORDS_SETTINGS

from trilog.records import crc32, crc32_reference, crc32c, crc32c_reference


@RECORDS_SETTINGS
@given(st.binary(max_size=4096))
def test_crc32c_matches_crcmod(data):
    assert crc32c(data) == crc32c_reference(data)
    assert crc32c_package.crc32c(data) == crc32c_reference(data)


@RECORDS_SETTINGS
@given(st.binary(max_size=4096))
def test_crc32_matches_crcmod(data):
    assert crc32(data) == crc32_reference(data)
    assert zlib.crc32(data) & 0xFFFFFFFF == crc32_reference(data)


def test_large_random_buffers_and_views():
    data = os.urandom(1 << 20)
    view = memoryview(data)[3:-5]
    assert crc32c(view) == crc32c_reference(bytes(view))
    assert crc32(view) == crc32_reference(bytes(view))
    assert crc32c(bytearray(data)) == crc32c_reference(data)


def test_known_vectors():
    # RFC 3720 / the usual "123456789" check values.
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32(b"123456789") == 0xCBF43926
    assert calc_crc32c(b"123456789") == 0xE3069283
