"""Reading the web: the address guard (guard.py), page fetching (fetch.py), text extraction
(extract.py) and search providers (search.py). See docs/tools.md."""
