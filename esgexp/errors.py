"""The one exception type for user mistakes: printed as a message, never as a traceback."""


class UserError(Exception):
    """Bad input or configuration: the message names what is wrong and where."""
