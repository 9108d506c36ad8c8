"""The agent: the LangGraph graph, its tools, prompts, effects, events and slash commands."""
