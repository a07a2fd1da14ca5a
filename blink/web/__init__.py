"""Wire-agnostic HTTP: the one request pipeline (body under its deadlines and budget, check, admit), the
route wrapper, bodies, safe JSON, the key, slow clients, callers and admission, streams, uploads, metrics."""
