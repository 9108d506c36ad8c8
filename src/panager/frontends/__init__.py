"""Every way a person talks to Panager: one package per front end (discord, telegram, web,
terminal), and `shared/` for what they have in common (answering, streaming, chunking,
questions, intake)."""
