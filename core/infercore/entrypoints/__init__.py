"""User entry points: the command line, the offline LLM API and the OpenAI server."""
