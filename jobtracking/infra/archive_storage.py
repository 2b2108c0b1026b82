"""The archive's files in the "archive" Django storage (`STORAGES`): gzip-compressed JSON Lines,
a gzip member per group of lines (about `MEMBER_BYTES` of them) so that one record is read back
from its member's byte offset without decompressing the file before it (`gzip` and `zcat` still
read the file whole), and the read-back check that lets a purge trust a file before it deletes
anything on its word."""

import hashlib
import tempfile
import zlib
from dataclasses import dataclass

import orjson
from django.core.files import File
from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages

from jobtracking.infra.files import DigestingFile, storage_sha256

ARCHIVE_STORAGE = "archive"
# A part bigger than this goes to a temporary file while it is written, not memory.
SPOOL_MAX_BYTES = 8 * 1024 * 1024
# zlib's fastest level: JSON still shrinks several times over, and the purge is not slowed.
COMPRESS_LEVEL = 1
# A member closes once its lines reach this size: reading one record back inflates at most about
# this much, and zlib's setup for each member (its window and hash table), which for a member of
# one record cost more than compressing it, is paid once for a few dozen records (and matches
# across records make the file about a third of the size).
MEMBER_BYTES = 64 * 1024
READ_CHUNK = 64 * 1024
# zlib's window bits for a gzip member (header and trailer around the deflate stream).
GZIP_WBITS = 31


class ArchiveError(Exception):
    """An archive file read back is not what was written, or not whole."""


def archive_storage() -> Storage:
    return storages[ARCHIVE_STORAGE]


@dataclass(frozen=True)
class StoredFile:
    path: str
    sha256: str
    bytes: int


def stored_sha256(path: str, storage: Storage | None = None) -> str:
    """The SHA-256 of a file in `storage` (the archive's by default), read back in chunks."""
    return storage_sha256(path, storage or archive_storage())


class LinesWriter:
    """One archive file being written: lines are gathered into gzip members of about
    `MEMBER_BYTES`, each appended to a spooled temporary file (memory stays bounded whatever the
    part's size) and hashed as it goes."""

    def __init__(self) -> None:
        # Closed by `save`, which stores it: the file outlives this call.
        self._spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MAX_BYTES)  # noqa: SIM115
        self._digest = hashlib.sha256()
        self._member: list[bytes] = []
        self._member_bytes = 0
        self.lines = 0
        self.size = 0  # of the members written: the next member's offset

    def add(self, document: bytes) -> None:
        """Append one JSON document: as line `lines` (read before), in the member that starts
        at byte `size`. (Nothing returned: no object made a line.)"""
        self._member.append(document)
        self._member_bytes += len(document) + 1
        self.lines += 1
        if self._member_bytes >= MEMBER_BYTES:
            self._close_member()

    def _close_member(self) -> None:
        lines = b"\n".join(self._member) + b"\n"
        member = zlib.compress(lines, COMPRESS_LEVEL, GZIP_WBITS)
        self._spool.write(member)
        self._digest.update(member)
        self.size += len(member)
        self._member, self._member_bytes = [], 0

    def save(self, path: str) -> StoredFile:
        """Store the file at `path` (or the free name the storage gives), read it back and check
        its SHA-256. Raises ArchiveError when the stored bytes differ."""
        if self._member:
            self._close_member()
        storage = archive_storage()
        self._spool.seek(0)
        with self._spool:
            saved = storage.save(path, File(self._spool, name=path))
        return _checked(saved, self._digest.hexdigest(), self.size)


def save_json(path: str, document: dict) -> StoredFile:
    """Store a JSON document (a manifest, an audit checkpoint), read it back and check its
    SHA-256, as the files a manifest lists were."""
    content = orjson.dumps(document, option=orjson.OPT_INDENT_2)
    saved = archive_storage().save(path, ContentFile(content))
    return _checked(saved, hashlib.sha256(content).hexdigest(), len(content))


def copy_file(source: Storage, name: str, path: str) -> StoredFile:
    """Copy a stored file (an upload, a result's file) into the archive, checked like a part.
    The source is hashed as the archive's storage reads it to copy it (read once), unless that
    storage reads it another way: then it is read again to hash it."""
    with source.open(name, "rb") as original:
        content = DigestingFile(original)
        saved = archive_storage().save(path, content)
    expected = content.sha256() or stored_sha256(name, source)
    return _checked(saved, expected, source.size(name))


def _checked(saved: str, expected: str, size: int) -> StoredFile:
    if (found := stored_sha256(saved)) != expected:
        raise ArchiveError(f"{saved} read back has SHA-256 {found}, written {expected}")
    return StoredFile(saved, expected, size)


def read_record(storage_name: str, path: str, offset: int, job_id) -> bytes:
    """A job's archived record (one JSON document, a line): the line of the gzip member at
    `offset` whose job it is (an archive of format 1 has one line a member). Raises
    ArchiveError when that member holds no record of the job."""
    inflater = zlib.decompressobj(wbits=GZIP_WBITS)
    parts = []
    with storages[storage_name].open(path, "rb") as stored:
        stored.seek(offset)
        while not inflater.eof and (chunk := stored.read(READ_CHUNK)):
            parts.append(inflater.decompress(chunk))
    if not inflater.eof:
        raise ArchiveError(f"{path} ends inside the member at byte {offset}")
    for line in b"".join(parts).splitlines(keepends=True):
        if orjson.loads(line)["job"]["id"] == str(job_id):
            return line
    raise ArchiveError(f"{path}: the member at byte {offset} holds no record of job {job_id}")
