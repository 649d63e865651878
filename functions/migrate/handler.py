"""Migration trigger (run by a CDK Trigger on every deploy whose layer or handler changed):
apply every pending migration through the same runner as the local stack and the tests,
and return the names applied. An exception fails the deploy before any rule or consumer
starts."""

from timekeeper import runtime
from timekeeper.db.migrate import apply_migrations
from timekeeper.observability import logger


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict, context) -> dict:
    applied = apply_migrations(runtime.database().get())
    logger.info("migrations applied", extra={"applied": applied})
    return {"applied": applied}
