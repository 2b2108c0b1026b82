import os
import time
import uuid


def uuid7() -> uuid.UUID:
    """A time-ordered UUID (RFC 9562 version 7): new rows land at the right edge of the index."""
    unix_ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (unix_ms & (2**48 - 1)) << 80
    value |= 0x7 << 76  # version
    value |= (rand >> 68) << 64  # rand_a, 12 bits
    value |= 0b10 << 62  # variant
    value |= rand & (2**62 - 1)  # rand_b
    return uuid.UUID(int=value)
