"""The terminal front end: `panager chat` (a conversation) and `panager ask` (one question)."""
