"""User-facing errors: what is wrong and what to do, never a traceback."""


class BottlerError(Exception):
    """An error the user can act on. The CLI prints it as one message and exits non-zero."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  → {self.hint}" if self.hint else self.message
