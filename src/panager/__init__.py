"""Panager: a self-hosted personal assistant for Discord DMs and the terminal."""

__version__ = "0.1.0"
