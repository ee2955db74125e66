"""Errors a user can cause and fix. The CLI prints these without a traceback."""

from __future__ import annotations


class DpalignError(Exception):
    """Base class of every error that is the caller's to fix (bad input, bad options)."""


class InputError(DpalignError, ValueError):
    """Bad input data, located as precisely as we know.

    Parameters
    ----------
    message : str
        What is wrong.
    path : str, optional
        The file it came from.
    line : int, optional
        1-based line number in that file.
    record : str, optional
        The sequence (record) name.
    column : int, optional
        1-based position in the sequence (or column in the alignment / line).
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        record: str | None = None,
        column: int | None = None,
    ) -> None:
        self.message = message
        self.path = path
        self.line = line
        self.record = record
        self.column = column
        super().__init__(str(self))

    def __str__(self) -> str:
        where = []
        if self.path is not None:
            where.append(str(self.path) + (f":{self.line}" if self.line is not None else ""))
        elif self.line is not None:
            where.append(f"line {self.line}")
        if self.record is not None:
            where.append(f"record {self.record!r}")
        if self.column is not None:
            where.append(f"position {self.column}")
        return (", ".join(where) + ": " if where else "") + self.message

    def located(self, **where) -> InputError:
        """Return a copy with the missing location fields filled in from ``where``."""
        fields = {k: getattr(self, k) for k in ("path", "line", "record", "column")}
        for key, value in where.items():
            if fields.get(key) is None:
                fields[key] = value
        return InputError(self.message, **fields)


class OptionError(DpalignError, ValueError):
    """An option or parameter value that cannot be used (unknown matrix, negative gap cost).

    Parameters
    ----------
    message : str
        What is wrong, naming the library's parameter (``threads must be at least 1``).
    parameter : str, optional
        That parameter's name, when the message starts with it: the command line replaces it
        with its own option (``--threads``), so neither face names the other's spelling.
    """

    def __init__(self, message: str = "", *, parameter: str | None = None) -> None:
        super().__init__(message)
        self.parameter = parameter


class BackendUnavailable(DpalignError, RuntimeError):
    """The requested backend or device does not exist on this machine."""


class InternalError(DpalignError, RuntimeError):
    """A result failed one of dpalign's own checks (a kernel bug, not the caller's): it is
    reported, never written."""
