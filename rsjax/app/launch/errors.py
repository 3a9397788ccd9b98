"""The errors of a run's settings: ``ValueError`` subclasses that name the argument at fault."""

__all__ = ["MismatchError", "RunError"]


class RunError(ValueError):
  """A run setting that cannot be used (``rsjax.app.launch.prepare`` / ``run``).

  The message starts with the argument at fault (``argument``, a parameter of ``prepare`` or
  ``run``, or None); ``rsjax.app.cli`` tells it in one line under the flag's name.
  """

  def __init__(self, message: str, argument: str | None = None) -> None:
    super().__init__(message)
    self.argument = argument


class MismatchError(RunError):
  """A run's settings that do not fit the model they name (an input shape after the
  recorded resize, a denoiser that cannot denoise at the recorded sigma): a command stops
  (exit 2); ``rsjax audit`` fails the model check (exit 1), as for another checkpoint."""
