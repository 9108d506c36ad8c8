"""Command-line entry points (`panager ...`)."""
