"""Reading vLLM logs: one Record per line with file, line number and raw text (several where a web page collapsed a
log's newlines onto one line)."""

from oomkit.logs.line import Record, clean, parse_line
from oomkit.logs.reader import ReadStats, expand_inputs, iter_records, read_text_lines

__all__ = ["Record", "ReadStats", "clean", "expand_inputs", "iter_records", "parse_line", "read_text_lines"]
