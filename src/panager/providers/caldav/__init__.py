"""CalDAV calendars (iCloud, Fastmail, Nextcloud, Radicale, Baïkal, …)."""
