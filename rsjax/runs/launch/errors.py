"""The error of a command that the user can fix, told in one line."""

__all__ = ["CliError"]


class CliError(Exception):
  """An error reported to the user as one line, exit status 2."""
