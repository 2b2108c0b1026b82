"""The archive's files: lines gathered into gzip members of about `MEMBER_BYTES`, each record
read back from its member's offset, in files of either format."""

import gzip
import secrets
import uuid
import zlib

import orjson
import pytest
from django.core.files.base import ContentFile

from jobtracking.infra.archive_storage import (
    ARCHIVE_STORAGE,
    COMPRESS_LEVEL,
    GZIP_WBITS,
    MEMBER_BYTES,
    ArchiveError,
    LinesWriter,
    archive_storage,
    read_record,
)


def records(count: int) -> list[tuple[str, bytes]]:
    """Records of about a fifth of a member each, that compress little."""
    ids = [str(uuid.uuid4()) for _ in range(count)]
    pad = MEMBER_BYTES // 10
    return [(i, orjson.dumps({"job": {"id": i}, "pad": secrets.token_hex(pad)})) for i in ids]


def test_lines_are_gathered_into_members_each_record_read_from_its_own(archive):
    written = records(40)
    writer = LinesWriter()
    places = []
    for _job, document in written:
        places.append((writer.lines, writer.size))
        writer.add(document)
    stored = writer.save("jobs/test.jsonl.gz")

    content = (archive / stored.path).read_bytes()
    assert gzip.decompress(content) == b"".join(document + b"\n" for _job, document in written)
    assert stored.bytes == len(content) == writer.size
    lines, offsets = zip(*places, strict=True)
    assert lines == tuple(range(40))
    members = sorted(set(offsets))
    assert members[0] == 0 and 5 <= len(members) <= 10  # five records (about 64 KiB) a member
    for (job, document), (_line, offset) in zip(written, places, strict=True):
        assert read_record(ARCHIVE_STORAGE, stored.path, offset, job) == document + b"\n"

    # A member never gives another job's record.
    first_job, last_offset = written[0][0], members[-1]
    with pytest.raises(ArchiveError, match=f"holds no record of job {first_job}"):
        read_record(ARCHIVE_STORAGE, stored.path, last_offset, first_job)


def test_a_record_of_format_1_one_member_a_line_still_reads(archive):
    written, content, offsets = records(3), b"", []
    for _job, document in written:
        offsets.append(len(content))
        content += zlib.compress(document + b"\n", COMPRESS_LEVEL, GZIP_WBITS)
    path = archive_storage().save("jobs/format-1.jsonl.gz", ContentFile(content))
    for (job, document), offset in zip(written, offsets, strict=True):
        assert read_record(ARCHIVE_STORAGE, path, offset, job) == document + b"\n"
