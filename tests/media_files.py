"""Files the attachment tests make themselves: PNG, PDF, DOCX, Ogg Opus and WAV."""

from __future__ import annotations

import io
import struct
import wave
import zipfile
import zlib


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(
        ">I", zlib.crc32(kind + data) & 0xFFFFFFFF
    )


def png(width: int = 4, height: int = 3, *, rgb: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A valid RGB PNG of one colour."""
    row = b"\x00" + bytes(rgb) * width
    raw = zlib.compress(row * height)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", raw) + _chunk(b"IEND", b"")


def png_claiming(width: int, height: int) -> bytes:
    """A small PNG whose header claims `width`×`height` pixels (a decompression bomb)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 1024)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def pdf(pages: list[str]) -> bytes:
    """A PDF with one line of Helvetica text per page (pypdf extracts it)."""
    objects: list[bytes] = []
    n = len(pages)
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(n))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for i, text in enumerate(pages):
        safe = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = f"BT /F1 12 Tf 72 720 Td ({safe}) Tj ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {5 + 2 * i} 0 R "
            "/Resources << /Font << /F1 3 0 R >> >> >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n"
              % (len(objects) + 1, xref))
    return out.getvalue()


def encrypted_pdf(pages: list[str]) -> bytes:
    """The same PDF, password-protected (pypdf's writer)."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf(pages))))
    writer.encrypt("secret", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
CONTENT_TYPES = (
    '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
    'content-types"><Override PartName="/word/document.xml" ContentType="application/'
    'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'
)


def _docx_zip(document_xml: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", CONTENT_TYPES)
        archive.writestr("word/document.xml", document_xml)
    return out.getvalue()


def docx(paragraphs: list[str], *, page_every: int = 0) -> bytes:
    """A DOCX with these paragraphs (a page break after every `page_every`)."""
    body = []
    for i, text in enumerate(paragraphs, 1):
        brk = '<w:r><w:br w:type="page"/></w:r>' if page_every and i % page_every == 0 else ""
        body.append(f"<w:p><w:r><w:t>{text}</w:t></w:r>{brk}</w:p>")
    xml = f'<?xml version="1.0"?><w:document {W}><w:body>{"".join(body)}</w:body></w:document>'
    return _docx_zip(xml.encode())


def docx_zip_bomb(expanded: int = 60_000_000) -> bytes:
    """A DOCX whose document.xml inflates to `expanded` bytes of spaces."""
    head = f'<?xml version="1.0"?><w:document {W}><w:body><w:p><w:r><w:t>'.encode()
    return _docx_zip(head + b" " * expanded)


def docx_billion_laughs() -> bytes:
    """A DOCX whose document.xml declares nested entities (billion laughs)."""
    entities = ['<!ENTITY lol "lol">'] + [
        f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">'
        for i in range(1, 10)
    ]
    xml = (f'<?xml version="1.0"?><!DOCTYPE w:document [{"".join(entities)}]>'
           f'<w:document {W}><w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>')
    return _docx_zip(xml.encode())


_CRC_TABLE = []
for _i in range(256):
    _r = _i << 24
    for _ in range(8):
        _r = ((_r << 1) ^ 0x04C11DB7) if _r & 0x80000000 else _r << 1
    _CRC_TABLE.append(_r & 0xFFFFFFFF)


def _ogg_crc(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFFFFFF) ^ _CRC_TABLE[((crc >> 24) & 0xFF) ^ byte]
    return crc


def _ogg_page(packet: bytes, seq: int, granule: int, flags: int) -> bytes:
    lacing = [255] * (len(packet) // 255) + [len(packet) % 255]
    header = (b"OggS" + bytes([0, flags]) + struct.pack("<qII", granule, 0x5A5A, seq)
              + b"\x00\x00\x00\x00" + bytes([len(lacing)]) + bytes(lacing))
    page = header + packet
    crc = _ogg_crc(page)
    return page[:22] + struct.pack("<I", crc) + page[26:]


def ogg_opus(seconds: float) -> bytes:
    """An Ogg Opus stream that says it lasts `seconds` (mutagen reads its length)."""
    head = b"OpusHead" + struct.pack("<BBHIhB", 1, 1, 312, 48000, 0, 0)
    tags = b"OpusTags" + struct.pack("<I", 4) + b"test" + struct.pack("<I", 0)
    frame = b"\xfc\xff\xfe"  # one silent 20 ms Opus frame (TOC + padding)
    granule = int(seconds * 48000) + 312
    return (_ogg_page(head, 0, 0, 2) + _ogg_page(tags, 1, 0, 0)
            + _ogg_page(frame, 2, granule, 4))


def wav(seconds: float, rate: int = 8000) -> bytes:
    """A silent mono 16-bit WAV of `seconds`."""
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\x00\x00" * int(seconds * rate))
    return out.getvalue()
