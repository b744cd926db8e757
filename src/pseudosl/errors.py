"""The errors a user can act on: one base class, so the command line has one way to report them.

:class:`PseudoslError` is defined in the bottom layer (:mod:`pseudosl.logic.errors`, with the errors of circuits,
files and sizes, all its subclasses) and re-exported here beside the errors of run folders and storage.

Every :class:`PseudoslError` names the argument or file, the value and the fix in its message; the
``pseudosl`` command prints it as one line (``pseudosl: error: ...``) and exits with status 2, never
with a traceback.  A subclass also derives from the built-in type that callers already catch
(``ValueError`` for bad values, ``OSError`` for files and disks).  Library functions keep raising
``ValueError``/``TypeError`` for bad arguments (STYLE.md); the command line reports those the same way.
"""

from __future__ import annotations

from .logic.errors import PseudoslError

__all__ = ["PseudoslError", "RunFolderError", "StorageError", "user_message"]

class RunFolderError(PseudoslError, ValueError):
    """A run folder is in use by another run, or holds runs that do not belong to this one."""


class StorageError(PseudoslError, OSError):
    """A file could not be written or read back (disk full, permissions, a truncated file); names the path."""


def user_message(e: BaseException) -> str | None:
    """The one-line message for an error a command line anticipates, or ``None`` (a bug: let its traceback show).

    Anticipated: every :class:`PseudoslError`; ``ValueError`` (the library's error for a bad value, which
    names the argument, the value and the fix); ``OSError`` (the file system names the path); ``MemoryError``
    and CUDA out-of-memory (the sizes asked for do not fit)."""
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return f"out of memory ({first[:200]}); lower the sizes asked for (data sizes, batch_size, jobs)"
    if isinstance(e, (PseudoslError, ValueError, OSError)):
        return " ".join(str(e).split()) or type(e).__name__
    return None
