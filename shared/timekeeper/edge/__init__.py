"""The Lambda edge: what the handlers of ``functions/*/handler.py`` call.

Handlers stay thin (Powertools decorators and one call here); domain code never reads the
environment or creates boto3 clients. The package holds:

* :mod:`timekeeper.edge.adapters` -- settings and adapters created once per execution
  environment (database connections, SQS/SNS/S3/SES/Lambda/Secrets Manager clients, publishers, mailer,
  renderer client, link signer); the variable names are :mod:`timekeeper.settings`'.
* :mod:`timekeeper.edge.registries` -- the work-kind and snapshot-type registries,
  assembled from every owner module (the generic modules know no owner).
* :mod:`timekeeper.edge.batch` -- the one SQS batch entry point of every queue consumer.
* :mod:`timekeeper.edge.startup` -- each handler's cold start: the AWS clients its code
  calls, built through :func:`timekeeper.edge.adapters.aws_client`, which refuses a
  service the function does not declare in the topology.
* one module per pipeline: :mod:`~timekeeper.edge.runs` (accounting and queries
  dispatchers and consumers), :mod:`~timekeeper.edge.exports`,
  :mod:`~timekeeper.edge.snapshots`, :mod:`~timekeeper.edge.renderer`, and
  :mod:`~timekeeper.edge.api` (the HTTP API's execution environments).
"""

from __future__ import annotations


def reset() -> None:
    """Forget every cached setting, adapter and registry (closing the connections), so the
    next call reads the environment again. The local stack and tests use it between
    configurations; the API's environments are reset by :func:`timekeeper.edge.api.reset`."""
    from timekeeper.edge import adapters, authorizer, registries

    adapters.reset()
    registries.reset()
    authorizer.reset()


def drop_environment() -> None:
    """Forget what a crashed execution environment (this thread) leaves behind: its
    connections, and every cached setting, adapter and registry; other threads'
    connections stay open (:func:`timekeeper.edge.adapters.drop_environment`)."""
    from timekeeper.edge import adapters, authorizer, registries

    adapters.drop_environment()
    registries.reset()
    authorizer.reset()
