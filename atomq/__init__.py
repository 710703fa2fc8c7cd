"""atomq: a multi-tenant cloud queue platform on Redis streams."""

__version__ = "0.1.0"
