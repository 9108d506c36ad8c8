"""Every outside account a person connects: one package per provider (see docs/providers.md)."""
