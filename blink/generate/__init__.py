"""Chat generation: the chat service, the decode loop, stop strings, grammars, tool-call and reasoning parsing."""
