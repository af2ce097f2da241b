"""fsio's bounded reader under an address-space limit (RLIMIT_AS), as batch schedulers and some
containers set it: reading a small file must not reserve a buffer the size of the limit."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from oomkit.errors import InputError
from oomkit.fsio import read_text_limited

CHILD = textwrap.dedent(
    """
    import resource, sys
    from oomkit.fsio import read_text_limited
    path, limit_bytes = sys.argv[1], int(sys.argv[2])
    cap = 1 << 30
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    # The limit is as large as the whole address space allowed: the old reader asked for it at once.
    print(len(read_text_limited(path, limit_bytes, "request set")))
    """
)


def test_small_file_under_an_address_space_limit(tmp_path: Path) -> None:
    small = tmp_path / "small.yaml"
    small.write_text("a: 1")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(small), str(2 << 30)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "4"


def test_reads_whole_file_across_chunks(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    text = "x" * (3 * (1 << 20) + 17)
    big.write_text(text)
    assert read_text_limited(big, 4 << 20, "log") == text


@pytest.mark.parametrize("extra_bytes", [1, 1 << 20])
def test_over_the_limit_is_one_input_error(tmp_path: Path, extra_bytes: int) -> None:
    limit_bytes = 2 << 20
    big = tmp_path / "big.txt"
    big.write_bytes(b"y" * (limit_bytes + extra_bytes))
    with pytest.raises(InputError, match="more than 2 MiB"):
        read_text_limited(big, limit_bytes, "request set")


def test_exactly_the_limit_is_read(tmp_path: Path) -> None:
    limit_bytes = (1 << 20) + 5
    exact = tmp_path / "exact.txt"
    exact.write_bytes(b"z" * limit_bytes)
    assert len(read_text_limited(exact, limit_bytes, "log")) == limit_bytes
