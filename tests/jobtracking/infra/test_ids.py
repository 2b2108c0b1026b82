"""Job ids: RFC 9562 version 7 UUIDs."""

import time
import uuid

from jobtracking.infra.ids import uuid7


def test_an_id_is_a_version_7_uuid_carrying_the_current_millisecond():
    before = time.time_ns() // 1_000_000
    value = uuid7()
    after = time.time_ns() // 1_000_000
    assert (value.version, value.variant) == (7, uuid.RFC_4122)
    assert before <= value.int >> 80 <= after


def test_ids_are_random_below_the_millisecond_and_ordered_across_milliseconds():
    ids = [uuid7() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    # Every random bit varies (12 of rand_a, 62 of rand_b); the version and variant never do.
    random_bits = ((1 << 12) - 1) << 64 | (1 << 62) - 1
    varied = 0
    for value in ids:
        varied |= value.int ^ ids[0].int
    assert varied & random_bits == random_bits
    assert varied & (0xF << 76 | 0b11 << 62) == 0
    time.sleep(0.002)
    assert uuid7().int >> 80 > ids[-1].int >> 80
