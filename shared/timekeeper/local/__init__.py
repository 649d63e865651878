"""The local stack behind ``python -m timekeeper``: the real handlers on a laptop or in CI,
over the embedded PostgreSQL and moto (simulate, serve, chaos, export, platform-data, ops,
psql). Never in the Lambda layer and imported by no product module; one module per job,
its statements in the ``.sql`` file beside it (docs/local-stack.md, "Where the code is")."""
