"""What a text table is written in, found before it is read: its encoding and, for a CSV, its delimiter.

Spreadsheets write CSVs in more than one way, and a person saves what their spreadsheet writes:
- encodings: UTF-8 (Excel's "CSV UTF-8" adds a BOM, which pyarrow skips), UTF-16 with a BOM (Excel's "Unicode
  text"), and Windows-1252 (Excel's plain "CSV" in Western locales). A file that is none of these is refused with
  what to do; a file with NUL bytes and no UTF-16 BOM is not a text table at all (a picture or a workbook renamed).
- delimiters: `,`, `;` (Excel's where the decimal mark is a comma), tab and `|`, sniffed from the header line as
  pandas' `sep=None` does (the standard library's csv.Sniffer, limited to those four); one it cannot tell is `,`.

The file is checked whole (a pass at about a GB a second), so a byte that no encoding here takes is refused before
any row is decided, not after the rows before it.
"""

from __future__ import annotations

import codecs
import csv
from dataclasses import dataclass

from blink.errors import StartupError

DELIMITERS = ",;\t|"
HEAD_BYTES = 64 << 10  # enough for any header line a table to label has
BLOCK = 1 << 20
BOMS = {codecs.BOM_UTF16_LE: "utf-16", codecs.BOM_UTF16_BE: "utf-16"}
NAMES = {"utf-8": "UTF-8", "utf-16": "UTF-16", "cp1252": "Windows-1252"}
SHOWN = {",": "commas", ";": "semicolons", "\t": "tabs", "|": "bars (|)"}
SAVE_AS = "save it as CSV UTF-8 (in Excel: File > Save As > CSV UTF-8) and try again"


@dataclass(frozen=True)
class Dialect:
    encoding: str = "utf-8"  # a name Python's codecs and pyarrow's ReadOptions both take
    delimiter: str = ","

    def read_options(self, **kwargs):
        import pyarrow.csv as pcsv

        return pcsv.ReadOptions(encoding="utf8" if self.encoding == "utf-8" else self.encoding, **kwargs)

    def parse_options(self):
        import pyarrow.csv as pcsv

        return pcsv.ParseOptions(delimiter=self.delimiter)

    def note(self) -> str | None:
        """What a person may not expect of their file, said once where the run starts."""
        said = []
        if self.encoding != "utf-8":
            said.append(f"read as {NAMES[self.encoding]} text")
        if self.delimiter != ",":
            said.append(f"columns separated by {SHOWN[self.delimiter]}")
        return ", ".join(said) or None


def of_file(path: str, fmt: str) -> Dialect:
    """The file's dialect (Parquet: none to find), or a StartupError saying why it cannot be a text table."""
    if fmt == "parquet":
        return Dialect()
    with open(path, "rb") as fh:
        head = fh.read(HEAD_BYTES)
    encoding = encoding_of(path, head)
    if fmt != "csv":
        if encoding != "utf-8":
            raise StartupError(f"{path} is not UTF-8 text, as JSON lines must be: save it as UTF-8 and try again")
        return Dialect()
    return Dialect(encoding, delimiter_of(head.decode(encoding, "replace")))


def encoding_of(path: str, head: bytes) -> str:
    for bom, name in BOMS.items():
        if head.startswith(bom):
            return name
    if b"\x00" in head:
        raise StartupError(f"{path} is not a text table (it holds binary data): upload a CSV, JSONL or Parquet file")
    for name in ("utf-8", "cp1252"):  # cp1252 leaves five bytes undefined: it is not a catch-all
        if decodes(path, name):
            return name
    raise StartupError(f"{path} is neither UTF-8 nor Windows-1252 text: {SAVE_AS}")


def decodes(path: str, encoding: str) -> bool:
    decoder = codecs.getincrementaldecoder(encoding)()
    try:
        with open(path, "rb") as fh:
            while block := fh.read(BLOCK):
                decoder.decode(block)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def delimiter_of(text: str) -> str:
    header = text.lstrip("\ufeff").splitlines()[0] if text.strip() else ""
    try:
        return csv.Sniffer().sniff(header, delimiters=DELIMITERS).delimiter
    except csv.Error:  # one column, or nothing to tell by
        return ","
