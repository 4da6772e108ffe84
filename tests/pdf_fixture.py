"""Build real PDFs with known text on known pages, for tests across the project.

make_pdf writes the PDF syntax by hand (no PDF library) so the fixture does not depend on the parser under
test; make_encrypted_pdf then uses pypdf only to apply standard encryption to such a file.
"""

from __future__ import annotations

import io
from pathlib import Path

_PAGE_W, _PAGE_H = 612, 792  # US Letter, points
_MARGIN_X, _TOP_Y, _BOTTOM_Y = 50, 750, 40
_FONT_SIZE = 10


def _pdf_string(line: str) -> bytes:
    """A PDF literal string: WinAnsi bytes (matching the font's /Encoding) with ( ) \\ escaped."""
    raw = line.encode("cp1252", errors="replace")
    return b"(" + raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


def _content_stream(text: str) -> bytes:
    lines = text.split("\n") if text else []
    if not lines:
        return b""  # a blank page: no text operators at all
    # Keep every line on the page: shrink the leading only when a page has more lines than fit at 14pt.
    leading = min(14.0, (_TOP_Y - _BOTTOM_Y) / max(len(lines), 1))
    ops = [b"BT", b"/F1 %d Tf" % _FONT_SIZE, b"%.2f TL" % leading, b"%d %d Td" % (_MARGIN_X, _TOP_Y)]
    for i, line in enumerate(lines):
        if i:
            ops.append(b"T*")  # next line: pypdf turns the vertical move into a newline
        ops.append(_pdf_string(line) + b" Tj")
    ops.append(b"ET")
    return b"\n".join(ops) + b"\n"


def pdf_bytes(pages: list[str]) -> bytes:
    """Bytes of a PDF with one page per entry of `pages`; "\\n" in an entry starts a new text line."""
    if not pages:
        raise ValueError("a PDF needs at least one page")
    n = len(pages)
    # Object numbers: 1 catalog, 2 page tree, 3 font, then (page, content) pairs.
    page_ids = [4 + 2 * i for i in range(n)]
    objects: dict[int, bytes] = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % p for p in page_ids) + b"] /Count %d >>" % n,
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    }
    for pid, text in zip(page_ids, pages):
        objects[pid] = (
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] " % (_PAGE_W, _PAGE_H)
            + b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (pid + 1)
        )
        stream = _content_stream(text)
        objects[pid + 1] = b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"endstream"

    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")  # binary comment marks the file as binary to transfer tools
    offsets: dict[int, int] = {}
    for num in sorted(objects):
        offsets[num] = out.tell()
        out.write(b"%d 0 obj\n" % num + objects[num] + b"\nendobj\n")
    xref_at = out.tell()
    size = max(objects) + 1
    out.write(b"xref\n0 %d\n" % size)
    out.write(b"0000000000 65535 f \n")  # each entry is exactly 20 bytes, EOL included
    for num in range(1, size):
        out.write(b"%010d 00000 n \n" % offsets[num])
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref_at))
    return out.getvalue()


def make_pdf(path: Path, pages: list[str]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pdf_bytes(pages))
    return path


def make_encrypted_pdf(path: Path, pages: list[str], password: str) -> Path:
    """Encrypt with RC4-128, which pypdf handles without the optional `cryptography` package.
    An empty `password` gives the common "encrypted but opens without a password" case."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_bytes(pages))))
    writer.encrypt(user_password=password, owner_password="owner-" + password, algorithm="RC4-128")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        writer.write(f)
    return path
