"""User-facing errors: the CLI prints them as one line and exits with code 2."""


class SpecdecError(Exception):
    """Base class of every error caused by bad input rather than a bug."""


class CheckpointError(SpecdecError):
    """A checkpoint directory is missing, corrupt or of an unsupported kind."""


class ConfigError(SpecdecError, ValueError):
    """An invalid setting (sampling parameters, k, lengths...)."""


class PromptError(SpecdecError, ValueError):
    """An empty or over-long prompt, or malformed prompt input."""


class ResourceError(SpecdecError):
    """A model or KV cache that would not fit in the memory available."""
