"""Attachments: images, voice and audio, documents — taken in once for every front end."""
