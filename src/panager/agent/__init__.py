"""The agent, on floors; each imports only the floors below it (pyproject.toml, "Agent floors").

commands/  slash commands
flows/     work built on turns: delivery, system jobs, tidy-up, linking, connect
turns/     one turn for one person: runner, input, approvals, threads, turn locks
tools/     what the model may call: one factory per domain
deps.py    AgentDeps, the one bag of services; models.py, which model a person's turns use
graph/     one model loop: nodes, state, events, prompts, effects, the tool contract
"""
