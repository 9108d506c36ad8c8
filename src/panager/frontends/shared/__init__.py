"""What every chat front end shares: how a message is taken in, answered and shown.

A front end (discord/, telegram/) only translates: platform events become inbox
rows, and the answers, questions and buttons of a turn become platform
messages through a small `Surface`. The rules live here, once:

- `intake.py`    storing an incoming message before anything else, riding out a
                 database outage (exactly once: the inbox's primary key);
- `reclaim.py`   this process's presence lock and taking back the messages of a
                 process that died (services/inbox_queue.py does the ordering);
- `answering.py` access before any model call, `/start CODE`, commands, turns;
- `streaming.py` the answer edited into its messages at about one edit a second;
- `chunking.py`  splitting under a platform's limit with code blocks intact;
- `links.py`     when a link becomes a button and when it stays text.
"""
