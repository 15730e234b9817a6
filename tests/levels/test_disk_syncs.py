"""A ``-m fast`` run skips the disk in ``os.fsync`` and ``os.fdatasync``, and nothing else.

Why it may: a sync only shows after a power cut, which no test in the pytest process causes;
why it must keep the descriptor check: a sync of a closed or wrong descriptor is a bug a fast
test should still see (``hutch_testing.pytest_plugin.skip_disk_syncs``).
"""

import errno
import os

import pytest
from hutch_testing import pytest_plugin


def test_the_in_memory_sync_checks_the_descriptor(tmp_path):
    path = tmp_path / "file"
    path.write_bytes(b"x")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert pytest_plugin.synced_in_memory(fd) is None
    finally:
        os.close(fd)
    with pytest.raises(OSError, match="Bad file descriptor") as caught:
        pytest_plugin.synced_in_memory(fd)  # closed now
    assert caught.value.errno == errno.EBADF


def test_the_syncs_are_swapped_and_restored():
    before = (os.fsync, os.fdatasync)
    restore = pytest_plugin.skip_disk_syncs()
    try:
        assert os.fsync is pytest_plugin.synced_in_memory
        assert os.fdatasync is pytest_plugin.synced_in_memory
    finally:
        restore()
    assert (os.fsync, os.fdatasync) == before


def test_only_a_fast_run_skips_the_disk(request):
    fast_run = (request.config.option.markexpr or "").strip() == "fast"
    assert (os.fsync is pytest_plugin.synced_in_memory) is fast_run
    assert (os.fdatasync is pytest_plugin.synced_in_memory) is fast_run
