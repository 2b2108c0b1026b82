"""The archive's files in the "archive" Django storage (`STORAGES`): gzip-compressed JSON Lines,
one gzip member per line so that one record is read back from its byte offset without
decompressing the file before it (`gzip` and `zcat` still read the file whole), and the
read-back check that lets a purge trust a file before it deletes anything on its word."""

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
READ_CHUNK = 64 * 1024
# zlib's window bits for a gzip member (header and trailer around the deflate stream).
GZIP_WBITS = 31


def _member_wbits(size: int) -> int:
    """A gzip member's window bits for `size` bytes: the smallest window that holds them all
    (so no match is lost), at most zlib's 32 KiB. zlib sets up and clears the window and its
    hash table for each member, which for a record of a few KiB in the largest window costs more
    than compressing it; a gzip member does not record its window, and any reader inflates it."""
    return GZIP_WBITS - 15 + min(15, max(9, size.bit_length()))


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
    """One archive file being written: each `add` appends a line as its own gzip member to a
    spooled temporary file (memory stays bounded whatever the part's size), hashing as it goes."""

    def __init__(self) -> None:
        # Closed by `save`, which stores it: the file outlives this call.
        self._spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MAX_BYTES)  # noqa: SIM115
        self._digest = hashlib.sha256()
        self.lines = 0
        self.size = 0

    def add(self, document: bytes) -> tuple[int, int]:
        """Append one JSON document; returns its line number and its member's byte offset."""
        line = document + b"\n"
        deflate = zlib.compressobj(COMPRESS_LEVEL, zlib.DEFLATED, _member_wbits(len(line)))
        member = deflate.compress(line) + deflate.flush()
        self._spool.write(member)
        self._digest.update(member)
        line, offset = self.lines, self.size
        self.lines, self.size = self.lines + 1, self.size + len(member)
        return line, offset

    def save(self, path: str) -> StoredFile:
        """Store the file at `path` (or the free name the storage gives), read it back and check
        its SHA-256. Raises ArchiveError when the stored bytes differ."""
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


def read_line(storage_name: str, path: str, offset: int) -> bytes:
    """One archived line (a JSON document): its gzip member, from `offset` to its end."""
    inflater = zlib.decompressobj(wbits=GZIP_WBITS)
    parts = []
    with storages[storage_name].open(path, "rb") as stored:
        stored.seek(offset)
        while not inflater.eof and (chunk := stored.read(READ_CHUNK)):
            parts.append(inflater.decompress(chunk))
    if not inflater.eof:
        raise ArchiveError(f"{path} ends inside the record at byte {offset}")
    return b"".join(parts)
