import hashlib

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage
from django.core.files.uploadedfile import TemporaryUploadedFile

from jobtracking.infra.files import (
    FILE_NAME_MAX,
    DigestingFile,
    file_name_from_url,
    readable_file_name,
)


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("https://files.example.org/grants/7/budget.csv", "budget.csv"),
        ("https://files.example.org/Q3%20budget%20%28v2%29.pdf?sig=abc#p2", "Q3 budget (v2).pdf"),
        ("https://files.example.org/reports/annual.pdf/", "annual.pdf"),
        ("https://files.example.org/r%C3%A9sum%C3%A9.txt", "résumé.txt"),
        # A decoded slash is not a path: it cannot make the name look like a folder.
        ("https://files.example.org/a%2F..%2Fetc%2Fpasswd", "a_.._etc_passwd"),
        ("https://files.example.org/", ""),
        ("https://files.example.org", ""),
    ],
)
def test_file_name_from_url_takes_the_last_segment_decoded(url, name):
    assert file_name_from_url(url) == name


def test_readable_file_name_drops_control_and_format_characters():
    # A right-to-left override would show "invoice‮fdp.exe" as "invoiceexe.pdf".
    assert readable_file_name("invoice\u202efdp.exe") == "invoicefdp.exe"
    assert readable_file_name("a\x00b\r\nc\td  e.txt") == "ab c d e.txt"
    assert readable_file_name("%ff.pdf") == "%ff.pdf"  # text that only looks encoded stays


def test_readable_file_name_keeps_the_extension_of_a_name_too_long():
    name = readable_file_name("x" * 400 + ".pdf")
    assert len(name) == FILE_NAME_MAX and name.endswith("x.pdf")


def test_file_name_from_url_replaces_bytes_that_are_not_utf8():
    assert file_name_from_url("https://files.example.org/bad%ff.csv") == "bad\ufffd.csv"


def test_digesting_file_hashes_what_storage_writes_in_one_pass(tmp_path):
    body = b"0123456789" * 100_000
    storage = FileSystemStorage(location=tmp_path)
    content = DigestingFile(ContentFile(body, name="big.bin"))
    name = storage.save("big.bin", content)
    assert content.sha256() == hashlib.sha256(body).hexdigest()
    assert (tmp_path / name).read_bytes() == body


def test_digesting_file_copies_a_temporary_upload_rather_than_moving_it(tmp_path):
    upload = TemporaryUploadedFile("scan.pdf", "application/pdf", 6, None)
    upload.write(b"%PDF-1")
    upload.seek(0)
    content = DigestingFile(upload)
    FileSystemStorage(location=tmp_path).save("scan.pdf", content)
    assert content.sha256() == hashlib.sha256(b"%PDF-1").hexdigest()


def test_digesting_file_says_nothing_when_storage_read_it_another_way():
    content = DigestingFile(ContentFile(b"abc", name="a.txt"))
    content.read()
    assert content.sha256() is None
