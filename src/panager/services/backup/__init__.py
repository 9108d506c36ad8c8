"""Backups of the whole instance and restoring them (docs/backup.md)."""
