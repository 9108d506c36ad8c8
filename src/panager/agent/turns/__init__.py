"""One turn for one person: the runner, the turn's input, approvals, threads and turn locks."""
