"""The model gateway of `rgbridge run`: one HTTP server per run on the host's loopback, outside
every sandbox, through which each agent's model calls leave. It speaks what the CLIs speak
(Anthropic Messages, OpenAI Responses and Chat Completions, Gemini generateContent), forwards each
call to the provider with the real key (the agent holds only a per-attempt placeholder), and keeps
per attempt what the wire says: status, latency, tokens and cost of every call, the tools each
request offered, the time spent waiting on a failing provider, and the transcript.
"""
