"""Small helpers shared by every stage: atomic outputs, checksums, sizes, memory, progress."""

from shoal.utils.io import (
    atomic_output_dir,
    file_checksum,
    parse_size,
    read_json,
    write_json_atomic,
)
from shoal.utils.memory import peak_rss_bytes
from shoal.utils.progress import progress

__all__ = [
    "atomic_output_dir",
    "file_checksum",
    "parse_size",
    "peak_rss_bytes",
    "progress",
    "read_json",
    "write_json_atomic",
]
