"""Panager: a self-hosted personal assistant in Discord and Telegram DMs, a terminal and the web."""

__version__ = "0.1.0"
