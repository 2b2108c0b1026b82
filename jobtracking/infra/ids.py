import os
import time
import uuid

# RFC 9562 version 7: 48 bits of Unix milliseconds, the version (7), 12 random bits, the variant
# (0b10), 62 random bits. Eighty random bits are drawn and the version and variant set in them.
_RANDOM = (1 << 80) - 1 ^ (0xF << 76) ^ (0b11 << 62)
_VERSION_AND_VARIANT = (0x7 << 76) | (0b10 << 62)


def uuid7() -> uuid.UUID:
    """A time-ordered UUID (RFC 9562 version 7): new rows land at the right edge of the index."""
    unix_ms = time.time_ns() // 1_000_000 & (1 << 48) - 1
    random = int.from_bytes(os.urandom(10)) & _RANDOM
    return uuid.UUID(int=unix_ms << 80 | random | _VERSION_AND_VARIANT)
