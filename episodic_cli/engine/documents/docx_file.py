"""A Word file (.docx) as a block document (blocks.py): paragraphs and tables in order, headings by paragraph style.

python-docx reads the file. A heading is a paragraph whose style is, or is based on, "Heading N" or "Title" (Word's
built-in styles, which its navigation pane and table of contents use too).

Plain engine module: no terminal output.
"""
from __future__ import annotations

import re
import zipfile
from pathlib import Path

from .blocks import BlockDocument, BlockWriter
from .html_file import NoText, NotReadable

DOCX_EXT = ".docx"
_HEADING_RE = re.compile(r"heading\s*(\d)$", re.I)


def _heading_level(style) -> int | None:
    """1-9 for "Heading N" (and styles based on one), 0 for "Title", None for body text."""
    for _ in range(4):  # a custom style based on a heading style, a few levels deep
        if style is None:
            return None
        name = (style.name or "").strip()
        if name.lower() == "title":
            return 0
        m = _HEADING_RE.match(name)
        if m:
            return int(m.group(1))
        style = style.base_style
    return None


def read_docx(path: Path, spool_dir: Path | None = None) -> BlockDocument:
    import docx
    from docx.table import Table

    from docx.opc.exceptions import PackageNotFoundError

    try:
        document = docx.Document(str(path))
    except PackageNotFoundError:  # python-docx's word for a file that is not a zip ("Package not found at ...")
        with path.open("rb") as f:
            ole = f.read(8) == b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # the old binary .doc format
        raise NotReadable("it is an old Word 97-2003 file renamed .docx; save it as .docx in Word or LibreOffice"
                          if ole else "it is not a readable Word file (not a zip archive; a damaged or partly "
                          "copied file?)") from None
    except (zipfile.BadZipFile, KeyError) as exc:
        why = "not a zip archive" if isinstance(exc, zipfile.BadZipFile) else "a part is missing"
        raise NotReadable(f"it is not a readable Word file ({why}; a damaged or partly copied file?)") from None
    except Exception as exc:  # noqa: BLE001 - python-docx raises ValueError, lxml errors, ...
        raise NotReadable(f"it is not a readable Word file ({' '.join(str(exc).split())[:120]})") from None
    writer = BlockWriter(spool_dir)
    try:
        for part in document.iter_inner_content():
            if isinstance(part, Table):
                writer.table([[cell.text for cell in row.cells] for row in part.rows])
                continue
            level = _heading_level(part.style)
            if level is None:
                writer.paragraph(part.text)
            else:
                writer.heading(part.text, level)
        if not writer.starts:
            raise NoText("no text in it")
        return writer.finish()
    except BaseException:
        writer.discard()
        raise
