"""The application layer: what an operator or a scheduled job does, one function each, with typed inputs and
results. The command (``platformctl.cli``) parses options, calls one of these and renders what it returns; the
release pipeline calls the same functions, never the command's code.

- ``clusters``: reaching a context's or a stage's clusters (the official client, Auto Scaling in the stage's
  region) and what their groups launch now.
"""
