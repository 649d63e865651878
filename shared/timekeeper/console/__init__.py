"""The console: the web pages of schedule owners, workspace admins and staff, rendered on
the server from the HTTP API's own answers.

Every page is a client of the API (:mod:`timekeeper.api`): the console turns the
signed-in person's request into API requests with that person's claims, resolved in the
same execution environment, so what a page shows and what its buttons may do is exactly
what the API allows that person (the tenant rule, the roles, the access rule). The
console holds no SQL and no access rule of its own.

:func:`timekeeper.console.app.create_console` builds the resolver; the API function
serves it beside the API (paths ``/`` and ``/console/...``).
"""
