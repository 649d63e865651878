"""Migration trigger (run by a CDK Trigger on every deploy whose layer or handler changed):
apply every pending migration through the same runner as the local stack and the tests,
then set the workers' and the API's login passwords from their secrets, recompute the
business-day schedules when the layer brings new holiday data, and return the names
applied. An exception fails the deploy before any rule or consumer
starts."""

from timekeeper import clock
from timekeeper.db.migrate import apply_migrations
from timekeeper.edge import adapters, startup
from timekeeper.observability import logger
from timekeeper.schedules.closures import refresh_holiday_data

startup.cold_start("migrate")


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict, context) -> dict:
    conn = adapters.database().get()
    applied = apply_migrations(conn)
    logins = adapters.provision_logins(conn)
    recomputed = refresh_holiday_data(conn, now=clock.now())
    logger.info("migrations applied", extra={"applied": applied, "logins": logins,
                                             "holiday_data_recomputed": recomputed})
    return {"applied": applied, "logins": logins}
