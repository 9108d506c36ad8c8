"""HTTP front end: OAuth callback, health check, metrics."""
