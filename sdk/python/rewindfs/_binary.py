"""Where the rewindfs binary is: the wheel installs it beside the interpreter's scripts (a
venv's ``bin/``, or ``~/.local/bin`` for ``pip install --user``), which need not be on PATH when
a venv's python is run without activating the venv."""

from __future__ import annotations

import os
import shutil
import sysconfig


def binary_path() -> str:
    """The path of the rewindfs binary: the one installed with this package, else the first on
    PATH.

    Raises:
        FileNotFoundError: there is none; the message says how to get one.
    """
    schemes = [sysconfig.get_default_scheme()]
    if os.name == "posix":
        schemes.append("posix_user")
    for scheme in schemes:
        try:
            candidate = os.path.join(sysconfig.get_path("scripts", scheme), "rewindfs")
        except KeyError:
            continue
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("rewindfs")
    if found:
        return found
    raise FileNotFoundError(
        "the rewindfs binary is neither installed with this package nor on PATH: install the "
        "rewindfs wheel (pip install rewindfs), or build it: "
        "cargo install --locked --git <repository> rewindfs"
    )
