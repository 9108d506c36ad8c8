"""Messages between people: who accepts relays from whom (store.py) and the relay itself
(relay.py: rate limit, framing, delivery through a `Messenger`)."""
