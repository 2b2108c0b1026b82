"""What a job knows of its file without a client saying it: a name people can read (a URL's last
path segment when no name was given) and an upload's SHA-256, taken as storage reads the upload."""

import hashlib
import unicodedata
from pathlib import PurePosixPath
from urllib.parse import unquote, urlsplit

from django.core.files import File

FILE_NAME_MAX = 255  # ExtractionJob.file_name's max_length


def readable_file_name(name: str) -> str:
    """`name` fit to show and to store: no control or format characters (a right-to-left
    override could disguise `exe.pdf`), no path separators, runs of spaces made one, at most
    `FILE_NAME_MAX` characters with its extension kept."""
    name = unicodedata.normalize("NFC", name).replace("/", "_").replace("\\", "_")
    name = "".join(" " if char.isspace() else char for char in name)
    name = "".join(char for char in name if not unicodedata.category(char).startswith("C"))
    name = " ".join(name.split())
    if len(name) > FILE_NAME_MAX:
        suffix = PurePosixPath(name).suffix
        suffix = suffix if len(suffix) <= 16 else ""
        name = name[: FILE_NAME_MAX - len(suffix)] + suffix
    return name


def file_name_from_url(url: str) -> str:
    """The last non-empty segment of the URL's path, percent-decoded (`…/Q3%20budget.csv` →
    `Q3 budget.csv`), made readable; "" when the path has none (`https://host/`)."""
    segments = [segment for segment in urlsplit(url).path.split("/") if segment]
    if not segments:
        return ""
    return readable_file_name(unquote(segments[-1], errors="replace"))


class DigestingFile(File):
    """A file (an upload, a stored file copied into the archive) whose bytes are hashed as
    storage reads them through `chunks()`, as Django's file system storage copies a file, so
    that they are read once. Wrapping hides the upload's temporary path, so storage copies
    rather than moves it: moving would read nothing through us. A storage that reads another
    way leaves `sha256()` None, and the caller hashes the file itself."""

    def __init__(self, upload: File) -> None:
        super().__init__(upload, name=upload.name)
        self._digest, self._read = hashlib.sha256(), 0

    def chunks(self, chunk_size: int | None = None):
        self._digest, self._read = hashlib.sha256(), 0  # `chunks` starts again from byte 0
        for chunk in super().chunks(chunk_size):
            self._digest.update(chunk)
            self._read += len(chunk)
            yield chunk

    def sha256(self) -> str | None:
        """The hex digest when every byte went through `chunks()`, else None."""
        return self._digest.hexdigest() if self._read == self.size else None


def stored_sha256(field_file) -> str:
    """The SHA-256 of a stored file, read back in chunks."""
    return storage_sha256(field_file.name, field_file.storage)


def storage_sha256(path: str, storage) -> str:
    """The SHA-256 of the file at `path` in `storage`, read back in chunks."""
    digest = hashlib.sha256()
    with storage.open(path, "rb") as stored:
        for chunk in stored.chunks():
            digest.update(chunk)
    return digest.hexdigest()
