"""One model loop: the graph's nodes, state, events, prompts, effects and the tool contract.

The floor below everything else in `agent/`: it imports nothing from `tools/`, `turns/`,
`flows/` or `commands/` (checked by import-linter, `pyproject.toml`).
"""
