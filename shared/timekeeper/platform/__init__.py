"""The Platform owner module: workspaces, users and their memberships, the business data
of an association (members, memberships, invoices, payments), and the one access rule
("may this person read this query or report now?") that the API, the export consumer and
scheduled delivery all use."""
