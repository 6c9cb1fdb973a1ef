"""Stored responses (the Responses API's ``store``): the app builds the store and the
Responses API reads and writes it; the run path never sees it."""
