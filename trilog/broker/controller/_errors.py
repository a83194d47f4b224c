"""How a term learns that it is over before the election says so."""


class StaleController(Exception):
    """This controller's epoch is not the newest: a state node was written by a newer
    controller, or a broker answered STALE_CONTROLLER_EPOCH.  Raised out of the term's
    nursery, it ends the term (``Controller.run`` decides when to try again)."""
