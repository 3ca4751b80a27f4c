"""Errors that are the user's to fix: the CLI prints them as one message, never a traceback."""

from adrun.exit_codes import USER_ERROR_EXIT_CODE


class UserError(Exception):
    """A mistake in the user's input (spec, strategy, script, arguments).

    The message must name what is wrong and where (file, field path, host, port).
    """

    exit_code = USER_ERROR_EXIT_CODE
