"""The error of a command that the user can fix, told in one line."""

__all__ = ["CliError", "MismatchError"]


class CliError(Exception):
  """An error reported to the user as one line, exit status 2."""


class MismatchError(CliError):
  """A run's settings that do not fit the model they name (an input shape after the
  recorded resize, a denoiser that cannot denoise at the recorded sigma): a command stops
  (exit 2); ``rsjax audit`` fails the model check (exit 1), as for another checkpoint."""
