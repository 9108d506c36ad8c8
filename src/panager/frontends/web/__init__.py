"""The web front end: the person's own pages (sign-in by a one-time link, chat, memories,
schedules, usage, connections, admin), the Google OAuth start and callback, personal
webhooks (`/hooks/…`), Telegram's webhook (`/telegram/webhook`), `/healthz` and `/metrics`."""
