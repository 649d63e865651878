"""``python -m timekeeper chaos``: the simulation under injected faults, then an audit.

The campaign runs :func:`timekeeper.local.simulate.run_simulation` (the local stack, the
REAL handlers, every pipeline, the sample tenant sets) with faults injected for the first
``days`` simulated days, then ``quiet_hours`` without faults for recovery:

- **crashes** at the product's named crash points (:mod:`timekeeper.faults`): each hit
  dies with probability ``crash_rate``. The invocation ends as a killed Lambda does: its
  open transactions roll back, its execution environment (cached connections, clients) is
  gone, and its SQS messages come back after their visibility timeout;
- **database disconnects** at the crash points (probability ``disconnect_rate``): every
  connection the product holds is cut under its driver, as in a failover or a network
  fault (the server rolls back what was in flight); the code carries on and meets the
  broken connection at its next statement;
- **database restarts**: ``db_restarts`` times per simulated day of faults (instants drawn
  from the seed, :func:`.injector.restart_instants`), the first crash point reached at or after the
  instant restarts the embedded server on its data directory (fast mode:
  :func:`timekeeper.local.embedded.restart_server`) while the product keeps running: every
  connection it holds, idle ones too, is broken and met at its next statement, and the
  simulation's own connection is reopened. A server named by ``DATABASE_URL``, or an
  embedded one other processes hold, is never restarted: the result counts the skipped
  restarts and says why (:attr:`.records.ChaosResult.notes`);
- **duplicate deliveries**: each received SQS message is sent again with probability
  ``duplicate_rate`` (standard queues deliver at least once);
- **publish refusals**: each entry of a SendMessageBatch the product makes is refused with
  probability ``refuse_rate``, and a whole call fails with a tenth of it;
- **stalled processes**: a consumer invocation freezes as its first handler starts
  (probability ``stall_rate``) for longer than its lease; meanwhile a second execution
  environment receives the run again (a redelivery, its own connections) at the simulated
  instant the lease has expired and takes the run over; then the stalled process resumes,
  runs its handler and tries to write and settle with its old attempt. The fences must
  refuse it (:func:`.audit._stalled_attempts`);
- **SES throttling and refusals**: the campaign's mailer (:class:`.injector.CountingMailer`, wrapping
  the local stack's) raises instead of submitting, with probability ``ses_throttle_rate``,
  a botocore ``ClientError`` ``Throttling`` ("Maximum sending rate exceeded.": deliveries
  retry the recipient, notice e-mails the message) and with ``ses_reject_rate`` a
  ``MessageRejected`` (a permanent refusal: never retried), for deliveries and owner
  notices alike;
- **connections cut at arbitrary moments**: the product reaches the database through a
  TCP proxy (:class:`timekeeper.local.cut_proxy.CuttingProxy`; the simulation's own
  connection goes direct) that, ``cut_rate`` times per wall-clock second on average while
  faults are injected, cuts one of the product's open connections chosen from the seed:
  in the middle of a statement, between a transaction's statements, during a COMMIT
  (whose outcome the product then does not know) or while the connection sits idle in
  its pool. Unlike the disconnects, nothing ties a cut to a crash point;
- **the API driven meanwhile**: ``api_requests`` a simulated day, at seeded instants, the
  REAL API function is called as a client retrying with its Idempotency-Key would (Run
  now of a schedule and of a delivery, an export, a render;
  :mod:`timekeeper.local.chaos.api`), under the same faults.

The samples get extra traffic (:func:`.injector.add_load`) so that a month meets every crash point
many times. Then :func:`.audit.audit` checks the invariants on the database, the queues and what the
campaign recorded, and the command prints a table and exits 1 when one fails:

1. every due occurrence of every schedule has exactly one run (or was counted in a run's
   skipped backlog), nothing is left due, and every run and snapshot run is terminal;
2. no run was executed by two attempts at once: each run's handler executions carry
   strictly increasing attempt numbers, and one that started while an earlier attempt's
   killed process still held its lease (it died before its settlement committed) would
   have run beside it; and a stalled attempt whose run was taken over never settled it
   (the run's outcome is a later attempt's);
3. every handler effect exists once, per its idempotency contract: batches opened and
   closed by succeeded runs only, one posting job per closed batch and every one finished,
   invoices prepared only by succeeded runs, each delivery message sent once (twice only
   where the process died between the provider's acceptance and the record: the one
   documented window), a rejected recipient recorded ``rejected`` and never submitted
   after its rejection, a throttled one sent in the end unless its run failed, a rejected
   notice message's notices closed, snapshot rows written once per published version;
4. failure streaks and pauses equal what the settled history implies;
5. the run and job queues are empty, and the dead-letter queues hold only the deliberately
   malformed messages.

The package, by job: :mod:`.records` (the options, the recorded executions and stalls,
the checks, the result), :mod:`.injector` (:class:`~.injector.Campaign`, the injector and
recorder the simulation calls; :func:`~.injector.run_chaos`), :mod:`.audit` (the
invariants, their queries in ``audit.sql``), :mod:`.api` (the API driven meanwhile, and
its audit), :mod:`.printer` (the tables the command prints).
"""
