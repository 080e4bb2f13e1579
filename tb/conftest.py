"""Every device a test opens puts guard regions around each buffer it allocates
(``Device(guard_bytes=)``); freeing a buffer, ``free_all`` and closing the device
check them, so a command that writes outside its buffers fails the test that ran it."""
import os

os.environ.setdefault("NDPKIT_GUARD_BYTES", "64")
