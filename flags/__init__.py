"""absl flag groups shared by the albert-tf binaries, and recipe flagfiles.

Import this package under another name so that it does not shadow absl.flags:
``import flags as albert_flags``.
"""
