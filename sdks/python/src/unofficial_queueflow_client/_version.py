"""The SDK's version, in one place: the package's ``__version__``, the client's User-Agent and what
the worker loop reports of itself on lease."""

__version__ = "0.1.0"
